//! Fuzz the calculator (`hearth_guard::calc`): the input is a program as a
//! model writes one (`x = 1,250 * 20%; round(x / 3, 2)`), evaluated with
//! `calc::eval`; `check_claim` compares it with a stated result (the text
//! after the last `=` on the first line), and `annotations` scans the input
//! for GSM8K `<<expr=result>>` marks, each of which is checked too.
//!
//! Invariants: no panic, no hang, no runaway memory; every exact result
//! stays within `MAX_DIGITS` decimal digits (numerator and denominator);
//! a value formats.

#![no_main]

use hearth_guard::calc::{self, MAX_DIGITS};
use libfuzzer_sys::fuzz_target;

/// Bits in a number of `MAX_DIGITS` decimal digits, with a margin for the
/// rounding of log2(10).
const MAX_BITS: u64 = (MAX_DIGITS as u64) * 3322 / 1000 + 8;

fn check(v: &calc::Value) {
    assert!(
        v.exact.numer().bits() <= MAX_BITS,
        "numerator of {} bits",
        v.exact.numer().bits()
    );
    assert!(
        v.exact.denom().bits() <= MAX_BITS,
        "denominator of {} bits",
        v.exact.denom().bits()
    );
    let _ = v.to_string();
    let _ = v.to_f64();
}

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(v) = calc::eval(src) {
        check(&v);
    }
    let first = src.lines().next().unwrap_or("");
    if let Some((expr, claimed)) = first.rsplit_once('=') {
        let _ = calc::check_claim(expr, claimed);
    }
    for (at, expr, result) in calc::annotations(src).into_iter().take(8) {
        assert!(src[at..].starts_with("<<"));
        let _ = calc::check_claim(expr, result);
    }
});
