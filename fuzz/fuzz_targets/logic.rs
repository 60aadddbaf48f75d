//! Fuzz the logic solver's front end (`hearth_guard::logic::solve`): the
//! input is a program in the z3py subset, lexed, parsed, resolved and
//! handed to the CP/SAT solver under `Limits` (the defaults, with the time
//! budget cut to 100 ms so one run stays short; a budget that runs out
//! gives `unknown`, not an error).
//!
//! Invariants: no panic (a panic inside the solver library is caught by
//! `solve` and tolerated here), no hang, no runaway memory; an unsat or
//! unknown answer has no model and is not unique; the answer serialises.

#![no_main]

use hearth_guard::logic::{solve, Limits, Status};
use libfuzzer_sys::fuzz_target;
use std::time::Duration;

fuzz_target!(
    init: {
        hearth_fuzz::tolerate_caught_panics_in(&["pumpkin"]);
    },
    |data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let limits = Limits {
        time_budget: Duration::from_millis(100),
        ..Limits::default()
    };
    match solve(src, &limits) {
        Ok(sol) => {
            if sol.status != Status::Sat {
                assert!(sol.model.is_empty(), "a model for {:?}", sol.status);
                assert!(!sol.unique, "unique for {:?}", sol.status);
            }
            serde_json::to_string(&sol).expect("a solution serialises");
        }
        Err(e) => {
            let _ = (e.to_string(), e.line());
        }
    }
});
