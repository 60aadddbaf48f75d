//! `hearth quantize` and `hearth synth`: flags, progress and file writing around
//! the conversion library (named `::convert` here, since this module shares
//! its name).

use ::convert::{FileType, GgufFile, GgufWriter, Preset, TensorReport};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// Flags of `hearth quantize`.
#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// Input GGUF: a path or a model alias (gemma3-270m).
    input: String,
    /// Output GGUF path.
    output: PathBuf,
    /// Target mix, as llama-quantize names it: q4_k_m, q4_k_s, q5_k_m, q5_k_s,
    /// q6_k, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k_s, q3_k_m, q3_k_l,
    /// iq4_nl, iq4_xs, f16, bf16, f32.
    #[arg(long = "type", value_name = "TYPE")]
    ftype: String,
    /// Worker threads (default: all cores).
    #[arg(short, long)]
    threads: Option<usize>,
    /// No per-tensor lines.
    #[arg(short, long)]
    quiet: bool,
    /// A LoRA adapter to merge into the weights before quantizing, at its
    /// scale (`FILE[:SCALE]`: a GGUF adapter or a PEFT directory); repeat
    /// for several. The merged model runs without it, at no decode cost.
    #[arg(long, value_name = "FILE[:SCALE]")]
    lora: Vec<engine::LoraSpec>,
}

/// Flags of `hearth synth`.
#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Architecture: gemma3 (270m, 1b, 4b), gemma2 (2b) or gemma4 (e2b,
    /// e4b); by default the preset's.
    #[arg(long)]
    arch: Option<String>,
    /// Model size: 270m, 1b, 4b (Gemma 3), gemma2-2b (Gemma 2 2B),
    /// gemma4-e2b or gemma4-e4b (Gemma 4's text model), embeddinggemma-300m.
    #[arg(long)]
    preset: String,
    /// Quantization mix of the weights (see `hearth quantize --help`)
    /// [default: q4_k_m; with --mmproj: f16, or bf16, f32, q8_0].
    #[arg(long)]
    quant: Option<String>,
    /// Write a Gemma 3 vision projector (llama.cpp's mmproj layout: the
    /// SigLIP tower's real shapes, random weights) that maps into the
    /// preset's width, instead of the text model.
    #[arg(long)]
    mmproj: bool,
    /// Output GGUF path.
    #[arg(short, long)]
    output: PathBuf,
    /// Model whose tokenizer (and so vocabulary) to copy: a path or an alias.
    #[arg(long, default_value = "gemma3-270m")]
    tokenizer_from: String,
    /// Seed of the random weights; the same seed gives the same file.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Worker threads (default: all cores).
    #[arg(short, long)]
    threads: Option<usize>,
    /// No per-tensor lines.
    #[arg(short, long)]
    quiet: bool,
}

fn parse_ftype(name: &str) -> Result<FileType> {
    FileType::from_name(name).with_context(|| {
        format!(
            "unknown quantization type `{name}`; expected one of: {}",
            FileType::names()
        )
    })
}

fn open_model(spec: &str, what: &str) -> Result<GgufFile> {
    let path = store::resolve(spec).with_context(|| format!("cannot find the {what} `{spec}`"))?;
    GgufFile::open(&path).with_context(|| format!("cannot load the {what} {}", path.display()))
}

/// Runs `f` on a pool of `threads` workers (rayon's default pool when `None`).
fn with_threads<T: Send>(threads: Option<usize>, f: impl FnOnce() -> T + Send) -> Result<T> {
    match threads {
        None => Ok(f()),
        Some(0) => bail!("--threads must be at least 1"),
        Some(n) => Ok(rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .context("cannot start the worker threads")?
            .install(f)),
    }
}

/// The output GGUF, written under a temporary name next to its destination
/// (hearth-durable: fsynced, then renamed into place), so a failed or killed
/// run never leaves a truncated GGUF under the output's name.
struct PendingFile(durable::PendingFile);

impl PendingFile {
    /// Creates the temporary file now, so an unwritable destination fails
    /// before minutes of quantizing; says so (before removing it) when it
    /// finds the partial output of an earlier run that was killed.
    fn create(dest: &Path) -> Result<Self> {
        if dest.is_dir() {
            bail!("output {} is a directory", dest.display());
        }
        let p = durable::PendingFile::create_saying(dest, |left| {
            eprintln!("{left} ({} itself is not touched by it)", dest.display())
        })
        .with_context(|| format!("cannot write the output {}", dest.display()))?;
        Ok(Self(p))
    }

    fn commit(mut self, w: &GgufWriter) -> Result<u64> {
        let dest = self.0.dest().to_path_buf();
        let mut out = std::io::BufWriter::with_capacity(1 << 20, &mut self.0);
        w.write_to(&mut out)
            .and_then(|()| out.flush())
            .with_context(|| format!("cannot write the output {}", dest.display()))?;
        drop(out);
        self.0
            .commit()
            .with_context(|| format!("cannot move the output into {}", dest.display()))
    }
}

