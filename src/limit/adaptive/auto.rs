//! flowctrl's own limiter. The reference limiters fail in two opposite ways
//! (see the README's "Adaptive limits"): a baseline that is a minimum over
//! a count of samples is refreshed too late after capacity drops (the limit
//! sinks to its floor and stays), and a baseline that is an average of
//! recent samples follows a standing queue up (the limit drifts to its max).
//!
//! `auto` never *infers* a queue from one RTT; it tests for one, the way TCP
//! BBR probes, and only while the limit is what bounds the traffic:
//!
//! - **Hold** at the limit `L` between tests. The baseline is the lowest
//!   window RTT of the last `baseline_window` ms (two time buckets, so it
//!   expires by time, not by a sample count that collapses with throughput).
//! - Every `probe_interval` ms, **probe**: raise to `L + s` (`s = max(1,
//!   L/8)`) for one settling and one measuring window. If the RTT rose by
//!   less than half of `s/L` (over the lower of the RTT before the probe
//!   and the baseline), the extra permits found free capacity: keep
//!   them and probe again at once by a quarter of the limit (so a low limit grows
//!   within a second; a big step that meets a queue is retried as a small
//!   one). Otherwise go back to `L` and drain.
//! - **Drain**: lower to `L − s` the same way. If the RTT fell by at least
//!   half of `s/L`, a queue stood at `L`: keep the lower limit and drain
//!   again (by `L/4`: far above the capacity it comes down fast; when a later drain of such a chain
//!   finds no queue, a probe follows at once, in case the chain went too
//!   far). Otherwise `L` had no queue, so the RTT seen at `L` *is* the
//!   no-load RTT: the baseline is reset to it (this is how the baseline is
//!   re-learned at once when the service itself slows down) and `L` stays.
//! - A hold window whose RTT is above `tolerance ×` baseline starts a drain
//!   at once instead of waiting for the next probe.
//! - A window with drops multiplies the limit by `backoff` (at least one
//!   permit less) and restarts the cycle.
//!
//! A test moves the limit by `s` for two short windows: it costs a few
//! requests a slight queue or a few rejections, never a burst. It starts
//! low and probes up (a limit too high at the start is a queue on a backend
//! that may be overloaded already; one too low costs a second of probing).
//! Defaults: initial 4, min 1, max 1000, `probe_interval` 3000 ms, `baseline_window`
//! 2000 ms, `tolerance` 1.1, `backoff` 0.9.

use super::{Spec, State, Window};

pub const PARAMS: &[(&str, f64)] = &[
    ("probe_interval", 3000.0),
    ("baseline_window", 2000.0),
    ("tolerance", 1.1),
    ("backoff", 0.9),
];

/// The longest test window, whatever the RTT.
const MAX_WINDOW_NS: u64 = 10_000_000_000;

// aux words.
const CUR_MIN: usize = 0;
const PREV_MIN: usize = 1;
const BUCKET_AT: usize = 2;
const PHASE: usize = 3;
const REF_LIMIT: usize = 4;
const REF_RTT: usize = 5;
const LAST_PROBE: usize = 6;

// Phases.
const HOLD: f64 = 0.0;
const PROBE_SETTLE: f64 = 1.0;
const PROBE_MEASURE: f64 = 2.0;
const DRAIN_SETTLE: f64 = 3.0;
const DRAIN_MEASURE: f64 = 4.0;
/// A drain after an accepted drain: if it finds no queue, the chain may
/// have gone below the capacity, so a probe follows at once.
const MORE_SETTLE: f64 = 5.0;
const MORE_MEASURE: f64 = 6.0;

