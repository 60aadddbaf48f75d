# Three children: the product of their ages is 36 and the sum is 13.
# Without knowing about an eldest child the ages are not determined.
from z3 import *
a, b, c = Ints('a b c')
s = Solver()
s.add(c >= 1, b >= c, a >= b)
s.add(a * b * c == 36)
s.add(a + b + c == 13)
print(s.check())
m = s.model()
print(m[a], m[b], m[c])
