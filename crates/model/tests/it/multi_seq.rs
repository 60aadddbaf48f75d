//! `Model::forward_multi` against `Model::forward`: several sequences of
//! different lengths decoded in one batch give the logits each gets alone,
//! with sequences joining (a whole prompt in the shared batch) and leaving
//! mid-way, across sliding-window rings, KV sharing and per-layer embeddings.

use hearth_model::{KvCache, KvType, LoadOptions, Model, ModelError, Precision, Scratch, SeqInput};
use std::path::PathBuf;

const N_CTX: usize = 64;

fn load(name: &str, file: &str) -> Model {
    load_kv(name, file, None)
}

/// [`load`] with the KV cache of type `kv` (`None`: the default).
fn load_kv(name: &str, file: &str, kv: Option<KvType>) -> Model {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny")
        .join(name)
        .join(file);
    Model::load(
        path,
        &LoadOptions {
            threads: 2,
            precision: Precision::Quantized,
            kv_cache: kv,
        },
    )
    .unwrap()
}

/// A deterministic prompt of `len` ids for sequence `seed` (BOS first).
fn prompt(vocab: usize, seed: usize, len: usize) -> Vec<u32> {
    std::iter::once(2)
        .chain((1..len).map(|i| ((seed * 131 + i * 17 + 5) % (vocab - 3) + 3) as u32))
        .collect()
}

/// The token a sequence is fed at decode step `t` (fixed, so both paths feed
/// the same ids whatever the logits say).
fn decode_token(vocab: usize, seed: usize, t: usize) -> u32 {
    ((seed * 37 + t * 11 + 1) % (vocab - 3) + 3) as u32
}

/// Each sequence alone: the logits after its prompt, then after each of
/// `steps` decode tokens.
fn alone(model: &Model, seed: usize, len: usize, steps: usize) -> Vec<Vec<f32>> {
    let vocab = model.config().vocab;
    let mut cache = model.new_cache(N_CTX);
    let mut scratch = model.new_scratch(N_CTX, 32);
    let p = prompt(vocab, seed, len);
    model.forward(&mut cache, &mut scratch, &p).unwrap();
    let mut out = vec![model.logits(&mut scratch, len - 1..len).unwrap().to_vec()];
    for t in 0..steps {
        model
            .forward(&mut cache, &mut scratch, &[decode_token(vocab, seed, t)])
            .unwrap();
        out.push(model.logits(&mut scratch, 0..1).unwrap().to_vec());
    }
    out
}

