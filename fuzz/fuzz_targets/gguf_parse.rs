//! Fuzz the GGUF reader: any byte string must parse or fail with an error,
//! never panic, and a file that parses must hand out every tensor's bytes and
//! format every metadata value.

#![no_main]

use hearth_gguf::GgufFile;
use libfuzzer_sys::fuzz_target;
use std::fmt::Write;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let mut sink = String::new();
    for (key, value) in file.metadata() {
        let _ = write!(sink, "{key}={value}");
        let _ = file.get(key);
        sink.clear();
    }
    let _ = file.architecture();
    for info in file.tensors() {
        let bytes = file.tensor_data(info);
        assert_eq!(bytes.len() as u64, info.n_bytes, "tensor `{}`", info.name);
        assert!(
            file.data_offset() + info.offset + info.n_bytes <= file.file_len(),
            "tensor `{}` past the end",
            info.name
        );
        // Touch the data so a bad slice would fault here.
        let _ = std::hint::black_box(bytes.iter().fold(0u8, |a, &b| a ^ b));
        let _ = info.n_elements();
        let _ = info.n_rows();
        let _ = file.tensor_bytes(&info.name);
        let _ = info.ty.to_string();
    }
});
