# A farm has chickens and rabbits: 35 heads and 94 legs.
from z3 import *
chickens, rabbits = Ints('chickens rabbits')
solve(chickens >= 0, rabbits >= 0, chickens + rabbits == 35, 2 * chickens + 4 * rabbits == 94)
