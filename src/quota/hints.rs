//! What the faces ask of a task's global quota besides a decision: whether
//! an acquire may make a round trip to the store (so Python lets the GIL go
//! around it), and when a global refusal may end (`retry_after`). Both read
//! a few words; neither is on the request path.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::store::slice_of;
use super::{Quota, TaskRef, phase};

impl Quota {
    /// Whether taking `n` permits at table-clock instant `now` may make a
    /// round trip to the store (a pull, a probe): the host's quota of the
    /// slice is too low, or of another slice, or the store is due a probe.
    /// The faces use it to let other threads run around such a call.
    pub fn may_pull(&self, t: TaskRef<'_>, n: u32, now: u64) -> bool {
        let q = &t.slot.quota;
        let slice = slice_of(self.store_us_at(&t.shm.clock, q, now), t.g.slice_ms);
        phase::may_pull(t.shm, t.slot, slice, n, now)
    }

    /// How long until a global refusal may end: while the slice has
    /// released nothing more for this host, until it will have; otherwise
    /// the slice's end. `None` while the store is failing (the probe
    /// decides).
    pub fn retry_after(&self, t: TaskRef<'_>, now: u64) -> Option<Duration> {
        let q = &t.slot.quota;
        if phase::failed(q) {
            return None;
        }
        let paced = q.paced_until.load(Ordering::Acquire);
        if paced > now {
            return Some(Duration::from_nanos(t.shm.clock.ticks_to_ns(paced - now)));
        }
        let slice_us = t.g.slice_ms as i64 * 1000;
        let at = self.store_us_at(&t.shm.clock, q, now).max(0);
        Some(Duration::from_micros((slice_us - at % slice_us) as u64))
    }
}
