//! The tiny random Gemma 4 vision tower against transformers' goldens
//! (`tests/fixtures/tiny/gemma4_vision`, made by `make_tiny_vision4.py`):
//! images of three sizes, each resized by the processor's rule to its own
//! number of soft tokens.

use crate::npy;

use hearth_media::{Picture, Projector, VisionTower};
use npy::{read_npy_f32, rel_err};
use std::path::PathBuf;
use std::sync::Arc;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny/gemma4_vision")
        .join(name)
}

/// Each image and the soft tokens it becomes at the fixture's budget of 70.
const IMAGES: [(&str, usize); 3] = [("img_a", 64), ("img_b", 60), ("img_c", 63)];

fn tower(file: &str) -> VisionTower {
    let mut t = VisionTower::load(&fixture(file)).unwrap();
    assert_eq!(t.config().projector, Projector::Gemma4);
    assert_eq!(t.config().tokens_per_image(), 280, "the default budget");
    t.set_max_tokens(70).unwrap();
    t
}

#[test]
fn pixels_match_the_processor() {
    let tower = tower("mmproj-f32.gguf");
    for (name, tokens) in IMAGES {
        let bytes = std::fs::read(fixture(&format!("{name}.png"))).unwrap();
        let got = tower.pixels(&Picture::decode(&bytes).unwrap()).unwrap();
        assert_eq!(got.width * got.height, tokens * 9 * 16, "{name}");
        // The goldens are the processor's patches: rows of (y, x, channel).
        let (shape, want) = read_npy_f32(&fixture(&format!("pixels_{name}.npy")));
        assert_eq!(shape, [tokens * 9, 48]);
        let (w, plane) = (got.width, got.width * got.height);
        let mut worst = 0.0f32;
        for (i, row) in want.chunks_exact(48).enumerate() {
            let (py, px) = (i / (w / 4), i % (w / 4));
            for (j, &v) in row.iter().enumerate() {
                let (ky, kx, c) = (j / 12, (j / 3) % 4, j % 3);
                let ours = got.data[c * plane + (py * 4 + ky) * w + px * 4 + kx];
                worst = worst.max((ours - v).abs());
            }
        }
        // The same bytes after PIL's bicubic resize: only the division rounds.
        assert!(worst < 1e-6, "{name}: pixel values differ by {worst}");
    }
}

fn check_embeddings(tower: &VisionTower, golden_suffix: &str, tol: f32) {
    let pool = threads::ThreadPool::new(2);
    for (name, tokens) in IMAGES {
        let bytes = std::fs::read(fixture(&format!("{name}.png"))).unwrap();
        let pixels = tower.pixels(&Picture::decode(&bytes).unwrap()).unwrap();
        let got = tower.encode(&pool, &pixels).unwrap();
        let (shape, want) = read_npy_f32(&fixture(&format!("embd_{name}{golden_suffix}.npy")));
        assert_eq!(shape, [tokens, 64]);
        let err = rel_err(&got, &want);
        eprintln!("{name}{golden_suffix}: relative error {err:.2e}");
        assert!(err < tol, "{name}: relative error {err} (limit {tol})");
    }
}

#[test]
fn embeddings_from_the_f32_mmproj_match_transformers() {
    check_embeddings(&tower("mmproj-f32.gguf"), "", 1e-4);
}

#[test]
fn embeddings_from_the_f16_mmproj_match_transformers() {
    check_embeddings(&tower("mmproj-f16.gguf"), "_f16proj", 1e-4);
}

#[test]
fn embeddings_from_the_checkpoint_match_transformers() {
    let w = hf::convert_vision_dir(&fixture(""))
        .unwrap()
        .expect("a vision tower");
    let file = gguf::GgufFile::from_bytes(w.to_bytes()).unwrap();
    let tower = VisionTower::from_gguf(Arc::new(file)).unwrap();
    // The budget comes from the checkpoint's preprocessor_config.json.
    assert_eq!(tower.config().tokens_per_image(), 70);
    check_embeddings(&tower, "", 1e-4);
}

#[test]
fn budgets_outside_the_range_are_refused() {
    let mut t = VisionTower::load(&fixture("mmproj-f32.gguf")).unwrap();
    assert!(t.set_max_tokens(69).is_err());
    assert!(t.set_max_tokens(1121).is_err());
    t.set_max_tokens(1120).unwrap();
}

#[test]
fn pictures_of_any_shape_fit_the_budget() {
    let t = tower("mmproj-f32.gguf");
    let pool = threads::ThreadPool::new(2);
    for (w, h) in [(1, 1), (1, 300), (2000, 3), (4000, 4000)] {
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i * 7 % 251) as u8).collect();
        let picture = Picture::from_rgb(w, h, rgb).unwrap();
        let pixels = t.pixels(&picture).unwrap();
        assert_eq!(pixels.width % 12, 0, "{w}x{h}");
        assert_eq!(pixels.height % 12, 0, "{w}x{h}");
        let rows = t.encode(&pool, &pixels).unwrap();
        let tokens = rows.len() / 64;
        assert!((1..=70).contains(&tokens), "{w}x{h}: {tokens} tokens");
        assert!(rows.iter().all(|v| v.is_finite()), "{w}x{h}");
    }
}
