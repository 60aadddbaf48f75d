# Six people at a round table with seats 0-5 (seat 5 is next to seat 0).
# A sits in seat 0, B opposite A, C just right of A (seat 1), D next to both
# B and C, and E not next to A. Where does everyone sit?
from z3 import *
a, b, c, d, e, f = Ints('a b c d e f')
s = Solver()
s.add(0 <= a, a <= 5, 0 <= b, b <= 5, 0 <= c, c <= 5, 0 <= d, d <= 5, 0 <= e, e <= 5, 0 <= f, f <= 5)
s.add(Distinct(a, b, c, d, e, f))
s.add(a == 0)
s.add((b - a) % 6 == 3)
s.add(c == 1)
s.add(Or((d - b) % 6 == 1, (d - b) % 6 == 5))
s.add(Or((d - c) % 6 == 1, (d - c) % 6 == 5))
s.add((e - a) % 6 != 1, (e - a) % 6 != 5)
print(s.check())
m = s.model()
print(m)
