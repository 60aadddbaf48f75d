# Five friends sit in seats 1-5 in a row. Alice sits at an end, Bob next to
# Alice, Carol in the middle, Dave not next to Carol, Eve left of Dave.
from z3 import *
alice, bob, carol, dave, eve = Ints('alice bob carol dave eve')
s = Solver()
s.add(1 <= alice, alice <= 5, 1 <= bob, bob <= 5, 1 <= carol, carol <= 5, 1 <= dave, dave <= 5, 1 <= eve, eve <= 5)
s.add(Distinct(alice, bob, carol, dave, eve))
s.add(Or(alice == 1, alice == 5))
s.add(Abs(bob - alice) == 1)
s.add(carol == 3)
s.add(Abs(dave - carol) > 1)
s.add(eve < dave)
print(s.check())
m = s.model()
print(m[alice], m[bob], m[carol], m[dave], m[eve])
