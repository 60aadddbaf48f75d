//! `hearth eval`: MT-Bench answering and judging (the work is in the eval
//! crate; this is flags, the progress bar and Ctrl-C).

use crate::commands::{load_engine, report_session};
use crate::{ModelArgs, SampleArgs};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use eval::fastchat::{self, Question};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What `hearth eval` does.
#[derive(Subcommand, Debug)]
pub enum EvalCommand {
    /// Answer MT-Bench's 80 questions (2 turns each) with FastChat's
    /// settings, onto the tape DIR/model_answer/NAME.jsonl.
    MtBench(Box<MtBenchArgs>),
    /// Grade answers with a judge model through an OpenAI-compatible API
    /// (FastChat's single-answer prompts), into DIR/model_judgment/.
    Judge(JudgeArgs),
    /// Average judgments as FastChat's show_result.py does and write
    /// DIR/summary.json and DIR/report.html.
    Report(ReportArgs),
    /// Grade answers blind in a local web page (judge `human:NAME`).
    Grade(GradeArgs),
}

/// `hearth eval report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Judgment files (FastChat's model_judgment format; any judge).
    #[arg(long, num_args = 1.., required = true)]
    judgments: Vec<PathBuf>,
    /// Answer files, to show the answers and compare raw with guarded.
    #[arg(long, num_args = 1..)]
    answers: Vec<PathBuf>,
    /// The output directory.
    #[arg(long)]
    out: PathBuf,
}

/// `hearth eval grade`.
#[derive(Args, Debug)]
pub struct GradeArgs {
    /// Answer files of the models to grade (their names stay hidden).
    #[arg(long, num_args = 1.., required = true)]
    answers: Vec<PathBuf>,
    /// The judgment file to append to (default: model_judgment/human_single.jsonl
    /// beside the answers' model_answer folder).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Your name in the judgments (default: $USER).
    #[arg(long)]
    grader: Option<String>,
    /// Port on 127.0.0.1.
    #[arg(long, default_value_t = eval::grade::DEFAULT_PORT)]
    port: u16,
    /// Orders the answers (the same seed gives the same order).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// `hearth eval mt-bench`.
#[derive(Args, Debug)]
pub struct MtBenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sample: SampleArgs,
    /// The output directory.
    #[arg(long)]
    out: PathBuf,
    /// The model's name on the tape (default: the model file's stem, with
    /// `+guard` when guards run).
    #[arg(long)]
    model_id: Option<String>,
    /// Guardrails for every turn: all, none, or a list.
    #[arg(long, value_name = "GUARDS", default_value = "none")]
    guard: guard::GuardSet,
    /// Questions answered at once (decoded together in one batch).
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Only these question ids (comma-separated, e.g. 81,104,119).
    #[arg(long, value_delimiter = ',')]
    questions: Vec<u32>,
    /// Continue an existing tape: questions already on it are skipped.
    #[arg(long)]
    resume: bool,
    /// A question file in FastChat's format instead of MT-Bench's own.
    #[arg(long)]
    question_file: Option<PathBuf>,
    /// New tokens per turn (FastChat: 1024).
    #[arg(long, default_value_t = eval::run::MAX_NEW_TOKENS)]
    max_tokens: usize,
}

/// `hearth eval judge`.
#[derive(Args, Debug)]
pub struct JudgeArgs {
    /// Answer files (FastChat's model_answer format).
    #[arg(long, num_args = 1.., required = true)]
    answers: Vec<PathBuf>,
    /// The judge's API base, e.g. http://127.0.0.1:8080/v1.
    #[arg(long)]
    judge_url: String,
    /// The judge model's name.
    #[arg(long)]
    judge_model: String,
    /// The environment variable holding the API key, if one is needed.
    #[arg(long, value_name = "VAR")]
    api_key_env: Option<String>,
    /// The output directory.
    #[arg(long)]
    out: PathBuf,
    /// Requests at once.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Attempts per judgment (with doubling waits) before it is written as
    /// `$ERROR$` (score -1; a re-run asks again).
    #[arg(long, default_value_t = 4)]
    attempts: u32,
    /// Seconds one request may take.
    #[arg(long, default_value_t = 300.0)]
    timeout: f64,
    /// Most tokens of one judgment (FastChat's judge: 2048; lower it for a
    /// small local judge that runs on until the limit).
    #[arg(long, default_value_t = 2048)]
    max_tokens: usize,
    /// Hold each judgment to a short explanation and then `Rating: [[n]]`
    /// (a `regex` constraint, which `hearth serve` and llama.cpp's server
    /// accept), so a small local judge always rates; not FastChat's setting.
    #[arg(long)]
    force_rating: bool,
}

