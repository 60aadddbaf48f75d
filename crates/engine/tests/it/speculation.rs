//! Speculative decoding changes how fast tokens come, never which: greedy
//! and seeded sampled outputs are the same token for token with n-gram
//! drafting as without, on the real 270M (20 prompts, copy-heavy and not)
//! and on a tiny model whose sliding-window rings wrap and rewind, and the
//! drafts were really verified (tokens were drafted and some kept).

use crate::common;

use common::real_model;
use hearth_engine::{
    Engine, GenerateOptions, Generation, GenerationRequest, NgramOptions, RunOptions, Sampler,
    SamplingParams, Speculation,
};

const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma3/model-f32.gguf"
);

fn load(path: &std::path::Path, ctx: usize) -> Engine {
    let opts = RunOptions {
        threads: Some(2),
        ctx: Some(ctx),
        ..RunOptions::default()
    };
    Engine::load(path, &opts).unwrap()
}

/// The generation, and what was streamed: (id, text) per event.
fn run(
    engine: &Engine,
    prompt: &[u32],
    n: usize,
    params: &SamplingParams,
    speculation: Option<Speculation>,
) -> (Generation, Vec<(u32, String)>) {
    let opts = GenerateOptions {
        max_tokens: n,
        stop: Vec::new(),
        stop_on_eog: true,
        render_special: true,
        speculation,
    };
    let mut sampler = Sampler::new(params.clone());
    let mut session = engine.session();
    let mut streamed = Vec::new();
    let d = session
        .begin(GenerationRequest::new(prompt, &opts), &sampler)
        .unwrap();
    let g = session
        .run(d, &mut sampler, |ev| {
            streamed.push((ev.id, ev.text.to_string()));
            true
        })
        .unwrap();
    (g, streamed)
}

/// Runs without and with `speculation` and checks they agree: the ids, the
/// text, the end and every streamed event. Returns the speculating run.
fn same_both_ways(
    engine: &Engine,
    prompt: &[u32],
    n: usize,
    params: &SamplingParams,
    speculation: Option<Speculation>,
    what: &str,
) -> Generation {
    let (plain, plain_events) = run(engine, prompt, n, params, None);
    let (fast, fast_events) = run(engine, prompt, n, params, speculation);
    assert_eq!(fast.ids, plain.ids, "{what}");
    assert_eq!(fast.text, plain.text, "{what}");
    assert_eq!(fast.finish, plain.finish, "{what}");
    assert_eq!(fast_events, plain_events, "{what}");
    assert!(plain.speculation.is_none());
    fast
}

fn ngram(max_draft: usize) -> Option<Speculation> {
    Some(Speculation::Ngram(NgramOptions {
        max_draft,
        ..NgramOptions::default()
    }))
}

const PASSAGE: &str = "The lighthouse keeper climbed the spiral stairs every evening at dusk. \
He trimmed the wick, polished the great lens, and wrote the weather in his log. \
Ships passing the point saw the beam sweep the water every ten seconds.";

const FUNCTION: &str = "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(value)\n";

/// Twenty prompts: copying, fixing, quoting, lists, and plain continuations.
fn prompts() -> Vec<String> {
    let mut p = vec![
        format!("Rewrite this paragraph in the past perfect tense.\n\n{PASSAGE}\n\nRewritten:\n"),
        format!("Copy the paragraph exactly.\n\n{PASSAGE}\n\nCopy:\n"),
        format!("Fix the bug in this function.\n\n{FUNCTION}\nFixed:\n"),
        format!("{FUNCTION}\n# The same function, with a docstring:\n"),
        format!("{PASSAGE}\n\nQuote the sentence about the lens: \""),
        format!("{PASSAGE}\n\nWhat did the keeper write in his log? Answer with a quote: \""),
        "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,".to_string(),
        "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday, Monday,".to_string(),
        "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td>".to_string(),
        "{\"name\": \"Ada\", \"age\": 36}, {\"name\": \"Alan\",".to_string(),
        "The capital of France is".to_string(),
        "Once upon a time, in a small village by the sea,".to_string(),
        "Photosynthesis is the process by which".to_string(),
        "A haiku about autumn:\n".to_string(),
        "Q: What is 12 times 7?\nA:".to_string(),
        "import numpy as np\n\ndef softmax(x):\n".to_string(),
        "Dear Sir or Madam,\n\nI am writing to".to_string(),
        "The three laws of motion are".to_string(),
    ];
    p.push(format!(
        "Summarize, quoting the original where you can.\n\n{PASSAGE} {PASSAGE}\n\nSummary:"
    ));
    p.push("SELECT name, email FROM users WHERE id = 1;\nSELECT name, email FROM users WHERE id = 2;\n".into());
    assert_eq!(p.len(), 20);
    p
}

