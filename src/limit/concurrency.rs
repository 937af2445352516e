//! A cap on permits in flight, as one counter word.

use std::sync::atomic::{AtomicU64, Ordering};

/// Adds `n` to `in_flight` if the result stays within `cap`.
#[inline]
pub fn try_take(in_flight: &AtomicU64, cap: u64, n: u64) -> bool {
    let mut current = in_flight.load(Ordering::Relaxed);
    loop {
        if current.saturating_add(n) > cap {
            return false;
        }
        match in_flight.compare_exchange_weak(
            current,
            current + n,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return true,
            Err(actual) => current = actual,
        }
    }
}

/// Returns `n` permits, never taking the counter below zero: the counter lives
/// in a file other processes can write, and a bad release elsewhere must not
/// wrap it into "full forever".
#[inline]
pub fn give_back(in_flight: &AtomicU64, n: u64) {
    let _ = in_flight.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(n))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_holds_and_give_back_frees() {
        let word = AtomicU64::new(0);
        assert!(try_take(&word, 10, 7));
        assert!(!try_take(&word, 10, 4));
        assert!(try_take(&word, 10, 3));
        assert!(!try_take(&word, 10, 1));
        give_back(&word, 5);
        assert!(try_take(&word, 10, 5));
        give_back(&word, 100);
        assert_eq!(word.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn threads_never_exceed_the_cap() {
        let word = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        if try_take(&word, 3, 1) {
                            assert!(word.load(Ordering::Relaxed) <= 3);
                            give_back(&word, 1);
                        }
                    }
                });
            }
        });
        assert_eq!(word.load(Ordering::Relaxed), 0);
    }
}