/// Run `hearth eval ...`.
pub fn run(cmd: &EvalCommand) -> Result<ExitCode> {
    match cmd {
        EvalCommand::MtBench(a) => mt_bench(a),
        EvalCommand::Judge(a) => judge(a),
        EvalCommand::Report(a) => report(a),
        EvalCommand::Grade(a) => grade(a),
    }
}

fn report(a: &ReportArgs) -> Result<ExitCode> {
    use eval::fastchat::{read_jsonl, AnswerRow, JudgmentRow};
    let mut judgments = Vec::new();
    for p in &a.judgments {
        let (rows, torn) = read_jsonl::<JudgmentRow>(p)?;
        if let Some(line) = torn {
            eprintln!(
                "{}: line {line} is an unfinished write; skipped",
                p.display()
            );
        }
        judgments.extend(rows);
    }
    let mut answers = Vec::new();
    for p in &a.answers {
        let (rows, torn) = read_jsonl::<AnswerRow>(p)?;
        if let Some(line) = torn {
            eprintln!(
                "{}: line {line} is an unfinished write; skipped",
                p.display()
            );
        }
        answers.extend(rows);
    }
    let questions = fastchat::questions();
    let summary = eval::report::summarize(&judgments, &questions);
    if summary.models.is_empty() {
        eprintln!("no judgment with a score (rows scored -1 are dropped, as in show_result.py)");
    }
    let f = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.6}"));
    for (model, m) in &summary.models {
        println!(
            "{model}: average {:.6} (turn 1 {}, turn 2 {}), {} judgments",
            m.average,
            f(m.turn1),
            f(m.turn2),
            m.n
        );
    }
    let html = eval::report::render_html(&summary, &judgments, &answers, &questions);
    eval::report::write_report(&a.out, &summary, &html, |left| eprintln!("{left}"))?;
    eprintln!(
        "wrote {} and {}",
        a.out.join("summary.json").display(),
        a.out.join("report.html").display()
    );
    Ok(ExitCode::SUCCESS)
}

fn grade(a: &GradeArgs) -> Result<ExitCode> {
    let mut cfg = eval::grade::GradeConfig::new(a.answers.clone());
    if let Some(out) = &a.out {
        cfg.out = out.clone();
    }
    if let Some(g) = &a.grader {
        cfg.grader = g.clone();
    }
    cfg.port = a.port;
    cfg.seed = a.seed;
    eval::grade::serve(cfg)?;
    Ok(ExitCode::SUCCESS)
}

fn bar(total: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "{{elapsed_precise}} [{{bar:30}}] {{pos}}/{{len}} {what} · {{msg}} · ETA {{eta}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

fn mt_bench(a: &MtBenchArgs) -> Result<ExitCode> {
    if a.parallel == 0 {
        bail!("--parallel must be at least 1");
    }
    let questions = read_questions(a.question_file.as_deref())?;
    let engine = Arc::new(load_engine(&a.model, a.sample.params())?);
    report_session(&engine);
    let cfg = eval::run::RunConfig {
        model_id: model_id(a),
        out: a.out.clone(),
        guards: a.guard,
        parallel: a.parallel,
        questions: a.questions.clone(),
        resume: a.resume,
        max_tokens: a.max_tokens,
    };
    say_how_the_tape_ends(&cfg)?;
    let shared = engine::SharedChat::start(Arc::clone(&engine), a.parallel, None)
        .context("cannot start the decoding thread")?;
    let stop = stop_on_ctrl_c();
    let pb = bar(0, "questions");
    pb.enable_steady_tick(Duration::from_millis(500));
    let summary = eval::run::run(
        &questions,
        &cfg,
        || shared.clone(),
        &stop,
        |p| {
            pb.set_length(p.total as u64);
            pb.set_position(p.done as u64);
            pb.set_message(format!("{} tokens", p.tokens));
        },
    )?;
    pb.finish_and_clear();

    eprintln!(
        "{}: {} answered this run, {} already on the tape, {} left; {} tokens in {:.1} s ({:.1} tokens/s)",
        summary.tape.display(),
        summary.answered,
        summary.resumed,
        summary.left,
        summary.tokens,
        summary.seconds,
        summary.tokens as f64 / summary.seconds.max(1e-9)
    );
    Ok(if summary.left == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(130)
    })
}

