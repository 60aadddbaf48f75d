# Three queens on a 3x3 board cannot avoid each other.
from z3 import *
q0, q1, q2 = Ints('q0 q1 q2')
s = Solver()
s.add(0 <= q0, q0 <= 2, 0 <= q1, q1 <= 2, 0 <= q2, q2 <= 2)
s.add(Distinct(q0, q1, q2))
s.add(Distinct(q0, q1 + 1, q2 + 2))
s.add(Distinct(q0, q1 - 1, q2 - 2))
print(s.check())
