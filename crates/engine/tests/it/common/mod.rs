//! What the engine's test binaries share: the real model's path.

use std::path::PathBuf;

/// The real 270M file, which scripts/test.sh fetches before the tests.
pub fn real_model() -> PathBuf {
    if let Some(p) = std::env::var_os("HEARTH_MODEL") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HEARTH_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/hearth")
        });
    let p = home.join("models/gemma-3-270m-q4_k_m.gguf");
    assert!(
        p.is_file(),
        "the real model is missing at {}: run scripts/fetch-model.sh (or set HEARTH_MODEL)",
        p.display()
    );
    p
}
