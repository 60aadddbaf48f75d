# A 4x4 sudoku (digits 1-4; rows, columns and 2x2 boxes distinct).
#   1 2 . .
#   . . 1 2
#   2 1 . 3
#   . 3 . .
from z3 import *
r0c0, r0c1, r0c2, r0c3 = Ints('r0c0 r0c1 r0c2 r0c3')
r1c0, r1c1, r1c2, r1c3 = Ints('r1c0 r1c1 r1c2 r1c3')
r2c0, r2c1, r2c2, r2c3 = Ints('r2c0 r2c1 r2c2 r2c3')
r3c0, r3c1, r3c2, r3c3 = Ints('r3c0 r3c1 r3c2 r3c3')
s = Solver()
s.add(1 <= r0c0, r0c0 <= 4, 1 <= r0c1, r0c1 <= 4, 1 <= r0c2, r0c2 <= 4, 1 <= r0c3, r0c3 <= 4)
s.add(1 <= r1c0, r1c0 <= 4, 1 <= r1c1, r1c1 <= 4, 1 <= r1c2, r1c2 <= 4, 1 <= r1c3, r1c3 <= 4)
s.add(1 <= r2c0, r2c0 <= 4, 1 <= r2c1, r2c1 <= 4, 1 <= r2c2, r2c2 <= 4, 1 <= r2c3, r2c3 <= 4)
s.add(1 <= r3c0, r3c0 <= 4, 1 <= r3c1, r3c1 <= 4, 1 <= r3c2, r3c2 <= 4, 1 <= r3c3, r3c3 <= 4)
s.add(Distinct(r0c0, r0c1, r0c2, r0c3), Distinct(r1c0, r1c1, r1c2, r1c3))
s.add(Distinct(r2c0, r2c1, r2c2, r2c3), Distinct(r3c0, r3c1, r3c2, r3c3))
s.add(Distinct(r0c0, r1c0, r2c0, r3c0), Distinct(r0c1, r1c1, r2c1, r3c1))
s.add(Distinct(r0c2, r1c2, r2c2, r3c2), Distinct(r0c3, r1c3, r2c3, r3c3))
s.add(Distinct(r0c0, r0c1, r1c0, r1c1), Distinct(r0c2, r0c3, r1c2, r1c3))
s.add(Distinct(r2c0, r2c1, r3c0, r3c1), Distinct(r2c2, r2c3, r3c2, r3c3))
s.add(r0c0 == 1, r0c1 == 2, r1c2 == 1, r1c3 == 2)
s.add(r2c0 == 2, r2c1 == 1, r2c3 == 3, r3c1 == 3)
print(s.check())
m = s.model()
print(m)
