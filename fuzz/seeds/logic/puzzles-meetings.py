# Four meetings A, B, C, D take the slots 1-4, one each. A is before B, C is
# right after D, B is not in the last slot and D is not in the first.
from z3 import *
a, b, c, d = Ints('a b c d')
s = Solver()
s.add(a >= 1, a <= 4, b >= 1, b <= 4, c >= 1, c <= 4, d >= 1, d <= 4)
s.add(Distinct(a, b, c, d))
s.add(a < b)
s.add(c == d + 1)
s.add(b != 4)
s.add(d != 1)
print(s.check())
m = s.model()
print(m[a], m[b], m[c], m[d])
