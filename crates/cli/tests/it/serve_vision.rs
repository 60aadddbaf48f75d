//! `hearth serve` reads images: OpenAI `image_url` content parts with data
//! URLs (the official `openai` client, streamed and not), local files only
//! behind `--allow-file-images`, and every bad image a 400 that leaves the
//! server serving.

use crate::serve_common;

use base64::Engine as _;
use serve_common::{connect, parse_response, python_with, Server};
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn fixture(name: &str) -> String {
    format!("{ROOT}/tests/fixtures/tiny/gemma3_vision/{name}")
}

fn chat_with_image(url: &str) -> String {
    serde_json::json!({
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Describe"},
            {"type": "image_url", "image_url": {"url": url}},
        ]}],
        "max_tokens": 4,
        "temperature": 0,
    })
    .to_string()
}

fn data_url(bytes: &[u8]) -> String {
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// A 4000×3000 JPEG about the size a phone camera writes (a few MB): smooth
/// shading with fine grain, at quality 90.
fn phone_photo() -> Vec<u8> {
    let (w, h) = (4000u32, 3000u32);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let grain = (seed % 24) as u32;
        let r = (x * 200 / w + grain) as u8;
        let g = (y * 180 / h + grain) as u8;
        let b = (((x + y) / 40) % 64 + 100 + grain) as u8;
        image::Rgb([r, g, b])
    });
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
        .encode_image(&img)
        .unwrap();
    out
}

#[test]
fn image_parts_are_read_and_bad_ones_refused() {
    let mut s = Server::start(&fixture(""), &["--ctx", "128", "-t", "2"]);
    let png = std::fs::read(fixture("img_a.png")).unwrap();

    // The image settings in force, as read from the checkpoint's files.
    let models = s.request("GET", "/v1/models", &[], b"").json();
    let image = &models["data"][0]["meta"]["image"];
    assert_eq!(image["max_tokens_per_image"], 16, "{models}");
    assert_eq!(image["image_size"], 64, "{models}");

    let ok = s.post("/v1/chat/completions", &chat_with_image(&data_url(&png)));
    assert_eq!(ok.status, 200, "{}", ok.text());
    let v = ok.json();
    // Text, the marker's framing and the image's 16 soft tokens.
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 16, "{v}");

    let bad = [
        ("data:image/png;base64,", "cannot decode"),
        (&*data_url(&png[..png.len() / 2]), "cannot decode"),
        ("data:image/png;base64,@@@", "base64"),
        ("data:image/png,rawbytes", "base64"),
        ("https://example.com/cat.png", "does not fetch"),
        (
            &*format!("file://{}", fixture("img_a.png")),
            "--allow-file-images",
        ),
    ];
    for (url, says) in bad {
        let r = s.post("/v1/chat/completions", &chat_with_image(url));
        let msg = r.assert_error(400);
        assert!(msg.contains(says), "{url}: {msg}");
    }
    // A part without its URL, and too many images.
    let no_url = r#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#;
    s.post("/v1/chat/completions", no_url).assert_error(400);
    let nine: Vec<_> = (0..9)
        .map(|_| serde_json::json!({"type": "image_url", "image_url": {"url": data_url(&png)}}))
        .collect();
    let many = serde_json::json!({"messages": [{"role": "user", "content": nine}]}).to_string();
    s.post("/v1/chat/completions", &many).assert_error(400);
    s.assert_alive();

    // The official client, whole and streamed, and with a phone's photo
    // under the default body limit.
    let photo = tempfile::NamedTempFile::new().unwrap();
    let jpeg = phone_photo();
    eprintln!("a 4000x3000 JPEG of {} bytes", jpeg.len());
    std::fs::write(photo.path(), &jpeg).unwrap();
    let python = python_with(&[("openai", "openai>=1.40,<3")]);
    let out = Command::new(&python)
        .arg(Path::new(ROOT).join("crates/server/tests/openai_vision.py"))
        .env("HEARTH_BASE_URL", format!("http://{}/v1", s.addr))
        .env("HEARTH_IMAGE", fixture("img_b.png"))
        .env("HEARTH_PHOTO", photo.path())
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("run openai_vision.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "openai_vision.py failed\nstdout:\n{stdout}\nstderr:\n{}\nserver:\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.stderr()
    );
    assert!(stdout.contains("all openai vision checks passed"));
    // 100 MB said up front: a 413 that names the limit and the flag, before
    // the body is sent; the server goes on.
    let mut c = connect(&s.addr).unwrap();
    c.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 104857600\r\n\r\n{\"messages\":")
        .unwrap();
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    let msg = parse_response(&raw).unwrap().assert_error(413);
    assert!(
        msg.contains("33554432") && msg.contains("--body-limit"),
        "{msg}"
    );
    s.assert_alive();
    s.sigterm();
    assert!(s.wait_exit(Duration::from_secs(30)).success());
}

#[test]
fn file_urls_behind_the_flag_and_text_models_refuse_images() {
    let mut s = Server::start(
        &fixture(""),
        &["--ctx", "128", "-t", "1", "--allow-file-images"],
    );
    let url = format!("file://{}", fixture("img_c.png"));
    let r = s.post("/v1/chat/completions", &chat_with_image(&url));
    assert_eq!(r.status, 200, "{}", r.text());
    let missing = s.post(
        "/v1/chat/completions",
        &chat_with_image("file:///no/such/image.png"),
    );
    assert!(missing.assert_error(400).contains("Cannot read"));
    s.sigterm();
    assert!(s.wait_exit(Duration::from_secs(30)).success());

    let mut text = Server::start(&fixture("model-f32.gguf"), &["--ctx", "64", "-t", "1"]);
    let png = std::fs::read(fixture("img_a.png")).unwrap();
    let r = text.post("/v1/chat/completions", &chat_with_image(&data_url(&png)));
    assert!(r.assert_error(400).contains("no vision tower"));
    text.assert_alive();
    text.sigterm();
    assert!(text.wait_exit(Duration::from_secs(30)).success());
}

#[test]
fn a_gemma4_checkpoint_reads_images_of_its_own_size() {
    // The tiny Gemma 4 checkpoint: its processor's budget of 70 tokens, and
    // an image of 60 (120x72 after the processor's resize).
    let dir = format!("{ROOT}/tests/fixtures/tiny/gemma4_vision");
    let mut s = Server::start(&dir, &["--ctx", "256", "-t", "2"]);
    let png = std::fs::read(format!("{dir}/img_b.png")).unwrap();
    let ok = s.post("/v1/chat/completions", &chat_with_image(&data_url(&png)));
    assert_eq!(ok.status, 200, "{}", ok.text());
    let v = ok.json();
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 60, "{v}");
    let half = data_url(&png[..png.len() / 2]);
    let msg = s
        .post("/v1/chat/completions", &chat_with_image(&half))
        .assert_error(400);
    assert!(msg.contains("cannot decode"), "{msg}");
    s.assert_alive();
}
