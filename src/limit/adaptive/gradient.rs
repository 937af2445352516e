//! Gradient: the reference's first gradient limiter (Netflix
//! concurrency-limits `GradientLimit`). The baseline is the lowest window
//! RTT since the last reset;
//! `new = L × clamp(tolerance × base/rtt, 0.5, 1) + √L`, a decrease smoothed by `smoothing`; a drop halves the limit.
//! Every `probe` windows (× a jitter in [1, 2)) the baseline is forgotten
//! and the limit drops to √L to re-learn it. Defaults are the
//! reference's: initial 50, min 1, max 1000, `tolerance` 2, `smoothing`
//! 0.2, `probe` 1000. Known behaviour: with tolerance 2 it keeps a queue of
//! up to the no-load RTT, and a baseline caught under a queue (a start
//! above the capacity, a slower service) holds until the next reset.

use super::{Spec, State, Window, unit_jitter};

pub const PARAMS: &[(&str, f64)] = &[("tolerance", 2.0), ("smoothing", 0.2), ("probe", 1000.0)];

/// aux[0]: windows since the last reset; aux[1]: windows until the next.
pub fn update(spec: &Spec, s: &mut State, w: &Window) {
    if w.samples == 0 || w.rtt_ns <= 0.0 {
        return;
    }
    let (tolerance, smoothing, probe) = (spec.param(0), spec.param(1), spec.param(2));
    let rtt = w.rtt_ns;
    let l = s.limit;
    let queue = l.max(0.0).sqrt().max(1.0);
    s.aux[0] += 1.0;
    if s.aux[1].is_nan() || s.aux[1] < 1.0 {
        s.aux[1] = probe * (1.0 + unit_jitter(w.now_ns));
    }
    if s.aux[0] >= s.aux[1] {
        s.aux[0] = 0.0;
        s.aux[1] = probe * (1.0 + unit_jitter(w.now_ns));
        s.baseline_ns = 0.0;
        s.limit = spec.clamp(queue.floor());
        return;
    }
    if s.baseline_ns <= 0.0 || rtt < s.baseline_ns {
        s.baseline_ns = rtt;
    }
    let next = if w.dropped > 0 {
        l / 2.0
    } else if !w.limit_bound(l) {
        return;
    } else {
        let gradient = (tolerance * s.baseline_ns / rtt).clamp(0.5, 1.0);
        l * gradient + queue
    };
    let next = if next < l {
        (1.0 - smoothing) * l + smoothing * next
    } else {
        next
    };
    s.limit = spec.clamp(next.max(queue));
}

#[cfg(test)]
mod tests {
    use super::super::{initial, testing::*};
    use super::*;

    #[test]
    fn keeps_a_queue_of_up_to_the_no_load_rtt() {
        // Started below the slots, it learns the true baseline; tolerance 2
        // lets the RTT reach 2 × 50 ms (16 permits), plus its queue term:
        // L = 16 + √L ≈ 21.
        let low = Spec::parse("gradient").unwrap().with_bounds(1, 1000, 4);
        let (_, mean) = run(&low, initial(&low), 0, 10_000, 8.0, 50.0);
        assert!((16.0..=23.0).contains(&mean), "mean limit {mean}");
        // Started at 50, its first baseline holds a queue of 42 (the
        // reference's known failure) until a reset.
        let spec = Spec::parse("gradient").unwrap();
        let (_, mean) = run(&spec, initial(&spec), 0, 10_000, 8.0, 50.0);
        assert!(mean > 50.0, "mean limit {mean}");
        let mut s = initial(&spec);
        let w = Window {
            dropped: 1,
            ..overloaded(0, 50.0, 8.0, 50.0)
        };
        s.baseline_ns = 50e6;
        update(&spec, &mut s, &w);
        assert_eq!(s.limit, 45.0, "a drop halves it, smoothed by 0.2");
    }
}
