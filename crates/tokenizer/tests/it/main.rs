//! Every integration test of this crate in one binary: one link, and
//! the shared helpers compiled once. Each file is a module named for
//! what it tests (`cargo test -p CRATE --test it MODULE::`).

mod fuzz_regressions;
mod gemma4_tiny;
mod llamacpp_parity;
mod message_text;
mod template_bounds;
