# Tom's age divided by 3 is 4 with remainder 2.
from z3 import *
tom = Int('tom')
s = Solver()
s.add(tom >= 0)
s.add(tom / 3 == 4, tom % 3 == 2)
print(s.check())
m = s.model()
print(m[tom])
