use super::amx;
use super::*;
use bytemuck::bytes_of;
use proptest::prelude::*;

/// Random rows of `ty` with sane scales: quantized from random floats.
fn random_rows(ty: GgmlType, n: usize, cols: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut x = seed | 1;
    let mut bits = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    if let Ok(all) = crate::testing::random_lattice_blocks(ty, n * cols / 256, 1.0, &mut bits) {
        return all.chunks(all.len() / n).map(<[u8]>::to_vec).collect();
    }
    let mut next = || ((bits() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
    (0..n)
        .map(|_| {
            let v: Vec<f32> = (0..cols).map(|_| next()).collect();
            let mut b = vec![0u8; crate::row_size(ty, cols).unwrap()];
            crate::quantize(ty, &v, &mut b).unwrap();
            b
        })
        .collect()
}

fn random_acts(
    n: usize,
    cols: usize,
    at: GgmlType,
    g: usize,
    off: i32,
    seed: u64,
) -> (Acts, Vec<f32>) {
    let mut x = seed | 1;
    let xs: Vec<f32> = (0..n * cols)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 6.0 - 3.0
        })
        .collect();
    let mut a = Acts::default();
    a.fill(GemmTier::Portable, &xs, cols, at, g, off);
    (a, xs)
}

/// The formats with a panel form, the lattice ones included.
const TYPES: [GgmlType; 19] = concat_types(BASE_TYPES, GgmlType::LATTICE);

const BASE_TYPES: [GgmlType; 12] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

/// `a` then `b`.
const fn concat_types<const A: usize, const B: usize, const N: usize>(
    a: [GgmlType; A],
    b: [GgmlType; B],
) -> [GgmlType; N] {
    assert!(A + B == N);
    let mut out = [GgmlType::F32; N];
    let mut i = 0;
    while i < N {
        out[i] = if i < A { a[i] } else { b[i - A] };
        i += 1;
    }
    out
}

/// Every format packs to a shape the AVX2 tile has a kernel for (any other
/// would silently run the reference).
#[cfg(target_arch = "x86_64")]
#[test]
fn every_format_has_an_avx2_kernel() {
    for ty in TYPES {
        let w = random_rows(ty, NR, 256, 7);
        let views: Vec<&[u8]> = w.iter().map(|r| r.as_slice()).collect();
        let mut p = Panel::default();
        p.fill(ty, &views, 256);
        assert!(
            super::x86::avx2_has_kernel(&p),
            "{ty:?}: {:?}",
            (p.g, p.min, p.run)
        );
    }
}

/// The GEMM tiers this CPU can run.
fn tiers() -> Vec<GemmTier> {
    let mut v: Vec<GemmTier> = crate::simd::available().iter().map(|k| k.gemm).collect();
    v.dedup();
    v
}

proptest! {
    /// Every tier's tile gives exactly the reference's sums, for every type,
    /// partial tiles and partial panels included.
    #[test]
    fn simd_tile_matches_scalar(t in 0usize..TYPES.len(), sbs in 1usize..4, rows in 1usize..=NR, m in 1usize..=MR, seed in any::<u64>()) {
        let ty = TYPES[t];
        let cols = sbs * 256;
        let g = group_len(ty).unwrap();
        let w = random_rows(ty, rows, cols, seed);
        let views: Vec<&[u8]> = w.iter().map(|r| r.as_slice()).collect();
        let mut p = Panel::default();
        p.fill(ty, &views, cols);
        let (a, _) = random_acts(m + 1, cols, crate::vec_dot_type(ty), g, offset(ty), seed ^ 0x5555);
        let want = tile_scalar(&p, &a, 1, m);
        for tier in tiers() {
            let got = tile(tier, &p, &a, 1, m);
            prop_assert_eq!(got, want, "{:?}", tier);
        }
    }
}