pub fn update(spec: &Spec, s: &mut State, w: &Window) -> u64 {
    let (probe_ms, baseline_ms, tolerance, backoff) =
        (spec.param(0), spec.param(1), spec.param(2), spec.param(3));
    let now_ms = w.now_ns as f64 / 1e6;
    let window = spec.window_ns();
    if w.samples == 0 || w.rtt_ns <= 0.0 {
        return window;
    }
    let rtt = w.rtt_ns;
    learn_baseline(s, now_ms, rtt, baseline_ms / 2.0);
    let l = s.limit;
    if w.dropped > 0 {
        s.limit = spec.clamp((l * backoff).min(l - 1.0).floor());
        s.aux[PHASE] = HOLD;
        s.aux[LAST_PROBE] = now_ms;
        return window;
    }
    let phase = s.aux[PHASE];
    if !w.limit_bound(l) {
        // The demand, not the limit, bounded this window: a test would
        // measure nothing. Abandon it.
        if phase != HOLD {
            s.limit = s.aux[REF_LIMIT];
            s.aux[PHASE] = HOLD;
        }
        return window;
    }
    // Settling windows last one RTT, measuring windows three: what a
    // measuring window sees was admitted under the tested limit, and enough
    // of it to rise above the noise of one window.
    // (f64 → u64 casts saturate: a damaged table's RTT cannot overflow.)
    let settle = window.max(rtt as u64).min(MAX_WINDOW_NS);
    let measure = window.max((3.0 * rtt) as u64).min(MAX_WINDOW_NS);
    let ref_limit = s.aux[REF_LIMIT];
    let ref_rtt = s.aux[REF_RTT];
    let share = |limit: f64| 0.5 * (limit - ref_limit).abs() / ref_limit;
    match phase {
        PROBE_SETTLE => {
            s.aux[PHASE] = PROBE_MEASURE;
            measure
        }
        PROBE_MEASURE => {
            s.aux[LAST_PROBE] = now_ms;
            // Against the lower of the reference and the baseline: a noisy
            // low reading must not pass a queue for free capacity.
            let against = if s.baseline_ns > 0.0 {
                ref_rtt.min(s.baseline_ns)
            } else {
                ref_rtt
            };
            if rtt <= against * (1.0 + share(l)) && l < spec.max as f64 {
                // Free capacity: probe again at once, in a bigger step.
                begin(spec, s, PROBE_SETTLE, l, rtt, (l / 4.0).round());
            } else if l - ref_limit > step(ref_limit) {
                // A big step found a queue: retry with a small one.
                s.limit = ref_limit;
                begin(spec, s, PROBE_SETTLE, ref_limit, ref_rtt, step(ref_limit));
            } else {
                s.limit = ref_limit;
                begin(spec, s, DRAIN_SETTLE, ref_limit, ref_rtt, -step(ref_limit));
            }
            settle
        }
        DRAIN_SETTLE | MORE_SETTLE => {
            s.aux[PHASE] = phase + 1.0;
            measure
        }
        DRAIN_MEASURE | MORE_MEASURE => {
            s.aux[LAST_PROBE] = if phase == MORE_MEASURE {
                now_ms - probe_ms
            } else {
                now_ms
            };
            if rtt <= ref_rtt * (1.0 - share(l)) && l > spec.min as f64 {
                begin(spec, s, MORE_SETTLE, l, rtt, -drain_step(l));
                settle
            } else {
                // No queue stood at the reference limit: its RTT is the
                // no-load RTT now.
                s.limit = ref_limit;
                let base = ref_rtt.min(rtt);
                s.aux[CUR_MIN] = base;
                s.aux[PREV_MIN] = base;
                s.baseline_ns = base;
                s.aux[PHASE] = HOLD;
                window
            }
        }
        _ => {
            s.aux[PHASE] = HOLD;
            if rtt > s.baseline_ns * tolerance && l > spec.min as f64 {
                begin(spec, s, DRAIN_SETTLE, l, rtt, -step(l));
                settle
            } else if now_ms - s.aux[LAST_PROBE] >= probe_ms {
                begin(spec, s, PROBE_SETTLE, l, rtt, step(l));
                settle
            } else {
                window
            }
        }
    }
}

/// The step of a probe from `limit`.
fn step(limit: f64) -> f64 {
    (limit / 8.0).round().max(1.0)
}

/// The step of a drain after an accepted one: twice a probe's, so a limit
/// far above the capacity comes down in a few seconds (a drain that goes
/// below it finds no queue and is undone, and a probe follows).
fn drain_step(limit: f64) -> f64 {
    (limit / 4.0).round().max(1.0)
}

/// Starts a test of `limit + delta` against `limit` (whose RTT was `rtt`).
fn begin(spec: &Spec, s: &mut State, phase: f64, limit: f64, rtt: f64, delta: f64) {
    s.aux[PHASE] = phase;
    s.aux[REF_LIMIT] = limit;
    s.aux[REF_RTT] = rtt;
    s.limit = spec.clamp(limit + delta.signum() * delta.abs().max(1.0));
    if s.limit == limit {
        s.aux[PHASE] = HOLD;
    }
}

