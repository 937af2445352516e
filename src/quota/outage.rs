//! The quota's policies while the store fails, as plain functions of plain
//! values: the fallback's rate, allowance and burst, how long a host is
//! paced while an outage's shares divide the slice, and when it probes.
//! The callers read the words and act on the answers (`fallback`, `down`,
//! `shard`, `pull`); the measured effect of each rule is in the decision
//! log (docs/design/quota.md, "Failures and fallbacks").

use std::time::Duration;

use super::policy::{LOW_WATER_DIV, PULLS_PER_SLICE};

/// The fallback's burst: this many seconds of its rate (a burst of one
/// refuses requests that arrive a little early).
const FALLBACK_BURST_S: f64 = 0.05;

/// A host held back below its allowance when the whole store fails
/// catches up at most this many times its fallback rate: the slice's end
/// is not a burst.
const FALLBACK_CATCH_UP_MAX: f64 = 4.0;

/// The probe interval is jittered by ±1/n: hosts that failed together do
/// not probe together.
const PROBE_JITTER_DIV: u64 = 5;

/// While an outage's shares divide the slice (a shard down, see `down`):
/// the longest a host granted `granted` of its ask `want` is paced. The
/// keys' and the self-grant's waits run until a part has released a full
/// ask, and a part releases a third of what the host spends: such a wait
/// left the host dry for most of it. This one ends when the host has spent
/// all but a low water of the grant at the pace its ask was sized for (a
/// slice per [`PULLS_PER_SLICE`] asks). `None`: nothing granted, the
/// store's wait stands (asking at once would be asking for nothing again).
pub(super) fn share_wait_ms(granted: u64, want: u64, slice_ms: u32) -> Option<u64> {
    if granted == 0 || want == 0 {
        return None;
    }
    let spend_ms = granted.min(want) * slice_ms as u64 / (want * PULLS_PER_SLICE);
    Some((spend_ms - spend_ms / LOW_WATER_DIV).max(1))
}

/// A slice's worth of `rate`.
pub(super) fn allowance(rate: f64, slice_ms: u32) -> u64 {
    (rate * slice_ms as f64 / 1000.0).ceil() as u64
}

/// The fallback's rate where shares divide the slice: at least what is
/// left of the host's allowance over what is left of the slice (it ends
/// the slice at its allowance, never past), at most
/// [`FALLBACK_CATCH_UP_MAX`] times the rate.
pub(super) fn fallback_pace(rate: f64, allowance_left: u64, left_us: u64) -> f64 {
    let even = allowance_left as f64 * 1e6 / left_us.max(1) as f64;
    even.clamp(rate, rate * FALLBACK_CATCH_UP_MAX)
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
    fn an_outage_paces_a_host_no_longer_than_it_spends_its_grant() {
        // Asked a third of a slice's worth (333 of 1,000/s), granted 255:
        // spent in 255 ms, asked again at its low water.
        assert_eq!(share_wait_ms(255, 333, 1_000), Some(192));
        assert_eq!(share_wait_ms(999, 333, 1_000), Some(250));
        assert_eq!(share_wait_ms(1, 1_000_000, 1_000), Some(1));
        assert_eq!(share_wait_ms(0, 333, 1_000), None);
    }

    #[test]
    fn a_fallback_held_back_catches_up_to_its_allowance() {
        // 1,000/s, 466 of its allowance left with 250 ms of the slice.
        assert_eq!(fallback_pace(1_000.0, 466, 250_000), 1_864.0);
        // Ahead of it: the rate; far behind: at most four times it.
        assert_eq!(fallback_pace(1_000.0, 100, 250_000), 1_000.0);
        assert_eq!(fallback_pace(1_000.0, 900, 100_000), 4_000.0);
        assert_eq!(fallback_pace(1_000.0, 900, 0), 4_000.0);
    }

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
