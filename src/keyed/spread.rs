//! The fleet's spread keys as the host keeps them: the list the store's
//! last answer carried (see `fleet`, and `format::FleetWords` for the
//! words), read when a key's words start a slice.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::Keys;
use super::record::HEARTBEAT_MS;

impl Keys {
    /// Whether the key `id` counts as spread over the fleet in `slice` (of
    /// `slice_ms`): the store's last answer listed it, for `slice` or up to
    /// a second of slices before (a host with nothing to ask calls once a
    /// second). While the store has failed since that answer, its list
    /// counts however old: the last list known is the fleet's (judged by
    /// its age, a listed key got its allowance back once an outage outlasted
    /// its hot slices).
    pub(super) fn spread(&self, slice: u64, slice_ms: u64, id: u64) -> bool {
        let f = &self.region.header().fleet;
        let of = f.slice.load(Acquire);
        let span = (HEARTBEAT_MS / slice_ms.max(1)).max(1);
        let failed = self.region.header().global.failed_until_ms.load(Relaxed) != 0;
        of != 0
            && f.slice_ms.load(Relaxed) == slice_ms
            && (failed || slice.wrapping_sub(of - 1) <= span)
            && f.ids.iter().any(|w| w.load(Relaxed) == id)
    }

    /// Keeps the spread keys the store listed for `slice` (of `slice_ms`):
    /// not over a later slice's list, nor over the default limits' list
    /// with another slicing's.
    pub(super) fn note_spread(&self, slice: u64, slice_ms: u64, ids: &[u64]) {
        let f = &self.region.header().fleet;
        let (of, of_ms) = (f.slice.load(Acquire), f.slice_ms.load(Relaxed));
        if of_ms == slice_ms && of > slice + 1 {
            return;
        }
        if of_ms != slice_ms && of != 0 && self.global_slicing().is_some_and(|(ms, _)| ms == of_ms)
        {
            return;
        }
        for (i, w) in f.ids.iter().enumerate() {
            w.store(ids.get(i).copied().unwrap_or(0), Relaxed);
        }
        f.slice_ms.store(slice_ms, Relaxed);
        f.slice.store(slice + 1, Release);
    }
}
