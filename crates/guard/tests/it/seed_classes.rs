//! The seven failure classes on MT-Bench's seed questions (Q87, Q93, Q99,
//! Q104, Q111, Q114, Q119), each with a scripted model that makes the slip
//! Gemma made: the guard must turn the failing answer into a right one, and
//! the trace must say so. Plus the bounds: hostile programs and prompts end
//! with "could not verify" and the original answer.

use engine::{ChatMessage, Grammar, ModelCall};
use hearth_guard::claims::CALC_GRAMMAR;
use hearth_guard::pipeline::{answer, GuardConfig, GuardKind, GuardSet, Guarded, Outcome};
use hearth_guard::{logic, ScriptedModel};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

const Q119: &str = "Benjamin went to a bookstore and purchased a variety of books. He bought 5 copies of a sci-fi novel, each priced at $20, 3 copies of a history book priced at $30 each, and 2 copies of a philosophy book for $45 each.\nWhat was the total cost of his purchases?";
const Q104: &str =
    "David has three sisters. Each of them has one brother. How many brothers does David have?";
const Q104_2: &str = "If we change the previous question and assume that each sister of David has two brothers, how many brothers would David have?";
const Q87: &str = "Could you write a captivating short story beginning with the sentence: The old abandoned house at the end of the street held a secret that no one had ever discovered.";
const Q87_2: &str = "Now, do the same task again but only use four-word sentences.";
const Q93: &str = "Imagine yourself as a doctor tasked with devising innovative remedies for various ailments and maladies. Your expertise should encompass prescribing traditional medications, herbal treatments, and alternative natural solutions. Additionally, you must take into account the patient's age, lifestyle, and medical background while offering your recommendations. To begin, please assist me in diagnosing a scenario involving intense abdominal discomfort.";
const Q99: &str = "Suppose you are a mathematician and poet. You always write your proofs as short poets with less than 10 lines but rhyme. Prove the square root of 2 is irrational number.";
const Q111: &str = "The vertices of a triangle are at points (0, 0), (-1, 1), and (3, 3). What is the area of the triangle?";
const Q114: &str = "When rolling two dice, what is the probability that you roll a total number that is at least 3?";

/// A scripted model that answers the pipeline's kinds of call: routing
/// questions (yes/no grammar), calculator and solver programs (by their
/// grammars), and answers (no grammar) from a queue.
struct Script {
    route: &'static str,
    calc: Option<&'static str>,
    logic: Option<&'static str>,
    answers: Vec<&'static str>,
}

fn run(messages: &[ChatMessage], s: Script) -> (Guarded, Vec<ModelCall>) {
    run_with(messages, s, GuardConfig::default())
}

fn run_with(messages: &[ChatMessage], s: Script, cfg: GuardConfig) -> (Guarded, Vec<ModelCall>) {
    let answers = Arc::new(Mutex::new(
        s.answers
            .iter()
            .map(|a| a.to_string())
            .collect::<VecDeque<_>>(),
    ));
    let queue = Arc::clone(&answers);
    let mut model = ScriptedModel::with(move |call| match &call.grammar {
        Some(Grammar::Regex(r)) if r == "(yes|no)" => s.route.to_string(),
        Some(Grammar::Lark(g)) if g == CALC_GRAMMAR => s.calc.unwrap_or("x = 1").to_string(),
        Some(Grammar::Lark(g)) if g == logic::GRAMMAR => s.logic.unwrap_or("").to_string(),
        Some(other) => panic!("unexpected grammar {other:?}"),
        None => queue
            .lock()
            .unwrap()
            .pop_front()
            .expect("the script has an answer for every answer call"),
    });
    let g = answer(&mut model, messages, &cfg).expect("the pipeline answers");
    (g, model.calls)
}

fn step(g: &Guarded, guard: GuardKind) -> Vec<(Outcome, String)> {
    g.trace
        .steps
        .iter()
        .filter(|s| s.guard == guard)
        .map(|s| (s.outcome, s.detail.clone()))
        .collect()
}

fn has(g: &Guarded, guard: GuardKind, outcome: Outcome) -> bool {
    step(g, guard).iter().any(|(o, _)| *o == outcome)
}

const Q119_PROGRAM: &str =
    "scifi = 5 * 20\nhistory = 3 * 30\nphilosophy = 2 * 45\ntotal = scifi + history + philosophy";

