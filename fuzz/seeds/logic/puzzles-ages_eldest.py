# Three children: the product of their ages is 36, the sum is 13, and there
# is an eldest child (the oldest is strictly older than the others).
from z3 import *
a, b, c = Ints('a b c')
s = Solver()
s.add(c >= 1, b >= c, a >= b)
s.add(a * b * c == 36)
s.add(a + b + c == 13)
s.add(a > b)
print(s.check())
m = s.model()
print(m[a], m[b], m[c])
