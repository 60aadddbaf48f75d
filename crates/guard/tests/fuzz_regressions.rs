//! Inputs the fuzz targets found (fuzz/fuzz_targets/logic.rs; docs/fuzz.md),
//! kept as tests so the bugs stay fixed.

use hearth_guard::logic::{solve, Limits, Status};
use std::time::{Duration, Instant};

/// Two remainders of one sum over the default domains made pumpkin's bound
/// propagation creep one unit at a time, and one conflict took minutes while
/// the time budget is only checked between conflicts. Found by `logic` (a
/// mutated seating puzzle). The answer now comes within the budget and its
/// overrun: `unknown`, or a solution when the solver is quick enough.
#[test]
fn fuzz_two_remainders_end_within_the_budget() {
    let src = "\
from z3 import *
a, b, c, d, e, f = Ints('a b c d e f')
s = Solver()
s.add(5 <= a, a <= (e - a) % 6 != 1, (e - a) % 3 != 5)
print(s.check())
m = s.model()
print(m)
";
    let limits = Limits {
        time_budget: Duration::from_millis(200),
        ..Limits::default()
    };
    let start = Instant::now();
    let solution = solve(src, &limits).expect("a program of the subset");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "took {:?}",
        start.elapsed()
    );
    assert!(matches!(solution.status, Status::Unknown | Status::Sat));
}
