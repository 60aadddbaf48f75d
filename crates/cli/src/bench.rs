//! `hearth bench`: llama-bench-style throughput rows.

use crate::commands::load_engine;
use crate::ConstraintArgs;
use crate::ModelArgs;
use anyhow::{bail, Result};
use engine::bench::{BenchResult, BenchTest};
use std::process::ExitCode;
use std::time::Duration;

/// Flags of `hearth bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Model: a GGUF path or alias.
    #[arg(short, long, default_value = "gemma3-270m")]
    pub model: String,
    /// Prompt lengths to test (0 skips prompt processing).
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    pub n_prompt: Vec<usize>,
    /// Generation lengths to test (0 skips generation).
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    pub n_gen: Vec<usize>,
    /// Thread counts to test.
    #[arg(short, long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Repetitions per test.
    #[arg(short, long, default_value_t = 5)]
    pub reps: usize,
    /// Context tokens processed before each timed test; a list measures
    /// every test at each depth (`-d 0,4096`, as llama-bench).
    #[arg(short, long, value_delimiter = ',', default_value = "0")]
    pub depth: Vec<usize>,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Keep activations in f32 in matrix products.
    #[arg(long)]
    pub precise: bool,
    /// How the KV cache stores keys and values (f16, q8_0 or f32; default:
    /// f16, or f32 with --precise).
    #[arg(long, value_name = "TYPE")]
    pub kv_cache: Option<engine::KvType>,
    /// Requantize the weights at load (q8_0, q4_k_m, ...).
    #[arg(long, value_name = "TYPE")]
    pub quant: Option<String>,
    /// A LoRA adapter to run beside the weights, `FILE[:SCALE]`; repeat
    /// for several (the cost of unmerged adapters).
    #[arg(long, value_name = "FILE[:SCALE]")]
    pub lora: Vec<engine::LoraSpec>,
    /// Kernel set to run (scalar, avx2, avxvnni, avx512, amx; scalar, neon, dotprod on AArch64): a lower tier than
    /// the CPU's best, as HEARTH_CPU does. Default: the best.
    #[arg(long, value_name = "TIER")]
    pub cpu: Option<String>,
    /// Measure sampled decode under this constraint against the same decode
    /// without one (`tg N` rows become `sampled tgN` pairs).
    #[command(flatten)]
    pub constraint: ConstraintArgs,
    /// Sequences decoded together in the constrained comparison.
    #[arg(long, default_value_t = 1)]
    pub seqs: usize,
    /// After each test, where its time went: the parallel operations by the
    /// place in the code that started them (time per token, the caller's
    /// wait at their end, the workers' wake-up delay, the serial work just
    /// before them), and the serial time between operations, when one
    /// thread works alone. Warm-up run included.
    #[arg(long)]
    pub profile: bool,
    /// Measure an embedding model instead: texts per second on `--texts`
    /// texts of `--text-tokens` tokens packed together, and on one text of
    /// `--doc-tokens` tokens.
    #[arg(long)]
    pub embed: bool,
    /// `--embed`: how many short texts (0 skips them).
    #[arg(long, default_value_t = 1000)]
    pub texts: usize,
    /// `--embed`: the short texts' lengths, MIN-MAX tokens (markers included).
    #[arg(long, value_parser = token_range, default_value = "10-60")]
    pub text_tokens: (usize, usize),
    /// `--embed`: the long document's length in tokens (0 skips it).
    #[arg(long, default_value_t = 2048)]
    pub doc_tokens: usize,
    /// Most tokens per forward pass (default: 512).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Measure speculative decoding instead: greedy decode of the first
    /// `-n` length on three copy-heavy tasks, without and with this drafter
    /// (alternated), the drafts kept, and whether the outputs matched.
    #[arg(long, value_enum, value_name = "HOW")]
    pub spec: Option<crate::SpecKind>,
    /// Measure speculation with this draft model (a GGUF path or alias of
    /// the same vocabulary) instead of --spec's.
    #[arg(long, value_name = "MODEL", conflicts_with = "spec")]
    pub draft: Option<String>,
    /// Most tokens drafted at a time, with --spec or --draft [default: 8].
    #[arg(long, value_name = "N")]
    pub draft_max: Option<usize>,
    /// With --draft: the least probability of a drafted guess [default: 0.5].
    #[arg(long, value_name = "P", value_parser = crate::probability, requires = "draft")]
    pub draft_p_min: Option<f32>,
}

