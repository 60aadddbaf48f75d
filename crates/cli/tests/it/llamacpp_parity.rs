//! End-to-end checks of the real binary on the real model (Gemma 3 270M
//! Q4_K_M) against llama.cpp's reference outputs in tests/fixtures/ref.
//!
//! The model file comes from `scripts/fetch-model.sh` (or `hearth pull
//! gemma3-270m`); `HEARTH_MODEL` may point at it instead. A missing file fails
//! the tests: they never pass by skipping.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("HEARTH_MODEL") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HEARTH_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/hearth")
        });
    let p = home.join("models/gemma-3-270m-q4_k_m.gguf");
    assert!(
        p.is_file(),
        "the real model is missing at {}: run scripts/fetch-model.sh (or set HEARTH_MODEL)",
        p.display()
    );
    p
}

fn fixture(name: &str) -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/ref")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn hearth(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hearth {args:?} failed: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    String::from_utf8(out.stdout).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn tokenize_matches_llamacpp() {
    let model = model_path();
    let m = model.to_str().unwrap();
    let cases = fixture("tokenize.json");
    let mut checked = 0;
    for case in cases["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        for (key, flags) in [
            ("ids_bos_special", vec![]),
            ("ids_nobos_special", vec!["--no-bos"]),
            ("ids_bos_nospecial", vec!["--no-special"]),
            ("ids_nobos_nospecial", vec!["--no-bos", "--no-special"]),
        ] {
            let mut args = vec!["tokenize", "-m", m];
            args.extend(flags);
            args.push("--");
            args.push(text);
            let got: Vec<u32> = serde_json::from_str(hearth(&args).trim()).unwrap();
            assert_eq!(got, ids(&case[key]), "{} / {key}", case["name"]);
            checked += 1;
        }
    }
    eprintln!("tokenize: {checked} cases identical to llama.cpp");
    assert!(checked >= 60);
}

/// llama.cpp's 8-bit activation quantization makes its logits move by a few
/// tenths under last-bit changes of its inputs (see `Precision` in the model
/// crate), so where its top-2 margin is that small the greedy choice is a coin
/// toss between engines. Below this margin a different token is accepted.
const NEAR_TIE: f64 = 0.35;

/// `--precise` computes the model's exact function in f32; its logits may
/// differ from transformers' f32 ones only by rounding (1.3e-4 at most measured on AVX2).
const PRECISE_TOLERANCE: f64 = 5e-4;

/// Greedy continuations agree with llama.cpp's up to its first near-tie.
fn greedy_matches_llamacpp(extra: &[&str]) {
    let model = model_path();
    let m = model.to_str().unwrap();
    let reference = fixture("greedy.json");
    for case in reference["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let prompt = case["prompt"].as_str().unwrap();
        let want = ids(&case["generated_ids"]);
        let top1 = floats(&case["step_top1_logit"]);
        let top2 = floats(&case["step_top2_logit"]);
        let margins: Vec<f64> = top1.iter().zip(&top2).map(|(a, b)| a - b).collect();

        let mut args = vec![
            "complete", "-m", m, "-p", prompt, "-n", "48", "--temp", "0", "--json",
        ];
        args.extend(extra);
        let out: Value = serde_json::from_str(hearth(&args).lines().last().unwrap()).unwrap();
        assert_eq!(
            ids(&out["prompt_ids"]),
            ids(&case["prompt_ids"]),
            "{name}: prompt ids"
        );
        let got = ids(&out["generated_ids"]);
        let first_diff = want.iter().zip(&got).position(|(a, b)| a != b);
        let must_match = margins
            .iter()
            .position(|&m| m < NEAR_TIE)
            .unwrap_or(want.len());
        assert!(
            first_diff.is_none_or(|d| d >= must_match),
            "{name}: greedy differs at step {first_diff:?}, before llama.cpp's first near-tie at {must_match}; ours {got:?}"
        );
        eprintln!("{name}: greedy first difference from llama.cpp {first_diff:?} (its first near-tie at {must_match})");
    }
}

/// How far our teacher-forced logits are from the model's exact function.
struct TruthDistance {
    name: String,
    /// Mean and max |our logit - truth| of llama.cpp's token, per step.
    mean: f64,
    max: f64,
    /// The same mean for llama.cpp.
    llamacpp_mean: f64,
    /// Steps where our argmax is not the truth's, among those whose truth
    /// margin is above rounding.
    argmax_misses: usize,
    steps: usize,
}

