//! Dynamic thresholds: one decision per slice from the fleet's health in
//! the last full slice, as its hosts' census records report it. Each
//! target puts a slice in one of three zones:
//!
//! - **over** (dropped ratio above target, or p99 above target): decrease.
//!   For drops (AIMD), when the services could not complete the threshold:
//!   to what they completed less the target's share (at exactly its
//!   capacity a service drops from bursts alone), times `backoff`. What
//!   they completed is counted host by host ([`served`]):
//!   a host that dropped past the target served its successes; one that
//!   did not could have served at least what it was admitted or an equal
//!   share of the threshold. So drops on a host given more than its share
//!   while another was given less (imbalance) do not read as overload: the
//!   estimate stays at the threshold and it holds. Without per-host figures,
//!   the slice admitted `A` per second and dropped a fraction `r`: `A × (1 −
//!   r)`. For latency (a gradient, as the adaptive limits scale a limit by
//!   the ratio of round-trip times): × target ÷ p99, at most halved, times
//!   `backoff`.
//! - **knee** (within target, above half the dropped target or 80 % of the
//!   p99 target): hold. The service is near its capacity.
//! - **clean** (below both, and the slice used the threshold): probe up,
//!   by 4 % of the threshold, doubling with each clean slice in a row up to
//!   32 %: near capacity a probe overshoots by little, and after a
//!   recovery the threshold is back within a few probes.
//!
//! With both targets, the lower proposal wins and any "over" decreases. A
//! slice is judged only against the threshold it ran with, and not the
//! first slice of a lowered threshold either (the manager skips it: a
//! backlog of the old one drains there), too few samples decide nothing, and the
//! threshold never leaves `[min, max]`.

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
    /// Requests/s the service completed or could have, host by host
    /// ([`served`]; 0: not known).
    pub served: f64,
}

/// One host's slice, per second: admitted, released as success, as dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostSlice {
    pub admitted: f64,
    pub success: f64,
    pub dropped: f64,
}

