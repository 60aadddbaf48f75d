# MT-Bench Q104, turn 2: each sister of David has two brothers.
from z3 import *
boys, girls, david_brothers, brothers_of_each_sister = Ints('boys girls david_brothers brothers_of_each_sister')
s = Solver()
s.add(girls == 3)
s.add(boys >= 1)
s.add(brothers_of_each_sister == boys)
s.add(brothers_of_each_sister == 2)
s.add(david_brothers == boys - 1)
print(s.check())
m = s.model()
print(m[david_brothers])
