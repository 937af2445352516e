//! Fair tails: what a host tells the store of its demand. While the
//! hosts' demands add up to more than a slice holds, the pull script owes
//! each host min(its demand, an equal share) of the slice, released over it
//! (Doorman's FairShare, with the slice's smoothing), so a host that asks
//! often cannot take the tail a small one needs. The demand is what the
//! host was asked for, refusals included: what it was granted alone would
//! hide what it lacked.

use super::account::Account;
use super::fallback::share_left;
use super::{Global, Quota, policy};
use crate::format::TaskSlot;

impl Quota {
    /// Requests per slice this host is asked for (`policy::demand`). A
    /// host back from a fallback reports no more than its share
    /// (`share_left`): reported at what it is asked, the fair tails would
    /// hold the rest of an equal share for it to the slice's end, and
    /// nobody would take it.
    pub(super) fn demand(&self, slot: &TaskSlot, g: Global, slice: u32) -> u64 {
        let account = Account::of(slot);
        let slice_us = g.slice_ms as u64 * 1000;
        let elapsed = self.store_now_us(&slot.quota).max(0) as u64 % slice_us;
        let demand = policy::demand(
            account.asked_before(slice),
            account.asked(slice),
            elapsed,
            slice_us,
        );
        match share_left(slot, g, slice) {
            Some(left) => demand.min(account.holds(slice) + left),
            None => demand,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Fallback;
    use crate::quota::store::slice_of;
    use std::sync::atomic::Ordering;

    /// 2,000 a slice of 1 s, the share fallback, one key.
    fn share_of_2000() -> Global {
        Global {
            rate: 2000.0,
            quota: 2000,
            slice_ms: 1000,
            chunk: 0,
            fallback: Fallback::Share,
            global_burst: 0,
            shards: 1,
        }
    }

    /// Back from a fallback with 37 of its 787 left, a host asked for
    /// 3,000 reports 787: what it will take.
    #[test]
    fn a_host_back_from_a_fallback_reports_no_more_than_its_share() {
        let (me, slot) = (
            crate::quota::testing::quota(),
            crate::quota::testing::slot(),
        );
        let g = share_of_2000();
        let q = &slot.quota;
        let slice = slice_of(me.store_now_us(q), g.slice_ms);
        let tag = (slice as u64) << 32;
        q.prev_spent.store(787, Ordering::Relaxed);
        q.slice_granted.store(tag | 700, Ordering::Relaxed);
        q.host.store(tag, Ordering::Relaxed);
        q.refused.store(tag | 2250, Ordering::Relaxed);
        q.prev_demand.store(3000, Ordering::Relaxed);
        assert!(me.demand(&slot, g, slice) >= 3000);
        q.fallback_admitted.store(tag | 50, Ordering::Relaxed);
        assert_eq!(me.demand(&slot, g, slice), 787);
    }

    /// A host that fell back in a slice keeps to its share in that slice
    /// and the next (the others may still be in their fallbacks, which the
    /// key does not know of), and is unbounded the slice after.
    #[test]
    fn the_share_binds_in_the_slice_of_a_fallback_and_the_next_only() {
        let slot = crate::quota::testing::slot();
        let g = share_of_2000();
        let q = &slot.quota;
        let slice = 1_000u32;
        q.prev_spent.store(900, Ordering::Relaxed);
        assert_eq!(share_left(&slot, g, slice), None);
        q.fallback_admitted
            .store((slice as u64) << 32 | 600, Ordering::Relaxed);
        assert_eq!(share_left(&slot, g, slice), Some(300));
        assert_eq!(share_left(&slot, g, slice + 1), Some(900));
        q.slice_granted
            .store(((slice + 1) as u64) << 32 | 850, Ordering::Relaxed);
        assert_eq!(share_left(&slot, g, slice + 1), Some(50));
        assert_eq!(share_left(&slot, g, slice + 2), None);
    }
}
