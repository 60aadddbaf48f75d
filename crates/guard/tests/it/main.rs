//! Every integration test of this crate in one binary: one link, and
//! the shared helpers compiled once. Each file is a module named for
//! what it tests (`cargo test -p CRATE --test it MODULE::`).

mod grammars;
mod gsm8k;
mod ifeval;
mod puzzles;
mod seed_classes;
