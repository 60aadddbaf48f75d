# Ten coins of 5 and 10 cents make 70 cents. How many of each?
from z3 import *
fives, tens = Ints('fives tens')
s = Solver()
s.add(fives >= 0, tens >= 0)
s.add(fives + tens == 10)
s.add(5 * fives + 10 * tens == 70)
print(s.check())
m = s.model()
print(m[fives], m[tens])
