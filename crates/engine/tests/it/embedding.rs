//! EmbeddingGemma against sentence-transformers: the tiny random model of
//! `tests/fixtures/tiny/embeddinggemma` (saved by `SentenceTransformer.save`,
//! goldens from `SentenceTransformer.encode`, made by
//! `tests/fixtures/tiny/tools/make_tiny_embedding.py`), loaded from its
//! directory and from llama.cpp's converted GGUF.

use crate::npy;

use hearth_engine::{EmbedInput, EmbedOptions, EmbedTask, Engine, RunOptions};
use npy::read_npy_f32;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny/embeddinggemma")
        .join(name)
}

fn load(path: &Path, batch: usize) -> Engine {
    let opts = RunOptions {
        threads: Some(2),
        batch: Some(batch),
        ..RunOptions::default()
    };
    Engine::load(path, &opts).unwrap()
}

fn reference() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("reference.json")).unwrap()).unwrap()
}

fn texts(r: &Value) -> Vec<String> {
    r["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect()
}

fn ids(v: &Value) -> Vec<Vec<u32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect()
        })
        .collect()
}

fn embed(engine: &Engine, texts: &[String], opts: EmbedOptions) -> Vec<Vec<f32>> {
    let inputs: Vec<EmbedInput<'_>> = texts.iter().map(|t| EmbedInput::Text(t)).collect();
    engine
        .embed(&inputs, &opts, &mut |_, _| {})
        .unwrap()
        .vectors
}

/// Largest absolute difference between our vectors and a golden matrix.
fn max_diff(got: &[Vec<f32>], golden: &str) -> f32 {
    let (shape, want) = read_npy_f32(&fixture(golden));
    assert_eq!(shape, vec![got.len(), got[0].len()], "{golden}");
    let d = got
        .iter()
        .flatten()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    eprintln!("{golden}: max |Δ| {d:e}");
    d
}

/// Ids as sentence-transformers' tokenizer gives them, the ten texts
/// within 1e-5 of `encode`, from the directory and from the GGUF.
#[test]
fn matches_sentence_transformers_from_directory_and_gguf() {
    let r = reference();
    let texts = texts(&r);
    for path in [fixture(""), fixture("model-f32.gguf")] {
        let engine = load(&path, 512);
        let want_ids = ids(&r["ids"]);
        for (t, want) in texts.iter().zip(&want_ids) {
            assert_eq!(&engine.embedding_ids(t, None), want, "{t}");
        }
        let lens: Vec<usize> = want_ids.iter().map(Vec::len).collect();
        assert!(
            lens.contains(&3) && lens.iter().max() >= Some(&290),
            "{lens:?}"
        );
        let got = embed(&engine, &texts, EmbedOptions::default());
        let d = max_diff(&got, "embeddings.npy");
        assert!(d < 1e-5, "{}: max |Δ| {d}", path.display());
        for (name, task) in [
            ("query", EmbedTask::Query),
            ("document", EmbedTask::Document),
        ] {
            let want_ids = ids(&r["prompted_ids"][name]);
            for (t, want) in texts.iter().zip(&want_ids) {
                assert_eq!(&engine.embedding_ids(t, Some(task)), want, "{name}: {t}");
            }
            let opts = EmbedOptions {
                task: Some(task),
                ..EmbedOptions::default()
            };
            let got = embed(&engine, &texts[..3], opts);
            let d = max_diff(&got, &format!("embeddings_{name}.npy"));
            assert!(d < 1e-5, "{name}: max |Δ| {d}");
        }
    }
}

/// Each Matryoshka width equals sentence-transformers' `truncate_dim`
/// (renormalised), and widths outside the model's are refused.
#[test]
fn matryoshka_dimensions_match_truncate_dim() {
    let r = reference();
    let texts = texts(&r);
    let engine = load(&fixture("model-f32.gguf"), 512);
    for dim in [32, 16, 8] {
        let opts = EmbedOptions {
            dim: Some(dim),
            ..EmbedOptions::default()
        };
        let got = embed(&engine, &texts, opts);
        let d = max_diff(&got, &format!("embeddings_dim{dim}.npy"));
        assert!(d < 1e-5, "dim {dim}: max |Δ| {d}");
    }
    for dim in [0, 65] {
        let opts = EmbedOptions {
            dim: Some(dim),
            ..EmbedOptions::default()
        };
        let err = engine
            .embed(&[EmbedInput::Text("a")], &opts, &mut |_, _| {})
            .unwrap_err();
        assert!(err.to_string().contains("outside 1..=64"), "{err}");
    }
}

