//! A prompt state saved out of a session and loaded into another serves the
//! next turn with exactly the logits the first session gives (every tiny
//! architecture, each cache type, rings that have wrapped, a branch back,
//! media in the prefix), and a state that does not fit is refused, leaving
//! the session empty.

use hearth_engine::{
    usable_prefix, Engine, GenerateOptions, GenerationRequest, KvType, MediaEmbedding, MediaSpan,
    PromptMedia, RunOptions, Sampler, SamplingParams, SavedKv, SavedPrompt, Session,
};
use std::path::{Path, PathBuf};

fn fixture(model: &str, file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny")
        .join(model)
        .join(file)
}

fn load(model: &str, ctx: usize, kv: KvType) -> Engine {
    Engine::load(
        fixture(model, "model-f32.gguf"),
        &RunOptions {
            threads: Some(2),
            ctx: Some(ctx),
            kv_cache: Some(kv),
            ..RunOptions::default()
        },
    )
    .unwrap()
}

/// Deterministic ids in the vocabulary (BOS first).
fn ids(vocab: usize, seed: usize, len: usize) -> Vec<u32> {
    std::iter::once(2)
        .chain((1..len).map(|i| ((seed * 131 + i * 17 + 5) % (vocab - 10) + 10) as u32))
        .collect()
}

/// The first turn: `prompt` prefilled and 30 tokens sampled (decode steps
/// write their own rows), at temperature 1 with a fixed seed.
fn first_turn(session: &mut Session, prompt: &[u32]) {
    let opts = GenerateOptions {
        max_tokens: 30,
        stop: Vec::new(),
        stop_on_eog: false,
        render_special: true,
        speculation: None,
    };
    let mut sampler = Sampler::new(SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: 5,
        ..SamplingParams::default()
    });
    let d = session
        .begin(GenerationRequest::new(prompt, &opts), &sampler)
        .unwrap();
    session.run(d, &mut sampler, |_| true).unwrap();
}

/// The next turn's logits bit for bit, with the tokens it reused.
fn next_turn(session: &mut Session, prompt: &[u32]) -> (Vec<u32>, usize) {
    let (_, reused) = session.feed(prompt).unwrap();
    let bits = session
        .last_logits()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    (bits, reused)
}

/// Loads `saved` into `session` for `prompt` (no media), as much of it as
/// the prompt can use.
fn load_for(session: &mut Session, saved: &SavedPrompt, prompt: &[u32]) -> usize {
    let keep = usable_prefix(&saved.tokens, &saved.media, prompt, &[]);
    session.load_prompt(saved, keep, &[]).unwrap();
    keep
}

/// `saved` with its cache's bytes cut into parts of uneven lengths, as a
/// store that shares some of them hands them back (parts straddle rows,
/// integers and layers).
fn in_parts(saved: &SavedPrompt) -> SavedPrompt {
    let bytes = saved.kv.to_vec();
    let mut parts: Vec<std::sync::Arc<[u8]>> = Vec::new();
    let (mut at, mut i) = (0, 0);
    while at < bytes.len() {
        let len = [1, 0, 5, 997, 4099, 3][i % 6].min(bytes.len() - at);
        parts.push(bytes[at..at + len].into());
        (at, i) = (at + len, i + 1);
    }
    SavedPrompt {
        kv: SavedKv::from_parts(parts),
        ..saved.clone()
    }
}

#[test]
fn a_loaded_state_serves_the_next_turn_as_the_live_session_would() {
    // Run by the test below on each tier: check it is that tier's kernels.
    if let Ok(tier) = std::env::var("HEARTH_CPU") {
        assert_eq!(hearth_engine::bench::kernel_set(), tier);
    }
    let models = [
        "gemma2",
        "gemma3",
        "gemma3n",
        "gemma4_e2b",
        "gemma4_moe",
        "gemma4_31b",
    ];
    for model in models {
        for kv in [KvType::F32, KvType::F16, KvType::Q8_0] {
            let what = format!("{model} {kv:?}");
            let engine = load(model, 512, kv);
            let other_ctx = load(model, 256, kv);
            let vocab = engine.model().config().vocab;
            let turn1 = ids(vocab, 1, 150);
            let mut live = engine.session();
            first_turn(&mut live, &turn1);
            let held = live.tokens().to_vec();
            let saved = live.save_prompt();
            assert_eq!(saved.tokens, held);
            assert!(saved.kv.len() <= live.saved_bytes(), "{what}");
            // The next turn follows the whole exchange; a regenerated one
            // branches a few tokens back, inside what the rings still hold.
            for back in [0, 5] {
                let mut turn2 = held[..held.len() - back].to_vec();
                turn2.extend(&ids(vocab, 9 + back, 12)[1..]);
                let mut live = engine.session();
                first_turn(&mut live, &turn1);
                let (want, live_reused) = next_turn(&mut live, &turn2);
                let cut = in_parts(&saved);
                for (target, state) in [(&engine, &saved), (&other_ctx, &saved), (&engine, &cut)] {
                    let mut restored = target.session();
                    let keep = load_for(&mut restored, state, &turn2);
                    assert_eq!(keep, held.len() - back, "{what}");
                    let (got, reused) = next_turn(&mut restored, &turn2);
                    assert_eq!(reused, live_reused, "{what}, {back} back");
                    assert!(got == want, "{what}, {back} back: logits differ");
                }
            }
        }
    }
}

