//! The scheduler on the tiny model, without HTTP: output identical to
//! `Session::run`, a bounded queue, and cancellation by a dropped
//! receiver.

use engine::{
    Engine, FinishReason, GenerateOptions, GenerationRequest, RunOptions, Sampler, SamplingParams,
};
use hearth_server::metrics::Metrics;
use hearth_server::scheduler::{Event, Fork, Job, Rejected, Scheduler, Usage};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma3/model-f32.gguf"
);

/// The tiny model with sessions of `n_ctx` tokens.
fn engine(n_ctx: usize) -> Arc<Engine> {
    Arc::new(
        Engine::load(
            TINY,
            &RunOptions {
                threads: Some(1),
                ctx: Some(n_ctx),
                ..RunOptions::default()
            },
        )
        .expect("load the tiny model"),
    )
}

fn opts(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        stop: Vec::new(),
        stop_on_eog: true,
        render_special: false,
        speculation: None,
    }
}

/// Collect a job's events until it ends (bounded in time).
fn drain(rx: &mut mpsc::UnboundedReceiver<Event>) -> (String, Option<FinishReason>) {
    let (text, usage) = drain_usage(rx);
    (text, usage.map(|u| u.finish))
}

/// [`drain`] with the whole usage the job ended with.
fn drain_usage(rx: &mut mpsc::UnboundedReceiver<Event>) -> (String, Option<Usage>) {
    let t0 = Instant::now();
    let mut text = String::new();
    while t0.elapsed() < Duration::from_secs(60) {
        match rx.try_recv() {
            Ok(Event::Text(t)) => text.push_str(&t),
            Ok(Event::Thought(_)) => panic!("thinking is off"),
            Ok(Event::Guard(_)) => panic!("the scheduler never sends a guard trace"),
            Ok(Event::Logprobs(_)) => panic!("no job here asks for log-probabilities"),
            Ok(Event::Done(u)) => return (text, Some(u)),
            Ok(Event::Failed(e)) => panic!("failed: {}", e.message),
            Ok(Event::Started) => {}
            Err(mpsc::error::TryRecvError::Empty) => std::thread::sleep(Duration::from_millis(1)),
            Err(mpsc::error::TryRecvError::Disconnected) => return (text, None),
        }
    }
    panic!("job did not end");
}

/// `prompt`'s text generated alone in a fresh session, as the CLI does.
fn alone(
    engine: &Engine,
    prompt: &[u32],
    params: &SamplingParams,
    opts: &GenerateOptions,
) -> String {
    let mut session = engine.session();
    let mut sampler = Sampler::new(params.clone());
    let decoding = session
        .begin(GenerationRequest::new(prompt, opts), &sampler)
        .expect("begin");
    session
        .run(decoding, &mut sampler, |_| true)
        .expect("generate")
        .text
}

#[test]
fn interleaved_slots_match_generate() {
    let engine = engine(64);
    let prompts: Vec<Vec<u32>> = ["Once upon a time", "Hello", "The sky is", "1 2 3"]
        .iter()
        .map(|p| engine.tokenizer().encode(p, true, true))
        .collect();
    let params = SamplingParams {
        seed: 11,
        ..SamplingParams::default()
    };
    // Reference: each prompt alone through Session::run.
    let want: Vec<String> = prompts
        .iter()
        .map(|p| alone(&engine, p, &params, &opts(20)))
        .collect();

    let metrics = Arc::new(Metrics::default());
    let sched = Scheduler::start(Arc::clone(&engine), 2, 16, Arc::clone(&metrics), None).unwrap();
    let mut rxs = Vec::new();
    for p in &prompts {
        let (tx, rx) = mpsc::unbounded_channel();
        sched
            .submit(Job {
                prompt: p.clone(),
                images: Vec::new(),
                params: params.clone(),
                opts: opts(20),
                constraint: None,
                thinking: None,
                events: tx,
                deadline: None,
                hold: None,
                cache_scope: None,
                adapters: Default::default(),
                logprobs: None,
                forks: Vec::new(),
            })
            .unwrap();
        rxs.push(rx);
    }
    for (rx, want) in rxs.iter_mut().zip(&want) {
        let (text, finish) = drain(rx);
        assert!(finish.is_some());
        assert_eq!(&text, want);
    }
    assert_eq!(metrics.completed.load(Ordering::Relaxed), 4);
    sched.join();
}