/// The questions: MT-Bench's own, or those of `--question-file` (whole and
/// not empty).
fn read_questions(file: Option<&std::path::Path>) -> Result<Vec<Question>> {
    Ok(match file {
        None => fastchat::questions(),
        Some(p) => {
            let (q, torn) = fastchat::read_jsonl::<Question>(p)?;
            if torn.is_some() {
                bail!("{}: the last line is cut off", p.display());
            }
            if q.is_empty() {
                bail!("{}: no questions", p.display());
            }
            q
        }
    })
}

/// `--model-id`, else the model file's stem (`+guard` added with guards).
fn model_id(a: &MtBenchArgs) -> String {
    a.model_id.clone().unwrap_or_else(|| {
        let stem = std::path::Path::new(&a.model.model)
            .file_stem()
            .map_or_else(
                || a.model.model.clone(),
                |s| s.to_string_lossy().into_owned(),
            );
        if a.guard.is_empty() {
            stem
        } else {
            format!("{stem}+guard")
        }
    })
}

/// When resuming, says what an earlier run's crash left at the tape's end.
fn say_how_the_tape_ends(cfg: &eval::run::RunConfig) -> Result<()> {
    // Said now, not only at the end: a run killed again before it ends has
    // still told what the last one lost.
    let tape = eval::run::tape_path(cfg);
    if cfg.resume && tape.exists() {
        // Said before the repair (run() does it): a crash in between only
        // makes the next start say it again.
        let tail = fastchat::inspect_jsonl::<fastchat::AnswerRow>(&tape)?;
        if let Some(line) =
            fastchat::describe_tail(&tape, tail, "that question will be answered again")
        {
            eprintln!("{line}");
        }
    }
    Ok(())
}

/// First Ctrl-C: finish the questions in flight and stop (nothing is
/// lost; --resume continues). Second: quit now. The flag the first sets.
fn stop_on_ctrl_c() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let presses = Arc::new(AtomicU8::new(0));
    {
        let (stop, presses) = (Arc::clone(&stop), Arc::clone(&presses));
        let _ = ctrlc::set_handler(move || {
            if presses.fetch_add(1, Ordering::SeqCst) == 0 {
                stop.store(true, Ordering::SeqCst);
                eprintln!("\nstopping after the questions in flight (Ctrl-C again to quit now; --resume continues)");
            } else {
                std::process::exit(130);
            }
        });
    }
    stop
}

fn judge(a: &JudgeArgs) -> Result<ExitCode> {
    if !(a.timeout.is_finite() && a.timeout > 0.0) {
        bail!("--timeout must be a positive number of seconds");
    }
    for f in &a.answers {
        eval::judge::check_answers(f)?;
    }
    let api_key = match &a.api_key_env {
        None => None,
        Some(var) => Some(
            std::env::var(var)
                .with_context(|| format!("--api-key-env {var}: the variable is not set"))?,
        ),
    };
    let cfg = eval::judge::JudgeConfig {
        url: a.judge_url.clone(),
        model: a.judge_model.clone(),
        api_key,
        out: a.out.clone(),
        parallel: a.parallel.max(1),
        attempts: a.attempts.max(1),
        timeout: Duration::from_secs_f64(a.timeout),
        backoff: Duration::from_millis(500),
        max_tokens: a.max_tokens.max(1),
        force_rating: a.force_rating,
    };
    // Said before judge() repairs it: a crash in between only makes the next
    // start say it again.
    let judgments = eval::judge::judgment_path(&cfg);
    let tail = fastchat::inspect_jsonl::<fastchat::JudgmentRow>(&judgments)?;
    if let Some(line) =
        fastchat::describe_tail(&judgments, tail, "that judgment will be asked for again")
    {
        eprintln!("{line}");
    }
    let pb = bar(0, "judgments");
    let s = eval::judge::judge(&a.answers, &cfg, |done, total| {
        pb.set_length(total as u64);
        pb.set_position(done as u64);
    })?;
    pb.finish_and_clear();
    eprintln!(
        "{}: {} judged ({} without a rating, score -1), {} already there, {} failed; {} requests",
        eval::judge::judgment_path(&cfg).display(),
        s.judged,
        s.no_rating,
        s.cached,
        s.failed,
        s.requests
    );
    if s.failed > 0 {
        eprintln!(
            "error: {} judgment(s) failed after {} attempt(s), written with score -1 and asked again on a re-run; last error: {}",
            s.failed,
            cfg.attempts,
            s.last_error.as_deref().unwrap_or("unknown")
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
