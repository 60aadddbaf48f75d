//! Pictures as the vision models' processors see them: decoded to 8-bit
//! RGB (transparency composited onto white), resized with PIL's bilinear
//! (Gemma 3) or bicubic (Gemma 4) filter, then rescaled and normalised into
//! channel-first floats.
//!
//! Gemma's processors in transformers run on PIL, so the resize here is PIL's
//! own fixed-point arithmetic, to the bit: the same file gives the same
//! pixel values, and so the same image embeddings, as the reference.

use crate::MediaError;
use image::ImageDecoder;
use std::io::Cursor;

/// The longest side a picture may have. Larger files are refused before
/// their pixels are decoded, so a hostile header cannot make us allocate.
pub const MAX_SIDE: u32 = 16_384;

/// The default bound on a picture's pixels: a 48-megapixel phone photo
/// (8064 x 6048, 146 MB as RGB) fits; a decompression bomb does not.
pub const DEFAULT_MAX_PIXELS: u64 = 50_000_000;

/// A decoded picture: 8-bit RGB, row-major, no padding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picture {
    width: u32,
    height: u32,
    rgb: Vec<u8>,
}

impl Picture {
    /// A picture from raw RGB bytes (`width * height * 3` of them).
    pub fn from_rgb(width: u32, height: u32, rgb: Vec<u8>) -> Result<Self, MediaError> {
        if width == 0 || height == 0 || rgb.len() as u64 != u64::from(width) * u64::from(height) * 3
        {
            return Err(MediaError::Decode(format!(
                "{} bytes are not a {width}x{height} RGB picture",
                rgb.len()
            )));
        }
        Ok(Self { width, height, rgb })
    }

    /// Decode a PNG, JPEG or WebP file held in memory, of at most
    /// [`DEFAULT_MAX_PIXELS`] and [`DEFAULT_MAX_DECODE_BYTES`].
    pub fn decode(bytes: &[u8]) -> Result<Self, MediaError> {
        Self::decode_within(bytes, DEFAULT_MAX_PIXELS, DEFAULT_MAX_DECODE_BYTES)
    }

    /// Decode a PNG, JPEG or WebP file held in memory, refusing one whose
    /// header claims more than `max_pixels`, or whose decoding would take
    /// more than `max_bytes` of memory (worked out from its size, depth
    /// and channels: see [`decode_memory`]), before any pixel is decoded.
    /// Transparency is composited onto white, as the processors' RGB
    /// conversion does.
    pub fn decode_within(
        bytes: &[u8],
        max_pixels: u64,
        max_bytes: u64,
    ) -> Result<Self, MediaError> {
        let decode_error = |e: image::ImageError| MediaError::Decode(e.to_string());
        let (mut decoder, needed) = open(bytes)?;
        let (width, height) = decoder.dimensions();
        check_size(width, height, max_pixels)?;
        if needed > max_bytes {
            return Err(MediaError::TooMuchMemory {
                needed,
                max: max_bytes,
            });
        }
        let mut limits = image::Limits::default();
        limits.max_image_width = Some(MAX_SIDE);
        limits.max_image_height = Some(MAX_SIDE);
        limits.max_alloc = Some(max_bytes);
        decoder.set_limits(limits).map_err(decode_error)?;
        let img = image::DynamicImage::from_decoder(decoder).map_err(decode_error)?;
        let (width, height) = (img.width(), img.height());
        Self::from_rgb(width, height, rgb_over_white(img))
    }