/// Texts packed many to a pass give what each gives alone, to 1e-6, in
/// fewer passes.
#[test]
fn packed_batches_equal_one_at_a_time() {
    let r = reference();
    let texts = texts(&r);
    let engine = load(&fixture("model-f32.gguf"), 512);
    let mut passes = 0;
    let inputs: Vec<EmbedInput<'_>> = texts.iter().map(|t| EmbedInput::Text(t)).collect();
    let packed = engine
        .embed(&inputs, &EmbedOptions::default(), &mut |_, _| passes += 1)
        .unwrap();
    assert!(
        passes < texts.len(),
        "{passes} passes for {} texts",
        texts.len()
    );
    for (t, v) in texts.iter().zip(&packed.vectors) {
        let alone = embed(&engine, std::slice::from_ref(t), EmbedOptions::default());
        let d = v
            .iter()
            .zip(&alone[0])
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(d <= 1e-6, "{t}: packed differs by {d}");
    }
}

/// A text past the context is refused unless truncation is asked for; then
/// it keeps its start and its closing `<eos>`, and is reported.
#[test]
fn long_texts_are_refused_or_truncated() {
    let opts = RunOptions {
        threads: Some(2),
        ctx: Some(16),
        ..RunOptions::default()
    };
    let engine = Engine::load(fixture("model-f32.gguf"), &opts).unwrap();
    let long = "the cat sat on the mat ".repeat(10);
    let err = engine
        .embed(
            &[EmbedInput::Text(&long)],
            &EmbedOptions::default(),
            &mut |_, _| {},
        )
        .unwrap_err();
    assert!(err.to_string().contains("past the limit of 16"), "{err}");
    let cut = EmbedOptions {
        truncate: true,
        ..EmbedOptions::default()
    };
    let out = engine
        .embed(
            &[EmbedInput::Text("a"), EmbedInput::Text(&long)],
            &cut,
            &mut |_, _| {},
        )
        .unwrap();
    assert_eq!(out.truncated, vec![1]);
    assert_eq!(out.tokens[1], 16);
    let ids = engine.embedding_ids(&long, None);
    let mut want = ids[..15].to_vec();
    want.push(1);
    let direct = engine
        .embed(
            &[EmbedInput::Tokens(&want)],
            &EmbedOptions::default(),
            &mut |_, _| {},
        )
        .unwrap();
    assert_eq!(out.vectors[1], direct.vectors[0]);
    for bad in [EmbedInput::Tokens(&[]), EmbedInput::Tokens(&[2, 600])] {
        let err = engine
            .embed(&[bad], &EmbedOptions::default(), &mut |_, _| {})
            .unwrap_err();
        assert!(err.to_string().contains("input 0"), "{err}");
    }
}

/// llama.cpp's GGUF converted without `--sentence-transformers-dense-modules`
/// is refused with what is missing and how to get it; a generative model
/// asked to embed says it does not.
#[test]
fn missing_projections_and_generative_models_are_clear_errors() {
    let opts = RunOptions {
        threads: Some(1),
        ..RunOptions::default()
    };
    let err = Engine::load(fixture("model-nodense-f32.gguf"), &opts).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("dense_2.weight") && msg.contains("--sentence-transformers-dense-modules"),
        "{msg}"
    );
    let gen = fixture("../gemma3/model-f32.gguf");
    let engine = Engine::load(gen, &opts).unwrap();
    assert_eq!(engine.embedding_dim(), None);
    let err = engine
        .embed(
            &[EmbedInput::Text("a")],
            &EmbedOptions::default(),
            &mut |_, _| {},
        )
        .unwrap_err();
    assert!(err.to_string().contains("does not embed"), "{err}");
}
