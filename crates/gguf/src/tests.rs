use super::*;
use proptest::prelude::*;

fn sample() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String("gemma3".into()))
        .set("gemma3.block_count", MetaValue::U32(2))
        .set("gemma3.rope.freq_base", MetaValue::F32(10000.0))
        .set("flag", MetaValue::Bool(true))
        .set(
            "tokenizer.ggml.tokens",
            MetaValue::Array(MetaArray::String(crate::StrArray::from_iter([
                "<pad>", "a", "▁b",
            ]))),
        )
        .set(
            "nested",
            MetaValue::Array(MetaArray::Array(vec![
                MetaArray::I32(vec![1, -2]),
                MetaArray::F64(vec![0.5]),
            ])),
        );
    w.add_tensor("a", &[4, 2], GgmlType::F32, (0..32).collect())
        .unwrap();
    w.add_tensor("b", &[32], GgmlType::Q8_0, vec![7; 34])
        .unwrap();
    w
}

#[test]
fn round_trip() {
    let bytes = sample().to_bytes();
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.architecture(), Some("gemma3"));
    assert_eq!(f.get_u64("gemma3.block_count"), Some(2));
    assert_eq!(f.get_f32("gemma3.rope.freq_base"), Some(10000.0));
    assert_eq!(f.get_bool("flag"), Some(true));
    assert_eq!(
        f.get_str_array("tokenizer.ggml.tokens").unwrap().to_vec(),
        ["<pad>", "a", "▁b"]
    );
    match f.get("nested").unwrap().as_array().unwrap() {
        MetaArray::Array(v) => {
            assert_eq!(v[0], MetaArray::I32(vec![1, -2]));
            assert_eq!(v[1], MetaArray::F64(vec![0.5]));
        }
        other => panic!("unexpected {other:?}"),
    }
    let a = f.tensor("a").unwrap();
    assert_eq!(a.dims, vec![4, 2]);
    assert_eq!(a.n_rows(), 2);
    assert_eq!(f.tensor_data(a), (0..32).collect::<Vec<u8>>().as_slice());
    assert_eq!(f.tensor_bytes("b").unwrap(), &[7u8; 34][..]);
    assert_eq!(f.tensor("b").unwrap().offset % f.alignment(), 0);
    assert_eq!(f.data_offset() % f.alignment(), 0);
}

#[test]
fn open_reads_a_file_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    std::fs::write(&path, sample().to_bytes()).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.tensors().len(), 2);
    let missing = GgufFile::open(dir.path().join("nope.gguf")).unwrap_err();
    assert!(missing.to_string().contains("nope.gguf"), "{missing}");
    let dir_err = GgufFile::open(dir.path()).unwrap_err();
    assert!(
        dir_err.to_string().contains("not a regular file"),
        "{dir_err}"
    );
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = sample().to_bytes();
    for len in 0..bytes.len() {
        let err = GgufFile::from_bytes(bytes[..len].to_vec())
            .expect_err(&format!("prefix of {len} bytes parsed"));
        let msg = err.to_string();
        assert!(
            msg.contains("truncated")
                || msg.contains("outside the file")
                || msg.contains("not a GGUF"),
            "len {len}: {msg}"
        );
    }
}

#[test]
fn wrong_magic_and_version() {
    let mut bytes = sample().to_bytes();
    bytes[0] = b'X';
    let err = GgufFile::from_bytes(bytes).unwrap_err();
    assert!(matches!(err, GgufError::NotGguf { .. }), "{err}");

    let mut bytes = sample().to_bytes();
    bytes[4..8].copy_from_slice(&7u32.to_le_bytes());
    let err = GgufFile::from_bytes(bytes).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unsupported GGUF version 7 (versions 2 and 3 are supported)"
    );
}

/// The offset of tensor `name`'s type field in an image made by `sample()`.
fn tensor_field_offset(bytes: &[u8], name: &str) -> usize {
    let needle = [&(name.len() as u64).to_le_bytes()[..], name.as_bytes()].concat();
    let start = bytes
        .windows(needle.len())
        .rposition(|w| w == needle.as_slice())
        .unwrap();
    let n_dims_at = start + needle.len();
    let n_dims = u32::from_le_bytes(bytes[n_dims_at..n_dims_at + 4].try_into().unwrap()) as usize;
    n_dims_at + 4 + 8 * n_dims
}

#[test]
fn unknown_tensor_type_is_named() {
    let mut bytes = sample().to_bytes();
    let at = tensor_field_offset(&bytes, "b");
    bytes[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
    let err = GgufFile::from_bytes(bytes).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("tensor `b`") && msg.contains("unknown tensor type id 99"),
        "{msg}"
    );
}