    /// What decoding `bytes` with [`Picture::decode_within`] would take,
    /// worked out from the file's header without decoding a pixel.
    pub fn decode_memory_of(bytes: &[u8]) -> Result<u64, MediaError> {
        Ok(open(bytes)?.1)
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// The RGB bytes, row-major.
    pub fn rgb(&self) -> &[u8] {
        &self.rgb
    }

    /// The picture resized to `width` × `height` with PIL's bilinear filter
    /// (`Image.resize(..., BILINEAR)`): a triangle filter widened by the
    /// scale when shrinking (so it averages instead of skipping pixels),
    /// fixed-point weights of 22 bits, horizontal pass then vertical, each
    /// rounded to 8 bits as PIL does.
    pub fn resize_bilinear(&self, width: u32, height: u32) -> Result<Self, MediaError> {
        self.resize(width, height, Filter::Bilinear)
    }

    /// The picture resized with PIL's bicubic filter (`Image.resize(...,
    /// BICUBIC)`, Keys' cubic with `a = -0.5`), in the same fixed point as
    /// [`Self::resize_bilinear`]; each pass clamps to 0..=255.
    pub fn resize_bicubic(&self, width: u32, height: u32) -> Result<Self, MediaError> {
        self.resize(width, height, Filter::Bicubic)
    }

    fn resize(&self, width: u32, height: u32, filter: Filter) -> Result<Self, MediaError> {
        if width == 0 || height == 0 || width > MAX_SIDE || height > MAX_SIDE {
            return Err(MediaError::Decode(format!(
                "cannot resize to {width}x{height}"
            )));
        }
        let (w0, h0) = (self.width as usize, self.height as usize);
        let (w1, h1) = (width as usize, height as usize);
        let mut cur = std::borrow::Cow::Borrowed(&self.rgb);
        if w1 != w0 {
            let k = Coefficients::new(w0, w1, filter);
            let mut out = vec![0u8; w1 * h0 * 3];
            for y in 0..h0 {
                let src = &cur[y * w0 * 3..(y + 1) * w0 * 3];
                let dst = &mut out[y * w1 * 3..(y + 1) * w1 * 3];
                for x in 0..w1 {
                    let (first, weights) = k.of(x);
                    for c in 0..3 {
                        let sum = weights.iter().enumerate().fold(ROUND, |acc, (i, &wt)| {
                            acc + i32::from(src[(first + i) * 3 + c]) * wt
                        });
                        dst[x * 3 + c] = clip8(sum);
                    }
                }
            }
            cur = std::borrow::Cow::Owned(out);
        }
        if h1 != h0 {
            let k = Coefficients::new(h0, h1, filter);
            let row = w1 * 3;
            let mut out = vec![0u8; row * h1];
            for y in 0..h1 {
                let (first, weights) = k.of(y);
                for (x, dst) in out[y * row..(y + 1) * row].iter_mut().enumerate() {
                    let sum = weights.iter().enumerate().fold(ROUND, |acc, (i, &wt)| {
                        acc + i32::from(cur[(first + i) * row + x]) * wt
                    });
                    *dst = clip8(sum);
                }
            }
            cur = std::borrow::Cow::Owned(out);
        }
        Self::from_rgb(width, height, cur.into_owned())
    }

    /// Channel-first floats `[3][height][width]`: each byte `v` becomes
    /// `(v / 255 - mean[c]) / std[c]`.
    pub fn normalized(&self, mean: [f32; 3], std: [f32; 3]) -> Vec<f32> {
        let n = self.width as usize * self.height as usize;
        let mut out = vec![0.0f32; 3 * n];
        for (c, plane) in out.chunks_exact_mut(n).enumerate() {
            for (o, px) in plane.iter_mut().zip(self.rgb.chunks_exact(3)) {
                let v = (f64::from(px[c]) / 255.0) as f32;
                *o = (v - mean[c]) / std[c];
            }
        }
        out
    }
}

/// Refuse a picture past [`MAX_SIDE`] on a side or `max_pixels` in all.
fn check_size(width: u32, height: u32, max_pixels: u64) -> Result<(), MediaError> {
    if width > MAX_SIDE || height > MAX_SIDE {
        return Err(MediaError::TooLarge {
            width,
            height,
            max: MAX_SIDE,
        });
    }
    if u64::from(width) * u64::from(height) > max_pixels {
        return Err(MediaError::TooManyPixels {
            width,
            height,
            max: max_pixels,
        });
    }
    Ok(())
}

/// The default bound on what decoding one picture may take: 256 MiB, the
/// server's default request budget. A 12-megapixel photo takes ~80 MB, a
/// 48-megapixel one (baseline JPEG) ~250 MB.
pub const DEFAULT_MAX_DECODE_BYTES: u64 = 256 << 20;

/// The processors' largest outputs: Gemma 3's 896-pixel square, Gemma 4's
/// 1120 tokens of 3x3 cells of 16-pixel patches.
const PROCESSOR_SIDE: u64 = 896;
const PROCESSOR_PIXELS: u64 = 1120 * 9 * 16 * 16;

/// What decoding a `width` x `height` picture whose pixels decode as
/// `color` takes at its peak, from its header alone:
/// - the decoder's output buffer (a 16-bit RGBA PNG takes 8 bytes a pixel,
///   whatever its file size: a flat one compresses a thousandfold);
/// - the format's own working memory, `working` bytes a pixel (see
///   [`working_per_pixel`]), and a few rows and the inflate window;
/// - the 8-bit copy of anything not already 8-bit RGB(A) (RGBA is folded
///   into RGB in place);
/// - the processor's resized copies: its output, beside the first pass of
///   its resize (the output's width by the picture's height), then beside
///   the output's normalised floats.
pub(crate) fn decode_memory(
    (width, height): (u32, u32),
    color: image::ColorType,
    working: u64,
) -> u64 {
    // Saturating: a header may claim 2^32 by 2^32 pixels, and is priced
    // before its size is checked.
    let (w, h) = (u64::from(width), u64::from(height));
    let pixels = w.saturating_mul(h);
    let per_pixel = u64::from(color.bytes_per_pixel());
    let buffer = pixels.saturating_mul(per_pixel);
    let decoder = pixels
        .saturating_mul(working)
        .saturating_add(2 * w * per_pixel + (1 << 20));
    let conversion = match color {
        image::ColorType::Rgb8 | image::ColorType::Rgba8 => 0,
        _ => pixels.saturating_mul(4),
    };
    // The output lives beside the first pass, then beside its floats.
    let first_pass = (PROCESSOR_SIDE.saturating_mul(h))
        .max((PROCESSOR_PIXELS as f64 * pixels as f64).sqrt() as u64);
    let processor = 3 * PROCESSOR_PIXELS + (3 * first_pass).max(12 * PROCESSOR_PIXELS);
    buffer
        .saturating_add(decoder)
        .saturating_add(conversion)
        .saturating_add(processor)
}

/// The decoder for a PNG, JPEG or WebP file held in memory, and what
/// decoding it takes ([`decode_memory`]), from its header alone.
fn open(bytes: &[u8]) -> Result<(impl image::ImageDecoder + '_, u64), MediaError> {
    if bytes.is_empty() {
        return Err(MediaError::Decode("the image is empty (0 bytes)".into()));
    }
    let reader = image::ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| MediaError::Decode(e.to_string()))?;
    let format = match reader.format() {
        None => {
            return Err(MediaError::Decode(
                "not a PNG, JPEG or WebP image (unrecognised header)".into(),
            ))
        }
        // The JPEG decoder fills a cut-off scan with grey and succeeds;
        // the reference (PIL) refuses such a file, and so do we.
        Some(image::ImageFormat::Jpeg) if !jpeg_is_complete(bytes) => {
            return Err(MediaError::Decode(
                "the JPEG is truncated (its image data has no end marker)".into(),
            ))
        }
        Some(format) => format,
    };
    let decoder = reader
        .into_decoder()
        .map_err(|e| MediaError::Decode(e.to_string()))?;
    let needed = decode_memory(
        decoder.dimensions(),
        decoder.color_type(),
        working_per_pixel(format, bytes),
    );
    Ok((decoder, needed))
}

