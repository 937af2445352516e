//! Dynamic thresholds: one decision per slice from the fleet's health in
//! the last full slice, as its hosts' census records report it.
//!
//! - **Dropped ratio (AIMD).** Over target: the slice admitted `A` per
//!   second (the threshold, or less when demand was below it) and a
//!   fraction `r` of it was dropped, so the service completed about
//!   `A × (1 − r)`: the threshold goes there, times `backoff`. Within target
//!   and the slice used the threshold: it grows by `step`.
//! - **p99 (a gradient).** Over target: the threshold is scaled by
//!   target ÷ p99 (at most halved), as the adaptive limits scale a limit by
//!   the ratio of round-trip times. Within target: it grows as above.
//!
//! With both targets, the lower proposal wins. A slice is judged only
//! against the threshold it ran with: after a decrease, the slices still
//! running the old threshold prove nothing, and are skipped. Too few
//! samples decide nothing. The threshold never leaves `[min, max]`.

use super::config::Policy;

/// Samples below which a slice tells nothing.
const MIN_SAMPLES: u64 = 20;
/// A slice used its threshold when it admitted at least this share of it.
const USED: f64 = 0.9;

/// The fleet's health over one full slice.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Observed {
    /// The threshold (requests/s) the slice ran with.
    pub threshold: f64,
    /// Requests/s the fleet admitted in it (what its hosts claimed).
    pub admitted: f64,
    pub success: u64,
    pub dropped: u64,
    /// The highest of the hosts' p99 round-trip times, µs (0: none).
    pub p99_us: u64,
}

/// Why the threshold moved (or did not).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reason {
    /// The dropped ratio was over target.
    Dropped(f64),
    /// The p99 was over target (µs).
    Latency(u64),
    /// Within target and the threshold was used: probe upwards.
    Probe,
    /// Nothing to act on (few samples, unused threshold, or a slice of
    /// another threshold).
    Hold,
}

impl std::fmt::Display for Reason {
    /// One word, no spaces (the store's change log splits on them).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Dropped(r) => write!(f, "dropped_ratio={r:.3}"),
            Self::Latency(us) => write!(f, "p99_ms={:.1}", *us as f64 / 1000.0),
            Self::Probe => f.write_str("within_target"),
            Self::Hold => f.write_str("hold"),
        }
    }
}

/// The threshold after a slice that ran `o.threshold` (`current`: what is
/// in force now, which the slice may not have run with).
pub fn decide(p: &Policy, current: f64, o: &Observed) -> (f64, Reason) {
    let samples = o.success + o.dropped;
    let same = (o.threshold - current).abs() <= current * 1e-6 + 1e-9;
    if samples < MIN_SAMPLES || !same {
        return (current, Reason::Hold);
    }
    let ratio = o.dropped as f64 / samples as f64;
    let admitted = o.admitted.min(current).max(0.0);
    let mut proposal: Option<(f64, Reason)> = None;
    let mut lower = |value: f64, why: Reason| {
        if proposal.is_none_or(|(v, _)| value < v) {
            proposal = Some((value, why));
        }
    };
    if let Some(target) = p.dropped_ratio
        && ratio > target
    {
        lower(admitted * (1.0 - ratio) * p.backoff, Reason::Dropped(ratio));
    }
    if let Some(target) = p.p99
        && o.p99_us > 0
    {
        let target_us = target.as_micros() as f64;
        if o.p99_us as f64 > target_us {
            let scale = (target_us / o.p99_us as f64).max(0.5);
            lower(current * scale * p.backoff, Reason::Latency(o.p99_us));
        }
    }
    let (next, why) = match proposal {
        Some(p) => p,
        None if o.admitted >= USED * current => (current + p.step, Reason::Probe),
        None => (current, Reason::Hold),
    };
    (next.clamp(p.min_rate, p.max_rate), why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn policy() -> Policy {
        Policy {
            min_rate: 50.0,
            max_rate: 1000.0,
            dropped_ratio: Some(0.05),
            p99: None,
            step: 25.0,
            backoff: 0.95,
        }
    }

    fn slice(threshold: f64, admitted: f64, success: u64, dropped: u64) -> Observed {
        Observed {
            threshold,
            admitted,
            success,
            dropped,
            p99_us: 0,
        }
    }

    #[test]
    fn drops_bring_the_threshold_to_what_the_service_completed() {
        // 800/s admitted, half dropped: the service did ~400/s.
        let (next, why) = decide(&policy(), 800.0, &slice(800.0, 800.0, 400, 400));
        assert!((next - 380.0).abs() < 1e-6, "{next}");
        assert_eq!(why, Reason::Dropped(0.5));
        // Never below the floor.
        let (next, _) = decide(&policy(), 60.0, &slice(60.0, 60.0, 1, 99));
        assert_eq!(next, 50.0);
    }

    #[test]
    fn within_target_it_probes_only_when_the_threshold_was_used() {
        let (next, why) = decide(&policy(), 400.0, &slice(400.0, 395.0, 390, 5));
        assert_eq!((next, why), (425.0, Reason::Probe));
        let (next, why) = decide(&policy(), 400.0, &slice(400.0, 100.0, 100, 0));
        assert_eq!((next, why), (400.0, Reason::Hold));
        let (next, _) = decide(&policy(), 990.0, &slice(990.0, 990.0, 990, 0));
        assert_eq!(next, 1000.0, "never above the ceiling");
    }

    #[test]
    fn slices_of_another_threshold_or_few_samples_decide_nothing() {
        let (next, why) = decide(&policy(), 380.0, &slice(800.0, 800.0, 400, 400));
        assert_eq!((next, why), (380.0, Reason::Hold));
        let (next, why) = decide(&policy(), 380.0, &slice(380.0, 380.0, 5, 5));
        assert_eq!((next, why), (380.0, Reason::Hold));
    }

    #[test]
    fn latency_over_target_scales_down_and_the_lower_proposal_wins() {
        let p = Policy {
            p99: Some(Duration::from_millis(100)),
            ..policy()
        };
        let mut o = slice(400.0, 400.0, 400, 0);
        o.p99_us = 200_000;
        let (next, why) = decide(&p, 400.0, &o);
        assert!((next - 190.0).abs() < 1e-6, "{next}");
        assert_eq!(why, Reason::Latency(200_000));
        // Drops ask for less than latency does: drops win.
        let mut o = slice(400.0, 400.0, 100, 300);
        o.p99_us = 150_000;
        let (next, why) = decide(&p, 400.0, &o);
        assert!(next < 100.0, "{next}");
        assert!(matches!(why, Reason::Dropped(_)));
    }
}
