# A says: "B is a knave." B says: "A and C are of the same kind." What is C?
from z3 import *
a, b, c = Bools('a b c')
s = Solver()
s.add(a == Not(b))
s.add(b == (a == c))
print(s.check())
m = s.model()
print(m[c])
