//! Every integration test of this crate in one binary: one link, and
//! the shared helpers compiled once. Each file is a module named for
//! what it tests (`cargo test -p CRATE --test it MODULE::`).

mod fixtures;
mod iq4;
mod kernels;
mod kquant_llamacpp;
mod kquantize;
mod llama_quantize_bytes;
