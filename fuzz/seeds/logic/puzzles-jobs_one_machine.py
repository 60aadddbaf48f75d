# Three jobs on one machine (durations 2, 3, 1), no overlap, all done by time 6.
# Job 3 runs before job 1, and job 1 before job 2. When does each start?
from z3 import *
s1, s2, s3 = Ints('s1 s2 s3')
s = Solver()
s.add(s1 >= 0, s2 >= 0, s3 >= 0)
s.add(s1 + 2 <= 6, s2 + 3 <= 6, s3 + 1 <= 6)
s.add(Or(s1 + 2 <= s2, s2 + 3 <= s1))
s.add(Or(s1 + 2 <= s3, s3 + 1 <= s1))
s.add(Or(s2 + 3 <= s3, s3 + 1 <= s2))
s.add(s3 + 1 <= s1)
s.add(s1 + 2 <= s2)
print(s.check())
m = s.model()
print(m[s1], m[s2], m[s3])