/// Class 1: arithmetic committed before it was computed.
#[test]
fn q119_arithmetic_is_computed_first_and_wrong_claims_repaired() {
    let draft = "He spent 5 × $20 = $100 on sci-fi, 3 × $30 = $90 on history and 2 × $45 = $90 on philosophy. The total cost is $100 + $90 + $90 = $245.";
    let (g, calls) = run(
        &[ChatMessage::user(Q119)],
        Script {
            route: "yes",
            calc: Some(Q119_PROGRAM),
            logic: None,
            answers: vec![draft],
        },
    );
    // The answer was asked for with the computed value in hand.
    let answer_call = calls.iter().find(|c| c.grammar.is_none()).unwrap();
    assert!(answer_call
        .messages
        .last()
        .unwrap()
        .content
        .contains("total = 280"));
    assert!(g.text.ends_with("= $280."), "{}", g.text);
    assert!(!g.text.contains("245"));
    assert!(has(&g, GuardKind::Calc, Outcome::Computed));
    assert!(has(&g, GuardKind::Calc, Outcome::Repaired));
    assert!(g.trace.changed);
    assert_eq!(g.draft, draft);
}

/// Class 1, the final only: a stated total with no working is held to the
/// calculator's value.
#[test]
fn q119_a_wrong_final_is_replaced_by_the_computed_value() {
    let (g, _) = run(
        &[ChatMessage::user(Q119)],
        Script {
            route: "yes",
            calc: Some(Q119_PROGRAM),
            logic: None,
            answers: vec!["Benjamin's total cost was $245."],
        },
    );
    assert_eq!(g.text, "Benjamin's total cost was $280.");
}

/// Class 5 on Q119: the self-correction draft is dropped, the corrected
/// tail kept, and the calculator agrees with it.
#[test]
fn q119_self_correction_is_stripped() {
    let draft = "5 × $20 = $100, 3 × $30 = $90, 2 × $45 = $90, so the total is $245. Wait, let me recheck: $100 + $90 + $90 = $280. The total cost of his purchases is $280.";
    let (g, _) = run(
        &[ChatMessage::user(Q119)],
        Script {
            route: "yes",
            calc: Some(Q119_PROGRAM),
            logic: None,
            answers: vec![draft],
        },
    );
    assert_eq!(
        g.text,
        "$100 + $90 + $90 = $280. The total cost of his purchases is $280."
    );
    assert!(has(&g, GuardKind::Clean, Outcome::Repaired));
    assert!(has(&g, GuardKind::Calc, Outcome::Passed));
}

const Q104_PROGRAM: &str = "from z3 import *\nboys, david_brothers = Ints('boys david_brothers')\ns = Solver()\ns.add(boys >= 1)\ns.add(boys == 1)\ns.add(david_brothers == boys - 1)\ns.check()\nm = s.model()\nprint(m[david_brothers])";

/// Class 2: a puzzle reasoned right and answered wrong.
#[test]
fn q104_the_solver_fixes_the_count() {
    let (g, calls) = run(
        &[ChatMessage::user(Q104)],
        Script {
            route: "no",
            calc: None,
            logic: Some(Q104_PROGRAM),
            answers: vec![
                "Each of David's three sisters has one brother, and that brother is David. So David has one brother.",
                "Each sister's one brother is David himself, so David has no brothers.",
            ],
        },
    );
    assert!(
        has(&g, GuardKind::Logic, Outcome::Computed),
        "{:?}",
        g.trace
    );
    assert!(has(&g, GuardKind::Logic, Outcome::Repaired));
    assert_eq!(
        g.text,
        "Each sister's one brother is David himself, so David has no brothers."
    );
    let answer_call = calls.iter().find(|c| c.grammar.is_none()).unwrap();
    assert!(answer_call
        .messages
        .last()
        .unwrap()
        .content
        .contains("david_brothers = 0"));
}

/// Class 2, turn 2, where the model will not take the hint: the number is
/// replaced.
#[test]
fn q104_turn_two_is_replaced_when_asking_again_fails() {
    let program = Q104_PROGRAM.replace("boys == 1", "boys == 2");
    let program: &'static str = Box::leak(program.into_boxed_str());
    let messages = [
        ChatMessage::user(Q104),
        ChatMessage::assistant("David has no brothers."),
        ChatMessage::user(Q104_2),
    ];
    let (g, _) = run(
        &messages,
        Script {
            route: "no",
            calc: None,
            logic: Some(program),
            answers: vec![
                "If each sister has two brothers, David would have two brothers.",
                "David would have two brothers.",
            ],
        },
    );
    assert_eq!(
        g.text,
        "If each sister has two brothers, David would have one brother."
    );
    assert!(has(&g, GuardKind::Logic, Outcome::Repaired));
}