/// The bytes a pixel a format's decoder works through beside its output,
/// told from the file's header: a progressive JPEG holds every coefficient
/// (16 bits for each of three components), a baseline one a row of blocks;
/// WebP decodes through a frame of its own (an animation's first frame and
/// its canvas); PNG streams its rows.
fn working_per_pixel(format: image::ImageFormat, bytes: &[u8]) -> u64 {
    match format {
        image::ImageFormat::Jpeg if jpeg_is_progressive(bytes) => 6,
        image::ImageFormat::Jpeg => 1,
        image::ImageFormat::WebP if webp_is_animated(bytes) => 8,
        image::ImageFormat::WebP => 4,
        _ => 0,
    }
}

/// Whether a WebP file's extended header says it is animated.
fn webp_is_animated(bytes: &[u8]) -> bool {
    bytes.get(12..16) == Some(b"VP8X") && bytes.get(20).is_some_and(|flags| flags & 0x02 != 0)
}

/// Whether a JPEG's frame is progressive (or lossless), from the start of
/// frame marker among its header's segments.
fn jpeg_is_progressive(bytes: &[u8]) -> bool {
    let mut at = 2;
    while at + 4 <= bytes.len() && bytes[at] == 0xFF {
        match bytes[at + 1] {
            // Fill bytes before a marker.
            0xFF => at += 1,
            // Frames other than baseline and extended sequential.
            0xC2 | 0xC3 | 0xC6 | 0xC7 | 0xCA | 0xCB | 0xCE | 0xCF => return true,
            0xC0 | 0xC1 | 0xC9 | 0xDA => return false,
            _ => at += 2 + usize::from(u16::from_be_bytes([bytes[at + 2], bytes[at + 3]])),
        }
    }
    // A header we cannot walk: assume the costly kind.
    true
}

