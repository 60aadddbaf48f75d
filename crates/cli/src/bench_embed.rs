//! `hearth bench --embed`: texts per second and tokens per second of an
//! embedding model, on many short texts packed together and on one long
//! document.

use crate::bench::BenchArgs;
use anyhow::{bail, Result};
use engine::{Engine, Rng};
use std::time::Instant;

/// `count` texts of `lo..=hi` tokens (ids drawn past the control tokens,
/// between the model's markers), the same for the same seed.
fn random_texts(engine: &Engine, count: usize, lo: usize, hi: usize, seed: u64) -> Vec<Vec<u32>> {
    let vocab = engine.model().config().vocab as u64;
    // Past the control and byte tokens at the start of Gemma's vocabulary.
    let first = (vocab / 4).min(1000);
    let tok = engine.tokenizer();
    let (bos, eos) = (tok.bos_id(), tok.eos_id().filter(|_| tok.vocab().add_eos));
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|_| {
            let n = lo + (rng.next_u64() % (hi - lo + 1) as u64) as usize;
            let inner = n.saturating_sub(usize::from(bos.is_some()) + usize::from(eos.is_some()));
            let mut ids: Vec<u32> = bos.into_iter().collect();
            ids.extend((0..inner).map(|_| (first + rng.next_u64() % (vocab - first)) as u32));
            ids.extend(eos);
            ids
        })
        .collect()
}

/// One row per workload: the mean of `reps` timed runs after a warm-up.
pub(crate) fn rows(engine: &Engine, name: &str, args: &BenchArgs) -> Result<()> {
    if engine.embedding_dim().is_none() {
        bail!("--embed needs an embedding model (such as EmbeddingGemma); this one generates text");
    }
    let (lo, hi) = args.text_tokens;
    if lo == 0 || hi < lo {
        bail!("--text-tokens {lo}-{hi} is not a range of positive lengths");
    }
    let mut work = Vec::new();
    if args.texts > 0 {
        let texts = random_texts(engine, args.texts, lo, hi, 1);
        work.push((
            format!("embed {} texts of {lo}-{hi} tokens", args.texts),
            texts,
        ));
    }
    if args.doc_tokens > 0 {
        let doc = random_texts(engine, 1, args.doc_tokens, args.doc_tokens, 2);
        work.push((format!("embed 1 text of {} tokens", args.doc_tokens), doc));
    }
    for (test, texts) in work {
        let tokens: usize = texts.iter().map(Vec::len).sum();
        engine.embed_ids(&texts, &mut |_, _| {})?;
        let mut secs = Vec::with_capacity(args.reps.max(1));
        for _ in 0..args.reps.max(1) {
            let start = Instant::now();
            engine.embed_ids(&texts, &mut |_, _| {})?;
            secs.push(start.elapsed().as_secs_f64());
        }
        let mean = secs.iter().sum::<f64>() / secs.len() as f64;
        let threads = engine.model().threads();
        if args.json {
            let v = serde_json::json!({
                "model": name,
                "kernels": engine::bench::kernel_set(),
                "test": test,
                "threads": threads,
                "batch": engine.options().batch,
                "texts": texts.len(),
                "tokens": tokens,
                "seconds": secs,
                "texts_per_s": texts.len() as f64 / mean,
                "tokens_per_s": tokens as f64 / mean,
            });
            println!("{v}");
        } else {
            println!(
                "| {name} | {} | {threads} | {test} | {:.3} s | {:.1} texts/s | {:.0} tokens/s |",
                engine::bench::kernel_set(),
                mean,
                texts.len() as f64 / mean,
                tokens as f64 / mean
            );
        }
    }
    Ok(())
}