#[test]
fn greedy_and_seeded_outputs_on_the_real_model_are_the_same_with_ngram_drafting() {
    let engine = load(&real_model(), 1024);
    let greedy = SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    };
    let mut drafted = 0;
    let mut accepted = 0;
    for (i, prompt) in prompts().iter().enumerate() {
        let ids = engine.tokenizer().encode(prompt, true, true);
        let what = format!("prompt {i}: {prompt:?}");
        let fast = same_both_ways(&engine, &ids, 48, &greedy, ngram(8), &what);
        let s = fast.speculation.expect("speculation stats");
        assert!(s.accepted <= s.drafted);
        drafted += s.drafted;
        accepted += s.accepted;
    }
    // Copy-heavy prompts draft, and the model keeps a good share.
    assert!(drafted > 100, "drafted {drafted}");
    assert!(accepted * 4 > drafted, "kept {accepted} of {drafted}");

    // Sampling with a seed: one draw per output token either way.
    let sampled = SamplingParams {
        temperature: 0.8,
        seed: 5,
        ..SamplingParams::default()
    };
    for prompt in &prompts()[..4] {
        let ids = engine.tokenizer().encode(prompt, true, true);
        same_both_ways(&engine, &ids, 40, &sampled, ngram(4), prompt);
    }
}

#[test]
fn drafts_across_wrapped_sliding_windows_change_nothing() {
    // Window 8, rings of 72: 300 tokens wrap them many times, and every
    // rejected draft rewinds them.
    let engine = load(std::path::Path::new(TINY), 512);
    let vocab = engine.model().config().vocab as u32;
    let prompt: Vec<u32> = std::iter::once(2)
        .chain((0..60).map(|i| 10 + (i * 7 % 13) % (vocab - 10)))
        .collect();
    for (seed, temperature) in [(1, 0.0), (3, 1.0), (9, 1.5)] {
        let params = SamplingParams {
            temperature,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed,
            ..SamplingParams::default()
        };
        for draft in [1, 3, hearth_engine::MAX_DRAFT] {
            let what = format!("temperature {temperature}, draft {draft}");
            let fast = same_both_ways(&engine, &prompt, 300, &params, ngram(draft), &what);
            let s = fast.speculation.unwrap();
            assert!(
                s.drafted > 0,
                "temperature {temperature}, draft {draft}: {s:?}"
            );
        }
    }
}

#[test]
fn the_token_limit_and_the_context_end_a_speculating_generation_as_a_plain_one() {
    let engine = load(std::path::Path::new(TINY), 96);
    let prompt: Vec<u32> = std::iter::once(2)
        .chain((0..40).map(|i| 10 + i % 5))
        .collect();
    let greedy = SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    };
    for n in [1, 2, 7, 55, 56, 200] {
        same_both_ways(
            &engine,
            &prompt,
            n,
            &greedy,
            ngram(hearth_engine::MAX_DRAFT),
            &format!("{n} tokens"),
        );
    }
}

#[test]
fn bad_speculation_settings_are_a_clear_error() {
    let engine = load(std::path::Path::new(TINY), 64);
    let opts = GenerateOptions {
        max_tokens: 4,
        speculation: ngram(0),
        ..GenerateOptions::default()
    };
    let sampler = Sampler::new(SamplingParams::default());
    let err = engine
        .session()
        .begin(GenerationRequest::new(&[2, 10, 11], &opts), &sampler)
        .unwrap_err();
    assert!(err.to_string().contains("n-gram speculation"), "{err}");
}

const TINY_Q8: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma3/model-q8_0.gguf"
);

/// The tiny f32 model, its Q8_0 copy to draft for it, and a prompt of BOS
/// and `len` ids whose pattern `(i * step % modulus)` the caller picks.
fn tiny_with_its_q8_0(
    len: u32,
    step: u32,
    modulus: u32,
) -> (Engine, std::sync::Arc<Engine>, Vec<u32>) {
    let target = load(std::path::Path::new(TINY), 512);
    let draft = std::sync::Arc::new(load(std::path::Path::new(TINY_Q8), 512));
    let vocab = target.model().config().vocab as u32;
    let prompt = std::iter::once(2)
        .chain((0..len).map(|i| 10 + (i * step % modulus) % (vocab - 10)))
        .collect();
    (target, draft, prompt)
}

