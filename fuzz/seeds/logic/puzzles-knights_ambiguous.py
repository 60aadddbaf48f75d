# A says: "B is a knight." B says: "A is a knight." Who is what?
from z3 import *
a, b = Bools('a b')
s = Solver()
s.add(a == b, b == a)
print(s.check())
m = s.model()
print(m[a], m[b])
