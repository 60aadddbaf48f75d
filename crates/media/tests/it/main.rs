//! Every integration test of this crate in one binary: one link, and
//! the shared helpers compiled once. Each file is a module named for
//! what it tests (`cargo test -p CRATE --test it MODULE::`).

mod audio_features;
mod fuzz_regressions;
mod gemma3_tiny;
mod gemma3n_audio_tiny;
mod gemma4_audio_tiny;
mod gemma4_tiny;
#[path = "../../../../tests/support/npy.rs"]
mod npy;
