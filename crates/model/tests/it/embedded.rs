//! Embedded rows with a bidirectional span (an image) give the same logits
//! whichever attention schedule runs them: one long batch (the blocked
//! schedule), short batches (row by row), and two sequences in one
//! `forward_multi` step (row by row, rows of both sequences mixed).

use hearth_model::{Embedded, LoadOptions, Model, Precision, SeqInput};
use std::path::PathBuf;

const N_CTX: usize = 64;

fn model() -> Model {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny/gemma3/model-f32.gguf");
    Model::load(
        path,
        &LoadOptions {
            threads: 2,
            precision: Precision::Exact,
            kv_cache: None,
        },
    )
    .unwrap()
}

/// 20 tokens whose positions 6..11 are replaced by `rows` (a 5-token span).
fn tokens() -> Vec<u32> {
    (0..20)
        .map(|i| if i == 0 { 2 } else { 3 + (i * 37 % 500) as u32 })
        .collect()
}

fn rows(width: usize, seed: f32) -> Vec<f32> {
    (0..5 * width)
        .map(|i| ((i as f32 * 0.37 + seed).sin()) * 0.8)
        .collect()
}

const SPAN: std::ops::Range<usize> = 6..11;

/// Logits of the last token, the prompt fed in batches ending at `cuts`.
fn fed_in(model: &Model, cuts: &[usize], emb: &[f32], bidirectional: bool) -> Vec<f32> {
    let ids = tokens();
    let mut cache = model.new_cache(N_CTX);
    let mut scratch = model.new_scratch(N_CTX, 32);
    let mut start = 0;
    for &end in cuts {
        let spans: Vec<Embedded<'_>> = if start <= SPAN.start && SPAN.end <= end {
            vec![Embedded {
                start: SPAN.start - start,
                len: SPAN.len(),
                rows: emb,
                bidirectional,
            }]
        } else {
            Vec::new()
        };
        model
            .forward_embedded(&mut cache, &mut scratch, &ids[start..end], &spans)
            .unwrap();
        start = end;
    }
    let n = scratch.batch();
    model.logits(&mut scratch, n - 1..n).unwrap().to_vec()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
}

#[test]
fn every_schedule_gives_the_same_logits() {
    let m = model();
    let emb = rows(m.config().hidden, 0.3);
    // One batch of 20 rows: the blocked schedule.
    let blocked = fed_in(&m, &[20], &emb, true);
    // Batches of 6, 5 and 9 rows: row by row.
    let rows_path = fed_in(&m, &[6, 11, 20], &emb, true);
    assert!(
        max_diff(&blocked, &rows_path) < 1e-4,
        "{}",
        max_diff(&blocked, &rows_path)
    );
    // The span matters: causal-only attention within it gives other logits.
    let causal = fed_in(&m, &[20], &emb, false);
    assert!(max_diff(&blocked, &causal) > 1e-3);
}

#[test]
fn two_sequences_with_spans_in_one_step() {
    let m = model();
    let w = m.config().hidden;
    let (ea, eb) = (rows(w, 0.3), rows(w, 1.7));
    let ids = tokens();
    let want_a = fed_in(&m, &[6, 11, 20], &ea, true);
    let want_b = fed_in(&m, &[6, 11, 20], &eb, true);
    let (mut ca, mut cb) = (m.new_cache(N_CTX), m.new_cache(N_CTX));
    let mut scratch = m.new_scratch(N_CTX, 32);
    let span = |e| {
        [Embedded {
            start: 0,
            len: SPAN.len(),
            rows: e,
            bidirectional: true,
        }]
    };
    let (sa, sb) = (span(&ea), span(&eb));
    // The shared prefix, then both spans in one multi-sequence step, then the rest.
    for (range, with_span) in [(0..6, false), (6..11, true), (11..20, false)] {
        let mut seqs = [
            SeqInput {
                cache: &mut ca,
                tokens: &ids[range.clone()],
                embedded: if with_span { &sa } else { &[] },
            },
            SeqInput {
                cache: &mut cb,
                tokens: &ids[range.clone()],
                embedded: if with_span { &sb } else { &[] },
            },
        ];
        m.forward_multi(&mut seqs, &mut scratch).unwrap();
    }
    let rows_b = scratch.sequence_rows(1).unwrap();
    let got_a = m
        .logits(&mut scratch, rows_b.start - 1..rows_b.start)
        .unwrap()
        .to_vec();
    let got_b = m
        .logits(&mut scratch, rows_b.end - 1..rows_b.end)
        .unwrap()
        .to_vec();
    assert!(max_diff(&got_a, &want_a) < 1e-4);
    assert!(max_diff(&got_b, &want_b) < 1e-4);
    assert!(max_diff(&want_a, &want_b) > 1e-3, "the two pictures differ");
}

#[test]
fn bad_spans_are_refused() {
    let m = model();
    let w = m.config().hidden;
    let emb = rows(w, 0.3);
    let ids = tokens();
    let mut cache = m.new_cache(N_CTX);
    let mut scratch = m.new_scratch(N_CTX, 32);
    for (start, len, values) in [(18, 5, 5 * w), (0, 5, 4 * w), (0, 0, 0)] {
        let span = [Embedded {
            start,
            len,
            rows: &emb[..values],
            bidirectional: true,
        }];
        assert!(m
            .forward_embedded(&mut cache, &mut scratch, &ids, &span)
            .is_err());
    }
    // A span longer than a batch.
    let mut small = m.new_scratch(N_CTX, 4);
    let span = [Embedded {
        start: 6,
        len: 5,
        rows: &emb,
        bidirectional: true,
    }];
    let err = m
        .forward_embedded(&mut cache, &mut small, &ids, &span)
        .unwrap_err();
    assert!(err.to_string().contains("do not fit a batch of 4"), "{err}");
}
