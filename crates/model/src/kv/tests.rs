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
