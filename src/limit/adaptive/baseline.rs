//! A no-load RTT estimate that expires by time: the lowest window RTT of
//! two time buckets. A minimum over a count of samples is refreshed too
//! late when throughput collapses (the count takes longer to fill); a
//! bucket older than two bucket lengths is forgotten whatever the traffic.

use super::{State, positive};

/// Where in `aux` the three words of the estimate live.
#[derive(Clone, Copy)]
pub struct Buckets {
    pub current: usize,
    pub previous: usize,
    pub started_at: usize,
}

impl Buckets {
    /// Feeds one window's RTT at `now_ms`; sets and returns the baseline.
    pub fn learn(self, s: &mut State, now_ms: f64, rtt: f64, window_ms: f64) -> f64 {
        let bucket_ms = window_ms / 2.0;
        let age = now_ms - s.aux[self.started_at];
        let cur = s.aux[self.current];
        if !positive(cur) || !(0.0..2.0 * bucket_ms).contains(&age) {
            s.aux[self.previous] = rtt;
            s.aux[self.current] = rtt;
            s.aux[self.started_at] = now_ms;
        } else if age >= bucket_ms {
            s.aux[self.previous] = cur;
            s.aux[self.current] = rtt;
            s.aux[self.started_at] = now_ms;
        } else {
            s.aux[self.current] = cur.min(rtt);
        }
        s.baseline_ns = s.aux[self.current].min(s.aux[self.previous]);
        s.baseline_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Buckets = Buckets {
        current: 0,
        previous: 1,
        started_at: 2,
    };

    #[test]
    fn a_low_rtt_is_forgotten_after_two_buckets() {
        let mut s = State::default();
        assert_eq!(B.learn(&mut s, 0.0, 50.0, 2000.0), 50.0);
        assert_eq!(B.learn(&mut s, 500.0, 80.0, 2000.0), 50.0);
        assert_eq!(
            B.learn(&mut s, 1500.0, 80.0, 2000.0),
            50.0,
            "previous bucket"
        );
        assert_eq!(B.learn(&mut s, 2600.0, 90.0, 2000.0), 80.0);
        // A long silence forgets both.
        assert_eq!(B.learn(&mut s, 9000.0, 100.0, 2000.0), 100.0);
    }
}
