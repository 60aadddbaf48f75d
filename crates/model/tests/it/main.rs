//! Every integration test of this crate in one binary: one link, and
//! the shared helpers compiled once. Each file is a module named for
//! what it tests (`cargo test -p CRATE --test it MODULE::`).

mod embedded;
mod lora;
mod multi_seq;
#[path = "../../../../tests/support/npy.rs"]
mod npy;
mod tiny_reference;
