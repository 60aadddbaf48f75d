# SEND + MORE = MONEY, each letter a different digit, no leading zeros.
from z3 import *
S, E, N, D, M, O, R, Y = Ints('S E N D M O R Y')
s = Solver()
s.add(0 <= S, S <= 9, 0 <= E, E <= 9, 0 <= N, N <= 9, 0 <= D, D <= 9)
s.add(0 <= M, M <= 9, 0 <= O, O <= 9, 0 <= R, R <= 9, 0 <= Y, Y <= 9)
s.add(Distinct(S, E, N, D, M, O, R, Y))
s.add(S != 0, M != 0)
send = 1000 * S + 100 * E + 10 * N + D
more = 1000 * M + 100 * O + 10 * R + E
money = 10000 * M + 1000 * O + 100 * N + 10 * E + Y
s.add(send + more == money)
print(s.check())
m = s.model()
print(m)