proptest! {
    /// The AMX block kernel (its instructions emulated, and the real ones
    /// where the CPU has them) gives exactly the reference's sums, for every
    /// type, whole and partial blocks and partial panels, at a block that
    /// does not start the batch.
    #[test]
    fn amx_block_matches_scalar(t in 0usize..TYPES.len(), sbs in 1usize..3, rows in 1usize..=NR, m in 1usize..=amx::MA, seed in any::<u64>()) {
        let ty = TYPES[t];
        let cols = sbs * 256;
        let g = group_len(ty).unwrap();
        let w = random_rows(ty, rows, cols, seed);
        let views: Vec<&[u8]> = w.iter().map(|r| r.as_slice()).collect();
        let (mut plain, mut signed) = (Panel::default(), Panel::default());
        plain.fill(ty, &views, cols);
        signed.fill_as(ty, &views, cols, true);
        let c0 = amx::MA;
        let (mut a, _) = random_acts(c0 + m, cols, crate::vec_dot_type(ty), g, offset(ty), seed ^ 0x3333);
        // The tile loads read whole blocks of rows.
        a.q.resize((c0 + amx::MA) * cols, 0);
        let mut got = vec![amx::tile_emulated(&signed, &a, c0, m)];
        // The real unit's AVX-512 float steps, wherever the CPU has AVX-512.
        got.extend(amx::tile_emulated_avx512_steps(&signed, &a, c0, m));
        if amx::usable() {
            got.push(*amx::Tiles::new().block(&signed, &a, c0, m));
        }
        for c in (0..m).step_by(MR) {
            let n = (m - c).min(MR);
            let want = tile_scalar(&plain, &a, c0 + c, n);
            for block in &got {
                prop_assert_eq!(&block[c..c + n], &want[..n]);
            }
        }
    }
}

/// The signed panel holds each value: the unpacked values less the
/// format's offset.
#[test]
fn signed_panel_is_the_unsigned_one_less_its_offset() {
    for (i, &ty) in TYPES.iter().enumerate() {
        let cols = 512;
        let w = random_rows(ty, NR - 3, cols, 11 + i as u64);
        let views: Vec<&[u8]> = w.iter().map(|r| r.as_slice()).collect();
        let (mut plain, mut signed) = (Panel::default(), Panel::default());
        plain.fill(ty, &views, cols);
        signed.fill_as(ty, &views, cols, true);
        assert_eq!(plain.s, signed.s, "{ty}");
        assert_eq!(plain.m, signed.m, "{ty}");
        for (k4, quads) in plain.q.chunks_exact(NR * 4).enumerate() {
            // Missing rows are zero bytes in both.
            for (j, (&u, &s)) in quads.iter().zip(&signed.q[k4 * NR * 4..]).enumerate() {
                let r = j / 4;
                if r >= NR - 3 {
                    assert_eq!((u, s), (0, 0), "{ty} step {k4} byte {j}");
                    continue;
                }
                let q = i32::from(u) - plain.off;
                assert_eq!(q, i32::from(s as i8), "{ty} step {k4} byte {j}");
            }
        }
    }
}