/// Class 3: four-word sentences kept for a few sentences only.
#[test]
fn q87_four_word_sentences_are_refined() {
    let messages = [
        ChatMessage::user(Q87),
        ChatMessage::assistant("The old abandoned house at the end of the street held a secret that no one had ever discovered. …"),
        ChatMessage::user(Q87_2),
    ];
    let (g, calls) = run(
        &messages,
        Script {
            route: "no",
            calc: None,
            logic: None,
            answers: vec![
                "Old house held secrets. Nobody ever went inside because it was scary. Children whispered about ghosts. One night, a girl named Lily decided to explore it alone.",
                "Old house held secrets. Nobody dared go inside. Children whispered about ghosts. Lily explored it alone. She found hidden letters. The secret was love.",
            ],
        },
    );
    assert!(
        has(&g, GuardKind::Verify, Outcome::Repaired),
        "{:?}",
        g.trace
    );
    assert!(g.text.starts_with("Old house held secrets. Nobody dared"));
    // The refinement said which sentences broke the rule.
    let refine = calls
        .last()
        .unwrap()
        .messages
        .last()
        .unwrap()
        .content
        .clone();
    assert!(refine.contains("words_per_sentence"), "{refine}");
}

/// Class 3 and 4's neighbour: a poem proof "with less than 10 lines".
#[test]
fn q99_line_limit_is_refined() {
    let long: String = (1..=20)
        .map(|i| format!("Line {i} of a proof that goes on, with rhyme and reason strong"))
        .collect::<Vec<_>>()
        .join("\n");
    let long: &'static str = Box::leak(long.into_boxed_str());
    let short = "Suppose root two is p over q, reduced,\nThen p squared is two q squared, deduced.\nSo p is even; write p as two k,\nThen q is even too, the same way.\nBoth even breaks the lowest terms we chose,\nSo no such fraction: irrational, it goes.";
    let (g, _) = run(
        &[ChatMessage::user(Q99)],
        Script {
            route: "no",
            calc: None,
            logic: None,
            answers: vec![long, short],
        },
    );
    assert!(
        has(&g, GuardKind::Verify, Outcome::Repaired),
        "{:?}",
        g.trace
    );
    assert_eq!(g.text, short);
    assert!(has(&g, GuardKind::Persona, Outcome::Passed));
}

/// Class 4: the doctor says it is an AI.
#[test]
fn q93_persona_break_is_regenerated() {
    let (g, calls) = run(
        &[ChatMessage::user(Q93)],
        Script {
            route: "no",
            calc: None,
            logic: None,
            answers: vec![
                "I am an AI, not a licensed medical professional, so I cannot diagnose you. Abdominal pain has many causes.",
                "As your doctor, I would first ask where the pain sits and how long it has lasted. Pain in the lower right suggests appendicitis; after meals, gallstones.",
            ],
        },
    );
    assert!(
        has(&g, GuardKind::Persona, Outcome::Repaired),
        "{:?}",
        g.trace
    );
    assert!(g.text.starts_with("As your doctor"));
    let regen = &calls.last().unwrap().messages[0];
    assert_eq!(regen.role, "system");
    assert!(regen.content.contains("You are a doctor"));
}

/// Class 4 when the regeneration leaks too: the leaking sentence goes.
#[test]
fn q93_a_second_leak_drops_the_sentence() {
    let (g, _) = run(
        &[ChatMessage::user(Q93)],
        Script {
            route: "no",
            calc: None,
            logic: None,
            answers: vec![
                "I am an AI, not a licensed medical professional. Abdominal pain has many causes.",
                "As an AI language model, I cannot examine you.",
            ],
        },
    );
    assert_eq!(g.text, "Abdominal pain has many causes.");
}