#[test]
fn speculating_jobs_beside_plain_ones_match_generate() {
    let engine = engine(160);
    let prompts: Vec<Vec<u32>> = [
        "Once upon a time",
        "1 2 3 1 2 3 1 2",
        "The sky is",
        "a b a b",
    ]
    .iter()
    .map(|p| engine.tokenizer().encode(p, true, true))
    .collect();
    let speculation = Some(engine::Speculation::Ngram(engine::NgramOptions::default()));
    let jobs: Vec<(Vec<u32>, SamplingParams, GenerateOptions)> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let params = SamplingParams {
                temperature: if i % 2 == 0 { 0.0 } else { 1.0 },
                seed: 3 + i as u64,
                ..SamplingParams::default()
            };
            // Two of four speculate; the other two go through the batch.
            let opts = GenerateOptions {
                speculation: speculation.clone().filter(|_| i < 2),
                ..opts(120)
            };
            (p.clone(), params, opts)
        })
        .collect();
    let want: Vec<String> = jobs
        .iter()
        .map(|(p, params, _)| alone(&engine, p, params, &opts(120)))
        .collect();
    let metrics = Arc::new(Metrics::default());
    let sched = Scheduler::start(Arc::clone(&engine), 3, 16, Arc::clone(&metrics), None).unwrap();
    let mut rxs = Vec::new();
    for (prompt, params, opts) in &jobs {
        let (tx, rx) = mpsc::unbounded_channel();
        sched
            .submit(Job {
                prompt: prompt.clone(),
                images: Vec::new(),
                params: params.clone(),
                opts: opts.clone(),
                constraint: None,
                thinking: None,
                events: tx,
                deadline: None,
                hold: None,
                cache_scope: None,
                adapters: Default::default(),
                logprobs: None,
                forks: Vec::new(),
            })
            .unwrap();
        rxs.push(rx);
    }
    for (i, (rx, want)) in rxs.iter_mut().zip(&want).enumerate() {
        let (text, usage) = drain_usage(rx);
        let usage = usage.expect("the job ended");
        assert_eq!(&text, want, "job {i}");
        match usage.speculation {
            Some(s) => assert!(
                i < 2 && s.drafted > 0 && s.accepted <= s.drafted,
                "job {i}: {s:?}"
            ),
            None => assert!(i >= 2, "job {i} speculated"),
        }
    }
    sched.join();
}

#[test]
fn forks_share_one_prefill() {
    let engine = engine(64);
    let prompt = engine
        .tokenizer()
        .encode("Once upon a time there was a", true, true);
    let metrics = Arc::new(Metrics::default());
    let sched = Scheduler::start(Arc::clone(&engine), 3, 4, Arc::clone(&metrics), None).unwrap();
    let params = |seed| SamplingParams {
        seed,
        ..SamplingParams::default()
    };
    let (tx, mut main) = mpsc::unbounded_channel();
    let mut forks = Vec::new();
    let mut rxs = Vec::new();
    // The same seed as the main job, then another.
    for seed in [11, 12] {
        let (tx, rx) = mpsc::unbounded_channel();
        forks.push(Fork {
            params: params(seed),
            constraint: None,
            events: tx,
        });
        rxs.push(rx);
    }
    sched
        .submit(Job {
            prompt: prompt.clone(),
            images: Vec::new(),
            params: params(11),
            opts: opts(12),
            constraint: None,
            thinking: None,
            events: tx,
            deadline: None,
            hold: None,
            cache_scope: None,
            adapters: Default::default(),
            logprobs: None,
            forks,
        })
        .unwrap();
    let (text, finish) = drain(&mut main);
    let fork_texts: Vec<String> = rxs
        .iter_mut()
        .map(|rx| {
            let (t, f) = drain(rx);
            assert!(f.is_some());
            t
        })
        .collect();
    assert!(finish.is_some() && !text.is_empty());
    // The first fork draws with the main job's seed from a copy of its
    // cache: the same text.
    assert_eq!(fork_texts[0], text);
    // The prompt went in once; each fork computed its last token alone.
    assert_eq!(
        metrics.prefill_evaluated.load(Ordering::Relaxed),
        prompt.len() as u64 + 2
    );
    assert_eq!(metrics.completed.load(Ordering::Relaxed), 3);
    sched.join();
}