#[test]
fn a_draft_model_changes_nothing_but_the_speed() {
    // The Q8_0 copy drafts for the f32 model: close enough that most drafts
    // are kept, different enough that some are not.
    let (target, draft, prompt) = tiny_with_its_q8_0(30, 11, 17);
    let mut kept = 0;
    for (seed, temperature) in [(1, 0.0), (4, 1.0)] {
        let params = SamplingParams {
            temperature,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed,
            ..SamplingParams::default()
        };
        for max_draft in [1, 4, hearth_engine::MAX_DRAFT] {
            let model = hearth_engine::DraftModel::new(draft.clone(), &target, max_draft).unwrap();
            let what = format!("temperature {temperature}, draft {max_draft}");
            let s = Some(Speculation::Draft(model));
            let fast = same_both_ways(&target, &prompt, 200, &params, s, &what);
            let stats = fast.speculation.unwrap();
            assert!(
                stats.drafted > 0 && stats.accepted <= stats.drafted,
                "{what}: {stats:?}"
            );
            kept += stats.accepted;
        }
    }
    assert!(kept > 0);
}

/// A draft ends at the first guess the draft model gives less than
/// `p_min`: every guess at 0, fewer at the default, none at 1 (no guess of
/// the tiny model is certain); the output is the same at each.
#[test]
fn a_draft_stops_at_a_guess_below_its_least_probability() {
    let (target, draft, prompt) = tiny_with_its_q8_0(30, 7, 23);
    let greedy = SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    };
    let model = hearth_engine::DraftModel::new(draft, &target, 4).unwrap();
    assert_eq!(model.p_min, hearth_engine::DEFAULT_DRAFT_P_MIN);
    let drafted = |p_min: f32| {
        let s = Speculation::Draft(model.clone()).with_p_min(p_min);
        let fast = same_both_ways(&target, &prompt, 60, &greedy, Some(s), "p_min");
        fast.speculation.unwrap().drafted
    };
    let (every, default, none) = (drafted(0.0), drafted(model.p_min), drafted(1.0));
    assert!(every > default && default > 0, "{every} {default}");
    assert_eq!(none, 0);
    let bad = Speculation::Draft(model).with_p_min(1.5);
    assert!(bad.validate().unwrap_err().contains("between 0 and 1"));
}

/// A conversation's next turn, on the same session, feeds the draft model
/// only what its sequence does not hold from the turn before (it had fed
/// the whole conversation again every generation), and still changes
/// nothing but the speed.
#[test]
fn a_draft_models_sequence_is_kept_for_the_next_turn() {
    let (target, draft, first) = tiny_with_its_q8_0(200, 13, 29);
    let model = hearth_engine::DraftModel::new(draft, &target, 4).unwrap();
    let greedy = SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    };
    let opts = GenerateOptions {
        max_tokens: 16,
        stop: Vec::new(),
        stop_on_eog: false,
        render_special: true,
        speculation: Some(Speculation::Draft(model)),
    };
    let mut session = target.session();
    let mut generate = |prompt: &[u32]| {
        let mut sampler = Sampler::new(greedy.clone());
        let d = session
            .begin(GenerationRequest::new(prompt, &opts), &sampler)
            .unwrap();
        session.run(d, &mut sampler, |_| true).unwrap()
    };
    let one = generate(&first);
    let fed_first = one.speculation.unwrap().fed;
    assert!(fed_first > first.len(), "fed {fed_first}");
    let next: Vec<u32> = first
        .iter()
        .chain(&one.ids)
        .chain(&[11, 12, 13])
        .copied()
        .collect();
    let two = generate(&next);
    let stats = two.speculation.unwrap();
    // At most the new turn's three ids and each token of the reply once
    // (those the draft did not guess itself), nothing of the first turn.
    assert!(stats.fed <= 3 + 1 + two.ids.len(), "{stats:?}");
    let (plain, _) = run(&target, &next, 16, &greedy, None);
    assert_eq!(two.ids, plain.ids);
}

#[test]
fn a_draft_model_of_another_vocabulary_is_refused() {
    let target = load(std::path::Path::new(TINY), 64);
    let other = std::sync::Arc::new(load(&real_model(), 64));
    let err = hearth_engine::DraftModel::new(other, &target, 4).unwrap_err();
    assert!(
        err.to_string()
            .contains("vocabulary is not the model's: it has 262144 tokens and the model 512"),
        "{err}"
    );
}