/// `img` as 8-bit RGB bytes, transparency composited onto white, reusing
/// the decoder's buffer when it is 8-bit already.
fn rgb_over_white(img: image::DynamicImage) -> Vec<u8> {
    if !img.color().has_alpha() {
        return img.into_rgb8().into_raw();
    }
    let mut rgba = img.into_rgba8().into_raw();
    // In place: pixel i's RGB goes to 3i, never past the 4i it is read
    // from.
    let n = rgba.len() / 4;
    for i in 0..n {
        let [r, g, b, a] = [
            rgba[4 * i],
            rgba[4 * i + 1],
            rgba[4 * i + 2],
            rgba[4 * i + 3],
        ];
        rgba[3 * i] = over_white(r, a);
        rgba[3 * i + 1] = over_white(g, a);
        rgba[3 * i + 2] = over_white(b, a);
    }
    rgba.truncate(3 * n);
    rgba.shrink_to_fit();
    rgba
}

/// Whether a JPEG's last scan is followed by the end-of-image marker. Inside
/// entropy-coded data every 0xFF byte is followed by 0x00 or a restart
/// marker, so `FF D9` after the last start-of-scan (`FF DA`) is the end of
/// the main image (an EXIF thumbnail's markers come before it).
fn jpeg_is_complete(bytes: &[u8]) -> bool {
    let last = |marker: u8| bytes.windows(2).rposition(|w| w == [0xFF, marker]);
    matches!((last(0xDA), last(0xD9)), (Some(sos), Some(eoi)) if eoi > sos)
}

/// PIL's fixed-point precision for 8-bit resampling.
const PRECISION_BITS: u32 = 32 - 8 - 2;
/// Half a unit of the fixed point, so the final shift rounds.
const ROUND: i32 = 1 << (PRECISION_BITS - 1);

/// The fixed-point sum back to a byte: shift, then clamp.
fn clip8(sum: i32) -> u8 {
    (sum >> PRECISION_BITS).clamp(0, 255) as u8
}

/// A colour channel composited onto white with alpha `a`, in the integer
/// arithmetic of PIL's `alpha_composite` (the processors' RGB conversion).
fn over_white(c: u8, a: u8) -> u8 {
    if a == 0 {
        return 255;
    }
    let (c, a) = (u32::from(c), u32::from(a));
    let tmp = c * (a << 7) + 255 * ((255 - a) << 7) + (0x80 << 7);
    ((((tmp >> 8) + tmp) >> 8) >> 7) as u8
}

/// PIL's resampling filters that Gemma's processors use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filter {
    /// The triangle, support 1.
    Bilinear,
    /// Keys' cubic convolution with `a = -0.5`, support 2.
    Bicubic,
}

impl Filter {
    /// Half the width of the filter at scale 1.
    fn support(self) -> f64 {
        match self {
            Filter::Bilinear => 1.0,
            Filter::Bicubic => 2.0,
        }
    }

