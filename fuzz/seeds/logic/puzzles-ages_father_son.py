# A father is four times as old as his son. In 20 years he will be twice as old.
from z3 import *
father, son = Ints('father son')
s = Solver()
s.add(son > 0)
s.add(father == 4 * son)
s.add(father + 20 == 2 * (son + 20))
print(s.check())
m = s.model()
print(m[father], m[son])