#[test]
fn greedy_outputs_on_the_real_model_are_the_same_with_a_draft_model() {
    // The Q4_K_M file drafts for itself requantized to Q8_0, as
    // `--quant q8_0 --draft gemma3-270m` does.
    let opts = RunOptions {
        threads: Some(2),
        ctx: Some(512),
        quant: Some("q8_0".into()),
        ..RunOptions::default()
    };
    let target = Engine::load(real_model(), &opts).unwrap();
    // With the head that `--draft` loads a draft with.
    let draft_opts = RunOptions {
        threads: Some(2),
        ctx: Some(512),
        draft_vocab: Some(hearth_engine::DRAFT_HEAD_ROWS),
        ..RunOptions::default()
    };
    let draft = std::sync::Arc::new(Engine::load(real_model(), &draft_opts).unwrap());
    let model = hearth_engine::DraftModel::new(draft, &target, 4).unwrap();
    let greedy = SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    };
    let (mut drafted, mut accepted) = (0, 0);
    for (i, prompt) in prompts().iter().enumerate() {
        let ids = target.tokenizer().encode(prompt, true, true);
        let s = Some(Speculation::Draft(model.clone()));
        let fast = same_both_ways(&target, &ids, 24, &greedy, s, &format!("prompt {i}"));
        let stats = fast.speculation.unwrap();
        drafted += stats.drafted;
        accepted += stats.accepted;
    }
    assert!(accepted * 2 > drafted, "kept {accepted} of {drafted}");
}

/// A draft model's limited head (`RunOptions::draft_vocab`) gives the whole
/// head's logits for the ids it keeps, to the bit: the first
/// `DRAFT_HEAD_ROWS` and the single characters past them; -inf for the
/// rest. On the last row of a step and on every row of a prompt.
#[test]
fn a_draft_head_keeps_its_ids_logits_and_rules_out_the_rest() {
    let path = real_model();
    let whole = load(&path, 64);
    let opts = RunOptions {
        threads: Some(2),
        ctx: Some(64),
        draft_vocab: Some(hearth_engine::DRAFT_HEAD_ROWS),
        ..RunOptions::default()
    };
    let limited = Engine::load(&path, &opts).unwrap();
    let n = hearth_engine::DRAFT_HEAD_ROWS;
    let tok = whole.tokenizer();
    let kept = |id: usize| {
        id < n
            || tok
                .token_text(id as u32)
                .is_some_and(|s| s.trim_start_matches('\u{2581}').chars().count() <= 1)
    };
    let same = |a: &[f32], b: &[f32]| {
        assert_eq!(a.len(), b.len());
        for (id, (x, y)) in a.iter().zip(b).enumerate() {
            match kept(id) {
                true => assert_eq!(x.to_bits(), y.to_bits(), "id {id}"),
                false => assert_eq!(*y, f32::NEG_INFINITY, "id {id}"),
            }
        }
    };
    let ids = tok.encode(
        "The quick brown fox jumps over the lazy dog, 1, 2, 3.",
        true,
        false,
    );
    let (mut a, mut b) = (whole.session(), limited.session());
    a.feed(&ids).unwrap();
    b.feed(&ids).unwrap();
    same(a.last_logits().unwrap(), b.last_logits().unwrap());
    let mut rows = Vec::new();
    whole
        .session()
        .score(&ids, |_, l| rows.push(l.to_vec()))
        .unwrap();
    let mut at = 0;
    limited
        .session()
        .score(&ids, |_, l| {
            same(&rows[at], l);
            at += 1;
        })
        .unwrap();
    assert_eq!(at, ids.len());
    let out = (0..tok.vocab_size()).filter(|&id| !kept(id)).count();
    assert!(out > 100_000, "only {out} ids ruled out");
}

/// The longest draft keeps the greedy output: its verifying batch computes
/// each row as a decode step does. With drafts of 15 (a batch of 16 rows,
/// which takes the panel product) this reply parted from the plain one
/// (`hearth bench --draft`'s quoting task, the 270M drafting for itself).
#[test]
fn the_longest_draft_verifies_rows_as_decode_steps_compute_them() {
    const TEXT: &str = "The committee met on the third of March. It agreed that the bridge would \
close for repairs from the first of June to the end of August. During the closure, a ferry \
will run every twenty minutes between the two landings, and it will be free for residents. \
The committee also asked the council to publish the repair schedule on its website.";
    let opts = RunOptions {
        threads: Some(2),
        ctx: Some(512),
        ..RunOptions::default()
    };
    let target = Engine::load(real_model(), &opts).unwrap();
    let draft_opts = RunOptions {
        draft_vocab: Some(hearth_engine::DRAFT_HEAD_ROWS),
        ..opts
    };
    let draft = std::sync::Arc::new(Engine::load(real_model(), &draft_opts).unwrap());
    let model = hearth_engine::DraftModel::new(draft, &target, hearth_engine::MAX_DRAFT).unwrap();
    let prompt = format!(
        "{TEXT}\n\nQuestion: When will the bridge close, and how will people cross it? \
         Answer by quoting the text.\nAnswer: \""
    );
    let ids = target.tokenizer().encode(&prompt, true, false);
    let greedy = SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    };
    // Every guess drafted, so that drafts reach the longest length.
    let s = Some(Speculation::Draft(model).with_p_min(0.0));
    let fast = same_both_ways(&target, &ids, 128, &greedy, s, "quotes");
    assert!(fast.speculation.unwrap().accepted > 0);
}