struct Seq {
    seed: usize,
    len: usize,
    /// The step at which its prompt goes in, and whether it goes in through
    /// `forward` alone (else as a multi-token share of the shared batch).
    join: usize,
    prefill_alone: bool,
    /// The step after which it leaves.
    leave: usize,
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Runs the schedule of `seqs` through `forward_multi` and checks every
/// logits row against the sequence decoded alone; returns the largest
/// difference seen.
fn check_schedule(model: &Model, seqs: &[Seq], steps: usize) -> f32 {
    let vocab = model.config().vocab;
    let want: Vec<Vec<Vec<f32>>> = seqs
        .iter()
        .map(|s| alone(model, s.seed, s.len, steps))
        .collect();
    let mut caches: Vec<KvCache> = seqs.iter().map(|_| model.new_cache(N_CTX)).collect();
    let mut own: Vec<Scratch> = seqs.iter().map(|_| model.new_scratch(N_CTX, 32)).collect();
    let mut shared = model.new_scratch(N_CTX, 32);
    // Decode steps each sequence has taken; its next row's logits are
    // `want[j][done[j]]`.
    let mut done = vec![0usize; seqs.len()];
    let mut worst = 0.0f32;
    let last = seqs.iter().map(|s| s.join).max().unwrap_or(0) + steps;
    for step in 0..=last {
        // Prompts that go in alone, then their first logits from their own
        // scratch.
        for (j, s) in seqs.iter().enumerate() {
            if s.join == step && s.prefill_alone {
                let p = prompt(vocab, s.seed, s.len);
                model.forward(&mut caches[j], &mut own[j], &p).unwrap();
                let got = model.logits(&mut own[j], s.len - 1..s.len).unwrap();
                worst = worst.max(max_diff(got, &want[j][0]));
            }
        }
        // The shared batch: a decode token from every active sequence, and
        // whole prompts of the ones that join inside it.
        let mut inputs: Vec<(usize, Vec<u32>)> = Vec::new();
        for (j, s) in seqs.iter().enumerate() {
            if s.join == step && !s.prefill_alone {
                inputs.push((j, prompt(vocab, s.seed, s.len)));
            } else if s.join < step && step <= s.leave && done[j] < steps {
                inputs.push((j, vec![decode_token(vocab, s.seed, done[j])]));
            }
        }
        if inputs.is_empty() {
            continue;
        }
        {
            let mut refs: Vec<Option<&mut KvCache>> = caches.iter_mut().map(Some).collect();
            let mut batch: Vec<SeqInput<'_>> = inputs
                .iter()
                .map(|(j, toks)| SeqInput {
                    cache: refs[*j].take().unwrap(),
                    tokens: toks,
                    embedded: &[],
                })
                .collect();
            model.forward_multi(&mut batch, &mut shared).unwrap();
        }
        assert_eq!(shared.sequences(), inputs.len());
        let logits = model
            .head_logits(
                &mut shared,
                hearth_model::BatchRows::LastOfEachSequence,
                &[],
            )
            .unwrap()
            .to_vec();
        assert_eq!(logits.len(), inputs.len() * vocab);
        for (row, (j, toks)) in logits.chunks_exact(vocab).zip(&inputs) {
            let idx = if toks.len() > 1 {
                0
            } else {
                done[*j] += 1;
                done[*j]
            };
            let d = max_diff(row, &want[*j][idx]);
            assert!(
                d <= 1e-4,
                "sequence {j} at step {step} (row {idx}): logits differ by {d}"
            );
            worst = worst.max(d);
        }
    }
    // Every sequence decoded what its schedule allowed.
    for (j, s) in seqs.iter().enumerate() {
        assert_eq!(done[j], (s.leave - s.join).min(steps), "sequence {j}");
        assert_eq!(caches[j].n_past(), s.len + done[j], "sequence {j}");
    }
    worst
}

fn schedule() -> Vec<Seq> {
    vec![
        // Longer than the sliding window of 8 from the start.
        Seq {
            seed: 1,
            len: 11,
            join: 0,
            prefill_alone: true,
            leave: 9,
        },
        // Short; joins one step later, runs to the end.
        Seq {
            seed: 2,
            len: 3,
            join: 1,
            prefill_alone: true,
            leave: usize::MAX,
        },
        // Joins mid-way with its whole prompt inside the shared batch (rows
        // past the window), so the batch mixes 1-token and 17-token shares.
        Seq {
            seed: 3,
            len: 17,
            join: 4,
            prefill_alone: false,
            leave: usize::MAX,
        },
    ]
}

#[test]
fn forward_multi_matches_forward_on_each_architecture() {
    for name in ["gemma3", "gemma2", "gemma4_e2b", "gemma3n"] {
        // An f32 cache: with f16 keys, a last-bit difference in a key (the
        // batch's rows take the blocked attention alone and the row-by-row
        // one shared) can flip its rounding and move a logit by 3e-4, which
        // says nothing about the schedule.
        let model = load_kv(name, "model-f32.gguf", Some(KvType::F32));
        let worst = check_schedule(&model, &schedule(), 12);
        eprintln!("{name}: max |Δlogit| batched vs alone = {worst:.2e}");
    }
}

#[test]
fn one_token_shares_of_a_quantized_model_are_bit_identical() {
    // Below the GEMM threshold every row of a product takes the same kernel
    // as a single row, and 8-bit activations are quantized per row, so
    // decoding in a batch must not change a bit.
    let model = load("gemma3", "model-q8_0.gguf");
    let vocab = model.config().vocab;
    // Five sequences: four rows take the 4-row tile kernel, one the vector
    // kernel.
    let seeds = [5usize, 6, 7, 8, 9];
    let lens = [4usize, 9, 13, 2, 20];
    const STEPS: usize = 6;
    let mut caches: Vec<KvCache> = Vec::new();
    // want[t][j]: sequence j's logits after its decode token t, alone.
    let mut want = vec![Vec::new(); STEPS];
    for (&seed, &len) in seeds.iter().zip(&lens) {
        let mut c = model.new_cache(N_CTX);
        let mut sc = model.new_scratch(N_CTX, 32);
        model
            .forward(&mut c, &mut sc, &prompt(vocab, seed, len))
            .unwrap();
        caches.push(c.clone());
        for (t, w) in want.iter_mut().enumerate() {
            model
                .forward(&mut c, &mut sc, &[decode_token(vocab, seed, t)])
                .unwrap();
            w.push(model.logits(&mut sc, 0..1).unwrap().to_vec());
        }
    }
    let mut shared = model.new_scratch(N_CTX, 8);
    for (t, want_t) in want.iter().enumerate() {
        let toks: Vec<[u32; 1]> = seeds.iter().map(|&s| [decode_token(vocab, s, t)]).collect();
        let mut batch: Vec<SeqInput<'_>> = caches
            .iter_mut()
            .zip(&toks)
            .map(|(cache, tokens)| SeqInput {
                cache,
                tokens,
                embedded: &[],
            })
            .collect();
        model.forward_multi(&mut batch, &mut shared).unwrap();
        let got = model
            .head_logits(
                &mut shared,
                hearth_model::BatchRows::LastOfEachSequence,
                &[],
            )
            .unwrap();
        for (j, (row, w)) in got.chunks_exact(vocab).zip(want_t).enumerate() {
            assert!(
                row.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits()),
                "sequence {j} step {t}: max diff {}",
                max_diff(row, w)
            );
        }
    }
}

