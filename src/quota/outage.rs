//! The quota's policies while the store fails, as plain functions of plain
//! values: the fallback's rate, allowance and burst, and when a host
//! probes. The callers read the words and act on the answers (`fallback`,
//! `pull`); the measured effect of each rule is in the decision
//! log (docs/design/quota.md, "Failures and fallbacks").

use std::time::Duration;

/// The fallback's burst: this many seconds of its rate (a burst of one
/// refuses requests that arrive a little early).
const FALLBACK_BURST_S: f64 = 0.05;

/// The probe interval is jittered by ±1/n: hosts that failed together do
/// not probe together.
const PROBE_JITTER_DIV: u64 = 5;

/// A slice's worth of `rate`.
pub(super) fn allowance(rate: f64, slice_ms: u32) -> u64 {
    (rate * slice_ms as f64 / 1000.0).ceil() as u64
}

/// The fallback rate's burst ([`FALLBACK_BURST_S`] of it, at least one).
pub(super) fn fallback_burst(rate: f64) -> u32 {
    (rate * FALLBACK_BURST_S).clamp(1.0, u32::MAX as f64) as u32
}

/// The share policy's rate: what the host spent per second in its last
/// full slice; before any, the global rate over the hosts the store last
/// counted; before that, none (the local limits alone).
pub(super) fn share_rate(spent_before: u64, hosts: u64, rate: f64, slice_ms: u32) -> Option<f64> {
    let spent = spent_before.min(u32::MAX as u64);
    if spent > 0 {
        return Some(spent as f64 * 1000.0 / slice_ms as f64);
    }
    let hosts = hosts.min(1 << 20);
    (hosts > 0).then(|| rate / hosts as f64)
}

/// The delay to the next probe, ns: the interval ± its jitter, from the
/// clock's low bits `seed`.
pub(super) fn probe_delay_ns(interval: Duration, seed: u64) -> u64 {
    let base = interval.as_nanos() as u64;
    let spread = base / PROBE_JITTER_DIV;
    let jitter = (seed ^ (seed >> 17)).wrapping_mul(0x9e37_79b9_7f4a_7c15) % (spread * 2 + 1);
    base - spread + jitter
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fallback_share_is_the_last_slices_spend_or_an_equal_part() {
        assert_eq!(share_rate(800, 4, 2_000.0, 1_000), Some(800.0));
        assert_eq!(share_rate(0, 4, 2_000.0, 1_000), Some(500.0));
        assert_eq!(share_rate(0, 0, 2_000.0, 1_000), None);
        assert_eq!(
            share_rate(u64::MAX, 4, 2_000.0, 1_000),
            Some(u32::MAX as f64)
        );
        assert_eq!(allowance(333.4, 1_000), 334);
        assert_eq!(fallback_burst(1_000.0), 50);
        assert_eq!(fallback_burst(1.0), 1);
    }

    #[test]
    fn probes_spread_within_a_fifth_of_the_interval() {
        let interval = Duration::from_millis(500);
        let (lo, hi) = (400_000_000, 600_000_000);
        let delays: Vec<u64> = (0..100)
            .map(|s| probe_delay_ns(interval, s * 7919))
            .collect();
        assert!(delays.iter().all(|d| (lo..=hi).contains(d)), "{delays:?}");
        assert!(delays.iter().max().unwrap() - delays.iter().min().unwrap() > 100_000_000);
    }
}