/// Feed each of llama.cpp's greedy sequences and compare every step's logit
/// of llama.cpp's token, and our argmax, with the exact f32 function
/// (`greedy_truth.json`: transformers on the dequantized weights).
fn distance_from_truth(extra: &[&str]) -> Vec<TruthDistance> {
    let model = model_path();
    let m = model.to_str().unwrap();
    let truth = fixture("greedy_truth.json");
    let mut out = Vec::new();
    for case in truth["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap().to_string();
        let gen = ids(&case["generated_ids"]);
        let want = floats(&case["truth_logit_of_generated"]);
        let truth_top1 = ids(&case["truth_top1_id"]);
        let truth_margin: Vec<f64> = floats(&case["truth_top1_logit"])
            .iter()
            .zip(floats(&case["truth_top2_logit"]))
            .map(|(a, b)| a - b)
            .collect();
        let mut seq = ids(&case["prompt_ids"]);
        let n_prompt = seq.len();
        seq.extend(&gen[..gen.len() - 1]);
        let seq_arg = seq
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let mut args = vec!["logits", "-m", m, "--ids", &seq_arg, "--top", "20"];
        args.extend(extra);
        let rows: Vec<Value> = hearth(&args)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let mut diffs = Vec::new();
        let mut argmax_misses = 0;
        for (step, &tok) in gen.iter().enumerate() {
            let top: Vec<(u32, f64)> = rows[n_prompt - 1 + step]["top"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap()))
                .collect();
            let logit = top
                .iter()
                .find(|(id, _)| *id == tok)
                .unwrap_or_else(|| {
                    panic!("{name} step {step}: token {tok} not in our top 20 {top:?}")
                })
                .1;
            diffs.push((logit - want[step]).abs());
            if truth_margin[step] > 1e-3 && top[0].0 != truth_top1[step] {
                argmax_misses += 1;
            }
        }
        out.push(TruthDistance {
            name,
            mean: diffs.iter().sum::<f64>() / diffs.len() as f64,
            max: diffs.iter().copied().fold(0.0, f64::max),
            llamacpp_mean: case["llamacpp_vs_truth_mean_abs"].as_f64().unwrap(),
            argmax_misses,
            steps: gen.len(),
        });
    }
    for d in &out {
        eprintln!(
            "{}: |logit - truth| mean {:.5} max {:.5} (llama.cpp mean {:.3}); argmax differs from the truth's at {}/{} steps",
            d.name, d.mean, d.max, d.llamacpp_mean, d.argmax_misses, d.steps
        );
    }
    out
}

/// How much farther from the exact function than llama.cpp the default path
/// may be, pooled over the 336 steps of the 7 sequences. The 8-bit activation
/// path turns last-bit differences into tenths of a logit (see `Precision` in
/// the model crate), so its distance from the truth depends on the kernels'
/// reduction order: measured on one AVX2 machine, our scalar tier is 0.190
/// and our AVX2 tier 0.202 from the truth, llama.cpp (AVX-512 build) 0.186.
/// Per prompt the spread between our own tiers (0.25 vs 0.33 on code_python)
/// is larger than the gap to llama.cpp, so the bound is pooled; making every
/// tier compute the same numbers is the job of "The fastest engine on every
/// CPU" issue.
const POOLED_SLACK: f64 = 1.1;

/// The default (8-bit activation) path: greedy as llama.cpp's, and about as
/// far from the model's exact function as llama.cpp is.
#[test]
fn greedy_and_logits_match_llamacpp() {
    greedy_matches_llamacpp(&[]);
    let d = distance_from_truth(&[]);
    let steps: usize = d.iter().map(|d| d.steps).sum();
    let pooled = |f: fn(&TruthDistance) -> f64| {
        d.iter().map(|d| f(d) * d.steps as f64).sum::<f64>() / steps as f64
    };
    let (ours, llamacpp) = (pooled(|d| d.mean), pooled(|d| d.llamacpp_mean));
    eprintln!("pooled mean |logit - truth|: ours {ours:.4}, llama.cpp {llamacpp:.4}");
    assert!(
        ours <= POOLED_SLACK * llamacpp,
        "pooled mean |logit - truth| {ours:.4} vs llama.cpp's {llamacpp:.4}"
    );
    // A wrong architecture or kernel is off by whole units.
    for d in &d {
        assert!(d.max < 1.6, "{}: max |logit - truth| {}", d.name, d.max);
        assert!(
            d.argmax_misses * 10 <= d.steps,
            "{}: argmax misses {}",
            d.name,
            d.argmax_misses
        );
    }
}

/// `--precise` is the exact function to rounding, and picks its argmax.
#[test]
fn greedy_and_logits_match_llamacpp_precise() {
    greedy_matches_llamacpp(&["--precise"]);
    for d in distance_from_truth(&["--precise"]) {
        assert!(
            d.max < PRECISE_TOLERANCE,
            "{}: max |logit - truth| {} with --precise",
            d.name,
            d.max
        );
        assert_eq!(d.argmax_misses, 0, "{}: --precise argmax", d.name);
    }
}

#[test]
fn perplexity_within_one_percent_of_llamacpp() {
    let model = model_path();
    let text = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/ref/ppl.txt");
    let out = hearth(&[
        "perplexity",
        "-m",
        model.to_str().unwrap(),
        "-f",
        text.to_str().unwrap(),
        "--chunk",
        "512",
    ]);
    let line = out
        .lines()
        .find(|l| l.starts_with("PPL = "))
        .expect("no PPL line");
    let ppl: f64 = line["PPL = ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let reference = fixture("ppl.json")["runs"]["kvf32_fa_off"]["final_ppl"]
        .as_f64()
        .unwrap();
    let rel = (ppl - reference).abs() / reference;
    eprintln!(
        "perplexity: ours {ppl:.4}, llama.cpp {reference:.4} (f32 KV), relative difference {:.3}%",
        rel * 100.0
    );
    assert!(rel < 0.01, "{line}");
}