#[test]
fn malformed_batches_are_refused_before_any_write() {
    let model = load("gemma3", "model-f32.gguf");
    let mut a = model.new_cache(N_CTX);
    let mut b = model.new_cache(N_CTX);
    let mut small = model.new_scratch(N_CTX, 2);
    let empty: [u32; 0] = [];
    let three = [2u32, 10, 11];
    let one = [2u32];
    let cases: [(&[u32], &[u32]); 3] = [(&one, &empty), (&three, &one), (&one, &[1 << 30])];
    for (ta, tb) in cases {
        let err = model
            .forward_multi(
                &mut [
                    SeqInput {
                        cache: &mut a,
                        tokens: ta,
                        embedded: &[],
                    },
                    SeqInput {
                        cache: &mut b,
                        tokens: tb,
                        embedded: &[],
                    },
                ],
                &mut small,
            )
            .unwrap_err();
        assert!(
            matches!(err, ModelError::BadBatch(_) | ModelError::BadToken { .. }),
            "{err}"
        );
        assert_eq!((a.n_past(), b.n_past()), (0, 0));
    }
    assert!(model.forward_multi(&mut [], &mut small).is_err());
    // A cache longer than the scratch's attention buffers is refused too.
    let mut long = model.new_cache(4 * N_CTX);
    let mut sc = model.new_scratch(N_CTX, 2);
    let ids: Vec<u32> = (0..N_CTX as u32 + 1).map(|i| 3 + i % 100).collect();
    let err = model.forward(&mut long, &mut sc, &ids).unwrap_err();
    assert!(matches!(err, ModelError::ContextFull { .. }), "{err}");
    assert_eq!(long.n_past(), 0);
}

