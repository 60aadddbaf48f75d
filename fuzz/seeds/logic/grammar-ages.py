from z3 import *
alice = Int('alice')
bob = Int('bob')
s = Solver()
s.add(alice == 2 * bob, (alice + 5) + (bob + 5) == 40, -bob < 0)
print(s.check())
m = s.model()
print(m[alice], m[bob])