/// Every tier's activation quantizers write the scalar ones' bytes (the
/// safe dispatchers are the code under test; they pick the tier's kernel).
#[test]
fn tier_activation_quantizers_match_scalar() {
    let mut x = 0x2545_f491_u64;
    for round in 0..200 {
        let scale = [1e-3f32, 1.0, 37.0, 1e4][round % 4];
        let v: Vec<f32> = (0..256)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Some exact halves and repeated extremes, to hit ties.
                if round % 5 == 0 && i % 9 == 0 {
                    scale * if i % 2 == 0 { 1.0 } else { -1.0 }
                } else if round % 7 == 0 && i % 5 == 0 {
                    // Values landing on .5 after scaling by 127/amax.
                    scale * (2 * (i % 11) + 1) as f32 / 254.0
                } else {
                    ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
                }
            })
            .collect();
        for tier in tiers() {
            let (mut want, mut got) = (vec![0u8; BlockQ8K::BYTES], BlockQ8K::zeroed());
            kquants::quant_q8_k(&v, &mut want);
            quant_q8_k(tier, &v, &mut got);
            assert_eq!(want, bytes_of(&got), "{tier:?} q8_k round {round}");
            // The whole row through the decode path's quantizer, sums too.
            let mut row = vec![0u8; BlockQ8K::BYTES];
            quantize_act_row(tier, GgmlType::Q8_K, &v, &mut row).unwrap();
            assert_eq!(want, row, "{tier:?} q8_k row round {round}");
            let mut row = vec![0u8; BlockQ8_0::BYTES * 8];
            let mut want_row = vec![0u8; BlockQ8_0::BYTES * 8];
            quantize_act_row(tier, GgmlType::Q8_0, &v, &mut row).unwrap();
            legacy::quant_q8_0_act(&v, &mut want_row);
            assert_eq!(want_row, row, "{tier:?} q8_0 row round {round}");
            for b in 0..8 {
                let (mut want, mut got) = (vec![0u8; BlockQ8_0::BYTES], BlockQ8_0::zeroed());
                let x = &v[32 * b..32 * (b + 1)];
                legacy::quant_q8_0_act(x, &mut want);
                quant_q8_0(tier, x, &mut got);
                assert_eq!(
                    want,
                    bytes_of(&got),
                    "{tier:?} q8_0 round {round} block {b}"
                );
            }
        }
    }
    for tier in tiers() {
        let zeros = [0.0f32; 256];
        let mut want = vec![0u8; BlockQ8K::BYTES];
        let mut got: BlockQ8K = bytemuck::cast([1u8; BlockQ8K::BYTES]);
        kquants::quant_q8_k(&zeros, &mut want);
        quant_q8_k(tier, &zeros, &mut got);
        assert_eq!(want, bytes_of(&got));
        let mut want = vec![0u8; BlockQ8_0::BYTES];
        let mut got: BlockQ8_0 = bytemuck::cast([1u8; BlockQ8_0::BYTES]);
        legacy::quant_q8_0_act(&zeros[..32], &mut want);
        quant_q8_0(tier, &zeros[..32], &mut got);
        assert_eq!(want, bytes_of(&got));
    }
}

/// Every tier fills the panel product's activation rows with the
/// portable path's bytes, scales, sums and starting integers, for every
/// activation form and group length the formats use: rows of a whole
/// number of 16-block runs and with runs left over, blocks of zeros,
/// exact ties and values far apart in size.
#[test]
fn acts_rows_match_portable_on_every_tier() {
    let mut seed = 99u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    for ty in TYPES {
        let (at, g, off) = (crate::vec_dot_type(ty), group_len(ty).unwrap(), offset(ty));
        for cols in [256usize, 1152, 2560, 6912, 32 * 17] {
            if !cols.is_multiple_of(at.block_len()) {
                continue;
            }
            let rows = 3;
            let xs: Vec<f32> = (0..rows * cols)
                .map(|i| {
                    let block = i / 32;
                    match block % 9 {
                        // A block of zeros.
                        4 => 0.0,
                        // Equal magnitudes of both signs (ties for the maximum).
                        6 => {
                            if i % 2 == 0 {
                                0.75
                            } else {
                                -0.75
                            }
                        }
                        // Values landing on .5 after scaling by 127/amax.
                        7 => (2 * (i % 11) + 1) as f32 / 254.0,
                        _ => next() * if block % 5 == 1 { 1e3 } else { 1.0 },
                    }
                })
                .collect();
            let mut want = Acts::default();
            want.fill(GemmTier::Portable, &xs, cols, at, g, off);
            for tier in tiers() {
                let mut got = Acts::default();
                got.fill(tier, &xs, cols, at, g, off);
                let n = rows * cols;
                let what = format!("{tier:?}, {ty}, {cols} columns");
                assert_eq!(got.q[..n], want.q[..n], "{what}: values");
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&got.d[..n / 32]),
                    bits(&want.d[..n / 32]),
                    "{what}: scales"
                );
                assert_eq!(
                    bits(&got.sum[..n / g]),
                    bits(&want.sum[..n / g]),
                    "{what}: sums"
                );
                assert_eq!(got.base[..n / g], want.base[..n / g], "{what}: starts");
            }
        }
    }
}