#[test]
fn hidden_rows_of_other_scratches_share_the_head_product() {
    let model = load("gemma3", "model-q8_0.gguf");
    let vocab = model.config().vocab;
    // Two prompts prefilled on their own; their last rows join the head
    // product of a decode step of a third sequence.
    let mut alone = Vec::new();
    for (seed, len) in [(11usize, 7usize), (12, 19)] {
        let mut c = model.new_cache(N_CTX);
        let mut sc = model.new_scratch(N_CTX, 32);
        model
            .forward(&mut c, &mut sc, &prompt(vocab, seed, len))
            .unwrap();
        let want = model.logits(&mut sc, len - 1..len).unwrap().to_vec();
        alone.push((sc, want));
    }
    let mut c = model.new_cache(N_CTX);
    let mut own = model.new_scratch(N_CTX, 32);
    model
        .forward(&mut c, &mut own, &prompt(vocab, 13, 5))
        .unwrap();
    let mut ref_cache = c.clone();
    let tok = [decode_token(vocab, 13, 0)];
    model.forward(&mut ref_cache, &mut own, &tok).unwrap();
    let want_step = model.logits(&mut own, 0..1).unwrap().to_vec();

    let mut shared = model.new_scratch(N_CTX, 2);
    model
        .forward_multi(
            &mut [SeqInput {
                cache: &mut c,
                tokens: &tok,
                embedded: &[],
            }],
            &mut shared,
        )
        .unwrap();
    let extra: Vec<&[f32]> = alone
        .iter()
        .map(|(sc, _)| sc.hidden(sc.batch() - 1).unwrap())
        .collect();
    // Three rows in a scratch made for two: the gather buffer grows.
    let got = model
        .head_logits(
            &mut shared,
            hearth_model::BatchRows::LastOfEachSequence,
            &extra,
        )
        .unwrap()
        .to_vec();
    assert_eq!(got.len(), 3 * vocab);
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    assert!(same(&got[..vocab], &want_step));
    assert!(same(&got[vocab..2 * vocab], &alone[0].1));
    assert!(same(&got[2 * vocab..], &alone[1].1));
    let only = model
        .head_logits(&mut shared, hearth_model::BatchRows::None, &extra[1..])
        .unwrap();
    assert!(same(only, &alone[1].1));
    let short = [0.0f32; 3];
    assert!(model
        .head_logits(&mut shared, hearth_model::BatchRows::None, &[&short])
        .is_err());
}

/// The largest difference two schedules of the same tokens may give with a
/// KV cache of type `kv`: their sums run in different orders, and with an
/// f16 cache a key that lands near a rounding boundary can round the other
/// way (one f16 step, about 5e-4 of it; with Q8_0 one step of its block's
/// largest value over 127, and every later row that reads it moves: up to
/// 2.7e-2 on the tiny Gemma 3). A wrong key or window moves the logits by
/// tenths (a Q8_0 batch that attends to its keys unrounded, by 0.13).
fn schedule_tolerance(kv: KvType) -> f32 {
    match kv {
        KvType::F32 => 1e-4,
        KvType::F16 => 2e-3,
        KvType::Q8_0 => 5e-2,
    }
}

/// Every tiny model with each KV cache type.
fn models_and_caches() -> impl Iterator<Item = (&'static str, KvType)> {
    ["gemma2", "gemma3", "gemma4_e2b", "gemma3n"]
        .into_iter()
        .flat_map(|n| [(n, KvType::F32), (n, KvType::F16), (n, KvType::Q8_0)])
}

/// A long batch after a cached prefix (the blocked prefill attention, with
/// the prefix in the ring and windows shorter than the batch) gives the
/// logits of feeding the same tokens one at a time (the row-by-row path).
#[test]
fn blocked_prefill_matches_token_by_token() {
    for (name, kv) in models_and_caches() {
        let tol = schedule_tolerance(kv);
        let model = load_kv(name, "model-f32.gguf", Some(kv));
        let vocab = model.config().vocab;
        let ids = prompt(vocab, 3, 50);
        let mut cache = model.new_cache(N_CTX);
        let mut scratch = model.new_scratch(N_CTX, 64);
        let mut want = Vec::new();
        for &t in &ids {
            model.forward(&mut cache, &mut scratch, &[t]).unwrap();
            want.push(model.logits(&mut scratch, 0..1).unwrap().to_vec());
        }
        // Prefixes of 0, 5 and 20 tokens (the last wraps the 8-wide rings),
        // then the rest as one batch of at least 30 rows.
        for prefix in [0, 5, 20] {
            let mut cache = model.new_cache(N_CTX);
            for &t in &ids[..prefix] {
                model.forward(&mut cache, &mut scratch, &[t]).unwrap();
            }
            let rest = &ids[prefix..];
            model.forward(&mut cache, &mut scratch, rest).unwrap();
            let got = model.logits(&mut scratch, 0..rest.len()).unwrap().to_vec();
            for (r, w) in want[prefix..].iter().enumerate() {
                let d = max_diff(&got[r * vocab..(r + 1) * vocab], w);
                assert!(
                    d < tol,
                    "{name} {kv:?} prefix {prefix} row {r}: max |Δ| {d}"
                );
            }
        }
    }
}