/// The lowest RTT of two time buckets of `bucket_ms` each: a bucket older
/// than two bucket lengths is forgotten whatever the traffic.
fn learn_baseline(s: &mut State, now_ms: f64, rtt: f64, bucket_ms: f64) {
    let age = now_ms - s.aux[BUCKET_AT];
    if s.aux[CUR_MIN] == 0.0 || !(0.0..2.0 * bucket_ms).contains(&age) {
        s.aux[PREV_MIN] = rtt;
        s.aux[CUR_MIN] = rtt;
        s.aux[BUCKET_AT] = now_ms;
    } else if age >= bucket_ms {
        s.aux[PREV_MIN] = s.aux[CUR_MIN];
        s.aux[CUR_MIN] = rtt;
        s.aux[BUCKET_AT] = now_ms;
    } else {
        s.aux[CUR_MIN] = s.aux[CUR_MIN].min(rtt);
    }
    s.baseline_ns = s.aux[CUR_MIN].min(s.aux[PREV_MIN]);
}

#[cfg(test)]
mod tests {
    use super::super::{initial, testing::*, update};
    use super::*;

    fn spec() -> Spec {
        Spec::parse("auto").unwrap()
    }

    #[test]
    fn comes_down_to_the_slots_and_holds_there() {
        let (s, mean) = run(&spec(), initial(&spec()), 0, 10_000, 8.0, 50.0);
        assert!((7.8..=8.6).contains(&mean), "mean limit {mean}");
        assert!((49e6..=51e6).contains(&s.baseline_ns), "{}", s.baseline_ns);
        // No drift: a minute later it is still there.
        let (_, later) = run(&spec(), s, 10_000, 60_000, 8.0, 50.0);
        assert!((7.8..=8.6).contains(&later), "{later}");
    }

    #[test]
    fn comes_down_from_a_high_start() {
        let spec = spec().with_bounds(1, 1000, 40);
        let (_, mean) = run(&spec, initial(&spec), 0, 10_000, 8.0, 50.0);
        assert!((7.8..=8.6).contains(&mean), "mean limit {mean}");
    }

    #[test]
    fn relearns_the_baseline_within_two_seconds_when_the_service_slows() {
        let (s, _) = run(&spec(), initial(&spec()), 0, 10_000, 8.0, 50.0);
        let (s, mean) = run(&spec(), s, 10_000, 2_000, 8.0, 100.0);
        assert!((95e6..=105e6).contains(&s.baseline_ns), "{}", s.baseline_ns);
        assert!(mean >= 7.0, "{mean}");
        // And back.
        let (s, _) = run(&spec(), s, 12_000, 2_000, 8.0, 50.0);
        assert!((49e6..=51e6).contains(&s.baseline_ns), "{}", s.baseline_ns);
    }

    #[test]
    fn grows_off_its_floor_when_capacity_appears() {
        let mut s = initial(&spec());
        s.limit = 1.0;
        // Within one probe interval and a second.
        let (s, _) = run(&spec(), s, 0, 4_000, 32.0, 50.0);
        assert!(s.limit >= 28.0, "stuck at {}", s.limit);
    }

    #[test]
    fn follows_slots_that_shrink() {
        let (s, _) = run(&spec(), initial(&spec()), 0, 10_000, 16.0, 50.0);
        let (_, mean) = run(&spec(), s, 10_000, 10_000, 4.0, 50.0);
        assert!((3.8..=4.8).contains(&mean), "{mean}");
    }

    #[test]
    fn drops_lower_the_limit() {
        let spec = spec().with_bounds(1, 1000, 20);
        let mut s = initial(&spec);
        let w = Window {
            dropped: 3,
            ..overloaded(0, 20.0, 20.0, 50.0)
        };
        update(&spec, &mut s, &w);
        assert_eq!(s.limit, 18.0);
        let mut small = State { limit: 3.0, ..s };
        update(&spec, &mut small, &w);
        assert_eq!(small.limit, 2.0, "at least one permit less");
    }
}
