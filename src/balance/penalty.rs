//! Taking a failing backend out, and panic mode.
//!
//! The penalty RTT (see `cost`) steers picks away from a backend after one
//! failure; ejection is for a backend that keeps failing whatever it is sent:
//! when most of its calls in the last `BUCKETS` seconds failed (at least
//! `EJECT_MIN_CALLS` of them), it is not picked for a period that doubles
//! with each ejection in a row (`EJECT_BASE_MS` … `EJECT_MAX_MS`), jittered
//! so the processes' probes of it do not arrive together. A success while
//! it is healthy again ends the series.

use std::sync::atomic::{AtomicU64, Ordering};

/// Failures must be more than this share of the window's calls (Finagle's
/// and Linkerd's breakers take a node out under 80 % success; we take the
/// plainer "most calls fail", so a merely slow or partly failing backend
/// is steered by its cost instead).
pub(crate) const EJECT_FAILURE_SHARE: f64 = 0.5;
/// …and at least this many calls, so two unlucky calls eject nothing
/// (Finagle's minimum, 5).
pub(crate) const EJECT_MIN_CALLS: u64 = 5;
/// The first ejection lasts 5 s (Finagle's backoff start), then doubles.
pub(crate) const EJECT_BASE_MS: u64 = 5_000;
/// Up to 5 minutes (Finagle's and Linkerd's maximum).
pub(crate) const EJECT_MAX_MS: u64 = 300_000;
/// Panic mode: when fewer than this share of the candidates are healthy,
/// pick among all of them (Envoy's panic threshold, 50 %): the ejected are
/// then likelier broken than the rest overloaded, but sending everything
/// to the few left would break them too.
pub(crate) const PANIC_SHARE: f64 = 0.5;

const UNTIL_MASK: u64 = (1 << 48) - 1;

/// Whether the window's counts call for an ejection.
pub(crate) fn failing(successes: u64, failures: u64) -> bool {
    let calls = successes + failures;
    calls >= EJECT_MIN_CALLS && failures as f64 > EJECT_FAILURE_SHARE * calls as f64
}

/// The length of the `n`th ejection in a row (n ≥ 1), with `jitter` in
/// 0..1 taking it anywhere from half to all of the doubled base.
pub(crate) fn period_ms(n: u32, jitter: f64) -> u64 {
    let full = EJECT_BASE_MS
        .saturating_mul(1 << (n.clamp(1, 16) - 1))
        .min(EJECT_MAX_MS);
    (full as f64 * (0.5 + 0.5 * jitter.clamp(0.0, 1.0))) as u64
}

/// Until when (ms) the penalty word ejects its backend, and the ejections
/// in a row.
pub(crate) fn unpack(word: u64) -> (u64, u32) {
    (word & UNTIL_MASK, (word >> 48) as u32)
}

pub(crate) fn ejected(word: u64, now_ms: u64) -> bool {
    unpack(word).0 > now_ms
}

/// Ejects the backend from `now_ms` unless it is ejected already (the
/// failures of picks that were in flight when it was ejected do not extend
/// it). Returns whether this call ejected it.
pub(crate) fn eject(penalty: &AtomicU64, now_ms: u64, jitter: f64) -> bool {
    let mut current = penalty.load(Ordering::Relaxed);
    loop {
        let (until, n) = unpack(current);
        if until > now_ms {
            return false;
        }
        let n = (n + 1).min(u16::MAX as u32);
        let next = ((n as u64) << 48) | ((now_ms + period_ms(n, jitter)) & UNTIL_MASK);
        match penalty.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(seen) => current = seen,
        }
    }
}

/// Ends a series of ejections: the backend is out of its last one and
/// healthy over the window.
pub(crate) fn forgive(penalty: &AtomicU64, now_ms: u64) {
    let current = penalty.load(Ordering::Relaxed);
    let (until, n) = unpack(current);
    if n != 0 && until <= now_ms {
        let _ = penalty.compare_exchange(current, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// Whether the healthy candidates are too few to carry the traffic alone.
pub(crate) fn panic(healthy: usize, candidates: usize) -> bool {
    (healthy as f64) < PANIC_SHARE * candidates as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn most_of_enough_calls_failing_is_failing() {
        assert!(!failing(0, 4));
        assert!(failing(0, 5));
        assert!(failing(4, 5));
        assert!(!failing(5, 5));
        assert!(!failing(100, 3));
    }

    #[test]
    fn ejections_grow_jittered_and_do_not_stack() {
        assert_eq!(period_ms(1, 1.0), 5_000);
        assert_eq!(period_ms(1, 0.0), 2_500);
        assert_eq!(period_ms(2, 1.0), 10_000);
        assert_eq!(period_ms(10, 1.0), EJECT_MAX_MS);
        assert_eq!(period_ms(60_000, 1.0), EJECT_MAX_MS);
        let p = AtomicU64::new(0);
        assert!(eject(&p, 1_000, 1.0));
        assert!(ejected(p.load(Ordering::Relaxed), 5_999));
        assert!(
            !eject(&p, 2_000, 1.0),
            "an ejection in force is not extended"
        );
        assert!(!ejected(p.load(Ordering::Relaxed), 6_000));
        assert!(eject(&p, 7_000, 1.0));
        assert_eq!(unpack(p.load(Ordering::Relaxed)), (17_000, 2));
        // Healthy after it: the next ejection starts from the base again.
        forgive(&p, 16_000);
        assert_eq!(unpack(p.load(Ordering::Relaxed)).1, 2, "not while ejected");
        forgive(&p, 17_000);
        assert!(eject(&p, 20_000, 1.0));
        assert_eq!(unpack(p.load(Ordering::Relaxed)), (25_000, 1));
    }

    #[test]
    fn panic_when_fewer_than_half_are_healthy() {
        assert!(!panic(2, 3));
        assert!(panic(1, 3));
        assert!(!panic(2, 4));
        assert!(panic(0, 1));
    }
}
