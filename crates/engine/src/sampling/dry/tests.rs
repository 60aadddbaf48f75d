use super::*;
use crate::sampling::{Rng, Sampler, SamplingParams};

/// DRY over `probs` after `history`, then the softmax, per token id.
fn after_dry(probs: &[f32], history: &[u32], dry: Dry) -> Vec<f32> {
    let mut logits: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
    let mut s = Sampler::new(SamplingParams {
        dry,
        ..SamplingParams::greedy()
    });
    s.prepare(&mut logits, history);
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(l));
    let e: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
    let sum: f32 = e.iter().sum();
    e.iter().map(|v| v / sum).collect()
}

fn dry(multiplier: f32, base: f32, allowed: usize, last_n: usize, breakers: &[Vec<u32>]) -> Dry {
    Dry {
        multiplier,
        base,
        allowed_length: allowed,
        penalty_last_n: last_n,
        sequence_breakers: Vec::new(),
        breakers: Arc::new(SequenceBreakers::from_tokens(breakers)),
    }
}

fn close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-5, "{got:?} against {want:?}");
    }
}

/// llama.cpp's own cases (tests/test-sampling.cpp), with its expected
/// probabilities.
#[test]
fn llama_cpp_cases() {
    let q = [0.25f32; 4];
    let f = [0.2f32; 5];
    close(&after_dry(&q, &[0, 1], dry(1.0, 1.1, 2, 4, &[])), &q);
    close(
        &after_dry(&q, &[0, 1, 2, 0, 1], dry(1.0, 1.1, 2, 5, &[])),
        &[0.296923, 0.296923, 0.109232, 0.296923],
    );
    close(
        &after_dry(&f, &[0, 1, 3, 4, 0, 1], dry(1.0, 1.1, 2, 6, &[vec![3]])),
        &f,
    );
    close(
        &after_dry(&f, &[0, 1, 2, 0, 1], dry(2.0, 1.1, 2, 5, &[])),
        &[0.241818, 0.241818, 0.032727, 0.241818, 0.241818],
    );
    close(
        &after_dry(&f, &[0, 1, 2, 3, 4, 0, 1], dry(1.0, 1.1, 4, 7, &[])),
        &f,
    );
}

#[test]
fn the_penalty_grows_with_the_repeat_and_off_means_off() {
    // "0 1 2 3 0 1 2": a repeat of 3 that 3 would extend.
    let h = [0, 1, 2, 3, 0, 1, 2];
    let logits = |d: Dry| {
        let mut l = vec![0.0f32; 5];
        Sampler::new(SamplingParams {
            dry: d,
            ..SamplingParams::greedy()
        })
        .prepare(&mut l, &h);
        l
    };
    let l = logits(dry(0.8, 1.75, 2, 64, &[]));
    let want = -(0.8f64 * 1.75f64.powf(1.0)) as f32;
    assert_eq!(l, [0.0, 0.0, 0.0, want, 0.0]);
    assert_eq!(logits(dry(0.0, 1.75, 2, 64, &[])), [0.0; 5]);
    assert_eq!(logits(dry(0.8, 0.9, 2, 64, &[])), [0.0; 5]);
    assert_eq!(logits(dry(0.8, 1.75, 2, 0, &[])), [0.0; 5]);
    // A breaker inside the repeat limits how much of it counts.
    assert_eq!(logits(dry(0.8, 1.75, 2, 64, &[vec![1]])), [0.0; 5]);
    // A token that is a breaker alone is never penalized.
    assert_eq!(logits(dry(0.8, 1.75, 2, 64, &[vec![3]]))[3], 0.0);
}

#[test]
fn a_huge_base_is_bounded() {
    let h: Vec<u32> = (0..200).map(|i| i % 2).collect();
    let mut l = vec![0.0f32; 2];
    Sampler::new(SamplingParams {
        dry: dry(1.0, 1e30, 0, usize::MAX, &[]),
        ..SamplingParams::greedy()
    })
    .prepare(&mut l, &h);
    // ln(f32::MAX) / ln(1e30) bounds the exponent at 1 (a repeat of 198
    // would be 1e30^198); with nothing allowed, a repeat of 0 costs base^0.
    assert_eq!(l, [-1e30, -1.0]);
}

