# Three meetings that all share a participant must fit into two slots.
from z3 import *
x, y, z = Ints('x y z')
s = Solver()
s.add(1 <= x, x <= 2, 1 <= y, y <= 2, 1 <= z, z <= 2)
s.add(Distinct(x, y, z))
print(s.check())
