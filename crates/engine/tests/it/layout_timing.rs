//! A model whose decode layout is made after its load (as the server loads
//! them) gives the logits of one whose layout was made before, bit for bit,
//! while the layout is being made and once it is: the real 270M, whose
//! matrices have the layout on x86 tiers with AVX2.

use crate::common;

use common::real_model;
use hearth_engine::{Engine, LayoutTiming, RunOptions};
use std::time::{Duration, Instant};

fn load(layout: LayoutTiming) -> Engine {
    let opts = RunOptions {
        threads: Some(2),
        ctx: Some(256),
        layout,
        ..RunOptions::default()
    };
    Engine::load(real_model(), &opts).unwrap()
}

/// The logits of a prompt's last position and of 12 greedy steps after it.
fn steps(engine: &Engine) -> Vec<Vec<f32>> {
    let prompt =
        engine
            .tokenizer()
            .encode("The lighthouse keeper climbed the stairs and", true, false);
    let mut session = engine.session();
    session.feed(&prompt).unwrap();
    let mut all = vec![session.last_logits().unwrap().to_vec()];
    for _ in 0..12 {
        let last = all.last().unwrap();
        let next = (0..last.len())
            .max_by(|&a, &b| last[a].total_cmp(&last[b]))
            .unwrap() as u32;
        all.push(session.feed_batch(&[next]).unwrap().to_vec());
    }
    all
}

#[test]
fn a_layout_made_after_the_load_changes_no_bit() {
    let want = steps(&load(LayoutTiming::AtLoad));
    let later = load(LayoutTiming::AfterLoad);
    let pending = later.layout_pending();
    if quant_reads_layout() && std::env::var_os("HEARTH_INTERLEAVE").is_none() {
        assert!(pending, "the layout was made before the load returned");
    }
    assert!(
        steps(&later) == want,
        "logits differ while the layout is made"
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while later.layout_pending() {
        assert!(Instant::now() < deadline, "the layout was never made");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        steps(&later) == want,
        "logits differ once the layout is made"
    );
    eprintln!("layout still being made at the first prompt: {pending}");
}

/// Whether the kernels in use have the layout at all (x86-64 from AVX2).
fn quant_reads_layout() -> bool {
    quant::interleaves(quant::GgmlType::Q4_K)
}