/// The Z-algorithm against the definition: how far the text before each
/// place matches the text's end.
#[test]
fn suffix_repeats_match_the_definition() {
    let mut rng = Rng::new(3);
    let mut got = Vec::new();
    for case in 0..500 {
        let n = 1 + case % 60;
        let letters = 1 + (case % 4) as u64;
        let text: Vec<u32> = (0..n).map(|_| (rng.next_u64() % letters) as u32).collect();
        let limit = (rng.next_u64() % (n as u64 + 2)) as usize;
        let back = |i: usize| text[n - 1 - i];
        suffix_repeats(n, limit, back, &mut got);
        for k in 1..n {
            let mut len = 0;
            while len + k < n && back(len) == back(len + k) {
                len += 1;
            }
            assert_eq!(
                got[n - 1 - k],
                len.min(limit),
                "{text:?} k {k} limit {limit}"
            );
        }
    }
}

#[test]
fn breakers_resolve_against_the_vocabulary() {
    let vocab = ["a", "b", "x\n", "ya", "c", ":", "na:m"];
    let text = |id: u32| vocab[id as usize].as_bytes().to_vec();
    // "ab" is whole in no token; "ya" ends in its start, "b" is its rest.
    let tokenize = |s: &str| match s {
        "b" => vec![1],
        other => panic!("tokenized {other:?}"),
    };
    let texts = [
        "\n".to_string(),
        "ab".to_string(),
        ":".to_string(),
        String::new(),
    ];
    let b = SequenceBreakers::resolve(&texts, vocab.len(), text, tokenize);
    assert!(b.breaks_alone(2) && b.breaks_alone(5) && b.breaks_alone(6));
    assert!(!b.breaks_alone(0) && !b.breaks_alone(3));
    assert_eq!(b.tails_of(0).collect::<Vec<_>>(), [[1]]);
    assert_eq!(b.tails_of(3).collect::<Vec<_>>(), [[1]]);
    assert_eq!(b.heads(), 5);
}

/// Replays llama.cpp's sampler decisions: `HEARTH_SAMPLER_REPLAY` names a
/// folder written by the llama.cpp program in `scripts/samplers-replay/`
/// (each step's full logits from llama.cpp's model and the token its
/// sampler chain chose); Hearth's sampler, given the same logits and
/// history, must choose the same token at every step. Run by
/// `scripts/samplers-replay.sh`.
#[test]
#[ignore = "needs llama.cpp's recorded logits (scripts/samplers-replay.sh)"]
fn replay_llama_cpp_sampler_choices() {
    use std::io::Read;
    let dir = std::path::PathBuf::from(std::env::var("HEARTH_SAMPLER_REPLAY").unwrap());
    let model = std::env::var("HEARTH_MODEL").unwrap();
    let engine = crate::Engine::load(&model, &crate::RunOptions::default()).unwrap();
    let cases: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("cases.json")).unwrap()).unwrap();
    let n_vocab = engine.tokenizer().vocab_size();
    let mut logits_file = std::fs::File::open(dir.join("logits.bin")).unwrap();
    let mut raw = vec![0u8; n_vocab * 4];
    let (mut steps, mut differ) = (0, Vec::new());
    for case in cases.as_array().unwrap() {
        let p = &case["params"];
        let f = |k: &str, d: f32| p.get(k).and_then(|v| v.as_f64()).map_or(d, |v| v as f32);
        let mut dry = Dry {
            multiplier: f("dry_multiplier", 0.0),
            base: f("dry_base", 1.75),
            allowed_length: f("dry_allowed_length", 2.0) as usize,
            penalty_last_n: f("dry_penalty_last_n", 64.0) as usize,
            ..Dry::default()
        };
        if let Some(b) = p.get("dry_sequence_breakers") {
            dry.sequence_breakers = serde_json::from_value(b.clone()).unwrap();
        }
        engine.bind_dry(&mut dry);
        let mut sampler = Sampler::new(SamplingParams {
            dry,
            xtc_probability: f("xtc_probability", 0.0),
            xtc_threshold: f("xtc_threshold", 0.1),
            top_n_sigma: f("top_n_sigma", -1.0),
            ..SamplingParams::greedy()
        });
        let mut history: Vec<u32> = serde_json::from_value(case["prompt_ids"].clone()).unwrap();
        for (step, want) in case["chosen"].as_array().unwrap().iter().enumerate() {
            logits_file.read_exact(&mut raw).unwrap();
            let mut logits: Vec<f32> = raw
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            let want = want.as_u64().unwrap() as u32;
            let got = sampler.sample(&mut logits, &history);
            if got != want {
                differ.push(format!(
                    "{} {:?} step {step}: {got} vs {want}",
                    case["setting"], case["prompt"]
                ));
            }
            steps += 1;
            // llama.cpp's choice goes on, so each step replays its history.
            history.push(want);
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {steps} steps differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
    eprintln!("{steps} steps, every choice the same");
}
