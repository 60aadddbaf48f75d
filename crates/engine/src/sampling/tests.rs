#[test]
fn one_pass_top_k_equals_the_full_sort() {
    let mut rng = super::Rng::new(5);
    for case in 0..200usize {
        let n = 1 + case * 7 % 300;
        // Few distinct values, so ties are common; some non-finite.
        let logits: Vec<f32> = (0..n)
            .map(|_| match rng.next_f64() {
                x if x < 0.05 => f32::NAN,
                x if x < 0.1 => f32::NEG_INFINITY,
                x if x < 0.2 => -0.0,
                x => (x * 20.0).floor() as f32 - 10.0,
            })
            .collect();
        for k in [1, 2, 5, 40, n.saturating_sub(1).max(1)] {
            let mut want: Vec<(u32, f32)> = logits
                .iter()
                .enumerate()
                .filter(|(_, l)| l.is_finite())
                .map(|(i, &l)| (i as u32, l))
                .collect();
            want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            want.truncate(k);
            let mut got = Vec::new();
            super::top_k_sorted(&logits, k, &mut got);
            assert_eq!(got, want, "n {n} k {k}");
        }
    }
}

#[test]
fn chunked_argmax_equals_the_one_element_loop() {
    fn naive(logits: &[f32]) -> usize {
        let (mut best, mut best_v) = (0, f32::NEG_INFINITY);
        for (i, &v) in logits.iter().enumerate() {
            if v > best_v {
                best = i;
                best_v = v;
            }
        }
        best
    }
    let mut rng = super::Rng::new(11);
    for case in 0..400usize {
        let n = case * 13 % 700;
        // Few distinct values (ties across and inside chunks), signed
        // zeros, NaN and infinities.
        let logits: Vec<f32> = (0..n)
            .map(|_| match rng.next_f64() {
                x if x < 0.05 => f32::NAN,
                x if x < 0.1 => f32::NEG_INFINITY,
                x if x < 0.12 && case % 3 == 0 => f32::INFINITY,
                x if x < 0.3 => -0.0,
                x if x < 0.4 => 0.0,
                x => (x * 12.0).floor() as f32 - 10.0,
            })
            .collect();
        assert_eq!(super::argmax(&logits), naive(&logits), "case {case} n {n}");
    }
    assert_eq!(super::argmax(&[f32::NAN; 100]), 0);
    assert_eq!(super::argmax(&[]), 0);
}

use super::*;

fn logits() -> Vec<f32> {
    vec![1.0, 3.0, 2.5, -1.0, 3.0, 0.0]
}

#[test]
fn greedy_takes_the_first_maximum() {
    let mut s = Sampler::new(SamplingParams::greedy());
    assert_eq!(s.sample(&mut logits(), &[]), 1);
}

#[test]
fn same_seed_same_tokens() {
    let params = SamplingParams {
        temperature: 1.5,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: 42,
        ..SamplingParams::default()
    };
    let run = |params: &SamplingParams| {
        let mut s = Sampler::new(params.clone());
        (0..50)
            .map(|_| s.sample(&mut logits(), &[]))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(&params), run(&params));
    let other = run(&SamplingParams {
        seed: 43,
        ..params.clone()
    });
    assert_ne!(run(&params), other);
    // With a high temperature and no truncation every token shows up.
    let seen: std::collections::HashSet<u32> = run(&params).into_iter().collect();
    assert!(seen.len() >= 4, "{seen:?}");
}

#[test]
fn top_k_limits_the_choice() {
    let params = SamplingParams {
        temperature: 5.0,
        top_k: 2,
        top_p: 1.0,
        min_p: 0.0,
        seed: 1,
        ..SamplingParams::default()
    };
    let mut s = Sampler::new(params);
    for _ in 0..100 {
        let t = s.sample(&mut logits(), &[]);
        assert!(t == 1 || t == 4, "{t}");
    }
}

#[test]
fn top_p_and_min_p_truncate() {
    let mut l = vec![10.0, 0.0, 0.0, 0.0];
    let params = SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 0.5,
        min_p: 0.0,
        seed: 3,
        ..SamplingParams::default()
    };
    let mut s = Sampler::new(params.clone());
    for _ in 0..50 {
        assert_eq!(s.sample(&mut l.clone(), &[]), 0);
    }
    let mut s = Sampler::new(SamplingParams {
        top_p: 1.0,
        min_p: 0.5,
        ..params
    });
    l[2] = 9.9;
    for _ in 0..50 {
        let t = s.sample(&mut l.clone(), &[]);
        assert!(t == 0 || t == 2);
    }
}

#[test]
fn repetition_penalty_changes_the_choice() {
    let mut s = Sampler::new(SamplingParams {
        repeat_penalty: 2.0,
        ..SamplingParams::greedy()
    });
    // Token 1 and 4 tie at 3.0; penalising 1 leaves 4.
    assert_eq!(s.sample(&mut logits(), &[1]), 4);
    let mut s = Sampler::new(SamplingParams {
        presence_penalty: 1.0,
        ..SamplingParams::greedy()
    });
    assert_eq!(s.sample(&mut logits(), &[1, 4]), 2);
}

