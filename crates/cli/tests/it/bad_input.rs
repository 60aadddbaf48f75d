//! Bad input to the real `hearth` binary: every case must exit non-zero with a
//! short error on stderr that names the problem, and never panic.

use gguf::{GgmlType, GgufFile, GgufWriter, MetaValue};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma3/model-f32.gguf"
);

fn tiny_bytes() -> Vec<u8> {
    std::fs::read(TINY).expect("read the tiny fixture")
}

/// Run `hearth ARGS` with `stdin` piped in; HOME points into a temp dir so no
/// user cache is touched.
fn hearth(home: &Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .env("HOME", home)
        .env("HEARTH_HOME", home.join("hearth"))
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hearth");
    {
        let mut sin = child.stdin.take().expect("stdin");
        // The binary may exit before reading; a broken pipe here is fine.
        let _ = sin.write_all(stdin);
    }
    child.wait_with_output().expect("wait for hearth")
}

/// Assert a clean failure whose stderr contains one of `needles`; returns stderr.
#[track_caller]
fn fails_with(out: &Output, needles: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("stderr: {stderr}");
    assert!(
        !out.status.success(),
        "expected failure, got success; stderr:\n{stderr}"
    );
    assert!(
        !stderr.contains("panicked"),
        "hearth panicked; stderr:\n{stderr}"
    );
    assert!(
        needles.iter().any(|n| stderr.contains(n)),
        "stderr does not mention any of {needles:?}:\n{stderr}"
    );
    let error_lines: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
    assert!(
        !error_lines.is_empty() && error_lines.len() <= 2,
        "expected one error line; stderr:\n{stderr}"
    );
    assert!(stderr.len() < 2000, "error too long:\n{stderr}");
    stderr
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write temp file");
    p
}

/// Copy the tiny model through a writer, letting `edit` change metadata and
/// tensors on the way.
fn rewrite(
    edit_meta: impl Fn(&str, &MetaValue) -> MetaValue,
    edit_tensor: impl Fn(&gguf::TensorInfo, &[u8]) -> (GgmlType, Vec<u64>, Vec<u8>),
) -> Vec<u8> {
    let f = GgufFile::open(TINY).expect("open tiny");
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        w.set(k.clone(), edit_meta(k, v));
    }
    for t in f.tensors() {
        let (ty, dims, data) = edit_tensor(t, f.tensor_data(t));
        w.add_tensor(t.name.clone(), &dims, ty, data)
            .expect("add tensor");
    }
    w.to_bytes()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

#[test]
fn truncated_gguf() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = tiny_bytes();
    for len in [3, 100, bytes.len() / 2] {
        let p = write(dir.path(), &format!("cut{len}.gguf"), &bytes[..len]);
        let needles = ["truncated", "outside the file", "not a GGUF"];
        let e = fails_with(
            &hearth(
                dir.path(),
                &["complete", "-m", s(&p), "-p", "hi", "-n", "1"],
                b"",
            ),
            &needles,
        );
        assert!(e.contains(s(&p)), "error does not name the file:\n{e}");
        fails_with(&hearth(dir.path(), &["inspect", s(&p)], b""), &needles);
    }
}

#[test]
fn wrong_magic() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = tiny_bytes();
    bytes[..4].copy_from_slice(b"GGML");
    let p = write(dir.path(), "magic.gguf", &bytes);
    fails_with(
        &hearth(
            dir.path(),
            &["complete", "-m", s(&p), "-p", "hi", "-n", "1"],
            b"",
        ),
        &["not a GGUF"],
    );
    fails_with(
        &hearth(dir.path(), &["inspect", s(&p)], b""),
        &["not a GGUF"],
    );
}

#[test]
fn tensor_offset_past_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = tiny_bytes();
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    // The last tensor's offset field: the u64 just before the data section's
    // padding, found by searching the header for the name and skipping its info.
    let last = f.tensors().iter().max_by_key(|t| t.offset).unwrap().clone();
    let name_at = bytes
        .windows(last.name.len() + 8)
        .position(|w| {
            w[..8] == (last.name.len() as u64).to_le_bytes() && &w[8..] == last.name.as_bytes()
        })
        .expect("find the tensor name");
    let offset_at = name_at + 8 + last.name.len() + 4 + 8 * last.dims.len() + 4;
    assert_eq!(
        u64::from_le_bytes(bytes[offset_at..offset_at + 8].try_into().unwrap()),
        last.offset
    );
    let past = (f.file_len() - f.data_offset()).div_ceil(f.alignment()) * f.alignment();
    bytes[offset_at..offset_at + 8].copy_from_slice(&past.to_le_bytes());
    let p = write(dir.path(), "offset.gguf", &bytes);
    for args in [
        vec!["complete", "-m", s(&p), "-p", "hi", "-n", "1"],
        vec!["inspect", s(&p)],
    ] {
        let e = fails_with(&hearth(dir.path(), &args, b""), &["outside the file"]);
        assert!(
            e.contains(&last.name),
            "error does not name the tensor:\n{e}"
        );
    }
}