/// The panel product agrees with dequantized weights times the Q8_0
/// activations' values, for every type (the unpacking and the shift are
/// right, not only consistent between the two kernels).
#[test]
fn tile_matches_dequantized_product() {
    for (i, &ty) in TYPES.iter().enumerate() {
        let cols = 512;
        let g = group_len(ty).unwrap();
        let w = random_rows(ty, NR, cols, 7 + i as u64);
        let views: Vec<&[u8]> = w.iter().map(|r| r.as_slice()).collect();
        let mut p = Panel::default();
        p.fill(ty, &views, cols);
        // Q8_1's f16 block sums are rounded; exact Q8_0 sums isolate the
        // unpacking, which is what this checks.
        let at = match crate::vec_dot_type(ty) {
            GgmlType::Q8_1 => GgmlType::Q8_0,
            at => at,
        };
        let (a, _) = random_acts(MR, cols, at, g, offset(ty), 99);
        let got = tile(crate::simd::best().gemm, &p, &a, 0, MR);
        for (r, row) in w.iter().enumerate() {
            let mut wf = vec![0.0f32; cols];
            crate::dequantize(ty, row, &mut wf).unwrap();
            for (c, got_c) in got.iter().enumerate() {
                let mut want = 0.0f64;
                let mut mag = 0.0f64;
                for (k, &wk) in wf.iter().enumerate() {
                    let av = a.q[c * cols + k] as i8 as f64 * a.d[c * cols / QK + k / QK] as f64;
                    want += wk as f64 * av;
                    mag += (wk as f64 * av).abs();
                }
                let err = (got_c[r] as f64 - want).abs();
                assert!(
                    err <= 1e-5 * mag + 1e-6,
                    "{ty} row {r} col {c}: {} vs {want}",
                    got_c[r]
                );
            }
        }
    }
}

/// `n` raw random bytes (any scale bits, NaN and infinity included).
fn raw_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 56) as u8
        })
        .collect()
}

