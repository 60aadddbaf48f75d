//! Every integration test of this crate in one binary: one link, and
//! the shared helpers compiled once. Each file is a module named for
//! what it tests (`cargo test -p CRATE --test it MODULE::`).

mod bad_input;
mod bench_kernels;
mod calc_cli;
mod chat_page_browser;
mod chat_session;
mod checkpoint_dir;
mod constrained_cli;
mod crash_common;
mod crash_kill;
mod crash_prompt_cache;
mod deploy_config;
mod empty_keys;
mod eval_cli;
mod guard_cli;
mod llamacpp_parity;
mod lora_cli;
#[path = "../../../../tests/support/npy.rs"]
mod npy;
mod same_on_every_tier;
mod serve_audio;
mod serve_browser;
mod serve_budgets;
mod serve_clients;
mod serve_common;
mod serve_context;
mod serve_embeddings;
mod serve_grammar_limits;
mod serve_http;
mod serve_idle;
mod serve_infill;
mod serve_limits;
mod serve_lora;
mod serve_models;
mod serve_native_completion;
mod serve_native_tools;
mod serve_openai;
mod serve_options;
mod serve_prompt_cache;
mod serve_pull;
mod serve_samplers;
mod serve_structured;
mod serve_thinking;
mod serve_tls;
mod serve_transcribe;
mod serve_utility;
mod serve_vision;
mod telegram_cli;
mod vision_cli;
