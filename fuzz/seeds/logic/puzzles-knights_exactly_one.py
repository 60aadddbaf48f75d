# A says: "All of us are knaves." B says: "Exactly one of us is a knight."
from z3 import *
a, b, c = Bools('a b c')
knights = Sum([If(a, 1, 0), If(b, 1, 0), If(c, 1, 0)])
s = Solver()
s.add(a == And(Not(a), Not(b), Not(c)))
s.add(b == (knights == 1))
print(s.check())
m = s.model()
print(m[a], m[b], m[c])
