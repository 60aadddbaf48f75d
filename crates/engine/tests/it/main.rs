//! Every integration test of this crate in one binary: one link, and
//! the shared helpers compiled once. Each file is a module named for
//! what it tests (`cargo test -p CRATE --test it MODULE::`).

mod audio_gemma3n;
mod audio_gemma4;
mod common;
mod embedding;
mod infill;
mod layout_timing;
mod lora;
#[path = "../../../../tests/support/npy.rs"]
mod npy;
mod prefix_cache;
mod saved_prompt;
mod speculation;
mod vision;
mod vision_gemma4;
mod vision_t5_layouts;