/// `MIN-MAX` as two numbers.
fn token_range(s: &str) -> Result<(usize, usize), String> {
    let (lo, hi) = s.split_once('-').ok_or("expected MIN-MAX, such as 10-60")?;
    let n = |x: &str| x.trim().parse::<usize>().map_err(|e| format!("{x}: {e}"));
    Ok((n(lo)?, n(hi)?))
}

/// What every thread count measures.
struct Plan {
    /// The `-p` and `-n` tests (those above 0).
    tests: Vec<BenchTest>,
    /// The constraint of the constrained comparison, if any.
    grammar: Option<engine::Grammar>,
    /// The kernel set that runs.
    kernels: &'static str,
    /// Whether a decode is timed (the read bandwidth is measured then).
    decodes: bool,
}

/// Run every (threads, test) combination and print a row for each.
pub fn run(args: &BenchArgs) -> Result<ExitCode> {
    // No -t: one row at the engine's default (the physical cores).
    let threads: Vec<Option<usize>> = if args.threads.is_empty() {
        vec![None]
    } else {
        args.threads.iter().map(|&t| Some(t)).collect()
    };
    let tests: Vec<BenchTest> = args
        .n_prompt
        .iter()
        .filter(|&&n| n > 0)
        .map(|&n| BenchTest::Prompt(n))
        .chain(
            args.n_gen
                .iter()
                .filter(|&&n| n > 0)
                .map(|&n| BenchTest::Generate(n)),
        )
        .collect();
    if tests.is_empty() && !args.embed {
        bail!("nothing to measure: give -p or -n above 0");
    }
    let grammar = args.constraint.grammar()?;
    if let Some(tier) = &args.cpu {
        engine::bench::select_kernels(tier)?;
    }
    let kernels = engine::bench::kernel_set();
    if !args.json {
        print_header(args, kernels);
    }
    let decodes = !args.embed && tests.iter().any(|t| matches!(t, BenchTest::Generate(_)));
    let plan = Plan {
        tests,
        grammar,
        kernels,
        decodes,
    };
    for &t in &threads {
        measure_at(args, t, &plan)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The lines before the table: the kernels, the cores and the KV cache's
/// type, then the table's head for what is measured.
fn print_header(args: &BenchArgs, kernels: &str) {
    println!(
        "kernels: {kernels} (this CPU runs: {})",
        engine::bench::kernel_sets().join(", ")
    );
    let (physical, logical) = engine::bench::core_counts();
    match physical {
        Some(p) => println!("cores: {p} physical, {logical} logical CPUs"),
        None => println!("cores: {logical} logical CPUs (physical cores unknown)"),
    }
    let precision = if args.precise {
        engine::Precision::Exact
    } else {
        engine::Precision::Quantized
    };
    let kv = args
        .kv_cache
        .unwrap_or(engine::KvType::default_for(precision));
    println!("kv cache: {}", kv.name());
    if args.spec.is_some() || args.draft.is_some() {
        crate::bench_spec::header();
    } else if args.embed {
        println!("| model | kernels | threads | test | time | texts/s | tokens/s |");
        println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    } else {
        println!("| model | kernels | threads | test | t/s | decode GB/s (% of read bandwidth) | sync: ops/token, workers idle, caller waits |");
        println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    }
}

/// Loads the model at `threads` and prints its rows: embedding, speculation
/// or constrained rows when asked for, else one per test and depth.
fn measure_at(args: &BenchArgs, threads: Option<usize>, plan: &Plan) -> Result<()> {
    let model = ModelArgs {
        model: args.model.clone(),
        threads,
        precise: args.precise,
        kv_cache: args.kv_cache,
        quant: args.quant.clone(),
        ctx: None,
        batch: args.batch,
        mmproj: None,
        image_tokens: None,
        lora: args.lora.clone(),
    };
    let engine = load_engine(&model, engine::SamplingParams::default())?;
    let name = engine.model_name().unwrap_or("model").to_string();
    // The machine's read bandwidth at these threads: the ceiling that
    // decode's weight traffic is judged against.
    let bandwidth = plan
        .decodes
        .then(|| engine::bench::memory_read_bandwidth(engine.model().threads()));
    let row = Row {
        model: &name,
        kernels: plan.kernels,
        kv_cache: engine.model().kv_type().name(),
        engine: &engine,
        bandwidth,
    };
    if args.embed {
        return crate::bench_embed::rows(&engine, &name, args);
    }
    let spec = match (&args.draft, args.spec) {
        (Some(d), _) => Some(crate::draft_speculation(
            d,
            &engine,
            args.draft_max,
            args.draft_p_min,
        )?),
        (None, Some(how)) => Some(crate::speculation(how, args.draft_max)),
        (None, None) => None,
    };
    if let Some(spec) = spec {
        return crate::bench_spec::rows(&engine, &name, &spec, args);
    }
    if let Some(grammar) = &plan.grammar {
        for &n in args.n_gen.iter().filter(|&&n| n > 0) {
            constrained_rows(&engine, &name, grammar, n, args)?;
        }
        return Ok(());
    }
    for &test in &plan.tests {
        for &depth in &args.depth {
            engine.model().set_profiling(args.profile);
            let start = std::time::Instant::now();
            let r = engine.bench(test, depth, args.reps)?;
            let elapsed = start.elapsed();
            engine.model().set_profiling(false);
            row.print(&r, args.json);
            if args.profile {
                // The warm-up run is timed too: one more run than `reps`.
                let tokens = (test.tokens() + depth) * (args.reps.max(1) + 1);
                print_profile(&engine.model().profile(), elapsed, tokens);
            }
        }
    }
    Ok(())
}

/// The profile of one test (see `--profile`): a line per call site, then
/// the serial time between operations.
fn print_profile(sites: &[(String, engine::bench::SiteProfile)], elapsed: Duration, tokens: usize) {
    let tokens = tokens.max(1) as f64;
    let total = elapsed.as_secs_f64().max(1e-12);
    let us = |d: Duration| d.as_secs_f64() * 1e6 / tokens;
    println!(
        "|   site | ops/token | tasks/op | us/token | % of time | caller waits | wake-up us | serial us/token before |"
    );
    for (site, p) in sites {
        let wake = p.wake.as_secs_f64() * 1e6 / (p.wakes.max(1) as f64);
        println!(
            "|   {site} | {:.1} | {:.1} | {:.1} | {:.1}% | {:.0}% | {wake:.2} | {:.1} |",
            p.ops as f64 / tokens,
            p.tasks as f64 / p.ops.max(1) as f64,
            us(p.wall),
            100.0 * p.wall.as_secs_f64() / total,
            100.0 * p.caller_wait.as_secs_f64() / p.wall.as_secs_f64().max(1e-12),
            us(p.gap_before),
        );
    }
    // Serial time inside the passes: the caller's gaps between operations
    // (setting up a run and what follows its last operation not counted).
    let serial: Duration = sites.iter().map(|(_, p)| p.gap_before).sum();
    println!(
        "|   between operations (one thread) | | | {:.1} | {:.1}% | | | |",
        us(serial),
        100.0 * serial.as_secs_f64() / total
    );
}

/// What every row of one model and thread count shares.
struct Row<'a> {
    model: &'a str,
    kernels: &'static str,
    /// How the KV cache stores keys and values.
    kv_cache: &'static str,
    /// The engine measured (for the bytes a decode step reads).
    engine: &'a engine::Engine,
    /// Measured memory read bandwidth at these threads, bytes/s.
    bandwidth: Option<f64>,
}

impl Row<'_> {
    fn print(&self, r: &BenchResult, json: bool) {
        let test = if r.depth > 0 {
            format!("{} @ d{}", r.test.name(), r.depth)
        } else {
            r.test.name()
        };
        // Decode reads every weight once a token, and at a depth the cached
        // keys and values too, so t/s × bytes is the bandwidth it draws.
        let decode_gbps = matches!(r.test, BenchTest::Generate(_)).then(|| {
            let bytes = self.engine.decode_bytes_at(r.depth, r.test.tokens());
            r.mean() * bytes as f64 / 1e9
        });
        let read_gbps = self.bandwidth.map(|b| b / 1e9);
        if json {
            let v = serde_json::json!({
                "model": self.model,
                "kernels": self.kernels,
                "kv_cache": self.kv_cache,
                "test": test,
                "threads": r.threads,
                "n_tokens": r.test.tokens(),
                "depth": r.depth,
                "avg_ts": r.mean(),
                "stddev_ts": r.sd(),
                "samples_ts": r.samples,
                "decode_gbps": decode_gbps,
                "read_bandwidth_gbps": read_gbps,
                "ops_per_token": r.sync.map(|s| s.ops_per_token),
                "workers_idle": r.sync.map(|s| s.workers_idle),
                "caller_wait": r.sync.map(|s| s.caller_wait),
            });
            println!("{v}");
        } else {
            let sync = r.sync.map_or(String::new(), |s| {
                // A prompt's operations are shared by all its tokens.
                let ops = if s.ops_per_token < 10.0 { 2 } else { 0 };
                format!(
                    "{:.ops$}, {:.0}%, {:.0}%",
                    s.ops_per_token,
                    100.0 * s.workers_idle,
                    100.0 * s.caller_wait
                )
            });
            let gbps = match (decode_gbps, read_gbps) {
                (Some(d), Some(b)) => format!("{d:.1} ({:.0}% of {b:.1})", 100.0 * d / b),
                (Some(d), None) => format!("{d:.1}"),
                _ => String::new(),
            };
            println!(
                "| {} | {} | {} | {test} | {:.2} ± {:.2} | {gbps} | {sync} |",
                self.model,
                self.kernels,
                r.threads,
                r.mean(),
                r.sd()
            );
        }
    }
}