#[test]
fn validation_names_the_parameter() {
    let bad = SamplingParams {
        temperature: -1.0,
        ..SamplingParams::default()
    };
    assert!(bad.validate().unwrap_err().contains("temperature"));
    let bad = SamplingParams {
        top_p: f32::NAN,
        ..SamplingParams::default()
    };
    assert!(bad.validate().unwrap_err().contains("top_p"));
    assert!(SamplingParams::default().validate().is_ok());
}

#[test]
fn logit_bias_moves_the_choice() {
    let mut l = logits();
    let worst = l
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as u32)
        .unwrap();
    let best = argmax(&l) as u32;
    let mut s = Sampler::new(SamplingParams {
        logit_bias: vec![(worst, 100.0), (best, -100.0), (u32::MAX, 5.0)],
        ..SamplingParams::greedy()
    });
    assert_eq!(s.sample(&mut l, &[]), worst);
    let bad = SamplingParams {
        logit_bias: vec![(1, 101.0)],
        ..SamplingParams::default()
    };
    assert!(bad.validate().unwrap_err().contains("logit_bias"));
}

#[test]
fn non_finite_logits_do_not_panic() {
    let mut s = Sampler::new(SamplingParams::default());
    let t = s.sample(&mut [f32::NAN, f32::NEG_INFINITY, 1.0], &[]);
    assert_eq!(t, 2);
}

/// llama.cpp's XTC cases (tests/test-sampling.cpp), greedy after XTC so the
/// token left on top names what XTC removed.
#[test]
fn xtc_removes_all_but_the_least_likely_top_choice() {
    let probs = [0.4f32, 0.3, 0.2, 0.1];
    for (threshold, want) in [(0.09, 3), (0.19, 2), (0.29, 1), (0.39, 0), (0.6, 0)] {
        let mut l: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
        let mut s = Sampler::new(SamplingParams {
            xtc_probability: 1.0,
            xtc_threshold: threshold,
            top_p: 1.0,
            min_p: 0.0,
            ..SamplingParams::greedy()
        });
        assert_eq!(s.sample(&mut l, &[]), want, "threshold {threshold}");
    }
}

#[test]
fn xtc_applies_with_its_probability_and_leaves_other_draws_alone() {
    let probs = [0.4f32, 0.3, 0.2, 0.1];
    let params = SamplingParams {
        xtc_probability: 0.5,
        xtc_threshold: 0.09,
        top_p: 1.0,
        min_p: 0.0,
        ..SamplingParams::greedy()
    };
    let mut s = Sampler::new(params);
    let removed = (0..2000)
        .filter(|_| {
            let mut l: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
            s.sample(&mut l, &[]) == 3
        })
        .count();
    assert!((850..1150).contains(&removed), "{removed} of 2000");
    // With XTC never firing, the draws are the ones without it.
    let draw = |xtc_probability| {
        let mut s = Sampler::new(SamplingParams {
            xtc_probability,
            xtc_threshold: 0.6,
            temperature: 1.0,
            seed: 9,
            ..SamplingParams::default()
        });
        (0..50)
            .map(|_| s.sample(&mut logits(), &[]))
            .collect::<Vec<_>>()
    };
    assert_eq!(draw(1.0), draw(0.0));
}

#[test]
fn top_n_sigma_keeps_the_tokens_near_the_best() {
    // llama.cpp's case: logits ln(0.1..0.4), one σ keeps tokens 2 and 3.
    let probs = [0.1f32, 0.2, 0.3, 0.4];
    let seen = |n: f32| {
        let mut s = Sampler::new(SamplingParams {
            top_n_sigma: n,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 4,
            ..SamplingParams::default()
        });
        let mut seen = [false; 4];
        for _ in 0..400 {
            let mut l: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
            seen[s.sample(&mut l, &[]) as usize] = true;
        }
        seen
    };
    assert_eq!(seen(1.0), [false, false, true, true]);
    assert_eq!(seen(3.0), [true; 4]);
    assert_eq!(seen(0.0), [true; 4]);
}

#[test]
fn the_new_samplers_check_their_ranges() {
    for (bad, name) in [
        (
            SamplingParams {
                xtc_probability: 1.5,
                ..SamplingParams::default()
            },
            "xtc_probability",
        ),
        (
            SamplingParams {
                top_n_sigma: f32::NAN,
                ..SamplingParams::default()
            },
            "top_n_sigma",
        ),
        (
            SamplingParams {
                dry: Dry {
                    multiplier: -1.0,
                    ..Dry::default()
                },
                ..SamplingParams::default()
            },
            "dry_multiplier",
        ),
        (
            SamplingParams {
                dry: Dry {
                    sequence_breakers: vec!["x".into(); MAX_BREAKERS + 1],
                    ..Dry::default()
                },
                ..SamplingParams::default()
            },
            "dry_sequence_breakers",
        ),
    ] {
        assert!(bad.validate().unwrap_err().starts_with(name), "{name}");
    }
}
