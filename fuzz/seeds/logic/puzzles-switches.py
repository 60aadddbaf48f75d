# Three switches p, q, r: p implies q, exactly one of q and r is on, one of
# p and r is on but not both, and q is on.
from z3 import *
p, q, r = Bools('p q r')
s = Solver()
s.add(Implies(p, q))
s.add(Xor(q, r))
s.add(Or(p, r), Not(And(p, r)))
s.add(q == True)
print(s.check())
print(s.model())
