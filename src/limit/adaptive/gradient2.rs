//! Gradient2: compares a long exponential average of the RTT with the
//! window's RTT; `new = L × clamp(tolerance × long/rtt, 0.5, 1) + queue`,
//! smoothed. Defaults are the reference implementation's (Netflix
//! concurrency-limits `Gradient2Limit`): initial 20, min 20, max 200,
//! `smoothing` 0.2, `queue` 4, `long_window` 600, `tolerance` 1.5. As in
//! the reference, drops are ignored, and under sustained load the long
//! average follows the RTT up, so the limit drifts towards its max.

use super::{Spec, State, Window};

pub const PARAMS: &[(&str, f64)] = &[
    ("tolerance", 1.5),
    ("smoothing", 0.2),
    ("queue", 4.0),
    ("long_window", 600.0),
];

/// Windows averaged plainly before the exponential average takes over.
const WARMUP: f64 = 10.0;

/// aux[0]: windows seen; `baseline_ns` is the long average.
pub fn update(spec: &Spec, s: &mut State, w: &Window) {
    if w.samples == 0 || w.rtt_ns <= 0.0 {
        return;
    }
    let (tolerance, smoothing, queue, long_window) =
        (spec.param(0), spec.param(1), spec.param(2), spec.param(3));
    let rtt = w.rtt_ns;
    s.aux[0] += 1.0;
    if s.aux[0] <= WARMUP {
        s.baseline_ns += (rtt - s.baseline_ns) / s.aux[0];
    } else {
        let factor = 2.0 / (long_window + 1.0);
        s.baseline_ns = s.baseline_ns * (1.0 - factor) + rtt * factor;
    }
    // After a long overload ends, come down quickly.
    if s.baseline_ns / rtt > 2.0 {
        s.baseline_ns *= 0.95;
    }
    let l = s.limit;
    if !w.limit_bound(l) {
        return;
    }
    let gradient = (tolerance * s.baseline_ns / rtt).clamp(0.5, 1.0);
    let next = l * gradient + queue;
    s.limit = spec.clamp((1.0 - smoothing) * l + smoothing * next);
}

#[cfg(test)]
mod tests {
    use super::super::{initial, testing::*};
    use super::*;

    #[test]
    fn holds_its_floor_and_drifts_up_under_sustained_load() {
        let spec = Spec::parse("gradient2").unwrap();
        let (s, mean) = run(&spec, initial(&spec), 0, 5_000, 8.0, 50.0);
        assert!(mean >= 20.0, "{mean}");
        let (later, _) = run(&spec, s, 5_000, 60_000, 8.0, 50.0);
        assert!(later.limit >= s.limit, "{} then {}", s.limit, later.limit);
    }

    #[test]
    fn with_a_low_floor_it_comes_down_when_the_rtt_doubles() {
        let spec = Spec::parse("gradient2").unwrap().with_bounds(1, 200, 8);
        let mut s = initial(&spec);
        for i in 0..20 {
            update(&spec, &mut s, &overloaded(i * 100, 8.0, 8.0, 50.0));
        }
        let before = s.limit;
        for i in 20..40 {
            update(&spec, &mut s, &overloaded(i * 100, 8.0, 8.0, 200.0));
        }
        assert!(s.limit < before, "{before} → {}", s.limit);
    }
}
