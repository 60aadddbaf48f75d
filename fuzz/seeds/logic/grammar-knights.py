from z3 import *
a, b, c = Bools('a b c')
s = Solver()
s.add(a == And(Not(a), Not(b), Not(c)))
s.add(b == (Sum([If(a, 1, 0), If(b, 1, 0), If(c, 1, 0)]) == 1))
s.add(Implies(a, b), Or(a, b, c), Xor(a, b))
print(s.check())
m = s.model()
print(m)
