//! Vegas: estimates the queue at the bottleneck as `L × (1 − base/rtt)` and
//! keeps it between `alpha` and `beta` (each times `log10root(L)`). The
//! baseline is the lowest window RTT seen, re-probed after 15–30 × L windows
//! by taking the current RTT. Defaults are the reference implementation's
//! (Netflix concurrency-limits `VegasLimit`): initial 20, min 1, max 1000,
//! `alpha` 3, `beta` 6, `smoothing` 1.0, `probe` 30. Known failure: the
//! baseline is sample-counted, so after capacity drops it is refreshed
//! late, and a baseline caught under load is too high.

use super::{Spec, State, Window, log10root, unit_jitter};

pub const PARAMS: &[(&str, f64)] = &[
    ("alpha", 3.0),
    ("beta", 6.0),
    ("smoothing", 1.0),
    ("probe", 30.0),
];

/// aux[0]: windows since the last probe; aux[1]: this period's jitter.
pub fn update(spec: &Spec, s: &mut State, w: &Window) {
    if w.samples == 0 || w.rtt_ns <= 0.0 {
        return;
    }
    let (alpha, beta, smoothing, probe) =
        (spec.param(0), spec.param(1), spec.param(2), spec.param(3));
    let rtt = w.rtt_ns;
    s.aux[0] += 1.0;
    if s.aux[1] == 0.0 {
        s.aux[1] = jitter(w.now_ns);
    }
    if s.aux[0] >= s.aux[1] * probe * s.limit {
        s.aux[0] = 0.0;
        s.aux[1] = jitter(w.now_ns);
        s.baseline_ns = rtt;
        return;
    }
    if s.baseline_ns == 0.0 || rtt < s.baseline_ns {
        s.baseline_ns = rtt;
        return;
    }
    let l = s.limit;
    let step = log10root(l);
    let queue = (l * (1.0 - s.baseline_ns / rtt)).ceil();
    let next = if w.dropped > 0 {
        l - step
    } else if !w.limit_bound(l) {
        return;
    } else if queue <= step {
        l + beta * step
    } else if queue < alpha * step {
        l + step
    } else if queue > beta * step {
        l - step
    } else {
        return;
    };
    let next = spec.clamp(next);
    s.limit = spec.clamp((1.0 - smoothing) * l + smoothing * next);
}

/// A factor in [0.5, 1) from the clock: probes of different tasks and
/// hosts do not fall in step.
fn jitter(now_ns: u64) -> f64 {
    0.5 + 0.5 * unit_jitter(now_ns)
}

#[cfg(test)]
mod tests {
    use super::super::{initial, testing::*};
    use super::*;

    #[test]
    fn settles_near_the_slots_of_an_overloaded_service() {
        // Started below the slots, it learns the true baseline and keeps a
        // queue of alpha..beta above them.
        let spec = Spec::parse("vegas").unwrap().with_bounds(1, 1000, 4);
        let (_, mean) = run(&spec, initial(&spec), 0, 10_000, 8.0, 50.0);
        assert!((9.0..=16.0).contains(&mean), "mean limit {mean}");
        // Started above them, its baseline holds the queue (the reference's
        // known failure) until a probe.
        let spec = Spec::parse("vegas").unwrap();
        let (_, mean) = run(&spec, initial(&spec), 0, 10_000, 8.0, 50.0);
        assert!(mean > 20.0, "mean limit {mean}");
    }

    #[test]
    fn a_drop_lowers_the_limit_by_one_step() {
        let spec = Spec::parse("vegas").unwrap();
        let mut s = initial(&spec);
        s.baseline_ns = 50e6;
        let w = Window {
            dropped: 1,
            ..overloaded(0, 20.0, 20.0, 50.0)
        };
        update(&spec, &mut s, &w);
        assert_eq!(s.limit, 19.0);
        assert!((0.5..1.0).contains(&jitter(12345)));
    }
}
