# A says: "I am a knave." (No knight or knave can say this.)
from z3 import *
a = Bool('a')
s = Solver()
s.add(a == Not(a))
print(s.check())
