//! The quota's policies while the store fails, as plain functions of plain
//! values: the fallback's rate, allowance and release curve, and when a host
//! probes. The callers read the words and act on the answers (`fallback`,
//! `pull`); the measured effect of each rule is in the decision
//! log (docs/design/quota.md, "Failures and fallbacks").

use std::time::Duration;

use super::Global;
use super::account::just_before;
use super::store::{released, slice_of};

/// The fallback rate's burst: this many seconds of its rate (a burst of one
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

/// What an allowance of `allow` permits of a slice has released
/// `elapsed_ms` into it, as the store releases the slice: the slice's
/// burst, scaled to the allowance, at once, the rest evenly. A host keeping
/// to its share without the store (a down shard's part, or the whole
/// slice) follows the curve the keys would have released to it: one that
/// was paced behind it when the store failed is not held behind it.
pub(super) fn share_released(allow: u64, g: Global, elapsed_ms: u64) -> u64 {
    released(allow, share_burst(allow, g), elapsed_ms, g.slice_ms)
}

/// The slice's burst scaled to an allowance of `allow` (at least one).
pub(super) fn share_burst(allow: u64, g: Global) -> u64 {
    ((allow as u128 * g.burst() as u128 / g.quota.max(1) as u128) as u64).max(1)
}

/// Ms into `slice` at the store's time `now_us`: the whole slice once it
/// is over, none before it begins.
pub(super) fn elapsed_ms(now_us: i64, slice: u32, slice_ms: u32) -> u64 {
    let slice_ms_u = slice_ms.max(1) as u64;
    match slice_of(now_us, slice_ms) {
        s if s == slice => (now_us.max(0) as u64 / 1000) % slice_ms_u,
        s if just_before(slice, s) => slice_ms_u,
        _ => 0,
    }
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

    /// A share of 1,000 of a slice of 2,000 with a burst of 500 (the
    /// default quarter): 250 at once, the rest evenly, the whole by the
    /// slice's end. A host paced to 500 by 750 ms may take 500 more then.
    #[test]
    fn a_share_is_released_as_the_store_releases_the_slice() {
        let g = Global {
            rate: 2000.0,
            quota: 2000,
            slice_ms: 1000,
            chunk: 0,
            fallback: crate::format::Fallback::Share,
            global_burst: 0,
            shards: 1,
        };
        assert_eq!(share_burst(1000, g), 250);
        let curve: Vec<u64> = [0, 250, 500, 750, 1000]
            .map(|e| share_released(1000, g, e))
            .into();
        assert_eq!(curve, [250, 500, 750, 1000, 1000]);
        assert_eq!(share_burst(1, g), 1, "at least one");
    }

    #[test]
    fn elapsed_is_counted_in_the_slice_asked_for() {
        let slice = 1_796_682_000u32;
        let at = |ms: i64| (slice as i64 * 1000 + ms) * 1000;
        assert_eq!(elapsed_ms(at(250), slice, 1000), 250);
        assert_eq!(elapsed_ms(at(1250), slice, 1000), 1000, "over: all of it");
        assert_eq!(elapsed_ms(at(-250), slice, 1000), 0, "not begun: none");
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