/// Class 5: "the area is 6 … wait … 3".
#[test]
fn q111_self_correction_is_stripped_and_checked() {
    let (g, _) = run(
        &[ChatMessage::user(Q111)],
        Script {
            route: "yes",
            calc: Some("area = abs(0 * (1 - 3) + (-1) * (3 - 0) + 3 * (0 - 1)) / 2"),
            logic: None,
            answers: vec!["Using base times height, the area is 6. Wait, let me recheck with the shoelace formula: |0(1 - 3) + (-1)(3 - 0) + 3(0 - 1)| / 2, so the area of the triangle is 3."],
        },
    );
    assert_eq!(
        g.text,
        "|0(1 - 3) + (-1)(3 - 0) + 3(0 - 1)| / 2, so the area of the triangle is 3."
    );
    assert!(has(&g, GuardKind::Clean, Outcome::Repaired));
    assert!(has(&g, GuardKind::Calc, Outcome::Passed));
}

/// Class 6: "at least 3" worked as "greater than 3".
#[test]
fn q114_at_least_is_respected() {
    let (g, _) = run(
        &[ChatMessage::user(Q114)],
        Script {
            route: "no",
            calc: None,
            logic: None,
            answers: vec![
                "We need a total greater than 3. Totals of 2 and 3 happen in 3 of 36 ways, so the probability is 33/36 = 11/12.",
                "A total of at least 3 fails only for a total of 2 (1 + 1), so the probability is 1 - 1/36 = 35/36.",
            ],
        },
    );
    assert!(
        has(&g, GuardKind::Qualifiers, Outcome::Repaired),
        "{:?}",
        g.trace
    );
    assert!(g.text.ends_with("35/36."));
}

#[test]
fn guard_none_returns_the_draft_with_no_extra_calls() {
    let cfg = GuardConfig {
        guards: GuardSet::none(),
        ..GuardConfig::default()
    };
    let (g, calls) = run_with(
        &[ChatMessage::user(Q119)],
        Script {
            route: "yes",
            calc: Some(Q119_PROGRAM),
            logic: None,
            answers: vec!["The total is $245."],
        },
        cfg,
    );
    assert_eq!(g.text, "The total is $245.");
    assert_eq!(calls.len(), 1);
    assert_eq!(g.trace.extra_calls, 0);
    assert!(g.trace.steps.is_empty());
}

/// Hostile calculator programs end with "could not verify" and the answer
/// as it was.
#[test]
fn hostile_calculator_programs_keep_the_answer() {
    // Each uses the question's numbers, so it is grounded and reaches the
    // calculator's own bounds.
    let nested = format!("x = {}5{}", "(".repeat(100), ")".repeat(100));
    let nested: &'static str = Box::leak(nested.into_boxed_str());
    for program in ["x = 20 ** 20 ** 20", "x = 5 / 0", nested] {
        let start = std::time::Instant::now();
        let (g, _) = run(
            &[ChatMessage::user(Q119)],
            Script {
                route: "yes",
                calc: Some(program),
                logic: None,
                answers: vec!["The total cost is $280."],
            },
        );
        assert!(start.elapsed().as_secs() < 5, "{program}");
        assert_eq!(g.text, "The total cost is $280.");
        let calc = step(&g, GuardKind::Calc);
        assert_eq!(calc[0].0, Outcome::CouldNotVerify, "{program}: {calc:?}");
        assert!(!calc[0].1.contains("not used"), "{program}: {calc:?}");
    }
}

const PENS: &str =
    "A shop sells pens at $3 each. I buy 7 pens and pay with a $50 bill. How much change do I get?";

/// A program whose numbers are not the question's (the 270M's own, seen on
/// the pens question) is not used: the step reads could-not-verify, the
/// answer is asked without a "fact", and no check claims agreement with it.
#[test]
fn a_program_unrelated_to_the_question_is_not_used() {
    let foreign = "write = 100000000000 + 100000000000 + 2000010000000";
    for program in [foreign, "x = 1 + 1", "change = 50 - 3 * 8"] {
        let (g, calls) = run(
            &[ChatMessage::user(PENS)],
            Script {
                route: "yes",
                calc: Some(program),
                logic: None,
                answers: vec!["You get $29 back."],
            },
        );
        let calc = step(&g, GuardKind::Calc);
        assert_eq!(calc[0].0, Outcome::CouldNotVerify, "{program}: {calc:?}");
        assert!(calc[0].1.contains("not used"), "{calc:?}");
        assert!(!has(&g, GuardKind::Calc, Outcome::Computed), "{calc:?}");
        let answer_call = calls.iter().find(|c| c.grammar.is_none()).unwrap();
        let prompt = &answer_call.messages.last().unwrap().content;
        assert!(!prompt.contains("exact"), "{prompt}");
        assert!(
            calc.iter().all(|(_, d)| !d.contains("calculator's")),
            "{calc:?}"
        );
        assert_eq!(g.text, "You get $29 back.");
    }
}

