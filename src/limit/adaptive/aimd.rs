//! AIMD: additive increase while the limit is in use, multiplicative
//! decrease on a drop or a window whose RTT passes a timeout. Defaults are
//! the reference implementation's (Netflix concurrency-limits `AIMDLimit`):
//! initial 20, min 20, max 200, `backoff` 0.9, `timeout` 5000 ms. Purely
//! loss-based: a queue that grows without drops or timeouts does not lower it.

use super::{Spec, State, Window};

pub const PARAMS: &[(&str, f64)] = &[("backoff", 0.9), ("timeout", 5000.0)];

pub fn update(spec: &Spec, s: &mut State, w: &Window) {
    let (backoff, timeout_ms) = (spec.param(0), spec.param(1));
    if w.samples == 0 {
        return;
    }
    s.limit = if w.dropped > 0 || w.rtt_ns > timeout_ms * 1e6 {
        (s.limit * backoff).floor()
    } else if w.limit_bound(s.limit) {
        s.limit + 1.0
    } else {
        s.limit
    };
    s.limit = spec.clamp(s.limit);
}

#[cfg(test)]
mod tests {
    use super::super::{Algorithm, initial, testing::*, update};
    use super::*;

    #[test]
    fn grows_while_bound_and_backs_off_on_drops() {
        let spec = Spec::parse("aimd").unwrap();
        assert_eq!(spec.algorithm, Algorithm::Aimd);
        let mut s = initial(&spec);
        assert_eq!(s.limit, 20.0);
        let w = overloaded(0, s.limit, 100.0, 50.0);
        update(&spec, &mut s, &w);
        assert_eq!(s.limit, 21.0);
        let dropped = Window { dropped: 1, ..w };
        update(&spec, &mut s, &dropped);
        assert_eq!(s.limit, 20.0, "floor(21 × 0.9) = 18, clamped to min 20");
        let idle = Window {
            rejected: 0,
            in_flight: 1,
            ..w
        };
        update(&spec, &mut s, &idle);
        assert_eq!(s.limit, 20.0, "not bound: no growth");
        let slow = Window { rtt_ns: 6e9, ..w };
        let spec = spec.with_bounds(1, 200, 100);
        let mut s = initial(&spec);
        update(&spec, &mut s, &slow);
        assert_eq!(s.limit, 90.0, "an RTT past the timeout counts as a drop");
    }
}
