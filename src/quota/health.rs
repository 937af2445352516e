//! What a task's releases reported over the current slice — successes,
//! drops, the mean and the 99th percentile of their round-trip times — sent
//! with every pull into the host's census record, so a manager can move the
//! fleet's threshold from the services' health without asking each host.
//!
//! The counts are the lanes' own counters (monotonic), less what they were
//! when the slice began (`TaskSlot::health`). The percentile comes from a
//! fixed sketch of 20 buckets: every release as success or dropped adds one
//! to a bucket of its own lane's sketch (`LaneSketch`: words only the
//! threads on that lane write, so the add moves no cache line between
//! threads; no allocation). A table made by 0.3.0 has no lane sketches:
//! there bucket `k` is word `k % 5` of lane `k / 5` of the releasing
//! process, which all its threads share. The task's sketch is the sum over
//! the lanes. The buckets are monotonic, like the counters
//! (`metrics` exports them as a histogram); the first pull of each slice
//! records them as the slice's baseline (`TaskSlot::sketch_base`, 32 bits a
//! bucket), and a percentile is over what they gained since.
//! Buckets are half octaves from ~1 ms: a percentile is exact to its bucket,
//! interpolated within it (±25 %), and at most ~537 ms (the last bucket
//! has no top). Pullers write these words under the pull lock; one killed
//! half-way leaves one slice's figures off, never a permit.

use std::sync::atomic::Ordering;

use crate::format::{
    Counter, LANES, Lane, SKETCH_BASE_WORDS, SKETCH_BUCKETS, SKETCH_PER_LANE, TaskSlot,
    WAIT_BUCKETS,
};
use crate::shm::{Region, Shm};

/// Buckets of the latency sketch.
pub(crate) const BUCKETS: usize = SKETCH_BUCKETS;
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

/// The octave of a time (two buckets of [`bucket`] each, the first and the
/// last alone): the buckets of the waiting-time histogram.
#[inline]
pub(crate) fn octave(ns: u64) -> usize {
    bucket(ns).div_ceil(2)
}

/// The upper bound of bucket `k` of [`bucket`] in seconds (∞ for the last).
pub(crate) fn upper_seconds(k: usize) -> f64 {
    if k + 1 < BUCKETS {
        lower_ns(k + 1) as f64 / 1e9
    } else {
        f64::INFINITY
    }
}

/// The upper bound of octave `j` of [`octave`] in seconds (∞ for the last).
pub(crate) fn octave_upper_seconds(j: usize) -> f64 {
    if j + 1 < WAIT_BUCKETS {
        upper_seconds(2 * j)
    } else {
        f64::INFINITY
    }
}

/// The lowest RTT of bucket `k`, ns.
fn lower_ns(k: usize) -> u64 {
    if k == 0 {
        return 0;
    }
    let (octave, half) = ((k - 1) / 2 + 1, (k - 1) % 2);
    ((1u64 << octave) + ((half as u64) << (octave - 1))) << UNIT_SHIFT
}

