# Six queens on a 6x6 board: q_k is the row of the queen in column k.
from z3 import *
q0, q1, q2, q3, q4, q5 = Ints('q0 q1 q2 q3 q4 q5')
s = Solver()
s.add(0 <= q0, q0 <= 5, 0 <= q1, q1 <= 5, 0 <= q2, q2 <= 5)
s.add(0 <= q3, q3 <= 5, 0 <= q4, q4 <= 5, 0 <= q5, q5 <= 5)
s.add(Distinct(q0, q1, q2, q3, q4, q5))
s.add(Distinct(q0 + 0, q1 + 1, q2 + 2, q3 + 3, q4 + 4, q5 + 5))
s.add(Distinct(q0 - 0, q1 - 1, q2 - 2, q3 - 3, q4 - 4, q5 - 5))
print(s.check())
m = s.model()
print(m)
