//! A task's global-quota statistics, read from its slot alone: attached
//! handles and read-only views share this reader, so it loads with
//! `Relaxed` or `format::load_acquire` only, and needs no store.

use std::sync::atomic::Ordering;

use super::pull::{FAILED, SINCE, tagged};
use super::store::{slice_of, wall_us};
use super::{Global, QuotaState, QuotaStats};
use crate::format::{TaskSlot, load_acquire};

/// The global-quota statistics of the task in `slot`, whose global limit is
/// `g`; the state is judged at this host's wall clock plus `skew_us` and the
/// store offset kept in the slot.
pub(crate) fn read(slot: &TaskSlot, g: Option<Global>, skew_us: i64) -> QuotaStats {
    let q = &slot.quota;
    let phase = load_acquire(&q.phase);
    let now_ms = (wall_us() / 1000) as u64;
    let mut ms = [0u64; 3];
    for (m, word) in ms.iter_mut().zip(&q.phase_ms) {
        *m = word.load(Ordering::Relaxed);
    }
    let kind = (phase >> 62) as usize;
    if phase != 0 && kind < 3 {
        ms[kind] += now_ms.saturating_sub(phase & SINCE);
    }
    let state = g.map(|g| {
        let store_now_us = wall_us() + skew_us + q.offset_us.load(Ordering::Relaxed) as i64;
        let slice = slice_of(store_now_us, g.slice_ms);
        if kind as u64 == FAILED {
            QuotaState::Failed
        } else if load_acquire(&q.exhausted) & !super::pull::MAY_COME_BACK == slice as u64 + 1
            && tagged(q.host.load(Ordering::Relaxed), slice) == 0
            && super::reserve::none(slot)
        {
            QuotaState::Limited
        } else {
            QuotaState::Open
        }
    });
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
            .map_or(0, |g| super::down::down(slot) & super::down::all(g.shards)),
        reserved: slot.reserved_total.load(Ordering::Relaxed),
        returned: slot.given_total.load(Ordering::Relaxed),
    }
}
