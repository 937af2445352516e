//! Generic cell rate algorithm: a smooth rate with a burst, as one 64-bit word.
//!
//! The word is the *theoretical arrival time* (TAT): the instant at which the
//! task would be idle again if every admitted permit had been spaced exactly
//! one `interval` apart. A request for `n` permits at `now` is admitted when
//! `max(tat, now) + n·interval ≤ now + burst·interval`, i.e. when it fits into
//! the burst allowance left ahead of `now`; the TAT then moves forward by
//! `n·interval`. There are no windows, so there is no edge at which two
//! windows' worth can pass at once.

use std::sync::atomic::{AtomicU64, Ordering};

/// A task's rate parameters in clock ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gcra {
    /// Ticks between two permits at the smooth rate (> 0).
    pub interval: u64,
    /// Permits that may be taken at once (≥ 1).
    pub burst: u32,
}

impl Gcra {
    /// Ticks between two permits at `rate` requests/s, unrounded (the caller
    /// checks its range: validation refuses what does not fit, a fallback
    /// clamps it).
    #[inline]
    pub fn interval_of(rate: f64, ticks_per_sec: u64) -> f64 {
        ticks_per_sec as f64 / rate
    }

    /// The pure decision: the new TAT if `n` permits fit at `now`, else `None`.
    #[inline]
    pub fn decide(&self, tat: u64, now: u64, n: u32) -> Option<u64> {
        let start = tat.max(now);
        let new_tat = start.saturating_add(self.interval.saturating_mul(n as u64));
        let horizon = now.saturating_add(self.interval.saturating_mul(self.burst as u64));
        (new_tat <= horizon).then_some(new_tat)
    }

    /// The earliest instant at which `n` permits fit, given `tat` (the
    /// inverse of [`Gcra::decide`]; `n` above the burst never fits).
    pub fn earliest(&self, tat: u64, n: u32) -> Option<u64> {
        (n <= self.burst)
            .then(|| tat.saturating_sub(self.interval.saturating_mul((self.burst - n) as u64)))
    }

    /// Takes `n` permits from `word`, or leaves it unchanged. Returns the
    /// instant the permits were taken at.
    ///
    /// The clock is read *after* the word: a TAT written by another process
    /// was computed from an earlier reading, so a reading of ours is never
    /// older than the state it judges (a stale `now` would reject requests
    /// the rate allows). When the compare-and-swap loses a race, both are
    /// read again.
    #[cfg(test)]
    pub fn try_take(&self, word: &AtomicU64, n: u32, clock: impl Fn() -> u64) -> Option<u64> {
        let tat = word.load(Ordering::Relaxed);
        self.take_from(word, tat, clock(), n, clock)
    }

    /// [`Gcra::try_take`] starting from a `tat` and `now` the caller read
    /// already (in that order), e.g. to look before taking anything else.
    /// Always inlined: on the request path, as a call it cost a fifth of an
    /// uncapped decision's instructions (its frame, and the decision the
    /// caller had just made computed again).
    #[inline(always)]
    pub fn take_from(
        &self,
        word: &AtomicU64,
        mut tat: u64,
        mut now: u64,
        n: u32,
        clock: impl Fn() -> u64,
    ) -> Option<u64> {
        loop {
            let new_tat = self.decide(tat, now, n)?;
            match word.compare_exchange_weak(tat, new_tat, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(now),
                Err(current) => {
                    tat = current;
                    now = clock();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn idle_task_admits_exactly_the_burst_at_once() {
        for burst in [1, 2, 5, 100] {
            let g = Gcra {
                interval: MS,
                burst,
            };
            let word = AtomicU64::new(0);
            let now = 1_000 * MS;
            let admitted = (0..burst + 10)
                .filter(|_| g.try_take(&word, 1, || now).is_some())
                .count();
            assert_eq!(admitted, burst as usize);
        }
    }

    #[test]
    fn steady_arrivals_pass_at_the_rate_and_no_faster() {
        let g = Gcra {
            interval: MS,
            burst: 1,
        };
        let word = AtomicU64::new(0);
        // Offered every 0.25 ms for one second: exactly one per millisecond passes.
        let admitted = (0..4_000u64)
            .filter(|i| g.try_take(&word, 1, || 1_000 * MS + i * MS / 4).is_some())
            .count();
        assert_eq!(admitted, 1_000);
    }

    #[test]
    fn no_window_edge_burst() {
        // A fixed window would let 2×burst through around an edge; GCRA never
        // admits more than burst + elapsed/interval in any span.
        let g = Gcra {
            interval: 10 * MS,
            burst: 3,
        };
        let word = AtomicU64::new(0);
        let mut log = Vec::new();
        for t in (0..2_000 * MS).step_by((MS / 2) as usize) {
            if g.try_take(&word, 1, || 1_000 * MS + t).is_some() {
                log.push(t);
            }
        }
        for (i, &start) in log.iter().enumerate() {
            for span in [MS, 10 * MS, 95 * MS, 500 * MS] {
                let inside = log[i..].iter().take_while(|&&t| t < start + span).count() as u64;
                assert!(
                    inside <= 3 + span / (10 * MS),
                    "{inside} in {span} from {start}"
                );
            }
        }
    }

    #[test]
    fn batch_needs_room_for_all_n() {
        let g = Gcra {
            interval: MS,
            burst: 4,
        };
        let word = AtomicU64::new(0);
        let now = 50 * MS;
        assert!(g.try_take(&word, 3, || now).is_some());
        assert!(g.try_take(&word, 2, || now).is_none());
        assert!(g.try_take(&word, 1, || now).is_some());
        assert!(g.try_take(&word, 1, || now).is_none());
        assert!(g.try_take(&word, 2, || now + 2 * MS).is_some());
    }

    #[test]
    fn extreme_parameters_saturate_instead_of_wrapping() {
        let g = Gcra {
            interval: u64::MAX / 2,
            burst: u32::MAX,
        };
        assert!(g.decide(0, u64::MAX - 5, 1).is_some());
        let g = Gcra {
            interval: 1,
            burst: 1,
        };
        assert_eq!(g.decide(u64::MAX, 0, 1), None);
    }

    #[test]
    fn threads_share_one_word_without_losing_or_inventing_permits() {
        let g = Gcra {
            interval: 1,
            burst: 1_000,
        };
        let word = AtomicU64::new(0);
        let now = 5_000;
        let admitted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..1_000)
                            .filter(|_| g.try_take(&word, 1, || now).is_some())
                            .count()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, 1_000);
    }
}