/// Requests/s the hosts' services completed, or could have, in a slice of
/// `threshold` requests/s: a host that dropped more than `target` of what
/// it released was at its capacity and counts its successes; one that did
/// not counts what it was admitted, or an equal share of the threshold if
/// more (it was not shown to lack it).
pub fn served(threshold: f64, target: f64, hosts: &[HostSlice]) -> f64 {
    let equal = threshold / hosts.len().max(1) as f64;
    hosts
        .iter()
        .map(|h| {
            let released = h.success + h.dropped;
            if released > 0.0 && h.dropped / released > target {
                h.success
            } else {
                h.admitted.max(equal)
            }
        })
        .sum()
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

impl Reason {
    /// The words of the reasons that change a threshold, as counted in
    /// `flowctrl_manager_threshold_changes_total{reason}` (each is counted
    /// from 0, so a rate or an increase sees the first change).
    pub(crate) const CHANGE_WORDS: [&'static str; 3] = ["dropped_ratio", "p99_ms", "within_target"];

    /// The word a change is counted by: the reason up to its `=`.
    pub(crate) fn word(&self) -> String {
        let text = self.to_string();
        text.split('=').next().unwrap_or("").to_string()
    }
}

/// The first probe, as a share of the threshold, and the most doublings.
const PROBE: f64 = 0.04;
const MAX_DOUBLINGS: u32 = 3;

/// The threshold after a slice that ran `o.threshold` (`current`: what is
/// in force now, which the slice may not have run with). `clean` counts
/// the clean slices in a row before this one; it is updated.
pub fn decide(p: &Policy, current: f64, clean: &mut u32, o: &Observed) -> (f64, Reason) {
    let samples = o.success.saturating_add(o.dropped);
    let same = (o.threshold - current).abs() <= current * 1e-6 + 1e-9;
    if samples < MIN_SAMPLES || !same {
        return (current, Reason::Hold);
    }
    let ratio = o.dropped as f64 / samples as f64;
    // A slice that used its threshold admitted it (the census sees each
    // host's take up to its last pull, a little less); else what it saw.
    let admitted = if o.admitted >= USED * current {
        current
    } else {
        o.admitted.max(0.0)
    };
    let mut proposal: Option<(f64, Reason)> = None;
    let mut lower = |value: f64, why: Reason| {
        if proposal.is_none_or(|(v, _)| value < v) {
            proposal = Some((value, why));
        }
    };
    let mut knee = false;
    if let Some(target) = p.dropped_ratio {
        let completed = match o.served {
            s if s > 0.0 => s,
            _ => admitted * (1.0 - ratio),
        };
        // Overload: the services could not complete the threshold. Down
        // to what they completed less the target's share: at exactly its
        // capacity a service drops from bursts alone.
        if ratio > target && completed < current {
            lower(
                completed * (1.0 - target) * p.backoff,
                Reason::Dropped(ratio),
            );
        }
        knee |= ratio > target / 2.0;
    }
    if let Some(target) = p.p99
        && o.p99_us > 0
    {
        let (target_us, p99) = (target.as_micros() as f64, o.p99_us as f64);
        if p99 > target_us {
            let scale = (target_us / p99).max(0.5);
            lower(current * scale * p.backoff, Reason::Latency(o.p99_us));
        }
        knee |= p99 > 0.8 * target_us;
    }
    let (next, why) = match proposal {
        Some(p) => {
            *clean = 0;
            p
        }
        None if knee || o.admitted < USED * current => {
            *clean = 0;
            (current, Reason::Hold)
        }
        None => {
            let step = current * PROBE * (1u32 << (*clean).min(MAX_DOUBLINGS)) as f64;
            *clean += 1;
            (current + step, Reason::Probe)
        }
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
            served: 0.0,
        }
    }

    #[test]
    fn drops_bring_the_threshold_to_what_the_service_completed() {
        // 800/s admitted, half dropped: the service did ~400/s; less the
        // target's 5 %, times the backoff 0.95.
        let mut clean = 3;
        let (next, why) = decide(&policy(), 800.0, &mut clean, &slice(800.0, 800.0, 400, 400));
        assert!((next - 361.0).abs() < 1e-6, "{next}");
        assert_eq!((why, clean), (Reason::Dropped(0.5), 0));
        // Never below the floor.
        let (next, _) = decide(&policy(), 60.0, &mut clean, &slice(60.0, 60.0, 1, 99));
        assert_eq!(next, 50.0);
    }

    #[test]
    fn clean_slices_probe_up_faster_in_a_row_and_the_knee_holds() {
        let mut clean = 0;
        let mut t = 100.0;
        let mut steps = Vec::new();
        for _ in 0..6 {
            let (next, why) = decide(&policy(), t, &mut clean, &slice(t, t, t as u64, 0));
            assert_eq!(why, Reason::Probe);
            steps.push(((next - t) / t * 100.0).round());
            t = next;
        }
        assert_eq!(steps, [4.0, 8.0, 16.0, 32.0, 32.0, 32.0]);
        // Drops within target but past half of it: the knee, hold.
        let (next, why) = decide(&policy(), 400.0, &mut clean, &slice(400.0, 400.0, 385, 15));
        assert_eq!((next, why, clean), (400.0, Reason::Hold, 0));
        // Demand below the threshold: nothing to learn.
        let (next, why) = decide(&policy(), 400.0, &mut clean, &slice(400.0, 100.0, 100, 0));
        assert_eq!((next, why), (400.0, Reason::Hold));
        let (next, _) = decide(&policy(), 990.0, &mut clean, &slice(990.0, 990.0, 990, 0));
        assert_eq!(next, 1000.0, "never above the ceiling");
    }

    #[test]
    fn slices_of_another_threshold_or_few_samples_decide_nothing() {
        let mut clean = 0;
        let (next, why) = decide(&policy(), 380.0, &mut clean, &slice(800.0, 800.0, 400, 400));
        assert_eq!((next, why), (380.0, Reason::Hold));
        let (next, why) = decide(&policy(), 380.0, &mut clean, &slice(380.0, 380.0, 5, 5));
        assert_eq!((next, why), (380.0, Reason::Hold));
    }

    #[test]
    fn drops_on_a_host_given_more_than_its_share_are_imbalance_not_overload() {
        // 165/s: one host admitted 40 and dropped nothing, the other 125
        // and dropped 25. Served: 100 + an equal share (82.5) > 165: hold.
        let hosts = [
            HostSlice {
                admitted: 40.0,
                success: 40.0,
                dropped: 0.0,
            },
            HostSlice {
                admitted: 125.0,
                success: 100.0,
                dropped: 25.0,
            },
        ];
        assert_eq!(served(165.0, 0.05, &hosts), 182.5);
        let mut o = slice(165.0, 165.0, 140, 25);
        o.served = served(165.0, 0.05, &hosts);
        let mut clean = 0;
        let (next, why) = decide(&policy(), 165.0, &mut clean, &o);
        assert_eq!((next, why), (165.0, Reason::Hold));
        // Both hosts dropping: overload, down to what they served (200).
        let both = [hosts[1], hosts[1]];
        o = slice(250.0, 250.0, 200, 50);
        o.served = served(250.0, 0.05, &both);
        let (next, why) = decide(&policy(), 250.0, &mut clean, &o);
        assert!((next - 180.5).abs() < 1e-6, "{next}");
        assert_eq!(why, Reason::Dropped(0.2));
    }

    #[test]
    fn latency_over_target_scales_down_and_the_lower_proposal_wins() {
        let p = Policy {
            p99: Some(Duration::from_millis(100)),
            ..policy()
        };
        let mut o = slice(400.0, 400.0, 400, 0);
        o.p99_us = 200_000;
        let mut clean = 0;
        let (next, why) = decide(&p, 400.0, &mut clean, &o);
        assert!((next - 190.0).abs() < 1e-6, "{next}");
        assert_eq!(why, Reason::Latency(200_000));
        // Drops ask for less than latency does: drops win.
        let mut o = slice(400.0, 400.0, 100, 300);
        o.p99_us = 150_000;
        let (next, why) = decide(&p, 400.0, &mut clean, &o);
        assert!(next < 100.0, "{next}");
        assert!(matches!(why, Reason::Dropped(_)));
    }

    #[test]
    fn counts_near_the_top_add_up_with_saturation() {
        // Wrapped, 2^64 - 1 successes and 5 drops read as 4 samples and a
        // ratio of 1.25: a cut to the floor. Saturated: no drops to speak of.
        let mut clean = 0;
        let o = slice(400.0, 400.0, u64::MAX, 5);
        let (next, why) = decide(&policy(), 400.0, &mut clean, &o);
        assert_eq!((next, why), (416.0, Reason::Probe));
    }

    #[test]
    fn every_changing_reason_is_counted_by_a_known_word() {
        for (reason, word) in [
            (Reason::Dropped(0.25), "dropped_ratio"),
            (Reason::Latency(1500), "p99_ms"),
            (Reason::Probe, "within_target"),
        ] {
            assert_eq!(reason.word(), word);
            assert!(Reason::CHANGE_WORDS.contains(&word));
        }
    }
}