/// The panel's bytes, scales and minimum terms, bit for bit.
fn panel_bits(p: &Panel, cols: usize) -> (Vec<u8>, Vec<u32>, Vec<u32>) {
    let n = p.groups * NR;
    (
        p.q[..cols * NR].to_vec(),
        p.s[..n].iter().map(|v| v.to_bits()).collect(),
        p.m[..n].iter().map(|v| v.to_bits()).collect(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    /// Every tier's packer stores the portable packer's panel, for every
    /// format: quantized rows, and raw random bytes (any scale bits,
    /// NaN and infinity included), whole panels and short ones.
    #[test]
    fn every_tier_packs_the_portable_panel(t in 0usize..TYPES.len(), sbs in 1usize..4, short in 1usize..NR, whole in 0usize..4, raw in any::<bool>(), seed in any::<u64>()) {
        let ty = TYPES[t];
        // Mostly whole panels, which the vector packers take (short ones go
        // to the portable packer on every tier).
        let rows = if whole > 0 { NR } else { short };
        let cols = sbs * 256;
        let w: Vec<Vec<u8>> = if raw {
            let rb = crate::row_size(ty, cols).unwrap();
            raw_bytes(rows * rb, seed).chunks(rb).map(<[u8]>::to_vec).collect()
        } else {
            random_rows(ty, rows, cols, seed)
        };
        let views: Vec<&[u8]> = w.iter().map(|r| r.as_slice()).collect();
        // Both forms: the register tiles' (unsigned) and AMX's (signed).
        for signed in [false, true] {
            let mut want = Panel::default();
            want.fill_on(GemmTier::Portable, ty, &views, cols, signed);
            for tier in tiers() {
                // A panel that held a wider one first (and the other form),
                // as the product's reused panels do.
                let mut got = Panel::default();
                got.fill_on(tier, ty, &views, cols + 256, !signed);
                got.fill_on(tier, ty, &views, cols, signed);
                let (g, w) = (panel_bits(&got, cols), panel_bits(&want, cols));
                let first = |a: &[u32], b: &[u32]| a.iter().zip(b).position(|(x, y)| x != y);
                let bytes = g.0.iter().zip(&w.0).position(|(x, y)| x != y);
                prop_assert_eq!(bytes, None, "{:?} on {:?} (signed {}): first differing byte", ty, tier, signed);
                prop_assert_eq!(first(&g.1, &w.1), None, "{:?} on {:?}: first differing scale", ty, tier);
                prop_assert_eq!(first(&g.2, &w.2), None, "{:?} on {:?}: first differing minimum", ty, tier);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Packing interleaved rows straight from their layout stores the
    /// portable packer's panel of the same rows, in both forms, on every
    /// tier that takes that path (raw random bytes: any scale bits).
    #[test]
    fn interleaved_rows_pack_the_portable_panel(t in 0usize..4, blocks in 1usize..12, seed in any::<u64>()) {
        use crate::formats::interleave::{interleave_group, GROUP_ROWS};
        let ty = [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_0, GgmlType::Q8_0][t];
        // K-quants in whole 256-blocks; the others also at widths that are not.
        let cols = if ty.block_len() == 256 { blocks * 256 } else { blocks * 96 };
        let nb = cols / ty.block_len();
        let rb = crate::row_size(ty, cols).unwrap();
        let rows = raw_bytes(NR * rb, seed);
        let views: Vec<&[u8]> = rows.chunks_exact(rb).collect();
        let mut laid = vec![0u8; rows.len()];
        for (i, dst) in laid.chunks_exact_mut(GROUP_ROWS * rb).enumerate() {
            let group: [&[u8]; GROUP_ROWS] = std::array::from_fn(|r| views[GROUP_ROWS * i + r]);
            interleave_group(ty, group, nb, dst);
        }
        let groups: Vec<&[u8]> = laid.chunks_exact(GROUP_ROWS * rb).collect();
        let mut took = false;
        for signed in [false, true] {
            let mut want = Panel::default();
            want.fill_on(GemmTier::Portable, ty, &views, cols, signed);
            prop_assert!(!Panel::default().fill_interleaved(GemmTier::Portable, ty, &groups, cols, signed));
            for tier in tiers() {
                let mut got = Panel::default();
                // A wider panel of the other form first, as reused ones are.
                got.fill_on(tier, ty, &views, cols + 256, !signed);
                if !got.fill_interleaved(tier, ty, &groups, cols, signed) {
                    continue;
                }
                took = true;
                let (g, w) = (panel_bits(&got, cols), panel_bits(&want, cols));
                let first = |a: &[u32], b: &[u32]| a.iter().zip(b).position(|(x, y)| x != y);
                let bytes = g.0.iter().zip(&w.0).position(|(x, y)| x != y);
                prop_assert_eq!(bytes, None, "{:?} on {:?} (signed {}): first differing byte", ty, tier, signed);
                prop_assert_eq!(first(&g.1, &w.1), None, "{:?} on {:?}: first differing scale", ty, tier);
                prop_assert_eq!(first(&g.2, &w.2), None, "{:?} on {:?}: first differing minimum", ty, tier);
            }
        }
        // An x86 machine with AVX2 packs this way; elsewhere nothing does.
        #[cfg(target_arch = "x86_64")]
        prop_assert_eq!(took, is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c"));
        #[cfg(not(target_arch = "x86_64"))]
        prop_assert!(!took);
    }
}

/// What the AMX self-check does while the kernel tables are being chosen
/// (packing panels both ways, quantizing activations) never asks for them:
/// asking from inside their one-time initialisation deadlocked `hearth` on
/// an AMX machine once, before it printed anything.
#[test]
fn the_self_check_work_does_not_ask_for_the_kernel_tables() {
    let cases: Vec<(GgmlType, Vec<Vec<u8>>)> = TYPES
        .iter()
        .map(|&ty| (ty, random_rows(ty, NR, 512, 5)))
        .collect();
    let xs: Vec<f32> = (0..2 * 512).map(|i| (i % 17) as f32 - 8.0).collect();
    crate::simd::as_if_choosing(|| {
        for (ty, w) in &cases {
            let views: Vec<&[u8]> = w.iter().map(|r| r.as_slice()).collect();
            let (mut plain, mut signed) = (Panel::default(), Panel::default());
            plain.fill(*ty, &views, 512);
            signed.fill_as(*ty, &views, 512, true);
            let mut a = Acts::default();
            let at = crate::vec_dot_type(*ty);
            a.fill(GemmTier::Portable, &xs, 512, at, plain.g, offset(*ty));
            assert_eq!(plain.groups * plain.g, 512);
        }
    });
}
