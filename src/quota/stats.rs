//! A task's global-quota statistics, read from its slot alone: attached
//! handles and read-only views share this reader, so it loads with
//! `Relaxed` or `format::load_acquire` only, and needs no store.

use std::sync::atomic::Ordering;

use super::store::{slice_of, wall_us};
use super::{Global, QuotaStats, down, phase};
use crate::format::TaskSlot;

/// The global-quota statistics of the task in `slot`, whose global limit is
/// `g`; the state is judged at this host's wall clock plus `skew_us` and the
/// store offset kept in the slot.
pub(crate) fn read(slot: &TaskSlot, g: Option<Global>, skew_us: i64) -> QuotaStats {
    let q = &slot.quota;
    let slice = g.map(|g| {
        let store_now_us = wall_us() + skew_us + q.offset_us.load(Ordering::Relaxed) as i64;
        slice_of(store_now_us, g.slice_ms)
    });
    let (state, ms) = phase::read(slot, slice);
    QuotaStats {
        state,
        pulls: q.pulls.load(Ordering::Relaxed),
        failed_pulls: q.failed_pulls.load(Ordering::Relaxed),
        pull_ns_sum: q.pull_ns_sum.load(Ordering::Relaxed),
        pull_ns_max: q.pull_ns_max.load(Ordering::Relaxed),
        granted: q.granted.load(Ordering::Relaxed),
        stranded: q.stranded.load(Ordering::Relaxed),
        open_ms: ms[0],
        limited_ms: ms[1],
        failed_ms: ms[2],
        clock_offset_us: q.offset_us.load(Ordering::Relaxed) as i64,
        limited_fallback: q.limited_fallback.load(Ordering::Relaxed),
        hosts_seen: q.hosts_seen.load(Ordering::Relaxed),
        host_conflicts: q.host_conflicts.load(Ordering::Relaxed),
        config_conflicts: q.config_conflicts.load(Ordering::Relaxed),
        keys_created: slot.keys_created.load(Ordering::Relaxed),
        // Only the task's own shards: the word is the file's.
        shards_down: g
            .filter(|g| g.shards > 1)
            .map_or(0, |g| down::down(slot) & down::all(g.shards)),
        reserved: slot.reserved_total.load(Ordering::Relaxed),
        returned: slot.given_total.load(Ordering::Relaxed),
    }
}
