//! `hearth cache ls|clear`: the prompt states a server keeps in its
//! `--cache-dir`.

use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::ExitCode;

/// What `hearth cache` does.
#[derive(clap::Subcommand, Debug)]
pub enum CacheCommand {
    /// List the stored states, most recently written first: their
    /// namespace (model, options and key), tokens, media and bytes.
    Ls(CacheDir),
    /// Remove every stored state (stop the servers using the folder first:
    /// a running one would find its states gone and compute them again).
    Clear(CacheDir),
}

/// The folder of `hearth serve --cache-dir`.
#[derive(clap::Args, Debug)]
pub struct CacheDir {
    /// The folder (default: $HEARTH_CACHE_DIR, else prompt-cache in the
    /// Hearth home, ~/.cache/hearth).
    #[arg(long, env = "HEARTH_CACHE_DIR")]
    dir: Option<PathBuf>,
}

impl CacheDir {
    fn open(&self) -> Result<(PathBuf, prompt_cache::PromptCache)> {
        let dir = self
            .dir
            .clone()
            .unwrap_or_else(|| store::home().join("prompt-cache"));
        let cache = prompt_cache::PromptCache::open(&prompt_cache::CacheConfig {
            ram_bytes: 0,
            dir: Some(dir.clone()),
            disk_bytes: u64::MAX,
        })
        .with_context(|| format!("cannot open {}", dir.display()))?;
        Ok((dir, cache))
    }
}

/// Runs `hearth cache`.
pub fn run(what: &CacheCommand) -> Result<ExitCode> {
    match what {
        CacheCommand::Ls(dir) => {
            let (dir, cache) = dir.open()?;
            let entries = cache.entries();
            println!(
                "{:<14} {:>8} {:>6} {:>12}",
                "namespace", "tokens", "media", "bytes"
            );
            for e in &entries {
                println!(
                    "{:<14} {:>8} {:>6} {:>12}",
                    e.namespace, e.tokens, e.media, e.disk_bytes
                );
            }
            let total: u64 = entries.iter().map(|e| e.disk_bytes).sum();
            println!(
                "{} states, {:.1} MiB in {}",
                entries.len(),
                total as f64 / (1024.0 * 1024.0),
                dir.display()
            );
        }
        CacheCommand::Clear(dir) => {
            let (dir, cache) = dir.open()?;
            let n = cache.entries().len();
            cache.clear();
            println!("removed {n} states from {}", dir.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