/// The test above on every kernel tier this CPU runs, each in a process of
/// its own (a tier is chosen once per process).
#[test]
fn a_loaded_state_serves_the_next_turn_alike_on_every_tier() {
    let tiers = hearth_engine::bench::kernel_sets();
    assert!(tiers.contains(&"scalar"), "{tiers:?}");
    for tier in tiers {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "saved_prompt::a_loaded_state_serves_the_next_turn_as_the_live_session_would",
            ])
            .env("HEARTH_CPU", tier)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{tier}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn states_that_do_not_fit_are_refused_and_leave_the_session_empty() {
    let engine = load("gemma3", 512, KvType::F16);
    let vocab = engine.model().config().vocab;
    let mut s = engine.session();
    s.feed(&ids(vocab, 2, 40)).unwrap();
    let saved = s.save_prompt();
    let prompt = [saved.tokens.clone(), vec![7, 8]].concat();
    let keep = usable_prefix(&saved.tokens, &saved.media, &prompt, &[]);
    let mut target = engine.session();
    let refused = |target: &mut Session, state: &SavedPrompt| {
        target.feed(&ids(vocab, 3, 20)).unwrap();
        assert!(target.load_prompt(state, keep, &[]).is_err());
        assert!(target.tokens().is_empty());
        assert_eq!(target.feed(&prompt).unwrap().1, 0, "nothing reused");
    };
    // Cut short, or longer than it was.
    let bytes = saved.kv.to_vec();
    for cut in [1, 9, bytes.len() / 2, bytes.len() - 1] {
        let mut torn = saved.clone();
        torn.kv = SavedKv::whole(bytes[..cut].to_vec());
        refused(&mut target, &torn);
    }
    let mut longer = saved.clone();
    longer.kv = SavedKv::from_parts(vec![bytes.clone().into(), vec![0].into()]);
    refused(&mut target, &longer);
    // Another cache type, another model, another context.
    let f32_cache = load("gemma3", 512, KvType::F32).session().save_prompt();
    refused(
        &mut target,
        &SavedPrompt {
            tokens: saved.tokens.clone(),
            ..f32_cache
        },
    );
    let mut gemma2 = load("gemma2", 512, KvType::F16).session();
    gemma2.feed(&ids(vocab, 2, 40)).unwrap();
    refused(&mut target, &gemma2.save_prompt());
    let mut small = load("gemma3", 32, KvType::F16).session();
    small.feed(&ids(vocab, 3, 20)).unwrap();
    assert!(small.load_prompt(&saved, keep, &[]).is_err());
    // Asked to keep more than it holds.
    assert!(target
        .load_prompt(&saved, saved.tokens.len() + 1, &[])
        .is_err());
    // What fits loads.
    target.load_prompt(&saved, keep, &[]).unwrap();
    assert_eq!(target.feed(&prompt).unwrap().1, keep);
}

fn vision() -> Engine {
    let dir = |f: &str| fixture("gemma3_vision", f);
    Engine::load(
        dir("model-f32.gguf"),
        &RunOptions {
            threads: Some(2),
            ctx: Some(512),
            mmproj: Some(dir("mmproj-f32.gguf")),
            ..RunOptions::default()
        },
    )
    .unwrap()
}

fn image_prompt(
    engine: &Engine,
    text: &str,
    images: &[MediaEmbedding],
) -> (Vec<u32>, Vec<PromptMedia>) {
    let p = engine
        .prompt(&hearth_engine::PromptRequest::text(text, true).with_media(images, &[]))
        .unwrap();
    (p.ids, p.media)
}

#[test]
fn media_in_the_prefix_is_restored_only_for_the_same_picture() {
    let engine = vision();
    let picture = |name: &str| {
        engine
            .encode_image(&std::fs::read(fixture("gemma3_vision", name)).unwrap())
            .unwrap()
    };
    let (a, b) = (picture("img_a.png"), picture("img_b.png"));
    let spans = |m: &[PromptMedia]| m.iter().map(PromptMedia::span).collect::<Vec<MediaSpan>>();
    let (turn1, media1) = image_prompt(
        &engine,
        "Look: <start_of_image> and say",
        std::slice::from_ref(&a),
    );
    let (turn2, media2) = image_prompt(
        &engine,
        "Look: <start_of_image> and say what it is, in a few words",
        std::slice::from_ref(&a),
    );
    assert!(!media1.is_empty() && turn2.starts_with(&turn1[..turn1.len() - 1]));
    let mut live = engine.session();
    live.feed_images(&turn1, &media1).unwrap();
    let saved = live.save_prompt();
    assert_eq!(saved.media, spans(&media1));
    let (_, live_reused) = live.feed_images(&turn2, &media2).unwrap();
    let want: Vec<u32> = live
        .last_logits()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();

    let keep = usable_prefix(&saved.tokens, &saved.media, &turn2, &spans(&media2));
    assert!(keep > media2[0].end(), "the picture is reused");
    let mut restored = engine.session();
    restored.load_prompt(&saved, keep, &media2).unwrap();
    let (_, reused) = restored.feed_images(&turn2, &media2).unwrap();
    assert_eq!(reused, live_reused);
    let got: Vec<u32> = restored
        .last_logits()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    assert!(got == want, "logits differ");

    // The same ids with another picture share only what precedes it, and
    // loading past it is refused.
    let (other, other_media) = image_prompt(&engine, "Look: <start_of_image> and say", &[b]);
    assert_eq!(other, turn1);
    let keep = usable_prefix(&saved.tokens, &saved.media, &other, &spans(&other_media));
    assert_eq!(keep, other_media[0].pos);
    assert!(restored
        .load_prompt(&saved, other_media[0].end(), &other_media)
        .is_err());
}
