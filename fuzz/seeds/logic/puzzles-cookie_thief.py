# One of four took the cookie and exactly one of them tells the truth.
# A: "B did it."  B: "D did it."  C: "I didn't do it."  D: "B is lying."
from z3 import *
culprit = Int('culprit')  # 1 = A, 2 = B, 3 = C, 4 = D
ta, tb, tc, td = Bools('ta tb tc td')
s = Solver()
s.add(culprit >= 1, culprit <= 4)
s.add(ta == (culprit == 2))
s.add(tb == (culprit == 4))
s.add(tc == (culprit != 3))
s.add(td == Not(tb))
s.add(Sum([If(ta, 1, 0), If(tb, 1, 0), If(tc, 1, 0), If(td, 1, 0)]) == 1)
print(s.check())
m = s.model()
print(m[culprit])
