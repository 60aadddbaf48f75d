use super::*;

fn ring(window: usize, cap: usize) -> LayerCache {
    LayerCache {
        k: KvBuf::F32(Vec::new()),
        v: KvBuf::F32(Vec::new()),
        cap,
        window: Some(window),
    }
}

/// Q8_0 holds whole blocks only; its bytes are 34 for every 32
/// elements; the names parse back.
#[test]
fn kv_types_hold_their_widths_and_names() {
    for ty in [KvType::F32, KvType::F16, KvType::Q8_0] {
        assert_eq!(ty.name().parse::<KvType>(), Ok(ty));
        assert!(ty.holds_width(256) && ty.holds_width(32));
    }
    assert!(!KvType::Q8_0.holds_width(48) && KvType::F16.holds_width(48));
    assert_eq!(KvType::Q8_0.bytes_of(256), 272);
    assert_eq!(KvType::F16.bytes_of(256), 512);
    assert!("q4_0".parse::<KvType>().unwrap_err().contains("q8_0"));
}

#[test]
fn a_wrapped_ring_rewinds_only_while_it_holds_the_window() {
    // Window 8, 4 slots of slack: positions 88..100 are in the ring.
    let l = ring(8, 12);
    assert!(l.can_rewind(10, 3), "not wrapped yet");
    assert!(l.can_rewind(100, 99));
    // The token at 95 reads 88..95: all held.
    assert!(l.can_rewind(100, 95));
    // The token at 94 reads 87..94: 87 is gone.
    assert!(!l.can_rewind(100, 94));
    let global = LayerCache {
        window: None,
        ..ring(8, 100)
    };
    assert!(global.can_rewind(100, 1));
}

/// A cache of a global layer (16 positions) and a ring (window 4, 8 slots)
/// of 8-wide f16 rows, holding `n` positions of made-up keys and values.
fn filled(n: usize) -> KvCache {
    let layer = |cap, window| LayerCache {
        k: KvBuf::F16(vec![f16::ZERO; cap * 8]),
        v: KvBuf::F16(vec![f16::ZERO; cap * 8]),
        cap,
        window,
    };
    let mut cache = KvCache {
        layers: vec![layer(16, None), layer(8, Some(4))],
        n_ctx: 16,
        n_past: n,
        high: n,
        adapters: nn::Adapters::default(),
    };
    for (i, l) in cache.layers.iter_mut().enumerate() {
        for (j, e) in l.k.bytes_mut().iter_mut().enumerate() {
            *e = (i * 31 + j * 7) as u8;
        }
        for (j, e) in l.v.bytes_mut().iter_mut().enumerate() {
            *e = (i * 17 + j * 3) as u8;
        }
    }
    cache
}

proptest::proptest! {
    /// A saved cache loads back whole however its bytes are cut; cut, cut
    /// short, lengthened or with any byte changed, it never panics: it
    /// loads (a changed row) or is refused, leaving the cache empty.
    #[test]
    fn saved_caches_load_back_and_damage_never_panics(
        n in 0usize..16,
        cuts in proptest::collection::vec(0usize..4000, 0..6),
        flip in 0usize..4000,
        byte in 0u8..=255,
        cut_short in 0usize..4000,
    ) {
        let cache = filled(n);
        let bytes = cache.save().to_vec();
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut parts: Vec<std::sync::Arc<[u8]>> = Vec::new();
        let mut from = 0;
        for p in points.into_iter().chain([bytes.len()]) {
            parts.push(bytes[from..p].into());
            from = p;
        }
        let mut other = filled(0);
        other.load(&SavedKv::from_parts(parts)).unwrap();
        proptest::prop_assert_eq!(other.save().to_vec(), bytes.clone());
        proptest::prop_assert_eq!(SavedKv::cut_from(&bytes).to_vec(), bytes.clone());
        let (held, layers) = saved_rows(&SavedKv::whole(bytes.clone())).unwrap();
        proptest::prop_assert_eq!((held, layers.len()), (n, 2));
        let mut damaged = bytes.clone();
        let at = flip % damaged.len();
        damaged[at] = byte;
        let short = bytes[..cut_short % bytes.len()].to_vec();
        let long = [bytes.clone(), vec![byte]].concat();
        for bad in [damaged, short, long] {
            let _ = saved_rows(&SavedKv::whole(bad.clone()));
            let recut = SavedKv::cut_from(&bad);
            proptest::prop_assert_eq!(recut.to_vec(), bad.clone());
            let mut target = filled(3);
            if target.load(&recut).is_err() {
                proptest::prop_assert_eq!(target.n_past(), 0);
            }
        }
    }
}