    /// The filter's value at `x` (PIL's `bilinear_filter` and
    /// `bicubic_filter`, in the same operation order).
    fn weight(self, x: f64) -> f64 {
        let x = x.abs();
        match self {
            Filter::Bilinear => (1.0 - x).max(0.0),
            Filter::Bicubic => {
                const A: f64 = -0.5;
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
        }
    }
}

/// The filter weights of one resampling pass: for each output pixel, the
/// first input pixel it reads and its fixed-point weights.
struct Coefficients {
    bounds: Vec<(usize, usize)>,
    weights: Vec<i32>,
    ksize: usize,
}

impl Coefficients {
    /// PIL's `precompute_coeffs` for `filter`, with the weights normalised
    /// and converted to fixed point as `normalize_coeffs_8bpc` does.
    fn new(in_size: usize, out_size: usize, filter: Filter) -> Self {
        let scale = in_size as f64 / out_size as f64;
        let filter_scale = scale.max(1.0);
        let support = filter.support() * filter_scale;
        let ksize = support.ceil() as usize * 2 + 1;
        let mut bounds = Vec::with_capacity(out_size);
        let mut weights = vec![0i32; out_size * ksize];
        let mut k = vec![0.0f64; ksize];
        for (xx, wrow) in weights.chunks_exact_mut(ksize).enumerate() {
            let center = (xx as f64 + 0.5) * scale;
            let inv = 1.0 / filter_scale;
            // C's truncating casts of non-negative values, as in PIL.
            let xmin = ((center - support + 0.5).max(0.0)) as usize;
            let xmax = ((center + support + 0.5) as usize).min(in_size) - xmin;
            let mut total = 0.0;
            for (x, kv) in k.iter_mut().enumerate().take(xmax) {
                let v = filter.weight(((x + xmin) as f64 - center + 0.5) * inv);
                *kv = v;
                total += v;
            }
            for (kv, w) in k.iter().zip(wrow.iter_mut()).take(xmax) {
                let v = if total != 0.0 { kv / total } else { *kv };
                let fixed = v * f64::from(1u32 << PRECISION_BITS);
                *w = if v < 0.0 {
                    (fixed - 0.5).trunc() as i32
                } else {
                    (fixed + 0.5).trunc() as i32
                };
            }
            bounds.push((xmin, xmax));
        }
        Self {
            bounds,
            weights,
            ksize,
        }
    }

