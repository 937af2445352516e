//! A spread task's words: what each shard granted the host, the shards
//! found used up, and the down shards whose part the host granted itself.

use std::sync::atomic::Ordering;

use super::{Account, count_in, tag, tagged};

impl Account<'_> {
    /// What shard `i` granted this host of `slice` (shard 0: the rest of
    /// the slice's grants); `pending`: what this pull was granted so far
    /// (counted per shard already, not yet in the slice's grants).
    pub(in crate::quota) fn shard_granted(self, slice: u32, i: u32, pending: u64) -> u64 {
        let q = self.q();
        let of = |k: usize| tagged(q.shard_granted[k].load(Ordering::Relaxed), slice);
        match i {
            0 => {
                let others: u64 = (0..q.shard_granted.len()).map(of).sum();
                (self.granted(slice) + pending).saturating_sub(others)
            }
            i => of(i as usize - 1),
        }
    }

    /// What this host took of `slice` that shard `i`'s key is to know of:
    /// its grants, and on its home shard its fallback admissions. Every
    /// permit is claimed from exactly one key.
    pub(in crate::quota) fn shard_claim(self, slice: u32, i: u32, home: u32, pending: u64) -> u64 {
        let fell_back = if i == home { self.fell_back(slice) } else { 0 };
        self.shard_granted(slice, i, pending) + fell_back
    }

    /// Counts a grant of shard `i` (shard 0's is the rest of the slice's
    /// grants). Under the pull lock.
    pub(in crate::quota) fn count_shard_grant(self, slice: u32, i: u32, granted: u64) {
        if i > 0 {
            count_in(&self.q().shard_granted[i as usize - 1], slice, granted);
        }
    }

    /// The shards found used up in `slice`, one bit each.
    pub(in crate::quota) fn shards_out(self, slice: u32) -> u64 {
        tagged(self.q().shards_out.load(Ordering::Relaxed), slice)
    }

    /// Marks shard `i` used up in `slice`. Under the pull lock.
    pub(in crate::quota) fn mark_shard_out(self, slice: u32, i: u32) {
        let mask = self.shards_out(slice) | 1 << i;
        self.q()
            .shards_out
            .store(tag(slice, mask), Ordering::Relaxed);
    }

    /// The down shards whose part the host granted itself in `slice`
    /// (bits; see `down`): `shards_down` holds the slice above bit 32.
    pub(in crate::quota) fn self_granted(self, slice: u32) -> u64 {
        let word = self.slot.shards_down.load(Ordering::Relaxed);
        if (word >> 32) as u32 == slice {
            word >> 8 & 0xff
        } else {
            0
        }
    }

    /// Counts down shard `i`'s part of `slice` as granted by the host
    /// itself (keeping the down bits below).
    pub(in crate::quota) fn mark_self_granted(self, slice: u32, i: u32) {
        let word = self.slot.shards_down.load(Ordering::Relaxed);
        let selfs = self.self_granted(slice) | 1 << i;
        self.slot.shards_down.store(
            (slice as u64) << 32 | selfs << 8 | word & 0xff,
            Ordering::Relaxed,
        );
    }
}
