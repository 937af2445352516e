//! Reservations: a grant the store made ahead of the slice's release.
//!
//! Past 100 hosts a host's share of a slice is a few hundred permits, and
//! while the fleet asks for more than the slice holds each host spends its
//! chunk faster than the slice releases the next one. Its ask at the low
//! water was refused ("nothing released for you yet, ask again in W ms")
//! and the ask W ms later granted: two round trips a chunk. The pull script
//! grants such an ask at once instead, to be spent only after W (the time
//! asking again would have been granted), so one round trip does.
//!
//! The host keeps the grant in its task slot's `reserved` word (slice |
//! permits), with `paced_until` at the time it becomes usable; the first
//! pull after that (any process's, under the pull lock) moves it into the
//! host's quota. Until moved it counts in the host's claim to the store
//! (`taken_in`): the key charged it, and the table holds it.
//!
//! **A kill during the move** is what the pull lock's redeem already
//! covers: the word is emptied before the deposit, so between the two the
//! claim no longer counts the reservation, and whoever breaks the dead
//! mover's lock marks the task `redeem`: the next pull is handed back
//! exactly what the key charged and the table lost. A reservation of a slice
//! already over when it is moved is stranded, like a late grant.

use std::sync::atomic::Ordering;

use super::pull::{deposit, tagged};
use crate::format::TaskSlot;

/// Whether the host holds no reservation (of any slice). Only then does a
/// used-up key or a spent fallback share leave a pull nothing to do.
pub(super) fn none(slot: &TaskSlot) -> bool {
    slot.reserved.load(Ordering::Acquire) == 0
}

/// Permits of `slice` the host holds reserved.
pub(super) fn held(slot: &TaskSlot, slice: u32) -> u64 {
    tagged(slot.reserved.load(Ordering::Acquire), slice)
}

/// Keeps a reservation of `granted` permits of `slice` (under the pull
/// lock). A host asks only once its last one was moved, so the word is
/// empty; one of an older slice left unmoved is stranded.
/// A compare-and-swap, not a store: a holder only stuck past the lock's
/// bound may still be finishing its pull while the breaker moves the word.
pub(super) fn keep(slot: &TaskSlot, slice: u32, granted: u64) {
    let add =
        |word: u64| (slice as u64) << 32 | (tagged(word, slice) + granted).min(u32::MAX as u64);
    let (Ok(word) | Err(word)) =
        slot.reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| Some(add(w)));
    strand(slot, word, slice);
    slot.reserved_total.fetch_add(granted, Ordering::Relaxed);
}

/// Moves the reservation into the host's quota (under the pull lock, once
/// it is usable); `touched` as [`deposit`]'s. Returns the permits moved.
pub(super) fn move_in(slot: &TaskSlot, touched: impl Fn(u32) -> bool) -> u64 {
    let word = slot.reserved.swap(0, Ordering::AcqRel);
    if word == 0 {
        return 0;
    }
    let permits = word & 0xffff_ffff;
    // A kill here leaves the claim short of the key's charge: redeemed.
    if std::env::var_os("FLOWCTRL_TEST_DIE_IN_MOVE").is_some() {
        // Tests of the lost reservation: die between the two, as a
        // SIGKILL there would.
        std::process::abort();
    }
    deposit(slot, (word >> 32) as u32, permits, touched);
    permits
}

/// Counts an unmoved reservation of another slice than `slice` as pulled
/// and stranded.
fn strand(slot: &TaskSlot, word: u64, slice: u32) {
    if word != 0 && (word >> 32) as u32 != slice {
        let q = &slot.quota;
        q.granted.fetch_add(word & 0xffff_ffff, Ordering::Relaxed);
        q.stranded.fetch_add(word & 0xffff_ffff, Ordering::Relaxed);
    }
}
