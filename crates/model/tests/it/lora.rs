//! Sequences with different LoRA adapters in one batch: each row runs its
//! own sequence's adapters, in a prefill batch (the panel products) and a
//! decode step (the row products), and matches transformers with those
//! adapters (tests/fixtures/tiny/gemma3, `tools/make_tiny_lora.py`).

use crate::npy::read_npy_f32;
use hearth_model::{KvCache, KvType, LoadOptions, Model, Precision, SeqInput};
use nn::Adapters;
use std::path::PathBuf;
use std::sync::Arc;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny/gemma3")
}

fn tokens() -> Vec<u32> {
    let text = std::fs::read_to_string(dir().join("reference.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = v["tokens"].as_array().unwrap();
    ids.iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// The adapter `name` of the fixture (a GGUF file or a PEFT directory).
fn adapter(model: &Model, name: &str, id: u8) -> Arc<nn::Adapter> {
    let path = dir().join(name);
    let file = match path.is_dir() {
        true => {
            gguf::GgufFile::from_bytes(hf::convert_adapter_dir(&path, "gemma3").unwrap().to_bytes())
                .unwrap()
        }
        false => gguf::GgufFile::open(&path).unwrap(),
    };
    Arc::new(model.bind_adapter(&file, [id; 32]).unwrap())
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn each_row_runs_its_own_sequences_adapters() {
    let model = Model::load(
        dir().join("model-f32.gguf"),
        &LoadOptions {
            threads: 2,
            precision: Precision::Exact,
            kv_cache: Some(KvType::F32),
        },
    )
    .unwrap();
    let (a, b) = (
        adapter(&model, "lora_a", 1),
        adapter(&model, "lora_b-f32.gguf", 2),
    );
    let sets = [
        Adapters::new(vec![(a, 1.0), (Arc::clone(&b), 1.0)]),
        Adapters::new(vec![(b, 1.0)]),
        Adapters::default(),
    ];
    let goldens = ["logits_lora_ab.npy", "logits_lora_b.npy", "logits.npy"];
    let want: Vec<Vec<f32>> = goldens
        .iter()
        .map(|g| read_npy_f32(&dir().join(g)).1)
        .collect();
    let (ids, vocab) = (tokens(), model.config().vocab);
    let (n, last) = (ids.len(), ids.len() - 1);
    let mut caches: Vec<KvCache> = sets
        .iter()
        .map(|s| {
            let mut c = model.new_cache(n);
            c.use_adapters(s);
            c
        })
        .collect();
    let mut scratch = model.new_scratch(n, 3 * n);
    // All but the last token of every sequence in one prefill batch.
    let mut seqs: Vec<SeqInput<'_>> = caches
        .iter_mut()
        .map(|cache| SeqInput {
            cache,
            tokens: &ids[..last],
            embedded: &[],
        })
        .collect();
    model.forward_multi(&mut seqs, &mut scratch).unwrap();
    let got = model.logits(&mut scratch, 0..3 * last).unwrap().to_vec();
    for (j, w) in want.iter().enumerate() {
        let rows = &got[j * last * vocab..(j + 1) * last * vocab];
        let d = max_diff(rows, &w[..last * vocab]);
        assert!(d <= 1e-5, "prefill, sequence {j}: off by {d}");
    }
    // Then the last tokens as one decode step of three rows.
    let mut seqs: Vec<SeqInput<'_>> = caches
        .iter_mut()
        .map(|cache| SeqInput {
            cache,
            tokens: &ids[last..],
            embedded: &[],
        })
        .collect();
    model.forward_multi(&mut seqs, &mut scratch).unwrap();
    let got = model.logits(&mut scratch, 0..3).unwrap().to_vec();
    for (j, w) in want.iter().enumerate() {
        let d = max_diff(&got[j * vocab..(j + 1) * vocab], &w[last * vocab..]);
        assert!(d <= 1e-5, "decode, sequence {j}: off by {d}");
    }
    // The goldens differ, so a row that ran another sequence's adapters
    // would have failed.
    assert!(max_diff(&want[0], &want[1]) > 0.5 && max_diff(&want[1], &want[2]) > 0.5);
}

/// A cache computed with other adapters is cleared when the adapters
/// change, and kept when they do not.
#[test]
fn a_cache_is_kept_only_for_its_adapters() {
    let model = Model::load(dir().join("model-f32.gguf"), &LoadOptions::default()).unwrap();
    let b = Adapters::new(vec![(adapter(&model, "lora_b-f32.gguf", 2), 1.0)]);
    let mut cache = model.new_cache(32);
    let mut scratch = model.new_scratch(32, 8);
    model
        .forward(&mut cache, &mut scratch, &tokens()[..4])
        .unwrap();
    assert!(!cache.use_adapters(&Adapters::default()));
    assert_eq!(cache.n_past(), 4);
    assert!(cache.use_adapters(&b));
    assert_eq!(cache.n_past(), 0);
    assert_eq!(cache.adapters(), &b);
    // An adapter at scale 0 is none.
    let off = Adapters::new(vec![(adapter(&model, "lora_b-f32.gguf", 2), 0.0)]);
    assert!(off.is_empty() && off.key().is_empty());
}