#[test]
fn unknown_architecture() {
    let dir = tempfile::tempdir().unwrap();
    let f = GgufFile::open(TINY).unwrap();
    let arch = f.architecture().unwrap().to_string();
    let bytes = {
        let f = GgufFile::open(TINY).unwrap();
        let mut w = GgufWriter::new();
        for (k, v) in f.metadata() {
            let k = match k.strip_prefix(&format!("{arch}.")) {
                Some(rest) => format!("llama9.{rest}"),
                None => k.clone(),
            };
            w.set(k, v.clone());
        }
        w.set("general.architecture", MetaValue::String("llama9".into()));
        for t in f.tensors() {
            w.add_tensor(t.name.clone(), &t.dims, t.ty, f.tensor_data(t).to_vec())
                .unwrap();
        }
        w.to_bytes()
    };
    let p = write(dir.path(), "llama9.gguf", &bytes);
    let e = fails_with(
        &hearth(
            dir.path(),
            &["complete", "-m", s(&p), "-p", "hi", "-n", "1"],
            b"",
        ),
        &["llama9"],
    );
    assert!(e.contains("architecture"), "{e}");
}

#[test]
fn unsupported_tensor_type() {
    let dir = tempfile::tempdir().unwrap();
    let f = GgufFile::open(TINY).unwrap();
    // A 2-D weight whose rows are a whole number of Q8_1 blocks.
    let victim = f
        .tensors()
        .iter()
        .find(|t| t.name.ends_with("attn_q.weight") && t.dims[0] % 32 == 0)
        .or_else(|| {
            f.tensors()
                .iter()
                .find(|t| t.dims.len() == 2 && t.dims[0] % 32 == 0)
        })
        .expect("a 2-D weight")
        .name
        .clone();
    for ty in [GgmlType::Q8_1, GgmlType::I8] {
        let bytes = rewrite(
            |_, v| v.clone(),
            |t, data| {
                if t.name == victim {
                    let n = ty.row_bytes(t.dims[0]).unwrap() * t.n_rows();
                    (ty, t.dims.clone(), vec![0u8; n as usize])
                } else {
                    (t.ty, t.dims.clone(), data.to_vec())
                }
            },
        );
        let p = write(dir.path(), &format!("{ty}.gguf"), &bytes);
        let e = fails_with(
            &hearth(
                dir.path(),
                &["complete", "-m", s(&p), "-p", "hi", "-n", "1"],
                b"",
            ),
            &[&victim],
        );
        assert!(
            e.contains(ty.name()),
            "error does not name the type {ty}:\n{e}"
        );
    }
}

#[test]
fn missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("no-such-model.gguf");
    for args in [
        vec!["complete", "-m", s(&p), "-p", "hi", "-n", "1"],
        vec!["inspect", s(&p)],
        vec!["tokenize", "-m", s(&p), "hello"],
    ] {
        let out = hearth(dir.path(), &args, b"");
        let e = fails_with(&out, &[s(&p)]);
        assert!(e.trim().lines().count() <= 2, "not one line:\n{e}");
    }
}

/// `synth` refuses combinations it cannot write, before writing anything.
#[test]
fn synth_refuses_mismatched_presets() {
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("out.gguf");
    let o = s(&out_file);
    let cases: [(&[&str], &str); 3] = [
        (
            &["synth", "--preset", "gemma4-e2b", "--mmproj", "-o", o],
            "Gemma 3 vision projector",
        ),
        (
            &[
                "synth",
                "--arch",
                "gemma3",
                "--preset",
                "gemma4-e4b",
                "-o",
                o,
            ],
            "is a gemma4 model",
        ),
        (&["synth", "--preset", "gemma4-e8b", "-o", o], "gemma4-e8b"),
    ];
    for (args, needle) in cases {
        fails_with(&hearth(dir.path(), args, b""), &[needle]);
        assert!(!out_file.exists(), "{args:?} wrote a file");
    }
}

