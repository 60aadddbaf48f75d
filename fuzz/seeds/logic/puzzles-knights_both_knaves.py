# A says: "We are both knaves." (True = knight, who always tells the truth)
from z3 import *
a, b = Bools('a b')
s = Solver()
s.add(a == And(Not(a), Not(b)))
print(s.check())
m = s.model()
print(m[a], m[b])
