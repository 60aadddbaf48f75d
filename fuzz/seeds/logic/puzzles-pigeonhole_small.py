# Four pigeons, three holes, at most one pigeon per hole.
from z3 import *
p1, p2, p3, p4 = Ints('p1 p2 p3 p4')
s = Solver()
s.add(1 <= p1, p1 <= 3, 1 <= p2, p2 <= 3, 1 <= p3, p3 <= 3, 1 <= p4, p4 <= 3)
s.add(Distinct(p1, p2, p3, p4))
print(s.check())