/// Sampled decode of `n` tokens per sequence, free and under `grammar`, and
/// what the constraint cost per token.
fn constrained_rows(
    engine: &engine::Engine,
    model: &str,
    grammar: &engine::Grammar,
    n: usize,
    args: &BenchArgs,
) -> Result<()> {
    let tok = engine.tokenizer();
    let prompt = tok.encode("Here is the answer as JSON:\n", tok.add_bos(), true);
    let params = engine::SamplingParams {
        seed: 42,
        ..engine::SamplingParams::default()
    };
    let free = engine.bench_sampled(&prompt, n, args.seqs, None, &params, args.reps)?;
    let held = engine.bench_sampled(&prompt, n, args.seqs, Some(grammar), &params, args.reps)?;
    let stats = held.constraint.unwrap_or_default();
    let per_token_us =
        (stats.mask_time + stats.check_time).as_secs_f64() * 1e6 / stats.tokens.max(1) as f64;
    let mask_us = stats.mask_time.as_secs_f64() * 1e6 / stats.masks.max(1) as f64;
    let ratio = held.mean() / free.mean().max(1e-9);
    if args.json {
        for (r, kind) in [(&free, "free"), (&held, grammar.kind())] {
            let v = serde_json::json!({
                "model": model,
                "test": format!("sampled tg{n}"),
                "constraint": kind,
                "seqs": r.seqs,
                "threads": engine.model().threads(),
                "avg_ts": r.mean(),
                "samples_ts": r.samples,
                "tokens": r.tokens,
            });
            println!("{v}");
        }
        let v = serde_json::json!({
            "model": model,
            "test": format!("sampled tg{n}"),
            "constraint_cost": {
                "ratio": ratio,
                "us_per_token": per_token_us,
                "masks_per_token": stats.masks as f64 / stats.tokens.max(1) as f64,
                "us_per_mask": mask_us,
            },
        });
        println!("{v}");
    } else {
        println!(
            "| {model} | {} | {} | sampled tg{n} x{} free | {:.2} | |",
            engine::bench::kernel_set(),
            engine.model().threads(),
            free.seqs,
            free.mean()
        );
        println!(
            "| {model} | {} | {} | sampled tg{n} x{} {} | {:.2} ({:.1}% of free) | constraint {:.0} µs/token: {:.2} masks/token at {:.0} µs each |",
            engine::bench::kernel_set(),
            engine.model().threads(),
            held.seqs,
            grammar.kind(),
            held.mean(),
            100.0 * ratio,
            per_token_us,
            stats.masks as f64 / stats.tokens.max(1) as f64,
            mask_us
        );
    }
    Ok(())
}