/// A per-tensor progress printer in llama-quantize's style.
fn progress(total: usize, quiet: bool) -> impl FnMut(&TensorReport) {
    let mut i = 0;
    move |r: &TensorReport| {
        i += 1;
        if !quiet {
            eprintln!(
                "[{i:>4}/{total:>4}] {:<36} {:<24} {:>5} -> {:<5} {:>10.2} MiB",
                r.name,
                format!("{:?}", r.dims),
                r.from.name(),
                r.to.name(),
                r.bytes as f64 / (1024.0 * 1024.0)
            );
        }
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// `hearth quantize IN OUT --type T`.
pub fn quantize(args: &QuantizeArgs) -> Result<ExitCode> {
    let ftype = parse_ftype(&args.ftype)?;
    let in_path = store::resolve(&args.input)
        .with_context(|| format!("cannot find the input `{}`", args.input))?;
    if same_file(&in_path, &args.output) {
        bail!(
            "the output {} is the input file; write to another path",
            args.output.display()
        );
    }
    // A Hugging Face checkpoint directory is converted in memory first.
    let mut input = engine::open_model_file(&in_path)
        .with_context(|| format!("cannot load the input {}", in_path.display()))?;
    if !args.lora.is_empty() {
        input = engine::merge_adapters(&input, &args.lora).context("cannot merge the adapters")?;
        eprintln!("merged {} adapter(s) into the weights", args.lora.len());
    }
    let pending = PendingFile::create(&args.output)?;
    let start = Instant::now();
    let mut report = progress(input.tensors().len(), args.quiet);
    let w = with_threads(args.threads, || {
        ::convert::quantize_gguf_with(&input, ftype, &mut report)
    })?
    .with_context(|| format!("cannot quantize {}", in_path.display()))?;
    let bytes = pending.commit(&w)?;
    eprintln!(
        "quantized {} ({:.1} MiB) to {ftype} in {:.1} s",
        in_path.display(),
        input.file_len() as f64 / (1024.0 * 1024.0),
        start.elapsed().as_secs_f64()
    );
    println!(
        "wrote {} ({:.1} MiB, {} tensors, {ftype})",
        args.output.display(),
        bytes as f64 / (1024.0 * 1024.0),
        input.tensors().len()
    );
    Ok(ExitCode::SUCCESS)
}

/// `hearth synth --preset P --quant T -o FILE`.
pub fn synth(args: &SynthArgs) -> Result<ExitCode> {
    let preset = match args.arch.as_deref().map(str::to_ascii_lowercase) {
        // `--arch gemma2 --preset 2b` names the Gemma 2 2B too.
        Some(a) if a == "gemma2" && args.preset.eq_ignore_ascii_case("2b") => Preset::gemma2_2b(),
        Some(a) if !["gemma2", "gemma3", "gemma4"].contains(&a.as_str()) => {
            bail!("unknown architecture `{a}`; synth supports: gemma3, gemma2, gemma4")
        }
        Some(a) => {
            let p = Preset::by_name(&args.preset)?;
            if p.arch != a {
                bail!("preset `{}` is a {} model, not {a}", args.preset, p.arch);
            }
            p
        }
        None => Preset::by_name(&args.preset)?,
    };
    if args.mmproj {
        return synth_mmproj(args, &preset);
    }
    let ftype = parse_ftype(args.quant.as_deref().unwrap_or("q4_k_m"))?;
    let donor = open_model(&args.tokenizer_from, "tokenizer donor")?;
    let pending = PendingFile::create(&args.output)?;
    let start = Instant::now();
    let n_tensors = preset.tensor_specs(1).len();
    let mut report = progress(n_tensors, args.quiet);
    let w = with_threads(args.threads, || {
        ::convert::synth_with(&preset, ftype, &donor, args.seed, &mut report)
    })??;
    let bytes = pending.commit(&w)?;
    eprintln!(
        "synthesized {} {} ({ftype}, seed {}) in {:.1} s",
        preset.arch,
        preset.size_label,
        args.seed,
        start.elapsed().as_secs_f64()
    );
    println!(
        "wrote {} ({:.1} MiB, {n_tensors} tensors, {ftype})",
        args.output.display(),
        bytes as f64 / (1024.0 * 1024.0)
    );
    Ok(ExitCode::SUCCESS)
}

/// `hearth synth --mmproj`: a random Gemma 3 vision projector for `preset`'s
/// text width.
fn synth_mmproj(args: &SynthArgs, preset: &Preset) -> Result<ExitCode> {
    if preset.arch != "gemma3" {
        // Gemma 4's and Gemma 2's projectors are not SigLIP-into-Gemma-3's.
        bail!(
            "--mmproj writes a Gemma 3 vision projector; preset `{}` is {}",
            preset.name,
            preset.arch
        );
    }
    let ty = match args.quant.as_deref().unwrap_or("f16") {
        "f16" => ::convert::GgmlType::F16,
        "bf16" => ::convert::GgmlType::BF16,
        "f32" => ::convert::GgmlType::F32,
        "q8_0" => ::convert::GgmlType::Q8_0,
        other => bail!("a vision projector's matrices are f16, bf16, f32 or q8_0, not `{other}`"),
    };
    let vision = ::convert::VisionPreset::gemma3(preset.hidden);
    let pending = PendingFile::create(&args.output)?;
    let start = Instant::now();
    let n_tensors = 3 + 16 * vision.layers + 4;
    let mut report = progress(n_tensors, args.quiet);
    let w = with_threads(args.threads, || {
        ::convert::synth_vision(&vision, ty, args.seed, &mut report)
    })??;
    let bytes = pending.commit(&w)?;
    eprintln!(
        "synthesized a Gemma 3 vision projector into width {} ({ty}, seed {}) in {:.1} s",
        preset.hidden,
        args.seed,
        start.elapsed().as_secs_f64()
    );
    println!(
        "wrote {} ({:.1} MiB, {n_tensors} tensors, {ty})",
        args.output.display(),
        bytes as f64 / (1024.0 * 1024.0)
    );
    Ok(ExitCode::SUCCESS)
}