#[test]
fn prompt_longer_than_context() {
    let dir = tempfile::tempdir().unwrap();
    let long = "the quick brown fox jumps over the lazy dog ".repeat(20);
    let out = hearth(
        dir.path(),
        &["complete", "-m", TINY, "-c", "16", "-p", &long, "-n", "1"],
        b"",
    );
    let e = fails_with(&out, &["context"]);
    assert!(
        e.contains("16"),
        "error does not give the context size:\n{e}"
    );
}

/// `--kv-cache` takes f16, f32 and q8_0 (any case), the session line names
/// the type in use, and a type it does not know is named in the error.
#[test]
fn kv_cache_types() {
    let dir = tempfile::tempdir().unwrap();
    for kv in ["f16", "f32", "F16", "q8_0", "q3"] {
        let out = hearth(
            dir.path(),
            &[
                "complete",
                "-m",
                TINY,
                "--kv-cache",
                kv,
                "-p",
                "hi",
                "-n",
                "3",
                "--json",
            ],
            b"",
        );
        if kv == "q3" {
            fails_with(&out, &["unknown KV cache type `q3` (f16, f32 or q8_0)"]);
            continue;
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "--kv-cache {kv} failed:\n{stderr}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        assert!(v.is_object(), "--kv-cache {kv}: {v}");
        // The session line names the type the cache holds.
        let named = format!(" MiB {},", kv.to_ascii_lowercase());
        assert!(stderr.contains(&named), "--kv-cache {kv}: {stderr}");
    }
}

#[test]
fn invalid_utf8_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let out = hearth(
        dir.path(),
        &["complete", "-m", TINY, "-n", "1"],
        &[0x66, 0xff, 0xfe],
    );
    fails_with(&out, &["stdin is not valid UTF-8"]);
}

#[test]
fn tokenize_works() {
    let dir = tempfile::tempdir().unwrap();
    let out = hearth(dir.path(), &["tokenize", "-m", TINY, "hello"], b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tokenize failed:\n{stderr}");
    let ids: Vec<u32> = serde_json::from_slice(&out.stdout).expect("a JSON array of ids");
    assert!(!ids.is_empty());
}

/// Weights in the lattice IQ types made of any bits (scales that are NaN,
/// infinite or subnormal included) load and run, or stop with one line
/// that says why: never a panic. Every weight whose rows are whole
/// super-blocks of the tiny Gemma 3 (hidden 256) is rewritten.
#[test]
fn lattice_weights_of_any_bits_run_or_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/tiny/gemma3_h256/model-f32.gguf"
    );
    let f = GgufFile::open(src).expect("open the tiny h256 model");
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rewritten = 0;
    for ty in GgmlType::LATTICE {
        let mut w = GgufWriter::new();
        for (k, v) in f.metadata() {
            w.set(k.clone(), v.clone());
        }
        for t in f.tensors() {
            let whole = t.dims.len() == 2 && t.dims[0] % 256 == 0;
            let (tty, data) = if whole {
                rewritten += 1;
                let n = (ty.row_bytes(t.dims[0]).unwrap() * t.n_rows()) as usize;
                let bits: Vec<u8> = (0..n)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        (seed >> 32) as u8
                    })
                    .collect();
                (ty, bits)
            } else {
                (t.ty, f.tensor_data(t).to_vec())
            };
            w.add_tensor(t.name.clone(), &t.dims, tty, data).unwrap();
        }
        let p = write(dir.path(), &format!("{ty}.gguf"), &w.to_bytes());
        // A prompt long enough for the batched product, then decoding.
        let prompt = "the quick brown fox ".repeat(16);
        let out = hearth(
            dir.path(),
            &[
                "complete",
                "-m",
                s(&p),
                "-p",
                &prompt,
                "-n",
                "4",
                "--temp",
                "0",
            ],
            b"",
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked"),
            "{ty}: hearth panicked:\n{stderr}"
        );
        if !out.status.success() {
            let errors = stderr.lines().filter(|l| l.contains("error")).count();
            assert_eq!(errors, 1, "{ty}: not one error line:\n{stderr}");
        }
    }
    assert!(rewritten >= 7 * 4, "only {rewritten} weights rewritten");
}