/// Tensors of the IQ types (IQ4 and the lattice formats) open, sized by
/// ggml's block geometry and named, so `hearth inspect` lists them.
#[test]
fn iq_tensor_types_are_read_and_named() {
    let mut w = GgufWriter::new();
    for (name, ty) in [
        ("nl", GgmlType::IQ4_NL),
        ("xs", GgmlType::IQ4_XS),
        ("xxs", GgmlType::IQ2_XXS),
    ] {
        let bytes = ty.row_bytes(512).unwrap() as usize * 2;
        w.add_tensor(name, &[512, 2], ty, vec![0u8; bytes]).unwrap();
    }
    let file = GgufFile::from_bytes(w.to_bytes()).unwrap();
    let named: Vec<(String, String, u64)> = file
        .tensors()
        .iter()
        .map(|t| (t.name.clone(), t.ty.to_string(), t.n_bytes))
        .collect();
    assert_eq!(
        named,
        [
            ("nl".to_string(), "IQ4_NL".to_string(), 2 * 16 * 18),
            ("xs".to_string(), "IQ4_XS".to_string(), 2 * 2 * 136),
            ("xxs".to_string(), "IQ2_XXS".to_string(), 2 * 2 * 66),
        ]
    );
}

#[test]
fn out_of_bounds_and_misaligned_offsets() {
    let bytes = sample().to_bytes();
    let at = tensor_field_offset(&bytes, "b") + 4;
    let mut far = bytes.clone();
    far[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let err = GgufFile::from_bytes(far).unwrap_err();
    assert!(matches!(err, GgufError::TensorOutOfBounds { .. }), "{err}");

    let mut overflow = bytes.clone();
    overflow[at..at + 8].copy_from_slice(&(u64::MAX - 31).to_le_bytes());
    assert!(GgufFile::from_bytes(overflow).is_err());

    let mut misaligned = bytes;
    misaligned[at..at + 8].copy_from_slice(&3u64.to_le_bytes());
    let err = GgufFile::from_bytes(misaligned).unwrap_err();
    assert!(err.to_string().contains("not aligned"), "{err}");
}

/// Found by `cargo fuzz run gguf_parse`: dims `[0, 2^40, 2^40]` have 0
/// elements, so the element count did not overflow, but `n_rows()` did.
#[test]
fn row_count_overflow_is_rejected() {
    let mut w = GgufWriter::new();
    w.add_tensor("z", &[0, 1, 1], GgmlType::F32, Vec::new())
        .unwrap();
    let bytes = w.to_bytes();
    let dims_at = tensor_field_offset(&bytes, "z") - 3 * 8;

    // A zero-sized tensor with a sane row count still opens.
    let mut ok = bytes.clone();
    ok[dims_at + 8..dims_at + 16].copy_from_slice(&3u64.to_le_bytes());
    let f = GgufFile::from_bytes(ok).unwrap();
    let z = f.tensor("z").unwrap();
    assert_eq!((z.n_elements(), z.n_rows(), z.n_bytes), (0, 3, 0));

    let mut bad = bytes;
    for i in 1..3 {
        let at = dims_at + 8 * i;
        bad[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    }
    let err = GgufFile::from_bytes(bad).unwrap_err();
    assert!(err.to_string().contains("overflow"), "{err}");
}

#[test]
fn huge_counts_do_not_allocate() {
    // A header claiming 2^60 metadata entries and a string of 2^62 bytes.
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"GGUF");
    bytes.extend_from_slice(&3u32.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    bytes.extend_from_slice(&(1u64 << 60).to_le_bytes());
    bytes.extend_from_slice(&(1u64 << 62).to_le_bytes());
    let err = GgufFile::from_bytes(bytes).unwrap_err();
    assert!(matches!(err, GgufError::Truncated { .. }), "{err}");
}

#[test]
fn deep_nesting_is_rejected() {
    let mut a = MetaArray::U8(vec![1]);
    for _ in 0..20 {
        a = MetaArray::Array(vec![a]);
    }
    let mut w = GgufWriter::new();
    w.set("deep", MetaValue::Array(a));
    let err = GgufFile::from_bytes(w.to_bytes()).unwrap_err();
    assert!(err.to_string().contains("nested deeper"), "{err}");
}

#[test]
fn writer_rejects_wrong_sizes() {
    let mut w = GgufWriter::new();
    assert!(w
        .add_tensor("x", &[33], GgmlType::Q8_0, vec![0; 34])
        .is_err());
    assert!(w
        .add_tensor("x", &[32, 2], GgmlType::Q8_0, vec![0; 34])
        .is_err());
}

#[test]
fn duplicate_tensor_names_are_rejected() {
    let mut w = GgufWriter::new();
    w.add_tensor("x", &[1], GgmlType::F32, vec![0; 4]).unwrap();
    w.add_tensor("x", &[1], GgmlType::F32, vec![0; 4]).unwrap();
    let err = GgufFile::from_bytes(w.to_bytes()).unwrap_err();
    assert!(err.to_string().contains("appears twice"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    /// Flipping bytes anywhere gives either a valid file or an error, and
    /// every tensor of a file that parses lies inside it.
    #[test]
    fn corrupted_images_never_panic(flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut bytes = sample().to_bytes();
        for (i, b) in flips {
            let at = i.index(bytes.len());
            bytes[at] = b;
        }
        let len = bytes.len() as u64;
        if let Ok(f) = GgufFile::from_bytes(bytes) {
            for t in f.tensors() {
                prop_assert!(f.data_offset() + t.offset + t.n_bytes <= len);
                prop_assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes);
            }
        }
    }

    /// Arbitrary bytes after a valid magic and version never panic.
    #[test]
    fn random_bodies_never_panic(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut bytes = b"GGUF\x03\0\0\0".to_vec();
        bytes.extend(body);
        let _ = GgufFile::from_bytes(bytes);
    }
}