/// Long batches after prefixes that wrap the 72-slot rings (window 8 plus
/// the slack) give the logits of feeding the tokens one at a time, whether
/// the batch's keys go into the caches before its attention (global
/// layers; rings when the batch is at most 65 rows, the longest that
/// overwrites no slot its first row still reads) or after (longer batches
/// on wrapped rings, and a batch longer than the ring).
#[test]
fn keys_stored_before_or_after_attention_give_the_same_logits() {
    const CTX: usize = 256;
    for (name, kv) in models_and_caches() {
        let tol = schedule_tolerance(kv);
        let model = load_kv(name, "model-f32.gguf", Some(kv));
        let vocab = model.config().vocab;
        let ids = prompt(vocab, 5, 201);
        let mut scratch = model.new_scratch(CTX, 128);
        let mut cache = model.new_cache(CTX);
        let mut want = Vec::new();
        for &t in &ids {
            model.forward(&mut cache, &mut scratch, &[t]).unwrap();
            want.push(model.logits(&mut scratch, 0..1).unwrap().to_vec());
        }
        // (prefix fed one at a time, then batches): ring not yet wrapped
        // and kept whole (30 + 40), wrapped with 40, 65 (the most stored
        // before) and 66 rows, and 128 rows from the start (longer than
        // the ring).
        let schedules: [(usize, &[usize]); 5] = [
            (30, &[40]),
            (100, &[40, 60]),
            (100, &[65]),
            (100, &[66]),
            (0, &[128]),
        ];
        for (prefix, batches) in schedules {
            let mut cache = model.new_cache(CTX);
            for &t in &ids[..prefix] {
                model.forward(&mut cache, &mut scratch, &[t]).unwrap();
            }
            let mut at = prefix;
            for &n in batches {
                let batch = &ids[at..at + n];
                model.forward(&mut cache, &mut scratch, batch).unwrap();
                let got = model.logits(&mut scratch, 0..n).unwrap().to_vec();
                for (r, w) in want[at..at + n].iter().enumerate() {
                    let d = max_diff(&got[r * vocab..(r + 1) * vocab], w);
                    assert!(
                        d < tol,
                        "{name} {kv:?} {prefix}+{batches:?} row {}: max |Δ| {d}",
                        at + r
                    );
                }
                at += n;
            }
            // A decode step after the batches reads what they stored.
            model.forward(&mut cache, &mut scratch, &[ids[at]]).unwrap();
            let got = model.logits(&mut scratch, 0..1).unwrap().to_vec();
            let d = max_diff(&got, &want[at]);
            assert!(
                d < tol,
                "{name} {kv:?} {prefix}+{batches:?} step after: max |Δ| {d}"
            );
        }
    }
}

/// What a decode step reads from the cache: nothing at the start, half as
/// much from an f16 cache as from an f32 one, 34 bytes for every 64 of f16
/// from a Q8_0 one, and past every window only the global layers' share
/// grows, by the same amount a position.
#[test]
fn a_decode_step_reads_its_windows_of_the_cache() {
    let wide = load_kv("gemma3", "model-f32.gguf", Some(KvType::F32));
    let half = load_kv("gemma3", "model-f32.gguf", Some(KvType::F16));
    let q8 = load_kv("gemma3", "model-f32.gguf", Some(KvType::Q8_0));
    assert_eq!(wide.kv_bytes_read_at(0), 0);
    for pos in [1, 3, 7, 100, 1000] {
        assert_eq!(wide.kv_bytes_read_at(pos), 2 * half.kv_bytes_read_at(pos));
        assert_eq!(
            64 * q8.kv_bytes_read_at(pos),
            34 * half.kv_bytes_read_at(pos)
        );
    }
    let at = |p| wide.kv_bytes_read_at(p);
    assert!(at(2) > at(1));
    assert!(at(2000) > at(1000));
    assert_eq!(at(2000) - at(1000), at(3000) - at(2000));
    // A global layer's share a position, below what every layer reads.
    let per_position = (at(2000) - at(1000)) / 1000;
    assert!(per_position < at(1) && per_position > 0);
}
