//! Depositing a grant into the host's quota: the host word of its slice,
//! what a newer slice leaves stranded, and the figures of the slice left
//! behind (what the host spent and was asked for in it).

use std::sync::atomic::Ordering;

use super::pull::{just_before, tagged};
use crate::format::TaskSlot;

/// Adds `granted` permits of `slice` to the host's quota. A newer slice
/// restarts from zero: what was left of the old one is stranded. A grant for
/// a slice already over is stranded whole.
/// `touched(s)`: slice `s` was spent with a shard down (see `down`): like
/// one an outage cut short, its figure is not the host's share.
///
/// `slice_granted` (what the host's claim to the store counts) takes the
/// grant before the host word does: a kill between the two leaves the
/// claim counting permits the table never got, which the key keeps
/// charging (the chunk is lost to the host). In the other order the claim
/// would fall short of a grant the table holds, and the redeem of the dead
/// puller's lock would hand it over a second time.
pub(super) fn deposit(slot: &TaskSlot, slice: u32, granted: u64, touched: impl Fn(u32) -> bool) {
    let q = &slot.quota;
    q.granted.fetch_add(granted, Ordering::Relaxed);
    let mut word = q.host.load(Ordering::Acquire);
    // The slice the host word holds changes only under the pull lock,
    // which the caller holds: a grant for a slice already over is stranded
    // whole, and counts in no claim.
    let sg = q.slice_granted.load(Ordering::Relaxed);
    if !(word != 0 && just_before(slice, (word >> 32) as u32)) {
        q.slice_granted.store(
            (slice as u64) << 32 | (tagged(sg, slice) + granted).min(u32::MAX as u64),
            Ordering::Relaxed,
        );
    }
    if std::env::var_os("FLOWCTRL_TEST_DIE_IN_DEPOSIT").is_some() {
        // Tests of the kill inside the deposit: die between the claim and
        // the host word, as a SIGKILL there would.
        std::process::abort();
    }
    loop {
        let (current, left) = ((word >> 32) as u32, word & 0xffff_ffff);
        let next = if current == slice {
            word + granted.min(u32::MAX as u64 - left)
        } else if word != 0 && just_before(slice, current) {
            q.stranded.fetch_add(granted, Ordering::Relaxed);
            return;
        } else {
            (slice as u64) << 32 | granted.min(u32::MAX as u64)
        };
        match q
            .host
            .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                // A host that fell back after the slice it leaves (an outage
                // longer than a slice) keeps its figure from before: that
                // slice was cut short by the outage, and the share fallback
                // (and a host back from it) would keep to that sliver.
                let fell_back = q.fallback_admitted.load(Ordering::Relaxed);
                let since = ((fell_back >> 32) as u32).wrapping_sub(current);
                let cut_short = fell_back != 0 && since != 0 && since < 1 << 31 || touched(current);
                if current != slice && word != 0 && cut_short {
                    q.stranded.fetch_add(left, Ordering::Relaxed);
                } else if current != slice && word != 0 {
                    q.stranded.fetch_add(left, Ordering::Relaxed);
                    // What the host admitted in the slice it leaves: the
                    // share fallback's rate if the store fails next.
                    let old =
                        tagged(sg, current).saturating_sub(super::idle::given_in(slot, current));
                    let fell_back = tagged(q.fallback_admitted.load(Ordering::Relaxed), current);
                    q.prev_spent
                        .store(old.saturating_sub(left) + fell_back, Ordering::Relaxed);
                    let refused = tagged(q.refused.load(Ordering::Relaxed), current);
                    q.prev_demand.store(
                        old.saturating_sub(left) + fell_back + refused,
                        Ordering::Relaxed,
                    );
                }
                break;
            }
            Err(now) => word = now,
        }
    }
}
