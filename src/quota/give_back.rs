//! Giving back an idle host's quota.
//!
//! A host that goes quiet in the middle of a slice holds what is left of
//! its last chunk until the slice ends, and no call of its own can hand it
//! back: there is none. So a host whose quota word has not moved for a
//! while gives what it holds back to the store
//! ([`crate::Task::return_idle_quota`], called by the table's keeper
//! thread). The move itself, crash-exact, is the account's
//! (`account::give_back`).
//!
//! **The store hears of it** with the claim every pull sends: what the host
//! took less what it gave back (`given`, sent beside it); the script puts
//! back into the key what it was not told of before, and a key created anew
//! deducts only the net claim. The give-back's own round trip (a pull for
//! nothing) tells it at once; if that fails, the host's next pull does.

use std::sync::atomic::Ordering;

use super::account::Account;
use super::lock::try_lock;
use super::{Global, Quota, TaskRef, phase, policy};
use crate::format::QuotaSlot;

/// The least a give-back is worth (`policy::give_back_floor`), by the
/// hosts the store last counted.
pub(super) fn floor(q: &QuotaSlot, g: Global) -> u64 {
    policy::give_back_floor(g.quota as u64, q.hosts_seen.load(Ordering::Relaxed))
}

impl Quota {
    /// Whether this host gives back `g`'s idle quota: not to the embedded
    /// store (one host: nobody to give to), nor from a task spread over
    /// shards (its grants came from several keys).
    pub(super) fn gives_back(&self, g: Global) -> bool {
        self.store.spreads() && g.shards <= 1
    }

    /// [`crate::Task::return_idle_quota`]: gives back what the host holds
    /// of the current slice if no admission spent any, and none was
    /// refused, for `idle`.
    pub(crate) fn return_idle(&self, t: TaskRef<'_>, idle: std::time::Duration) -> u64 {
        let (q, g, account) = (&t.slot.quota, t.g, Account::of(t.slot));
        // Nor while the store fails or a reservation waits.
        if !self.gives_back(g) || phase::failed(q) || account.has_reservation() {
            return 0;
        }
        let word = q.host.load(Ordering::Acquire);
        let now = t.shm.clock.now();
        let idle_ticks = t.shm.clock.duration_to_ticks(idle);
        // Idle: nothing spent, nothing refused (a host refused is busy; it
        // holds less than it asked for, so there is nothing to give back).
        let refused = q.refused.load(Ordering::Acquire);
        if !self
            .keeper
            .unmoved(t.index, [word, refused], now, idle_ticks)
        {
            return 0;
        }
        let slice = super::slice_of(self.store_now_us(q), g.slice_ms);
        super::spell::mark_quiet(t.slot, slice);
        if super::account::tagged(word, slice) < floor(q, g) {
            return 0;
        }
        let Ok(Some(lock)) = try_lock(t.shm, q, self.stale_after()) else {
            return 0;
        };
        // Again under the lock: a pull between the looks may have kept a
        // reservation (the pull that tells the store would move it first
        // and tell nothing) or found the store failing.
        if phase::failed(q) || account.has_reservation() {
            return 0;
        }
        let back = account.give_back(word, slice);
        if back > 0 {
            // Tells the store now; if this fails, the next pull does.
            let _ = self.pull_locked(t, 0, &lock);
        }
        back
    }
}
