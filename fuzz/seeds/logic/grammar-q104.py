from z3 import *
boys, girls, david_brothers = Ints('boys girls david_brothers')
s = Solver()
s.add(girls == 3, boys >= 1)
s.add(boys == 1)
s.add(david_brothers == boys - 1)
print(s.check())
m = s.model()
print('david_brothers', m[david_brothers])
