//! A conversation that outgrows the sliding window and continues through
//! the prefix cache yields exactly the tokens a fresh run yields: the cache
//! rewinds only while every ring still holds the window the next token
//! reads, and recomputes otherwise.

use hearth_engine::{
    Engine, GenerateOptions, GenerationRequest, RunOptions, Sampler, SamplingParams, Session,
};

const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma3/model-f32.gguf"
);

fn engine() -> Engine {
    Engine::load(
        TINY,
        &RunOptions {
            threads: Some(2),
            ctx: Some(512),
            ..RunOptions::default()
        },
    )
    .unwrap()
}

/// `n` tokens sampled at temperature 1 with a fixed seed: unlike greedy
/// (which a random tiny model answers with one repeated token), the draw
/// follows the whole distribution, so different logits show.
fn sampled(session: &mut Session, prompt: &[u32], n: usize) -> (Vec<u32>, usize) {
    let opts = options(n);
    let mut sampler = Sampler::new(seeded());
    let d = session
        .begin(GenerationRequest::new(prompt, &opts), &sampler)
        .unwrap();
    let g = session.run(d, &mut sampler, |_| true).unwrap();
    (g.ids, g.prompt_tokens_reused)
}

/// Temperature 1, nothing cut, a fixed seed.
fn seeded() -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: 11,
        ..SamplingParams::default()
    }
}

/// `n` tokens, no stops.
fn options(n: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens: n,
        stop: Vec::new(),
        stop_on_eog: false,
        render_special: true,
        speculation: None,
    }
}

/// Deterministic ids in the vocabulary (BOS first).
fn ids(vocab: usize, seed: usize, len: usize) -> Vec<u32> {
    std::iter::once(2)
        .chain((1..len).map(|i| ((seed * 131 + i * 17 + 5) % (vocab - 10) + 10) as u32))
        .collect()
}

#[test]
fn a_conversation_past_the_window_continues_exactly_as_a_fresh_run() {
    let engine = engine();
    let vocab = engine.model().config().vocab;
    let window = engine.model().config().layers[0]
        .window
        .expect("a sliding layer");
    let cap = window + hearth_engine::ring_slack(window);
    let first = ids(vocab, 1, 120);
    // A long first exchange: the prompt and the answer, far more positions
    // than a ring keeps.
    let start = || {
        let mut convo = engine.session();
        let (answer, _) = sampled(&mut convo, &first, 30);
        (convo, answer)
    };
    let (convo, answer) = start();
    let held = convo.tokens().to_vec();
    assert!(held.starts_with(&first) && held.len() >= first.len() + 29);
    assert!(held.len() > cap + window, "the rings have wrapped");
    let distinct: std::collections::BTreeSet<_> = answer.iter().collect();
    assert!(distinct.len() > 5, "a varied answer: {answer:?}");
    let branch = |keep: usize, seed: usize| {
        let mut next = held[..keep].to_vec();
        next.extend(&ids(vocab, seed, 10)[1..]);
        next
    };
    // The same prompt through a fresh session: what any reuse must give.
    let check = |convo: &mut Session, next: &[u32], what: &str| {
        let (continued, reused) = sampled(convo, next, 12);
        let mut fresh_session = engine.session();
        let (fresh, fresh_reused) = sampled(&mut fresh_session, next, 12);
        assert_eq!(fresh_reused, 0);
        assert_eq!(continued, fresh, "{what}: reused {reused}");
        // And the logits after the whole exchange agree to rounding.
        let a = convo.last_logits().unwrap().to_vec();
        let b = fresh_session.last_logits().unwrap().to_vec();
        let max = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(max < 1e-3, "{what}: logits differ by {max}");
        reused
    };

    // Next turns branch off at different depths: a few tokens back (the
    // rings still hold the window), and far back (they do not).
    for back in [
        1,
        5,
        cap - window,
        cap - window + 1,
        cap - window + 2,
        60,
        held.len() - 3,
    ] {
        let (mut convo, _) = start();
        let keep = held.len() - back;
        let reused = check(&mut convo, &branch(keep, 7 + back), &format!("{back} back"));
        // Rewinding is allowed exactly while the window is still held.
        let can_rewind = keep + 1 + cap >= window + held.len();
        assert_eq!(
            reused > 0,
            can_rewind,
            "branch {back} back: reused {reused}"
        );
        if can_rewind {
            assert_eq!(reused, keep);
        }
    }

    // A branch that ran past the old end overwrote ring slots of positions
    // below it: going back to the first exchange and then branching far back
    // must not read them (it recomputes instead).
    let (mut convo, _) = start();
    let mut long_branch = branch(held.len() - 5, 3);
    long_branch.extend(ids(vocab, 4, 40));
    check(&mut convo, &long_branch, "long branch");
    let (again, _) = sampled(&mut convo, &first, 30);
    assert_eq!(again, answer);
    check(
        &mut convo,
        &branch(held.len() - (cap - window), 5),
        "after a long branch",
    );
}

/// Server slots keep buffers for a decode step and prefill their prompts,
/// a chunk at a time and in turns, through one set of buffers they share:
/// each samples exactly what a session with buffers of its own samples,
/// and many slots take far less than as many whole sessions.
#[test]
fn slots_prefilling_through_shared_buffers_sample_as_whole_sessions() {
    let engine = engine();
    let vocab = engine.model().config().vocab;
    let prompts = [ids(vocab, 3, 150), ids(vocab, 4, 97)];
    let params = seeded();
    let opts = options(20);
    // Whole sessions, prefilling the same chunks in their own buffers.
    let want: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| {
            let mut s = engine.session();
            let mut sm = Sampler::new(params.clone());
            let mut d = s.begin(GenerationRequest::new(p, &opts), &sm).unwrap();
            while !s.prefill(&mut d, 40).unwrap() {}
            s.run(d, &mut sm, |_| true).unwrap().ids
        })
        .collect();
    let mut lent = engine.prefill_scratch();
    let mut slots: Vec<Session> = prompts.iter().map(|_| engine.slot_session()).collect();
    let mut samplers: Vec<Sampler> = prompts
        .iter()
        .map(|_| Sampler::new(params.clone()))
        .collect();
    let mut runs: Vec<_> = slots
        .iter_mut()
        .zip(&prompts)
        .zip(&samplers)
        .map(|((s, p), sm)| s.begin(GenerationRequest::new(p, &opts), sm).unwrap())
        .collect();
    // Chunks of 40 tokens, the two prompts in turns.
    let mut done = [false, false];
    while !done.iter().all(|&d| d) {
        for (i, (s, d)) in slots.iter_mut().zip(runs.iter_mut()).enumerate() {
            if !done[i] {
                done[i] = s.prefill_in(d, 40, &mut lent).unwrap();
            }
        }
    }
    for (((s, d), sm), want) in slots.iter_mut().zip(runs).zip(&mut samplers).zip(&want) {
        let got = s.run(d, sm, |_| true).unwrap().ids;
        assert_eq!(&got, want);
    }
    assert!(engine.serving_bytes(16) < 4 * engine.session_bytes());
}
