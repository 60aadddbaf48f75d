//! Fuzz IFEval's instruction extraction and checking
//! (`hearth_guard::verify`): the input is a prompt and a response separated
//! by a line `===` (all prompt when there is none). The instructions are
//! recovered from the prompt with `extract`, and each is checked strictly
//! and loosely against the response and repaired. The prompt is also read
//! as IFEval `input_data.jsonl` rows, whose ids and kwargs build
//! instructions with `Instruction::from_id_kwargs`.
//!
//! Invariants: no panic, no hang; a strict pass is a loose pass; a repair
//! is only offered for a response that fails and it then passes.

#![no_main]

use hearth_guard::verify::rows::{instructions_of, parse_jsonl, InputRow};
use hearth_guard::verify::{check, check_loose, extract, repair, Instruction};
use libfuzzer_sys::fuzz_target;

fn exercise(i: &Instruction, response: &str) {
    let strict = check(i, response);
    let loose = check_loose(i, response);
    assert!(!strict || loose, "strict pass but loose fail: {i:?}");
    if let Some(fixed) = repair(i, response) {
        assert!(!strict, "repaired a response that passed: {i:?}");
        assert!(check(i, &fixed), "a repair that does not pass: {i:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (prompt, response) = text.split_once("\n===\n").unwrap_or((text, ""));
    for i in extract(prompt).iter().take(16) {
        exercise(i, response);
    }
    if let Ok(rows) = parse_jsonl::<InputRow>(prompt) {
        for (n, row) in rows.iter().enumerate().take(4) {
            if let Ok(list) = instructions_of(row, n) {
                for i in list.iter().take(16) {
                    exercise(i, response);
                }
            }
        }
    }
});
