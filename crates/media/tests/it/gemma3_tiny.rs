//! The tiny random Gemma 3 vision tower against transformers' goldens
//! (`tests/fixtures/tiny/gemma3_vision`, made by `make_tiny_vision.py`).

use crate::npy;

use hearth_media::{Picture, VisionTower};
use npy::{read_npy_f32, rel_err};
use std::path::PathBuf;
use std::sync::Arc;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny/gemma3_vision")
        .join(name)
}

const IMAGES: [&str; 3] = ["img_a", "img_b", "img_c"];

#[test]
fn pixels_match_the_processor() {
    let tower = VisionTower::load(&fixture("mmproj-f32.gguf")).unwrap();
    for name in IMAGES {
        let bytes = std::fs::read(fixture(&format!("{name}.png"))).unwrap();
        let picture = Picture::decode(&bytes).unwrap();
        let got = tower.pixels(&picture).unwrap().data;
        let (shape, want) = read_npy_f32(&fixture(&format!("pixels_{name}.npy")));
        assert_eq!(shape, [3, 64, 64]);
        let worst = got
            .iter()
            .zip(&want)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        // The same bytes after PIL's resize: only the float rounding differs.
        assert!(worst < 1e-6, "{name}: pixel values differ by {worst}");
    }
}

fn check_embeddings(tower: &VisionTower, golden_suffix: &str, tol: f32) {
    let pool = threads::ThreadPool::new(2);
    for name in IMAGES {
        let bytes = std::fs::read(fixture(&format!("{name}.png"))).unwrap();
        let pixels = tower.pixels(&Picture::decode(&bytes).unwrap()).unwrap();
        let got = tower.encode(&pool, &pixels).unwrap();
        let (shape, want) = read_npy_f32(&fixture(&format!("embd_{name}{golden_suffix}.npy")));
        assert_eq!(shape, [16, 64]);
        let err = rel_err(&got, &want);
        eprintln!("{name}{golden_suffix}: relative error {err:.2e}");
        assert!(err < tol, "{name}: relative error {err} (limit {tol})");
    }
}

#[test]
fn embeddings_from_the_mmproj_match_transformers() {
    // llama.cpp's converter keeps the projection in F16: the goldens with
    // that rounding.
    let tower = VisionTower::load(&fixture("mmproj-f32.gguf")).unwrap();
    assert_eq!(tower.config().tokens_per_image(), 16);
    check_embeddings(&tower, "_f16proj", 1e-4);
}

#[test]
fn embeddings_from_the_checkpoint_match_transformers() {
    let w = hf::convert_vision_dir(&fixture(""))
        .unwrap()
        .expect("a vision tower");
    let file = gguf::GgufFile::from_bytes(w.to_bytes()).unwrap();
    let tower = VisionTower::from_gguf(Arc::new(file)).unwrap();
    check_embeddings(&tower, "", 1e-4);
}

#[test]
fn a_q8_0_tower_stays_close() {
    // 8-bit weights and activations: near, not exact.
    let tower = VisionTower::load(&fixture("mmproj-q8_0.gguf")).unwrap();
    check_embeddings(&tower, "_f16proj", 3e-2);
}

#[test]
fn a_text_model_is_not_a_projector() {
    let err = VisionTower::load(&fixture("model-f32.gguf")).unwrap_err();
    assert!(err.to_string().contains("not a projector file"), "{err}");
}
