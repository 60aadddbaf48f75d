# MT-Bench Q104: David has three sisters. Each of them has one brother.
# How many brothers does David have?
from z3 import *
boys, girls, david_brothers, brothers_of_each_sister = Ints('boys girls david_brothers brothers_of_each_sister')
s = Solver()
s.add(girls == 3)  # David's three sisters are the girls of the family
s.add(boys >= 1)  # David himself is a boy
s.add(brothers_of_each_sister == boys)  # a sister's brothers are all the boys
s.add(brothers_of_each_sister == 1)
s.add(david_brothers == boys - 1)  # David's brothers are the other boys
print(s.check())
m = s.model()
print(m[david_brothers])
