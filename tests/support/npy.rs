//! A minimal reader for the little-endian f32 `.npy` files of the test
//! fixtures, shared by the crates' test suites (`#[path]`-included).

/// The shape and values of an f32 `.npy` file; panics on anything else
/// (a broken fixture is a test failure).
pub fn read_npy_f32(path: &std::path::Path) -> (Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        &bytes[..6],
        b"\x93NUMPY",
        "{} is not an npy file",
        path.display()
    );
    let (header_len, header_start) = if bytes[6] == 1 {
        (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10)
    } else {
        (
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
            12,
        )
    };
    let header = std::str::from_utf8(&bytes[header_start..header_start + header_len]).unwrap();
    assert!(
        header.contains("'descr': '<f4'"),
        "unexpected dtype in {header}"
    );
    assert!(header.contains("'fortran_order': False"));
    let shape_str = header
        .split("'shape': (")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap();
    let shape: Vec<usize> = shape_str
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let data = bytes[header_start + header_len..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    (shape, data)
}

/// Largest `|got - want|` relative to the largest `|want|`: how the tests
/// hold engine outputs to a golden.
#[allow(dead_code)] // not every suite that reads npy files compares this way
pub fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "lengths differ");
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let diff = got
        .iter()
        .zip(want)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    diff / scale
}
