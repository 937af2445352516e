//! Deciding while the store fails, by the task's fallback policy, and the
//! share a host keeps to around a fallback.
//!
//! **The share.** Other hosts that fell back report what they took only
//! when they reach the store again, up to a probe interval later and
//! perhaps in the next slice: until then the key cannot know it. So a host
//! that fell back in a slice keeps to its own fallback allowance in that
//! slice and the next ([`share_left`]), and the hosts' sum stays at most
//! the quota instead of the first host back taking what the others'
//! fallbacks admit too.

use std::sync::atomic::Ordering;

use super::account::Account;
use super::{Global, Need, Quota, Refused, Spent, TaskRef, outage};
use crate::format::{Fallback, TaskSlot};
use crate::limit::gcra::Gcra;

/// The fallback policy's rate for this host; `None`: the local limits
/// alone (`local`, or `share` before any history; `deny` admits nothing).
pub(super) fn fallback_rate(slot: &TaskSlot, g: Global) -> Option<f64> {
    match g.fallback {
        Fallback::Rate(rate) => Some(rate),
        Fallback::Share => outage::share_rate(
            Account::of(slot).last_spent(),
            slot.quota.hosts_seen.load(Ordering::Relaxed),
            g.rate,
            g.slice_ms,
        ),
        Fallback::Local | Fallback::Deny => None,
    }
}

/// In a slice this host spent partly in fallback, or the slice after one,
/// its fallback allowance of the slice (`None`: no bound). See the module
/// doc.
fn share_of_slice(slot: &TaskSlot, g: Global, slice: u32) -> Option<u64> {
    let account = Account::of(slot);
    if account.fell_back(slice) == 0 && account.fell_back(slice.wrapping_sub(1)) == 0 {
        return None;
    }
    fallback_rate(slot, g).map(|rate| outage::allowance(rate, g.slice_ms))
}

/// What the share still allows the host to take of `slice` from the store
/// (`None`: no bound).
pub(super) fn share_left(slot: &TaskSlot, g: Global, slice: u32) -> Option<u64> {
    share_of_slice(slot, g, slice).map(|a| a.saturating_sub(Account::of(slot).holds(slice)))
}

/// What the host holds of `slice` past its share (0 without one): a grant
/// that landed after the host's other processes spent the share by the
/// fallback.
pub(super) fn share_over(slot: &TaskSlot, g: Global, slice: u32) -> u64 {
    share_of_slice(slot, g, slice).map_or(0, |a| Account::of(slot).holds(slice).saturating_sub(a))
}

impl Quota {
    /// The decision while the store is failing, by the task's fallback
    /// policy; the local limits apply on top (the caller's). An admission
    /// is counted against `slice`, for the key that may be created anew in
    /// it (`now_us`: the store's time `slice` was read at, so the clock is
    /// read once). What the host already took of the slice (grants before
    /// the store failed, fallback admissions) counts against the slice's
    /// allowance: a host that falls back mid-slice does not admit on top of
    /// its grants.
    ///
    /// `share` keeps the host to its share of the slice as the store would
    /// have released it by now (`outage::share_released`): a host the
    /// store paced behind its share when it failed is not held behind it
    /// for the rest of the slice. A number is a rate: the host admits at
    /// most that many requests/s (its GCRA), within a slice's worth.
    pub(super) fn fallback(
        &self,
        t: TaskRef<'_>,
        need: Need,
        (slice, now_us): (u32, i64),
    ) -> Result<Spent, Refused> {
        let (shm, q, n) = (t.shm, &t.slot.quota, need.n);
        let account = Account::of(t.slot);
        let admitted = match (t.g.fallback, fallback_rate(t.slot, t.g)) {
            (Fallback::Deny, _) => false,
            (_, None) => {
                account.count_fallback(slice, n);
                true
            }
            (Fallback::Share, Some(rate)) => {
                let allowance = outage::allowance(rate, t.g.slice_ms);
                let elapsed = outage::elapsed_ms(now_us, slice, t.g.slice_ms);
                let limit = outage::share_released(allowance, t.g, elapsed);
                account.count_fallback_within(slice, n, limit)
            }
            (_, Some(rate)) => {
                let allowance = outage::allowance(rate, t.g.slice_ms);
                let gcra = Gcra {
                    interval: (Gcra::interval_of(rate, shm.clock.ticks_per_sec()).round() as u64)
                        .max(1),
                    burst: need.burst.max(n).max(outage::fallback_burst(rate)),
                };
                let tat = q.fallback_tat.load(Ordering::Relaxed);
                let now = shm.clock.now();
                account.holds(slice) + n as u64 <= allowance
                    && gcra
                        .take_from(&q.fallback_tat, tat, now, n, || shm.clock.now())
                        .is_some()
                    && {
                        account.count_fallback(slice, n);
                        true
                    }
            }
        };
        if !admitted {
            q.limited_fallback.fetch_add(n as u64, Ordering::Relaxed);
            return Err(Refused::Fallback);
        }
        Ok(Spent::Fallback(slice))
    }
}
