//! What a task's releases reported over the current slice — successes,
//! drops, the mean and the 99th percentile of their round-trip times — sent
//! with every pull into the host's census record, so a manager can move the
//! fleet's threshold from the services' health without asking each host.
//!
//! The counts are the lanes' own counters (monotonic), less what they were
//! when the slice began (`TaskSlot::health`). The percentile comes from a
//! fixed sketch of 20 buckets kept on the lanes' ledger lines: a release
//! adds one to a bucket of its own process's lane (no shared line, no
//! allocation), and the first pull of each slice empties the buckets (a
//! swap to zero loses no concurrent sample: it lands in the new slice).
//! Buckets are half octaves from ~1 ms: a percentile is exact to its bucket,
//! interpolated within it (±25 %), and at most ~537 ms (the last bucket
//! has no top). Pullers write these words under the pull lock; one killed
//! half-way leaves one slice's figures off, never a permit.

use std::sync::atomic::Ordering;

use crate::format::{Counter, LANES, Lane, SKETCH_PER_LANE, TaskSlot};
use crate::shm::Shm;

/// Buckets of the latency sketch.
pub(crate) const BUCKETS: usize = LANES as usize * SKETCH_PER_LANE;
/// The sketch's unit: 2^19 ns (~0.52 ms), half its first bucket.
const UNIT_SHIFT: u32 = 19;

/// A slice's health as this host saw it so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Health {
    pub success: u64,
    pub dropped: u64,
    /// Mean RTT of the permits released as success or dropped, µs.
    pub mean_us: u64,
    /// Their 99th percentile, µs (0 without samples).
    pub p99_us: u64,
}

/// The bucket of an RTT: 0 below two units (~1 ms), then two per octave
/// (at 1 and 1.5 × a power of two), the last open-ended.
#[inline]
pub(crate) fn bucket(rtt_ns: u64) -> usize {
    let units = rtt_ns >> UNIT_SHIFT;
    if units < 2 {
        return 0;
    }
    let octave = 63 - units.leading_zeros() as usize;
    let half = ((units >> (octave - 1)) & 1) as usize;
    (2 * octave - 1 + half).min(BUCKETS - 1)
}

/// The lowest RTT of bucket `k`, ns.
fn lower_ns(k: usize) -> u64 {
    if k == 0 {
        return 0;
    }
    let (octave, half) = ((k - 1) / 2 + 1, (k - 1) % 2);
    ((1u64 << octave) + ((half as u64) << (octave - 1))) << UNIT_SHIFT
}

/// Counts `n` releases of one RTT into the releasing process's lanes of the
/// task (`lane(i)`: its lane `i` of [`LANES`]).
#[inline]
pub(crate) fn record<'a>(lane: impl Fn(u32) -> Option<&'a Lane>, rtt_ns: u64, n: u64) {
    let k = bucket(rtt_ns);
    if let Some(lane) = lane((k / SKETCH_PER_LANE) as u32) {
        lane.sketch[k % SKETCH_PER_LANE].fetch_add(n, Ordering::Relaxed);
    }
}

/// The `q` quantile of a sketch, ns (0 when empty).
pub(crate) fn quantile(buckets: &[u64; BUCKETS], q: f64) -> u64 {
    // Saturating: the buckets are words of the file (a damaged one is huge).
    let total = buckets.iter().fold(0u64, |t, b| t.saturating_add(*b));
    if total == 0 {
        return 0;
    }
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut below = 0u64;
    for (k, &count) in buckets.iter().enumerate() {
        if below.saturating_add(count) >= rank {
            let (lo, hi) = (lower_ns(k), lower_ns(k + 1));
            if k == BUCKETS - 1 {
                return lo;
            }
            let into = (rank - below) as f64 / count as f64;
            return lo + ((hi - lo) as f64 * into) as u64;
        }
        below = below.saturating_add(count);
    }
    lower_ns(BUCKETS - 1)
}

/// The task's health over `slice` so far; the first call in a slice starts
/// it afresh. The caller holds the task's pull lock.
pub(crate) fn of_slice(shm: &Shm, index: u32, slot: &TaskSlot, slice: u32) -> Health {
    slot.sketching.store(1, Ordering::Relaxed);
    let lanes =
        || (0..shm.geometry.attach_capacity * LANES).filter_map(move |id| shm.lane(index, id));
    let totals = crate::shm::pool::task_totals(shm, index);
    let sums = [
        Counter::ReleasedSuccess,
        Counter::ReleasedDropped,
        Counter::RttSumNs,
    ]
    .map(|c| totals[c as usize]);
    let tag = slice as u64 + 1;
    if slot.health[0].load(Ordering::Acquire) != tag {
        for lane in lanes() {
            for b in &lane.sketch {
                b.swap(0, Ordering::Relaxed);
            }
        }
        for (word, sum) in slot.health[1..].iter().zip(sums) {
            word.store(sum, Ordering::Relaxed);
        }
        slot.health[0].store(tag, Ordering::Release);
        return Health::default();
    }
    let since = |i: usize| sums[i].wrapping_sub(slot.health[i + 1].load(Ordering::Relaxed));
    let (success, dropped, rtt_ns) = (since(0), since(1), since(2));
    // A counter wrapped by a damaged word: no figures rather than garbage.
    if success > 1 << 48 || dropped > 1 << 48 {
        return Health::default();
    }
    let mut buckets = [0u64; BUCKETS];
    for (id, lane) in
        (0..shm.geometry.attach_capacity * LANES).filter_map(|id| Some((id, shm.lane(index, id)?)))
    {
        let first = (id % LANES) as usize * SKETCH_PER_LANE;
        for (i, b) in lane.sketch.iter().enumerate() {
            buckets[first + i] = buckets[first + i].saturating_add(b.load(Ordering::Relaxed));
        }
    }
    let samples = success + dropped;
    Health {
        success,
        dropped,
        mean_us: rtt_ns.checked_div(samples).unwrap_or(0) / 1000,
        p99_us: quantile(&buckets, 0.99) / 1000,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 2 << UNIT_SHIFT;

    #[test]
    fn buckets_are_half_octaves_and_the_last_is_open() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(MS - 1), 0);
        assert_eq!(bucket(MS), 1);
        assert_eq!(bucket(MS * 3 / 2), 2);
        assert_eq!(bucket(2 * MS), 3);
        assert_eq!(bucket(3 * MS), 4);
        assert_eq!(bucket(4 * MS), 5);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        for k in 1..BUCKETS {
            assert_eq!(bucket(lower_ns(k)), k, "{k}");
            assert_eq!(bucket(lower_ns(k) - 1), k - 1, "{k}");
        }
    }

    #[test]
    fn the_quantile_falls_in_its_bucket() {
        let mut b = [0u64; BUCKETS];
        assert_eq!(quantile(&b, 0.99), 0);
        // 990 fast samples (~1 ms), 10 slow (~40 ms): p99 at the fast top,
        // p99.5 among the slow.
        b[bucket(MS + 1)] = 990;
        b[bucket(40 * MS)] = 10;
        let p99 = quantile(&b, 0.99);
        assert!((MS..=MS * 3 / 2).contains(&p99), "{p99}");
        let slow = quantile(&b, 0.995);
        assert!((32 * MS..48 * MS).contains(&slow), "{slow}");
        b = [0; BUCKETS];
        b[BUCKETS - 1] = 5;
        assert_eq!(quantile(&b, 0.99), lower_ns(BUCKETS - 1));
    }
}
