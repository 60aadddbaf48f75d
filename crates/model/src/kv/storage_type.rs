//! How a cache stores keys and values: f32, f16 or Q8_0.

/// How a cache stores keys and values.
///
/// f16 (llama.cpp's default) halves the cache's memory and the bytes a decode
/// step reads at a long context; the keys and values a batch attends to are
/// rounded to f16 before it attends, so a sequence gets the same result
/// however its positions were split into batches. f32 keeps them as
/// computed, for results that match a float reference to the last digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvType {
    /// 4 bytes an element.
    F32,
    /// 2 bytes an element.
    F16,
    /// Q8_0 blocks: 34 bytes for 32 elements (an f16 scale and a signed
    /// byte each), as llama.cpp's `-ctk q8_0 -ctv q8_0`. Needs head and
    /// value dimensions that are whole blocks.
    Q8_0,
}

impl KvType {
    /// The type a model loaded with `precision` caches in when none is
    /// asked for: f16 (as llama.cpp) with 8-bit activations, f32 with exact
    /// ones.
    pub fn default_for(precision: crate::Precision) -> Self {
        match precision {
            crate::Precision::Quantized => KvType::F16,
            crate::Precision::Exact => KvType::F32,
        }
    }

    /// Bytes `elements` take (whole blocks for Q8_0).
    pub fn bytes_of(self, elements: usize) -> usize {
        match self {
            KvType::F32 => 4 * elements,
            KvType::F16 => 2 * elements,
            KvType::Q8_0 => quant::vector::q8_0_bytes(elements),
        }
    }

    /// Whether rows of `width` elements (a head's keys or values) can be
    /// stored as this type: Q8_0 needs whole blocks.
    pub fn holds_width(self, width: usize) -> bool {
        match self {
            KvType::F32 | KvType::F16 => true,
            KvType::Q8_0 => width.is_multiple_of(quant::vector::Q8_0_BLOCK),
        }
    }

    /// Rounds `xs` (whole heads) in place to what this cache hands back for
    /// them, so a batch that attends to its own keys and values before they
    /// are cached sees what every later step reads.
    pub(crate) fn round(self, xs: &mut [f32]) {
        match self {
            KvType::F32 => {}
            KvType::F16 => quant::vector::round_to_f16(xs),
            KvType::Q8_0 => quant::vector::round_to_q8_0(xs),
        }
    }

    /// The name `--kv-cache` takes.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
        }
    }
}

impl std::str::FromStr for KvType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(KvType::F32),
            "f16" => Ok(KvType::F16),
            "q8_0" => Ok(KvType::Q8_0),
            other => Err(format!(
                "unknown KV cache type `{other}` (f16, f32 or q8_0)"
            )),
        }
    }
}
