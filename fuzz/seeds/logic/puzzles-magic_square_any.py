# Any 3x3 magic square of the digits 1-9: there are eight (rotations and reflections).
from z3 import *
a, b, c, d, e, f, g, h, i = Ints('a b c d e f g h i')
s = Solver()
s.add(1 <= a, a <= 9, 1 <= b, b <= 9, 1 <= c, c <= 9, 1 <= d, d <= 9, 1 <= e, e <= 9)
s.add(1 <= f, f <= 9, 1 <= g, g <= 9, 1 <= h, h <= 9, 1 <= i, i <= 9)
s.add(Distinct(a, b, c, d, e, f, g, h, i))
s.add(a + b + c == 15, d + e + f == 15, g + h + i == 15)
s.add(a + d + g == 15, b + e + h == 15, c + f + i == 15)
s.add(a + e + i == 15, c + e + g == 15)
print(s.check())
m = s.model()
print(m[e])
