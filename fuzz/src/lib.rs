//! Helpers shared by the fuzz targets: splitting one input into named
//! files, repairing the checksums that would otherwise stop almost every
//! mutated PNG or Ogg file at its first chunk, framing a safetensors header,
//! a scratch directory for the readers that take a checkpoint directory, and
//! a small tokenizer for the grammar compiler.
//!
//! Nothing here is fuzzed itself; it only shapes inputs so that mutations
//! reach the parsers' deeper checks.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The line that starts a named section: `--- NAME`.
pub const SECTION_MARK: &[u8] = b"--- ";

/// Split `data` into `(name, bytes)` sections. A section starts with a line
/// `--- NAME` (at the start of the input or after a newline) and runs to
/// the newline before the next such line. Text before the first marker is
/// returned under the empty name.
pub fn sections(data: &[u8]) -> Vec<(String, &[u8])> {
    let mut starts = Vec::new();
    if data.starts_with(SECTION_MARK) {
        starts.push(0);
    }
    let mut i = 0;
    while let Some(p) = find(&data[i..], b"\n--- ") {
        starts.push(i + p + 1);
        i += p + 1;
    }
    let mut out = Vec::new();
    let first = starts.first().copied().unwrap_or(data.len());
    if first > 0 {
        out.push((String::new(), trim_last_newline(&data[..first])));
    }
    for (k, &s) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(data.len());
        let line_end = find(&data[s..end], b"\n").map_or(end, |p| s + p);
        let name = String::from_utf8_lossy(&data[s + SECTION_MARK.len()..line_end])
            .trim()
            .to_string();
        let body_start = (line_end + 1).min(end);
        out.push((name, trim_last_newline(&data[body_start..end])));
    }
    out
}

fn trim_last_newline(b: &[u8]) -> &[u8] {
    b.strip_suffix(b"\n").unwrap_or(b)
}

/// First position of `needle` in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// CRC-32 as PNG and zlib compute it (reflected, polynomial 0xEDB88320).
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// Ogg's page CRC (polynomial 0x04C11DB7, not reflected, no final xor).
pub fn ogg_crc(bytes: &[u8]) -> u32 {
    let mut c = 0u32;
    for &b in bytes {
        c ^= u32::from(b) << 24;
        for _ in 0..8 {
            c = if c & 0x8000_0000 != 0 {
                (c << 1) ^ 0x04C1_1DB7
            } else {
                c << 1
            };
        }
    }
    c
}

/// Rewrite every chunk CRC of a PNG so a mutation inside a chunk reaches
/// the decoder instead of failing the checksum. Stops at the first chunk
/// whose length runs past the end.
pub fn fix_png_crcs(png: &mut [u8]) {
    const SIG: &[u8] = b"\x89PNG\r\n\x1a\n";
    if !png.starts_with(SIG) {
        return;
    }
    let mut at = SIG.len();
    while at + 12 <= png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
        let Some(end) = (at + 8).checked_add(len) else {
            return;
        };
        if end + 4 > png.len() {
            return;
        }
        let crc = crc32(&png[at + 4..end]);
        png[end..end + 4].copy_from_slice(&crc.to_be_bytes());
        at = end + 4;
    }
}