    /// Output pixel `i`'s first input pixel and its weights.
    fn of(&self, i: usize) -> (usize, &[i32]) {
        let (first, n) = self.bounds[i];
        (first, &self.weights[i * self.ksize..][..n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compositing_matches_pil_on_its_corners() {
        // Values PIL's alpha_composite onto white gives (checked in Python for
        // all 65,536 pairs against the same formula).
        assert_eq!(over_white(0, 0), 255);
        assert_eq!(over_white(0, 255), 0);
        assert_eq!(over_white(200, 255), 200);
        assert_eq!(over_white(0, 128), 127);
        assert_eq!(over_white(100, 1), 254);
    }

    #[test]
    fn resize_to_the_same_size_is_the_identity() {
        let rgb: Vec<u8> = (0..5 * 4 * 3).map(|i| (i * 37 % 256) as u8).collect();
        let p = Picture::from_rgb(5, 4, rgb).unwrap();
        assert_eq!(p.resize_bilinear(5, 4).unwrap(), p);
    }

    #[test]
    fn shrinking_a_flat_picture_keeps_its_colour() {
        let p = Picture::from_rgb(7, 9, [10u8, 200, 77].repeat(63)).unwrap();
        let small = p.resize_bilinear(3, 2).unwrap();
        assert!(small.rgb().chunks(3).all(|c| c == [10, 200, 77]));
        let big = p.resize_bilinear(20, 31).unwrap();
        assert!(big.rgb().chunks(3).all(|c| c == [10, 200, 77]));
    }

    #[test]
    fn shrinking_matches_pil() {
        // Values from PIL 13: Image.fromarray(row).resize((n, 1), BILINEAR).
        let row = |vals: &[u8]| {
            let rgb: Vec<u8> = vals.iter().flat_map(|&v| [v, v, v]).collect();
            Picture::from_rgb(vals.len() as u32, 1, rgb).unwrap()
        };
        let grey = |p: &Picture| p.rgb().chunks(3).map(|c| c[0]).collect::<Vec<u8>>();
        let halved = row(&[0, 100, 200, 50]).resize_bilinear(2, 1).unwrap();
        assert_eq!(grey(&halved), [71, 121]);
        let ramp: Vec<u8> = (0..250).step_by(10).map(|v| v as u8).collect();
        let shrunk = row(&ramp).resize_bilinear(7, 1).unwrap();
        assert_eq!(grey(&shrunk), [16, 49, 84, 120, 156, 191, 224]);
    }

    #[test]
    fn normalisation_maps_bytes_to_the_unit_interval_around_mean() {
        let p = Picture::from_rgb(1, 1, vec![0, 255, 51]).unwrap();
        let v = p.normalized([0.5; 3], [0.5; 3]);
        assert_eq!(v[0], -1.0);
        assert_eq!(v[1], 1.0);
        assert!((v[2] - (51.0 / 255.0 - 0.5) / 0.5).abs() < 1e-7);
    }

    /// The CRC-32 PNG chunks carry.
    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = 0xffff_ffffu32;
        for &b in bytes {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }

    /// A PNG whose header claims `w` × `h` RGB pixels, with a tiny body.
    fn png_claiming(w: u32, h: u32) -> Vec<u8> {
        png_of_depth(w, h, 8, 2)
    }

    /// A PNG whose header claims `w` × `h` pixels of `depth` bits and PNG
    /// colour type `color` (2: RGB, 6: RGBA), with a tiny body.
    fn png_of_depth(w: u32, h: u32, depth: u8, color: u8) -> Vec<u8> {
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut ihdr = b"IHDR".to_vec();
        ihdr.extend(w.to_be_bytes());
        ihdr.extend(h.to_be_bytes());
        ihdr.extend([depth, color, 0, 0, 0]);
        out.extend(13u32.to_be_bytes());
        out.extend(&ihdr);
        out.extend(crc32(&ihdr).to_be_bytes());
        let idat = b"IDAT\x78\x9c\x03\x00\x00\x00\x00\x01".to_vec();
        out.extend(((idat.len() - 4) as u32).to_be_bytes());
        out.extend(&idat);
        out.extend(crc32(&idat).to_be_bytes());
        out.extend(0u32.to_be_bytes());
        out.extend(b"IEND");
        out.extend(crc32(b"IEND").to_be_bytes());
        out
    }

    #[test]
    fn pixels_past_the_bound_are_refused_from_the_header() {
        let err = Picture::decode_within(&png_claiming(100, 100), 9_999, DEFAULT_MAX_DECODE_BYTES)
            .unwrap_err();
        assert!(
            matches!(
                err,
                MediaError::TooManyPixels {
                    width: 100,
                    height: 100,
                    max: 9_999
                }
            ),
            "{err}"
        );
        let err = Picture::decode(&png_claiming(10_000, 10_000)).unwrap_err();
        assert!(err.to_string().contains("100000000 pixels"), "{err}");
    }

    #[test]
    fn a_huge_picture_is_refused_before_decoding() {
        let err = Picture::decode(&png_claiming(20_000, 20_000)).unwrap_err();
        assert!(
            matches!(err, MediaError::TooLarge { width: 20_000, .. }),
            "{err}"
        );
        // A sane header with a body that does not hold its pixels.
        let err = Picture::decode(&png_claiming(64, 64)).unwrap_err();
        assert!(matches!(err, MediaError::Decode(_)), "{err}");
    }

    #[test]
    fn a_deep_picture_within_the_pixel_bound_is_refused_by_its_memory() {
        // 16-bit RGBA at the default pixel bound: 8 bytes a pixel to decode
        // (a flat one is a 400 KB file), refused from the header alone.
        let bomb = png_of_depth(7071, 7071, 16, 6);
        let err = Picture::decode(&bomb).unwrap_err();
        let MediaError::TooMuchMemory { needed, max } = err else {
            panic!("{err}");
        };
        assert_eq!(max, DEFAULT_MAX_DECODE_BYTES);
        assert!(needed > 7071 * 7071 * 8, "{needed}");
        // The same size at 8-bit RGB fits, and gets as far as its pixels.
        let err = Picture::decode(&png_of_depth(7071, 7071, 8, 2)).unwrap_err();
        assert!(matches!(err, MediaError::Decode(_)), "{err}");
        // A lower bound refuses the small one too.
        let err = Picture::decode_within(&png_claiming(64, 64), u64::MAX, 1 << 20).unwrap_err();
        assert!(matches!(err, MediaError::TooMuchMemory { .. }), "{err}");
    }

    #[test]
    fn the_price_of_a_picture_is_what_its_decode_checks() {
        let bomb = png_of_depth(7071, 7071, 16, 6);
        let MediaError::TooMuchMemory { needed, .. } = Picture::decode(&bomb).unwrap_err() else {
            panic!("not refused by its memory");
        };
        assert_eq!(Picture::decode_memory_of(&bomb).unwrap(), needed);
        // A header past every bound is refused or priced (saturating, not
        // overflowed) past any budget.
        let huge = png_of_depth(u32::MAX >> 1, u32::MAX >> 1, 16, 6);
        assert!(Picture::decode_memory_of(&huge).map_or(true, |n| n > 1 << 60));
        let wide = png_of_depth(1 << 20, 1 << 20, 16, 6);
        assert!(Picture::decode_memory_of(&wide).map_or(true, |n| n > 1 << 40));
        assert!(Picture::decode_memory_of(b"not a picture").is_err());
    }

    #[test]
    fn the_estimate_bounds_a_real_decode_and_rgba_folds_onto_white() {
        let rgba =
            image::RgbaImage::from_fn(3, 2, |x, _| image::Rgba([200, 10, 0, 255 - 127 * x as u8]));
        let mut png = Vec::new();
        image::DynamicImage::ImageRgba8(rgba)
            .write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        let p = Picture::decode(&png).unwrap();
        assert_eq!(&p.rgb()[..3], &[200, 10, 0]);
        assert_eq!(
            &p.rgb()[3..6],
            &[
                over_white(200, 128),
                over_white(10, 128),
                over_white(0, 128)
            ]
        );
        assert_eq!(p.rgb().len(), 3 * 3 * 2);
    }

    #[test]
    fn headers_tell_progressive_jpegs_and_animated_webps() {
        // SOI, an APP0 segment of 4 bytes, then the frame marker.
        let jpeg = |sof: u8| [0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, sof, 0, 11].to_vec();
        assert!(!jpeg_is_progressive(&jpeg(0xC0)));
        assert!(jpeg_is_progressive(&jpeg(0xC2)));
        assert!(jpeg_is_progressive(&[0xFF, 0xD8, 0x00]));
        let mut webp = b"RIFF\0\0\0\0WEBPVP8X\x0a\0\0\0\0\0\0\0".to_vec();
        assert!(!webp_is_animated(&webp));
        webp[20] = 0x02;
        assert!(webp_is_animated(&webp));
        assert!(
            decode_memory(
                (1000, 1000),
                image::ColorType::Rgb8,
                working_per_pixel(image::ImageFormat::Jpeg, &jpeg(0xC2))
            ) > decode_memory(
                (1000, 1000),
                image::ColorType::Rgb8,
                working_per_pixel(image::ImageFormat::Jpeg, &jpeg(0xC0))
            )
        );
    }

    #[test]
    fn bad_files_are_errors() {
        assert!(matches!(Picture::decode(&[]), Err(MediaError::Decode(_))));
        assert!(matches!(
            Picture::decode(b"hello, not an image"),
            Err(MediaError::Decode(_))
        ));
        assert!(Picture::from_rgb(2, 2, vec![0; 11]).is_err());
    }
}
