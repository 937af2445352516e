//! The retry budget: host-wide, retries may be at most a share of the picks
//! of the last `BUCKETS` seconds plus a minimum rate (Finagle's default: 20 %
//! and 10 per second). A retry that would go over is refused, so retries can
//! never multiply the load on backends that are failing already.

/// Whether one more retry fits, given the picks and retries of the window.
pub(crate) fn allowed(
    picks: u64,
    retries: u64,
    ratio: f64,
    min_per_sec: f64,
    window_s: u64,
) -> bool {
    ((retries + 1) as f64) <= ratio * picks as f64 + min_per_sec * window_s as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_of_picks_plus_a_minimum_rate() {
        // 10 s window, 20 %, 10/s: 100 retries with no picks at all...
        assert!(allowed(0, 99, 0.2, 10.0, 10));
        assert!(!allowed(0, 100, 0.2, 10.0, 10));
        // ...and 20 % of the picks on top.
        assert!(allowed(1_000, 299, 0.2, 10.0, 10));
        assert!(!allowed(1_000, 300, 0.2, 10.0, 10));
        assert!(!allowed(1_000, 0, 0.0, 0.0, 10));
    }
}
