//! The grammars the model writes programs under compile over a real
//! vocabulary, and what a model writes under them always parses: the tiny
//! random Gemma 3 (gibberish by design) writes calculator and solver
//! programs greedily and with sampling, and every one is read by our
//! parsers without a syntax error. Then the whole pipeline runs on it
//! through the engine's own [`LocalChat`].

use engine::{ChatMessage, ChatModel, Engine, Grammar, LocalChat, ModelCall, RunOptions};
use hearth_guard::calc::{self, CalcError};
use hearth_guard::claims::CALC_GRAMMAR;
use hearth_guard::logic;
use hearth_guard::pipeline::{answer, GuardConfig};

const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma3/model-f32.gguf"
);

fn engine(seed: u64) -> Engine {
    let mut opts = RunOptions {
        threads: Some(1),
        ctx: Some(1024),
        ..Default::default()
    };
    opts.sampling.seed = seed;
    opts.sampling.temperature = 1.0;
    Engine::load(TINY, &opts).expect("the tiny model loads")
}

#[test]
fn calculator_programs_written_under_the_grammar_always_parse() {
    for seed in 0..4 {
        let e = engine(seed);
        let mut chat = LocalChat::new(&e);
        for greedy in [true, false] {
            let mut call = ModelCall::new(vec![ChatMessage::user("What is 5 * 20 + 3 * 30?")], 160)
                .constrained(Grammar::Lark(CALC_GRAMMAR.into()));
            call.greedy = greedy;
            let program = chat.reply(&call).expect("a program").text;
            // A name used before it is bound, a division by zero, a bound
            // reached are errors of meaning, not of form: only syntax fails.
            if let Err(CalcError::Syntax { at, what }) = calc::eval(&program) {
                panic!("seed {seed}: `{program}` does not parse at {at}: {what}")
            }
        }
    }
}

#[test]
fn solver_programs_written_under_the_grammar_always_parse() {
    for seed in 0..4 {
        let e = engine(seed);
        let mut chat = LocalChat::new(&e);
        for greedy in [true, false] {
            let mut call = ModelCall::new(
                vec![ChatMessage::user("David has three sisters. Each of them has one brother. How many brothers does David have?")],
                320,
            )
            .constrained(Grammar::Lark(logic::GRAMMAR.into()));
            call.greedy = greedy;
            let reply = chat.reply(&call).expect("a program");
            if reply.finish != engine::FinishReason::Stop {
                // Cut off by the token limit: an unfinished program.
                continue;
            }
            if let Err(e) = logic::solve(&reply.text, &logic::Limits::default()) {
                assert!(
                    !matches!(e, logic::LogicError::Syntax { .. }),
                    "seed {seed}: `{}` does not parse: {e}",
                    reply.text
                );
            }
        }
    }
}

#[test]
fn the_pipeline_runs_on_a_real_engine() {
    let e = engine(7);
    let mut chat = LocalChat::new(&e);
    let cfg = GuardConfig {
        max_tokens: 32,
        program_tokens: 96,
        ..GuardConfig::default()
    };
    let q = "Benjamin bought 5 books at $20 each and 3 books at $30 each. What was the total cost? Answer in all lowercase letters.";
    let g = answer(&mut chat, &[ChatMessage::user(q)], &cfg).expect("an answer");
    assert!(g.trace.routed.iter().any(|r| r.applies));
    assert!(!g.trace.steps.is_empty());
    assert!(g.trace.extra_calls >= 1, "the calculator program is a call");
}
