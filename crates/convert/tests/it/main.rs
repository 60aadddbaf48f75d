//! Every integration test of this crate in one binary: one link, and
//! the shared helpers compiled once. Each file is a module named for
//! what it tests (`cargo test -p CRATE --test it MODULE::`).

mod llama_quantize;
#[path = "../../../../tests/support/npy.rs"]
mod npy;
mod real_model;
mod tiny;
