//! What a model computes, printed exactly, for comparing one machine's
//! output with another's (`scripts/test-aarch64.sh` runs it on x86 and
//! under qemu on AArch64 and wants the same bytes): the top logits of every
//! position of a prompt fed in batches, then a greedy continuation.
//!
//!     cargo run --profile ci -p hearth-model --example arch_check -- MODEL IDS BATCH TOP GREEDY [TIER]
//!     cargo run --profile ci -p hearth-model --example arch_check -- --tiers
//!
//! `IDS` is a comma-separated prompt, `BATCH` the most tokens per forward
//! pass, `TOP` the logits printed per position (0: none, and only the last
//! position's computed, as a prompt's prefill computes them), `GREEDY` the tokens then
//! decoded one at a time (argmax, ties to the lower id), `TIER` a kernel set
//! to force (as `HEARTH_CPU` does). Logits print as Rust's shortest
//! round-trip decimal, so equal text means equal bits.

use hearth_model::{LoadOptions, Model, Precision};
use std::error::Error;
use std::io::Write;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--tiers") {
        println!("{}", quant::kernel_sets().join(" "));
        return Ok(());
    }
    let [model, ids, batch, top, greedy, rest @ ..] = args.as_slice() else {
        return Err("usage: arch_check MODEL IDS BATCH TOP GREEDY [TIER] | --tiers".into());
    };
    if let Some(tier) = rest.first() {
        quant::select_kernels(tier)?;
    }
    let ids: Vec<u32> = ids.split(',').map(str::parse).collect::<Result<_, _>>()?;
    let (batch, top, greedy): (usize, usize, usize) =
        (batch.parse()?, top.parse()?, greedy.parse()?);
    if ids.is_empty() || batch == 0 {
        return Err("give a prompt and a batch of at least 1".into());
    }
    let model = Model::load(
        model,
        &LoadOptions {
            threads: 2,
            precision: Precision::Quantized,
            kv_cache: None,
        },
    )?;
    // Written through `writeln!` so a closed pipe ends the run with an
    // error, not a panic.
    let mut out = std::io::stdout().lock();
    let n_ctx = ids.len() + greedy + 1;
    let mut cache = model.new_cache(n_ctx);
    let mut scratch = model.new_scratch(n_ctx, batch);
    let mut pos = 0;
    let mut last = Vec::new();
    for chunk in ids.chunks(batch) {
        model.forward(&mut cache, &mut scratch, chunk)?;
        if top == 0 {
            // Nothing to print per position: the last one's logits alone,
            // as a prompt's prefill computes them (for profiling it).
            pos += chunk.len();
            last = model
                .logits(&mut scratch, chunk.len() - 1..chunk.len())?
                .to_vec();
            continue;
        }
        for i in 0..chunk.len() {
            let row = model.logits(&mut scratch, i..i + 1)?;
            writeln!(out, "{pos} {}", top_k(row, top))?;
            last = row.to_vec();
            pos += 1;
        }
    }
    let mut generated = Vec::new();
    for _ in 0..greedy {
        let next = argmax(&last);
        generated.push(next.to_string());
        model.forward(&mut cache, &mut scratch, &[next])?;
        last = model.logits(&mut scratch, 0..1)?.to_vec();
    }
    writeln!(out, "greedy {}", generated.join(","))?;
    Ok(())
}

/// The `k` largest logits as `id:value` pairs, largest first (ties to the
/// lower id).
fn top_k(row: &[f32], k: usize) -> String {
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    order
        .iter()
        .take(k)
        .map(|&i| format!("{i}:{:?}", row[i]))
        .collect::<Vec<_>>()
        .join(" ")
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if v.total_cmp(&row[best]).is_gt() {
            best = i;
        }
    }
    best as u32
}