/// Counts `n` releases of one RTT into the sketch of lane `id` (`attach *
/// LANES + lane`) of task `index`: the releasing thread's own, `own`
/// (`None` for a pair of a pooled table without a set).
#[inline]
pub(crate) fn record(
    region: &Region,
    own: Option<&Lane>,
    (index, id): (u32, u32),
    rtt_ns: u64,
    n: u64,
) {
    let k = bucket(rtt_ns);
    let word = if region.has_lane_sketches() {
        own.and_then(|lane| region.sketch_of(lane))
            .map(|sketch| &sketch.buckets[k])
    } else {
        // 0.3.0's table: the process's lane `k / 5` holds bucket `k`.
        region
            .lane(index, id - id % LANES + (k / SKETCH_PER_LANE) as u32)
            .map(|lane| &lane.sketch[k % SKETCH_PER_LANE])
    };
    if let Some(word) = word {
        word.fetch_add(n, Ordering::Relaxed);
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

/// The task's sketch: each bucket summed over the lanes of every process
/// (saturating: the buckets are words of the file).
pub(crate) fn sketch(region: &Region, index: u32) -> [u64; BUCKETS] {
    let mut buckets = [0u64; BUCKETS];
    let mut add = |k: usize, word: &std::sync::atomic::AtomicU64| {
        buckets[k] = buckets[k].saturating_add(word.load(Ordering::Relaxed));
    };
    for id in 0..region.geometry.attach_capacity * LANES {
        if region.has_lane_sketches() {
            if let Some(own) = region.lane_sketch(index, id) {
                own.buckets.iter().enumerate().for_each(|(k, b)| add(k, b));
            }
        } else if let Some(lane) = region.lane(index, id) {
            let first = (id % LANES) as usize * SKETCH_PER_LANE;
            lane.sketch
                .iter()
                .enumerate()
                .for_each(|(i, b)| add(first + i, b));
        }
    }
    buckets
}

/// `sketch` as a slice's baseline: 32 bits a bucket, two to a word.
fn pack(sketch: &[u64; BUCKETS]) -> [u64; SKETCH_BASE_WORDS] {
    std::array::from_fn(|w| sketch[2 * w] as u32 as u64 | (sketch[2 * w + 1] as u32 as u64) << 32)
}

/// What each bucket gained since `base`: none for a bucket below it (a
/// pooled set given back in the slice) or grown by more than the slice's
/// `samples` (a damaged word).
fn gained(
    base: &[u64; SKETCH_BASE_WORDS],
    sketch: &[u64; BUCKETS],
    samples: u64,
) -> [u64; BUCKETS] {
    std::array::from_fn(|k| {
        let base = (base[k / 2] >> (32 * (k % 2))) as u32;
        let gain = (sketch[k] as u32).wrapping_sub(base) as u64;
        if gain > samples { 0 } else { gain }
    })
}

/// The task's health over `slice` so far; the first call in a slice starts
/// it afresh. The caller holds the task's pull lock.
pub(crate) fn of_slice(shm: &Shm, index: u32, slot: &TaskSlot, slice: u32) -> Health {
    // The sketch before the counters: a release adds to its bucket first,
    // so no bucket gains more than the counters show.
    let sketch = sketch(shm, index);
    let totals = crate::shm::pool::task_totals(shm, index);
    let sums = [
        Counter::ReleasedSuccess,
        Counter::ReleasedDropped,
        Counter::RttSumNs,
    ]
    .map(|c| totals[c as usize]);
    let tag = slice as u64 + 1;
    if slot.health[0].load(Ordering::Acquire) != tag {
        for (i, word) in pack(&sketch).into_iter().enumerate() {
            slot.sketch_base(i).store(word, Ordering::Relaxed);
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
    let samples = success + dropped;
    let base = std::array::from_fn(|i| slot.sketch_base(i).load(Ordering::Relaxed));
    Health {
        success,
        dropped,
        mean_us: rtt_ns.checked_div(samples).unwrap_or(0) / 1000,
        p99_us: quantile(&gained(&base, &sketch, samples), 0.99) / 1000,
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
    fn a_slice_counts_what_each_bucket_gained_past_32_bits() {
        let mut then = [0u64; BUCKETS];
        then[3] = (1 << 32) - 2;
        then[4] = 7 << 32 | 9;
        then[5] = 100;
        let base = pack(&then);
        let mut now = then;
        now[3] += 5; // across 2^32
        now[4] += 1;
        now[5] = 40; // a set given back: below its baseline
        now[6] = 1 << 40; // a damaged word
        let gain = gained(&base, &now, 6);
        assert_eq!((gain[3], gain[4], gain[5], gain[6]), (5, 1, 0, 0));
        assert_eq!(gain.iter().sum::<u64>(), 6);
    }

    #[test]
    fn octaves_pair_the_buckets_and_share_their_bounds() {
        assert_eq!((octave(0), octave(MS - 1), octave(MS)), (0, 0, 1));
        assert_eq!(octave(u64::MAX), WAIT_BUCKETS - 1);
        for j in 0..WAIT_BUCKETS - 1 {
            let top = (octave_upper_seconds(j) * 1e9).round() as u64;
            assert_eq!((octave(top - 1), octave(top)), (j, j + 1), "{j}");
        }
        assert_eq!(octave_upper_seconds(WAIT_BUCKETS - 1), f64::INFINITY);
        assert_eq!(upper_seconds(BUCKETS - 1), f64::INFINITY);
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