#[test]
fn the_queue_is_bounded_and_a_dropped_receiver_cancels() {
    let engine = engine(2048);
    let metrics = Arc::new(Metrics::default());
    let sched = Scheduler::start(Arc::clone(&engine), 1, 1, Arc::clone(&metrics), None).unwrap();
    let prompt = engine.tokenizer().encode("a", true, true);
    let mut accepted = Vec::new();
    let mut rejected = 0;
    for _ in 0..5 {
        let (tx, rx) = mpsc::unbounded_channel();
        match sched.submit(Job {
            prompt: prompt.clone(),
            images: Vec::new(),
            params: SamplingParams::default(),
            // A sampled end-of-turn would free the slot and let a third job
            // in; only the context's end or a hang-up may end these.
            opts: GenerateOptions {
                stop_on_eog: false,
                ..opts(100_000)
            },
            constraint: None,
            thinking: None,
            events: tx,
            deadline: None,
            hold: None,
            cache_scope: None,
            adapters: Default::default(),
            logprobs: None,
            forks: Vec::new(),
        }) {
            Ok(()) => accepted.push(rx),
            Err(Rejected::QueueFull) => rejected += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    // One slot and one queue place: at most two in, the rest refused.
    assert!(
        accepted.len() <= 2 && rejected >= 3,
        "{} {rejected}",
        accepted.len()
    );
    // Hanging up cancels: both end long before their 2000-odd tokens.
    drop(accepted);
    let t0 = Instant::now();
    while metrics.slots_busy.load(Ordering::Relaxed) > 0
        || metrics.queue_depth.load(Ordering::Relaxed) > 0
    {
        assert!(t0.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(metrics.cancelled.load(Ordering::Relaxed) >= 1);
    assert!(metrics.completed.load(Ordering::Relaxed) == 0);
    sched.shutdown(false);
    let (tx, _rx) = mpsc::unbounded_channel();
    let after = sched.submit(Job {
        prompt,
        images: Vec::new(),
        params: SamplingParams::default(),
        opts: opts(4),
        constraint: None,
        thinking: None,
        events: tx,
        deadline: None,
        hold: None,
        cache_scope: None,
        adapters: Default::default(),
        logprobs: None,
        forks: Vec::new(),
    });
    assert_eq!(after.unwrap_err(), Rejected::ShuttingDown);
    sched.join();
}

#[test]
fn a_long_prompt_is_prefilled_in_chunks_beside_a_decoding_slot() {
    let engine = engine(1024);
    let short = engine.tokenizer().encode("Hello", true, true);
    let long = engine.tokenizer().encode(
        &"the quick brown fox jumps over the lazy dog ".repeat(12),
        true,
        true,
    );
    assert!(long.len() > 256, "{}", long.len());
    let params = SamplingParams::greedy();
    let reference = |p: &[u32], n: usize| alone(&engine, p, &params, &opts(n));
    let want_short = reference(&short, 300);
    let want_long = reference(&long, 20);

    let metrics = Arc::new(Metrics::default());
    let sched = Scheduler::start(Arc::clone(&engine), 2, 4, Arc::clone(&metrics), None).unwrap();
    let (tx_a, mut rx_a) = mpsc::unbounded_channel();
    sched
        .submit(Job {
            prompt: short,
            images: Vec::new(),
            params: params.clone(),
            opts: opts(300),
            constraint: None,
            thinking: None,
            events: tx_a,
            deadline: None,
            hold: None,
            cache_scope: None,
            adapters: Default::default(),
            logprobs: None,
            forks: Vec::new(),
        })
        .unwrap();
    // Wait until the short one decodes, so the long one is chunked.
    let t0 = Instant::now();
    while metrics.slots_busy.load(Ordering::Relaxed) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(30));
        std::thread::yield_now();
    }
    let (tx_b, mut rx_b) = mpsc::unbounded_channel();
    sched
        .submit(Job {
            prompt: long,
            images: Vec::new(),
            params,
            opts: opts(20),
            constraint: None,
            thinking: None,
            events: tx_b,
            deadline: None,
            hold: None,
            cache_scope: None,
            adapters: Default::default(),
            logprobs: None,
            forks: Vec::new(),
        })
        .unwrap();
    assert_eq!(drain(&mut rx_b).0, want_long);
    assert_eq!(drain(&mut rx_a).0, want_short);
    sched.join();
}

#[test]
fn batched_slots_match_generate_as_requests_join_and_leave() {
    let engine = engine(128);
    // Eight requests through four slots: they join as others leave, with
    // different lengths, samplers and stop strings.
    let cases: Vec<(Vec<u32>, SamplingParams, GenerateOptions)> = (0..8)
        .map(|i| {
            let prompt = engine.tokenizer().encode(
                &format!("Request {i}: {}", "once upon a time ".repeat(i % 3 + 1)),
                true,
                true,
            );
            let params = if i % 3 == 0 {
                SamplingParams::greedy()
            } else {
                SamplingParams {
                    seed: 100 + i as u64,
                    ..SamplingParams::default()
                }
            };
            let mut o = opts(6 + 7 * i);
            if i == 5 {
                o.stop = vec!["a".into()];
            }
            (prompt, params, o)
        })
        .collect();
    let want: Vec<String> = cases
        .iter()
        .map(|(p, params, o)| alone(&engine, p, params, o))
        .collect();
    let metrics = Arc::new(Metrics::default());
    let sched = Scheduler::start(Arc::clone(&engine), 4, 16, Arc::clone(&metrics), None).unwrap();
    let mut rxs = Vec::new();
    for (prompt, params, o) in &cases {
        let (tx, rx) = mpsc::unbounded_channel();
        sched
            .submit(Job {
                prompt: prompt.clone(),
                images: Vec::new(),
                params: params.clone(),
                opts: o.clone(),
                constraint: None,
                thinking: None,
                events: tx,
                deadline: None,
                hold: None,
                cache_scope: None,
                adapters: Default::default(),
                logprobs: None,
                forks: Vec::new(),
            })
            .unwrap();
        rxs.push(rx);
    }
    for (i, (rx, want)) in rxs.iter_mut().zip(&want).enumerate() {
        let (text, finish) = drain(rx);
        assert!(finish.is_some(), "request {i}");
        assert_eq!(&text, want, "request {i}");
    }
    assert_eq!(metrics.completed.load(Ordering::Relaxed), 8);
    sched.join();
}

/// The `Done` usage of a job, with the time it took to come.
fn done_usage(rx: &mut mpsc::UnboundedReceiver<Event>) -> (bool, String, Usage) {
    let t0 = Instant::now();
    let mut started = false;
    let mut text = String::new();
    while t0.elapsed() < Duration::from_secs(60) {
        match rx.try_recv() {
            Ok(Event::Started) => started = true,
            Ok(Event::Text(t)) => text.push_str(&t),
            Ok(Event::Thought(_)) => panic!("thinking is off"),
            Ok(Event::Guard(_)) => panic!("the scheduler never sends a guard trace"),
            Ok(Event::Logprobs(_)) => panic!("no job here asks for log-probabilities"),
            Ok(Event::Done(u)) => return (started, text, u),
            Ok(Event::Failed(e)) => panic!("failed: {}", e.message),
            Err(mpsc::error::TryRecvError::Empty) => std::thread::sleep(Duration::from_millis(1)),
            Err(mpsc::error::TryRecvError::Disconnected) => panic!("no Done"),
        }
    }
    panic!("job did not end");
}

#[test]
fn the_time_limit_ends_generations_with_length() {
    let engine = engine(32768);
    let metrics = Arc::new(Metrics::default());
    // A context so long that filling it takes far longer than the limit.
    let n_ctx = 32768;
    let sched = Scheduler::start(Arc::clone(&engine), 2, 4, Arc::clone(&metrics), None).unwrap();
    let prompt = engine.tokenizer().encode("a", true, true);
    let job = |deadline, tx| Job {
        prompt: prompt.clone(),
        images: Vec::new(),
        params: SamplingParams::default(),
        opts: GenerateOptions {
            stop_on_eog: false,
            ..opts(n_ctx)
        },
        constraint: None,
        thinking: None,
        events: tx,
        deadline,
        hold: None,
        cache_scope: None,
        adapters: Default::default(),
        logprobs: None,
        forks: Vec::new(),
    };
    // Out of time in the queue already: it ends at once, having started.
    let (tx, mut expired) = mpsc::unbounded_channel();
    sched
        .submit(job(Some(Instant::now() - Duration::from_millis(1)), tx))
        .unwrap();
    let (started, text, u) = done_usage(&mut expired);
    assert!(started);
    assert_eq!((text.as_str(), u.completion_tokens), ("", 0));
    assert_eq!(u.finish, FinishReason::Length);
    assert_eq!(u.prompt_tokens, prompt.len());

    // Out of time while generating: stopped early, the text so far kept.
    let t0 = Instant::now();
    let (tx, mut running) = mpsc::unbounded_channel();
    sched
        .submit(job(Some(t0 + Duration::from_millis(300)), tx))
        .unwrap();
    let (_, text, u) = done_usage(&mut running);
    let took = t0.elapsed();
    assert_eq!(u.finish, FinishReason::Length);
    assert!(
        u.completion_tokens > 0 && u.completion_tokens < n_ctx - 10,
        "{u:?}"
    );
    assert!(!text.is_empty());
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert_eq!(metrics.time_limited.load(Ordering::Relaxed), 2);
    assert_eq!(metrics.completed.load(Ordering::Relaxed), 2);
    sched.join();
}
