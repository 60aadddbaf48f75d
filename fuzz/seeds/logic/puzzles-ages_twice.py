# Alice is twice as old as Bob. In 5 years the sum of their ages will be 40.
from z3 import *
alice, bob = Ints('alice bob')
s = Solver()
s.add(alice == 2 * bob)
s.add((alice + 5) + (bob + 5) == 40)
print(s.check())
m = s.model()
print(m[alice], m[bob])
