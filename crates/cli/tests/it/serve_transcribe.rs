//! OpenAI's audio API on the tiny Gemma 4 audio model: three espeak-ng
//! clips (one of 37 s, two windows) through the official `openai` client
//! in every response format, each window's text the text `hearth complete`
//! gives for that window and the same prompt, the whole the text `hearth
//! transcribe` gives; and a model that does not hear refused.

use crate::serve_common::{python_with, Server};
use engine::transcribe::{AudioTask, Transcription};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const CTX: &str = "2048";

fn fixture(name: &str) -> String {
    format!("{ROOT}/tests/fixtures/{name}")
}

/// The tiny model's text GGUF and its `mmproj` with the audio encoder.
fn model_files() -> (String, String) {
    let dir = fixture("tiny/gemma4_audio");
    (
        format!("{dir}/model-f32.gguf"),
        format!("{dir}/mmproj-f32.gguf"),
    )
}

/// `hearth ARGS` on the tiny model, its stdout (which must succeed).
fn hearth(args: &[&str]) -> String {
    let (model, mmproj) = model_files();
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(&args[..1])
        .args([
            "--model", &model, "--mmproj", &mmproj, "--ctx", CTX, "-t", "2",
        ])
        .args(&args[1..])
        .output()
        .expect("run hearth");
    assert!(
        out.status.success(),
        "hearth {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The transcription prompt of one window as the server renders it, with
/// the marker where the clip goes.
fn rendered_prompt(s: &Server, instruction: &str) -> String {
    // A tenth of a second of silence stands for the clip: only the
    // rendered text is kept.
    let silence = base64_wav();
    let body = json!({"messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": silence, "format": "wav"}},
        {"type": "text", "text": instruction},
    ]}]});
    let r = s.post("/apply-template", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["prompt"].as_str().expect("prompt").to_string()
}

fn base64_wav() -> String {
    use base64::Engine as _;
    let clip = media::Clip::from_samples(vec![0.0; 1600]);
    base64::engine::general_purpose::STANDARD.encode(clip.to_wav())
}

/// Each window of `clip` (cut as the server cut it: `segments`' times)
/// through `hearth complete` with `prompt`: what the server's segments
/// must say.
fn complete_each_window(clip: &str, prompt: &str, segments: &[Value], dir: &Path) -> Vec<String> {
    let bytes = std::fs::read(clip).unwrap();
    let whole = media::Clip::decode_whole(&bytes, 600, media::DEFAULT_MAX_DECODE_BYTES).unwrap();
    let windows = whole.windows();
    assert_eq!(windows.len(), segments.len(), "{clip}: {segments:?}");
    let task = Transcription {
        task: AudioTask::Transcribe,
        language: Some("en".into()),
        prompt: None,
    };
    let rate = f64::from(media::SAMPLE_RATE);
    windows
        .into_iter()
        .zip(segments)
        .enumerate()
        .map(|(i, (range, seg))| {
            assert_eq!(seg[0].as_f64().unwrap(), range.start as f64 / rate, "{seg}");
            assert_eq!(seg[1].as_f64().unwrap(), range.end as f64 / rate, "{seg}");
            let file = dir.join(format!("window{i}.wav"));
            std::fs::write(&file, whole.window(range).to_wav()).unwrap();
            let out = hearth(&[
                "complete",
                "--prompt",
                prompt,
                "--audio",
                file.to_str().unwrap(),
                "--temp",
                "0",
                "-n",
                &engine::transcribe::WINDOW_MAX_TOKENS.to_string(),
                "--json",
            ]);
            let v: Value = serde_json::from_str(out.trim()).expect("complete's JSON");
            task.answer_text(v["text"].as_str().unwrap())
        })
        .collect()
}

#[test]
fn transcripts_equal_complete_and_transcribe_in_every_format() {
    let (model, mmproj) = model_files();
    let mut s = Server::start(&model, &["--mmproj", &mmproj, "--ctx", CTX, "-t", "2"]);
    let clips: Vec<String> = ["speech.wav", "numbers.opus", "long.opus"]
        .iter()
        .map(|c| fixture(&format!("audio/{c}")))
        .collect();
    let python = python_with(&[("openai", "openai>=1.40,<3")]);
    let out = Command::new(&python)
        .arg(Path::new(ROOT).join("crates/server/tests/openai_transcribe.py"))
        .env("HEARTH_BASE_URL", format!("http://{}/v1", s.addr))
        .env("HEARTH_CLIPS", clips.join(":"))
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("run openai_transcribe.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all openai transcription checks passed"),
        "openai_transcribe.py failed\nstdout:\n{stdout}\nstderr:\n{}\nserver:\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.stderr()
    );
    let task = Transcription {
        task: AudioTask::Transcribe,
        language: Some("en".into()),
        prompt: None,
    };
    let prompt = rendered_prompt(&s, &task.instruction());
    let dir = tempfile::tempdir().unwrap();
    let results: Vec<Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), clips.len(), "{stdout}");
    for (clip, got) in clips.iter().zip(&results) {
        let segments = got["segments"].as_array().unwrap();
        let texts = complete_each_window(clip, &prompt, segments, dir.path());
        for (seg, want) in segments.iter().zip(&texts) {
            assert_eq!(seg[2].as_str().unwrap(), want, "{clip}: a window's text");
        }
        let cli = hearth(&["transcribe", clip, "--language", "en", "--format", "json"]);
        let cli: Value = serde_json::from_str(&cli).expect("transcribe's JSON");
        assert_eq!(cli["text"], got["text"], "{clip}: hearth transcribe");
    }
    let long = &results[2];
    assert!(long["duration"].as_f64().unwrap() > 30.0, "{long}");
    assert_eq!(long["segments"].as_array().unwrap().len(), 2, "{long}");
    s.assert_alive();
    s.sigterm();
    assert!(s.wait_exit(Duration::from_secs(30)).success());
}

#[test]
fn a_model_that_does_not_hear_is_refused_and_forms_are_checked() {
    let mut s = Server::start(&fixture("tiny/gemma3/model-f32.gguf"), &["--ctx", "128"]);
    let wav = std::fs::read(fixture("audio/speech.wav")).unwrap();
    let form = multipart(&[("file", &wav), ("model", b"whisper-1")]);
    let refused = s.request(
        "POST",
        "/v1/audio/transcriptions",
        &[("Content-Type", "multipart/form-data; boundary=XyZ")],
        &form,
    );
    let msg = refused.assert_error(400);
    assert!(msg.contains("does not hear"), "{msg}");
    let json_body = s.post("/v1/audio/transcriptions", "{}");
    let msg = json_body.assert_error(415);
    assert!(msg.contains("multipart/form-data"), "{msg}");
    s.assert_alive();
    s.sigterm();
    assert!(s.wait_exit(Duration::from_secs(30)).success());
}

/// A `multipart/form-data` body with boundary `XyZ`.
pub(crate) fn multipart(fields: &[(&str, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in fields {
        let file = if *name == "file" {
            "; filename=\"clip.wav\""
        } else {
            ""
        };
        body.extend_from_slice(
            format!("--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"{file}\r\n\r\n")
                .as_bytes(),
        );
        body.extend_from_slice(value);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"--XyZ--\r\n");
    body
}
