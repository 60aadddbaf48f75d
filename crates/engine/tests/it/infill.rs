//! Fill-in-the-middle prompts on the tiny CodeGemma (tests/fixtures/tiny/
//! codegemma, `tools/make_infill_cases.py`): the prompt ids equal those
//! llama.cpp's server evaluated for the same `/infill` request under the
//! same settings, case by case (prefix and suffix, empty parts, a middle
//! already begun, control-token text, the project's files, truncation,
//! the suffix-first layout).

use hearth_engine::{
    Engine, Infill, InfillFile, InfillLayout, PromptInput, PromptRequest, RunOptions,
};
use serde_json::Value;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny/codegemma")
}

/// The engine as llama-server `server` was started: its context and batch.
fn engine(server: &Value) -> Engine {
    let opts = RunOptions {
        threads: Some(1),
        ctx: Some(server["n_ctx"].as_u64().unwrap() as usize),
        batch: Some(server["n_batch"].as_u64().unwrap() as usize),
        ..RunOptions::default()
    };
    Engine::load(dir().join("model-f32.gguf"), &opts).unwrap()
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

#[test]
fn infill_prompts_equal_llama_cpp_servers() {
    let cases: Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("infill_cases.json")).unwrap())
            .unwrap();
    let servers = &cases["servers"];
    let engines: std::collections::HashMap<&str, Engine> = ["A", "B", "C"]
        .into_iter()
        .map(|k| (k, engine(&servers[k])))
        .collect();
    let list = cases["cases"].as_array().unwrap();
    assert!(list.len() >= 10);
    for case in list {
        let (name, server) = (text(case, "name"), text(case, "server"));
        let req = &case["request"];
        let extra: Vec<InfillFile> = req["input_extra"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|f| InfillFile {
                        filename: f
                            .get("filename")
                            .and_then(Value::as_str)
                            .unwrap_or("tmp")
                            .into(),
                        text: text(f, "text").into(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let s = &servers[server];
        let reserve = s["n_predict"]
            .as_i64()
            .filter(|n| *n >= 0)
            .map(|n| n as usize);
        let infill = Infill {
            prefix: text(req, "input_prefix"),
            suffix: text(req, "input_suffix"),
            extra: &extra,
            middle: text(req, "prompt"),
            layout: InfillLayout {
                suffix_first: s["spm_infill"].as_bool().unwrap(),
                reserve,
            },
        };
        let request = PromptRequest {
            input: PromptInput::Infill(infill),
            images: &[],
            clips: &[],
        };
        let got = engines[server].prompt(&request).unwrap().ids;
        let want: Vec<u32> = case["prompt_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(got, want, "case {name}");
    }
}

/// A model without fill-in-the-middle tokens refuses a FIM prompt, saying
/// what it lacks.
#[test]
fn a_model_without_fim_tokens_refuses() {
    let model = dir().join("../gemma1/model-f32.gguf");
    let engine = Engine::load(
        model,
        &RunOptions {
            threads: Some(1),
            ..RunOptions::default()
        },
    )
    .unwrap();
    let infill = Infill {
        prefix: "a",
        suffix: "b",
        extra: &[],
        middle: "",
        layout: InfillLayout::default(),
    };
    let request = PromptRequest {
        input: PromptInput::Infill(infill),
        images: &[],
        clips: &[],
    };
    let e = engine.prompt(&request).unwrap_err().to_string();
    assert!(e.contains("fill-in-the-middle"), "{e}");
}
