# Tax is 10% of the income above 100 (rounded down), and nothing below.
# The tax paid is 5 and the income is a multiple of 10.
from z3 import *
income, tax = Ints('income tax')
s = Solver()
s.add(income >= 0)
s.add(tax == If(income > 100, (income - 100) / 10, 0))
s.add(tax == 5)
s.add(income % 10 == 0)
print(s.check())
m = s.model()
print(m.eval(income))