/// The grounded program for the same question still computes and repairs.
#[test]
fn a_grounded_program_computes_and_repairs() {
    let (g, calls) = run(
        &[ChatMessage::user(PENS)],
        Script {
            route: "yes",
            calc: Some("cost = 3 * 7\nchange = 50 - cost"),
            logic: None,
            answers: vec!["The pens cost 3 × 7 = $21, so you get $31 back."],
        },
    );
    let answer_call = calls.iter().find(|c| c.grammar.is_none()).unwrap();
    assert!(answer_call
        .messages
        .last()
        .unwrap()
        .content
        .contains("change = 29"));
    assert!(has(&g, GuardKind::Calc, Outcome::Computed));
    assert!(has(&g, GuardKind::Calc, Outcome::Repaired));
    assert_eq!(g.text, "The pens cost 3 × 7 = $21, so you get $29 back.");
}

/// A reply that copies the guard's note to the model loses it.
#[test]
fn the_guards_instructions_never_reach_the_reply() {
    let echo = "(Use these results; they are exact: A calculator computed exactly: change = 29.) You get $29 back.";
    let (g, _) = run(
        &[ChatMessage::user(PENS)],
        Script {
            route: "yes",
            calc: Some("change = 50 - 3 * 7"),
            logic: None,
            answers: vec![echo],
        },
    );
    assert_eq!(g.text, "You get $29 back.");
    let lower = g.text.to_lowercase();
    assert!(
        !lower.contains("exact") && !lower.contains("calculator"),
        "{}",
        g.text
    );
    assert!(step(&g, GuardKind::Calc)
        .iter()
        .any(|(o, d)| *o == Outcome::Repaired && d.contains("instructions")));
}

/// A solver program with a million variables, and one whose search has no
/// bound: each ends with "could not verify" and the answer as it was.
#[test]
fn hostile_solver_programs_keep_the_answer() {
    let names: Vec<String> = (0..1_000_000).map(|i| format!("v{i}")).collect();
    let huge = format!(
        "from z3 import *\nxs = Ints('{}')\ns = Solver()\nprint(s.model())",
        names.join(" ")
    );
    let huge: &'static str = Box::leak(huge.into_boxed_str());
    let unbounded = "from z3 import *\nx, y, z = Ints('x y z')\ns = Solver()\ns.add(x > 0, y > 0, z > 0)\ns.add(x * x * x + y * y * y == z * z * z)\nprint(s.model())";
    for program in [huge, unbounded] {
        let start = std::time::Instant::now();
        let (g, _) = run(
            &[ChatMessage::user(Q104)],
            Script {
                route: "no",
                calc: None,
                logic: Some(program),
                answers: vec!["David has no brothers."],
            },
        );
        assert!(start.elapsed().as_secs() < 30, "took {:?}", start.elapsed());
        assert_eq!(g.text, "David has no brothers.");
        let logic = step(&g, GuardKind::Logic);
        assert!(
            logic.iter().all(|(o, _)| *o == Outcome::CouldNotVerify),
            "{logic:?}"
        );
    }
}

/// A prompt with 500 constraints: checked in bounded time; whatever cannot
/// be met is flagged, and an answer comes back.
#[test]
fn five_hundred_constraints_end_in_bounded_time() {
    let mut prompt = String::from("Write a short note.");
    for i in 0..500 {
        prompt.push_str(&format!(
            " Do not include the keyword \"word{i}\" in the response. Your response should contain at least {} sentences.",
            i + 1
        ));
    }
    let prompt: &'static str = Box::leak(prompt.into_boxed_str());
    let start = std::time::Instant::now();
    let (g, _) = run(
        &[ChatMessage::user(prompt)],
        Script {
            route: "no",
            calc: None,
            logic: None,
            answers: vec!["A note.", "A note again.", "A third note."],
        },
    );
    assert!(start.elapsed().as_secs() < 30, "took {:?}", start.elapsed());
    assert!(!g.text.is_empty());
    assert!(!step(&g, GuardKind::Verify).is_empty());
}
