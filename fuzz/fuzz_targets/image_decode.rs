//! Fuzz picture decoding and the vision preprocessor's pixel work: the
//! input is an image file (PNG, JPEG, WebP) as a chat request carries it,
//! decoded with `Picture::decode` (the default pixel limit), then resized
//! with the processors' bilinear (Gemma 3) and bicubic (Gemma 4) filters
//! and normalised into channel-first floats.
//!
//! Structure-aware: a PNG input has every chunk CRC recomputed before
//! decoding, so mutations of IHDR (sizes, bit depth, colour type,
//! interlacing), PLTE, tRNS and IDAT reach the decoder instead of failing
//! the checksum. The resize targets are small (1 to 64 pixels a side, from
//! the input's last bytes) so one run stays fast; the real processors
//! resize to 896 (Gemma 3) or a size of whole pooling cells (Gemma 4) with
//! the same code.
//!
//! Invariants: no panic; a header claiming more than `MAX_SIDE` a side or
//! `DEFAULT_MAX_PIXELS` pixels is refused (fast, before decoding: the
//! -timeout and -rss_limit_mb flags catch a decoder that allocates or
//! works first); a decoded picture has width x height x 3 bytes.

#![no_main]

use hearth_media::{Picture, DEFAULT_MAX_PIXELS, MAX_SIDE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.to_vec();
    hearth_fuzz::fix_png_crcs(&mut bytes);
    let Ok(p) = Picture::decode(&bytes) else {
        return;
    };
    let (w, h) = (p.width(), p.height());
    assert!(
        w >= 1 && h >= 1 && w <= MAX_SIDE && h <= MAX_SIDE,
        "{w}x{h}"
    );
    assert!(u64::from(w) * u64::from(h) <= DEFAULT_MAX_PIXELS, "{w}x{h}");
    assert_eq!(p.rgb().len() as u64, u64::from(w) * u64::from(h) * 3);
    let side = |b: Option<&u8>| u32::from(b.copied().unwrap_or(7) % 64) + 1;
    let (tw, th) = (side(data.last()), side(data.iter().rev().nth(1)));
    let mean = [0.5, 0.5, 0.5];
    let std = [0.5, 0.5, 0.5];
    for resized in [p.resize_bilinear(tw, th), p.resize_bicubic(tw, th)] {
        let r = resized.expect("a decoded picture resizes to 1..=64 a side");
        assert_eq!((r.width(), r.height()), (tw, th));
        let px = r.normalized(mean, std);
        assert_eq!(px.len(), (tw * th * 3) as usize);
        assert!(
            px.iter().all(|v| (-1.0..=1.0).contains(v)),
            "a pixel outside [-1, 1]"
        );
    }
});
