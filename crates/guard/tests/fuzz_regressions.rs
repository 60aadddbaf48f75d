//! Inputs the fuzz targets found (fuzz/fuzz_targets/logic.rs; docs/fuzz.md),
//! kept as tests so the bugs stay fixed.
//! A binary of its own, apart from `it`: a program past its time budget
//! leaves the solver busy for the whole process until it stops.

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

/// pumpkin adds a linear constraint's bounds up in `i32`: three terms near
/// the solver's limit passed `i32::MAX`, a panic in checked builds (found
/// by `logic` as a caught panic) and wrapped, wrong bounds in release ones.
/// Such a constraint is now refused as beyond the solver's range; one whose
/// terms fit is still solved.
#[test]
fn fuzz_linear_sum_past_i32_is_refused() {
    let program = |sum: &str| {
        format!(
            "\
from z3 import *
x, y, z = Ints('x y z')
s = Solver()
s.add(x >= -1000000000, x <= 1000000000)
s.add(y >= -1000000000, y <= 1000000000)
s.add(z >= -1000000000, z <= 1000000000)
s.add({sum} == 7)
print(s.check())
print(s.model())
"
        )
    };
    let err = solve(&program("x + y + z"), &Limits::default())
        .map(|s| s.status)
        .expect_err("a sum of reach 3e9 must not be posted");
    assert!(err.to_string().contains("solver's range"), "{err}");
    let solution = solve(&program("x + y"), &Limits::default()).expect("reach 2e9 fits");
    assert!(
        matches!(solution.status, Status::Sat),
        "{:?}",
        solution.status
    );
}
