//! Counts in fixed one-second buckets: each word holds its second (24 bits)
//! and two counts (20 bits each, saturating), so a bucket is moved to a new
//! second and counted in one compare-and-swap, by any process. Fixed buckets
//! weigh every call the same whatever the rate, so a burst of failures is
//! never averaged away by a quiet period (a time-weighted average would).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::format::BUCKETS;

const SEC_BITS: u32 = 24;
const SEC_MASK: u64 = (1 << SEC_BITS) - 1;
const COUNT_BITS: u32 = 20;
/// The largest count a bucket holds in one second; more is not counted.
pub(crate) const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;

fn pack(sec: u64, a: u64, b: u64) -> u64 {
    (sec & SEC_MASK) << (2 * COUNT_BITS) | a.min(COUNT_MAX) << COUNT_BITS | b.min(COUNT_MAX)
}

fn unpack(word: u64) -> (u64, u64, u64) {
    (
        word >> (2 * COUNT_BITS),
        (word >> COUNT_BITS) & COUNT_MAX,
        word & COUNT_MAX,
    )
}

/// Adds `a` and `b` to the bucket of second `sec`.
pub(crate) fn add(buckets: &[AtomicU64; BUCKETS], sec: u64, a: u64, b: u64) {
    let bucket = &buckets[(sec % BUCKETS as u64) as usize];
    let mut current = bucket.load(Ordering::Relaxed);
    loop {
        let (at, ca, cb) = unpack(current);
        let next = if at == sec & SEC_MASK {
            pack(sec, ca + a, cb + b)
        } else {
            pack(sec, a, b)
        };
        match bucket.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(seen) => current = seen,
        }
    }
}

/// The sums of both counts over the window: the buckets of the last
/// `BUCKETS` seconds, the current one included.
pub(crate) fn window(buckets: &[AtomicU64; BUCKETS], sec: u64) -> (u64, u64) {
    buckets.iter().fold((0, 0), |(sa, sb), bucket| {
        let (at, a, b) = unpack(bucket.load(Ordering::Relaxed));
        let age = (sec & SEC_MASK).wrapping_sub(at) & SEC_MASK;
        if age < BUCKETS as u64 {
            (sa + a, sb + b)
        } else {
            (sa, sb)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_age_out_of_the_window_and_saturate() {
        let b: [AtomicU64; BUCKETS] = Default::default();
        add(&b, 100, 3, 1);
        add(&b, 100, 1, 0);
        add(&b, 105, 0, 2);
        assert_eq!(window(&b, 105), (4, 3));
        assert_eq!(window(&b, 109), (4, 3));
        assert_eq!(window(&b, 110), (0, 2));
        // Second 110 reuses second 100's bucket: the old counts are replaced.
        add(&b, 110, 1, 0);
        assert_eq!(window(&b, 110), (1, 2));
        add(&b, 110, COUNT_MAX * 2, 0);
        assert_eq!(window(&b, 110).0, COUNT_MAX);
        // The second wraps at 24 bits without losing the window.
        let w = SEC_MASK + 3;
        add(&b, w, 5, 5);
        assert_eq!(window(&b, w + 1), (5, 5));
    }
}