/// Rewrite the CRC of every Ogg page, walking pages from the first `OggS`.
pub fn fix_ogg_crcs(ogg: &mut [u8]) {
    let Some(mut at) = find(ogg, b"OggS") else {
        return;
    };
    while at + 27 <= ogg.len() && &ogg[at..at + 4] == b"OggS" {
        let nseg = ogg[at + 26] as usize;
        let head = 27 + nseg;
        if at + head > ogg.len() {
            return;
        }
        let body: usize = ogg[at + 27..at + head].iter().map(|&s| s as usize).sum();
        let end = at + head + body;
        if end > ogg.len() {
            return;
        }
        ogg[at + 22..at + 26].fill(0);
        let crc = ogg_crc(&ogg[at..end]);
        ogg[at + 22..at + 26].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
}

/// The largest data section a framed safetensors file gets.
pub const MAX_FRAMED_DATA: u64 = 1 << 20;

/// A safetensors file from its JSON `header`: the 8-byte length in front
/// and a data section as long as the largest `data_offsets` end (at most
/// [`MAX_FRAMED_DATA`]), filled by repeating `fill` (zeros when empty). The
/// fuzzer then mutates the header text, not the binary framing.
pub fn frame_safetensors(header: &[u8], fill: &[u8]) -> Vec<u8> {
    let end = serde_json::from_slice::<serde_json::Value>(header)
        .ok()
        .and_then(|v| {
            v.as_object().map(|m| {
                m.values()
                    .filter_map(|t| t.get("data_offsets")?.get(1)?.as_u64())
                    .max()
                    .unwrap_or(0)
            })
        })
        .unwrap_or(0)
        .min(MAX_FRAMED_DATA) as usize;
    let mut out = Vec::with_capacity(8 + header.len() + end);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(header);
    if fill.is_empty() {
        out.resize(out.len() + end, 0);
    } else {
        out.extend(fill.iter().copied().cycle().take(end));
    }
    out
}

/// A per-process directory (on tmpfs where there is one) that holds the
/// files of one checkpoint directory at a time.
pub struct Scratch {
    dir: PathBuf,
}

static SCRATCH: Mutex<Option<Scratch>> = Mutex::new(None);

impl Scratch {
    /// Run `f` on the scratch directory, emptied first.
    pub fn with<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
        let mut guard = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
        let s = guard.get_or_insert_with(|| {
            let base = if Path::new("/dev/shm").is_dir() {
                PathBuf::from("/dev/shm")
            } else {
                std::env::temp_dir()
            };
            Scratch {
                dir: base.join(format!("hearth-fuzz-{}", std::process::id())),
            }
        });
        let _ = std::fs::remove_dir_all(&s.dir);
        std::fs::create_dir_all(&s.dir).expect("scratch directory");
        f(s)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Write `bytes` as `name` (letters, digits, `_.-`, at most one `/`;
    /// anything else is skipped). Returns whether it was written.
    pub fn write(&mut self, name: &str, bytes: &[u8]) -> bool {
        let ok = !name.is_empty()
            && name.len() <= 80
            && name.matches('/').count() <= 1
            && name
                .split('/')
                .all(|c| !c.is_empty() && !c.starts_with('.'))
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-/".contains(&b));
        if !ok {
            return false;
        }
        let path = self.dir.join(name);
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        std::fs::write(path, bytes).is_ok()
    }
}

/// Write the sections of a checkpoint-directory input into `s`: a
/// `*.safetensors` section whose text starts with `{` is a header to frame
/// (data from the `NAME.data` section if any), anything else is written as
/// given. Files in `defaults` are written first unless a section names them.
pub fn write_checkpoint(s: &mut Scratch, data: &[u8], defaults: &[(&str, &[u8])]) {
    let secs = sections(data);
    for (name, bytes) in defaults {
        if !secs.iter().any(|(n, _)| n == name) {
            s.write(name, bytes);
        }
    }
    for (name, bytes) in &secs {
        if name.ends_with(".data") {
            continue;
        }
        if name.ends_with(".safetensors") && bytes.first() == Some(&b'{') {
            let fill_name = format!("{name}.data");
            let fill = secs
                .iter()
                .find(|(n, _)| *n == fill_name)
                .map_or(&[][..], |(_, b)| *b);
            s.write(name, &frame_safetensors(bytes, fill));
        } else {
            s.write(name, bytes);
        }
    }
}

/// A small BPE `tokenizer.json` in Gemma's layout (control tokens, byte
/// tokens, a few pieces and merges), for targets that fuzz something else
/// in a checkpoint directory.
pub fn tiny_tokenizer_json() -> Vec<u8> {
    let mut vocab = serde_json::Map::new();
    let specials = [
        "<pad>",
        "<eos>",
        "<bos>",
        "<unk>",
        "<start_of_turn>",
        "<end_of_turn>",
    ];
    let pieces = ["\u{2581}", "a", "b", "ab", "\u{2581}a", "<0x0A>", "<0x41>"];
    for (i, t) in specials.iter().chain(pieces.iter()).enumerate() {
        vocab.insert((*t).to_string(), serde_json::json!(i));
    }
    let added: Vec<_> = specials
        .iter()
        .enumerate()
        .map(|(i, t)| serde_json::json!({"id": i, "content": t, "special": true}))
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "version": "1.0",
        "added_tokens": added,
        "model": {
            "type": "BPE",
            "unk_token": "<unk>",
            "byte_fallback": true,
            "vocab": vocab,
            "merges": ["a b", "\u{2581} a"],
        },
    }))
    .unwrap()
}

/// An empty safetensors file (no tensors).
pub fn empty_safetensors() -> Vec<u8> {
    frame_safetensors(b"{}", &[])
}

/// The GGUF a converted checkpoint becomes, read back. Whatever the
/// converter accepted must be a file our own reader reads.
pub fn reread(w: &gguf::GgufWriter) -> gguf::GgufFile {
    gguf::GgufFile::from_bytes(w.to_bytes()).expect("a converted checkpoint must read back")
}

/// A tokenizer of a few hundred tokens in Gemma's SentencePiece layout
/// (control tokens, all 256 byte tokens, printable ASCII, some words), for
/// the grammar compiler's token trie.
pub fn tiny_tokenizer() -> tokenizer::Tokenizer {
    let mut tokens: Vec<String> = ["<pad>", "<eos>", "<bos>", "<unk>", "<end_of_turn>"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut types = vec![3, 3, 3, 2, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    for c in 0x21u8..0x7f {
        tokens.push((c as char).to_string());
        types.push(1);
    }
    for w in [
        "\u{2581}",
        "\u{2581}\"",
        "\":",
        "{\"",
        "\"}",
        ", ",
        "true",
        "false",
        "null",
        "12",
        "0.",
        "\u{2581}the",
        "name",
        "age",
        "[\"",
        "\"]",
        "\n",
        "\u{2581}\u{2581}",
    ] {
        tokens.push(w.to_string());
        types.push(1);
    }
    let scores: Vec<f32> = (0..tokens.len()).map(|i| -(i as f32)).collect();
    let mut vocab = tokenizer::Vocab::new(&tokens, Some(&scores), Some(&types)).unwrap();
    vocab.bos_id = Some(2);
    vocab.eos_id = Some(1);
    vocab.unk_id = Some(3);
    vocab.pad_id = Some(0);
    vocab.add_space_prefix = false;
    tokenizer::Tokenizer::new(vocab).unwrap()
}

/// Panics raised inside these crates are caught by the code that calls
/// them (`catch_unwind`) and turned into errors, so they are not crashes of
/// Hearth. libFuzzer's panic hook aborts on every panic, caught or not;
/// this hook lets those through and aborts on all others.
pub fn tolerate_caught_panics_in(crates: &'static [&'static str]) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let from = info.location().map(|l| l.file()).unwrap_or("");
        if crates.iter().any(|c| from.contains(c)) {
            let n = CAUGHT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n < 5 {
                eprintln!("tolerated a panic the caller catches, at {from}: {info}");
            }
            return;
        }
        previous(info);
    }));
}

/// How many tolerated panics the process has seen.
pub static CAUGHT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

// Re-exports so targets need only this crate plus the one they fuzz.
pub use hearth_gguf as gguf;
pub use hearth_tokenizer as tokenizer;
