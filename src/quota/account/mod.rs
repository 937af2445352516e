//! The slice account: the only code that reads or writes a host's words
//! for a slice.
//!
//! A slice word is `slice << 32 | count` (a *tagged* word): a word of
//! another slice counts 0 for this one, so a new slice starts every count
//! afresh without a reset that a kill could cut in half. The words:
//! - `host`: the permits the host may still spend (the request path's one
//!   compare-and-swap);
//! - `slice_granted`, `fallback_admitted`: what reached the host's quota
//!   from the store, and what its fallback admitted;
//! - `reserved`: a grant kept aside until it is usable (`deposit`);
//! - `given`, `giving`: what the host gave back while idle, and the
//!   journal of a give-back in flight (`give_back`);
//! - `refused`: requests refused as global (the host's demand);
//! - `shard_granted`, `shards_out`, and the parts of down shards the host
//!   granted itself: per shard of a spread task (`shards`).
//!
//! **The claim** a pull sends is [`Account::taken`]: every permit the host
//! took of the slice, received or reserved. A key created anew deducts it,
//! so a recreated key charges each permit once. [`Account::holds`] is the
//! claim less what was given back: the script puts back only the rest.

mod deposit;
mod give_back;
mod shards;

use std::sync::atomic::{AtomicU64, Ordering};

use super::Spent;
use crate::format::{QuotaSlot, TaskSlot};

/// The count of a tagged word if it is of `slice`, else 0.
pub(super) fn tagged(word: u64, slice: u32) -> u64 {
    if (word >> 32) as u32 == slice {
        word & 0xffff_ffff
    } else {
        0
    }
}

/// A tagged word of `slice` holding `count` (saturated to 32 bits).
fn tag(slice: u32, count: u64) -> u64 {
    (slice as u64) << 32 | count.min(u32::MAX as u64)
}

/// A test's crash point: when the environment names `hook`, this process
/// SIGKILLs itself here, as a kill at this instruction would. Tests of what
/// a survivor redeems set it in a forked child; it costs a lookup of the
/// environment per pull, never per request.
pub(super) fn crash_point(hook: &str) {
    if std::env::var_os(hook).is_some() {
        // SAFETY: signalling this process; SIGKILL cannot be caught.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}

/// Whether slice `a` is one of the few just before `b` (ids wrap at 2^32):
/// a grant that arrives late. Any other slice id is newer, or of another
/// slicing (`slice_ms` changed): it replaces `b`.
pub(super) fn just_before(a: u32, b: u32) -> bool {
    (1..=4).contains(&b.wrapping_sub(a))
}

/// Adds `n` to the tagged `word`'s count of `slice`, starting it afresh if
/// it holds another slice.
fn count_in(word: &AtomicU64, slice: u32, n: u64) {
    let _ = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
        Some(tag(slice, tagged(w, slice).saturating_add(n)))
    });
}

/// One task's slice words, read and written by the rules above.
#[derive(Clone, Copy)]
pub(super) struct Account<'a> {
    slot: &'a TaskSlot,
}

impl<'a> Account<'a> {
    #[inline]
    pub(super) fn of(slot: &'a TaskSlot) -> Self {
        Self { slot }
    }

    #[inline]
    fn q(self) -> &'a QuotaSlot {
        &self.slot.quota
    }

    /// What reached the host's quota of `slice` from the store.
    pub(super) fn granted(self, slice: u32) -> u64 {
        tagged(self.q().slice_granted.load(Ordering::Relaxed), slice)
    }

    /// What the host's fallback admitted in `slice`.
    pub(super) fn fell_back(self, slice: u32) -> u64 {
        tagged(self.q().fallback_admitted.load(Ordering::Relaxed), slice)
    }

    /// Whether the host's last fallback admission was in `slice` or later.
    pub(super) fn fell_back_since(self, slice: u32) -> bool {
        let word = self.q().fallback_admitted.load(Ordering::Relaxed);
        let since = ((word >> 32) as u32).wrapping_sub(slice);
        word != 0 && since != 0 && since < 1 << 31
    }

    /// Permits of `slice` the host may still spend.
    pub(super) fn held(self, slice: u32) -> u64 {
        tagged(self.q().host.load(Ordering::Relaxed), slice)
    }

    /// The slice the host's spendable word is of, and its permits.
    pub(super) fn last(self) -> (u32, u64) {
        let word = self.q().host.load(Ordering::Relaxed);
        ((word >> 32) as u32, word & 0xffff_ffff)
    }

    /// Permits of `slice` the host gave back while idle.
    pub(super) fn given(self, slice: u32) -> u64 {
        tagged(self.slot.given.load(Ordering::Acquire), slice)
    }

    /// Permits of `slice` the host holds reserved.
    pub(super) fn reserved(self, slice: u32) -> u64 {
        tagged(self.slot.reserved.load(Ordering::Acquire), slice)
    }

    /// Whether the host holds a reservation (of any slice). Only without
    /// one does a used-up key or a spent fallback share leave a pull
    /// nothing to do.
    pub(super) fn has_reservation(self) -> bool {
        self.slot.reserved.load(Ordering::Acquire) != 0
    }

    /// What reached the host's quota of `slice`, and its fallback
    /// admissions.
    pub(super) fn received(self, slice: u32) -> u64 {
        self.granted(slice) + self.fell_back(slice)
    }

    /// The claim: what the host took of `slice` (store grants, a
    /// reservation not yet moved in included, and fallback admissions).
    pub(super) fn taken(self, slice: u32) -> u64 {
        self.received(slice) + self.reserved(slice)
    }

    /// The claim less what the host gave back while idle: what it holds a
    /// right to (a key deducts it; the fallback's allowance counts it).
    pub(super) fn holds(self, slice: u32) -> u64 {
        self.taken(slice).saturating_sub(self.given(slice))
    }

    /// What the host kept of what reached it in `slice`.
    pub(super) fn kept(self, slice: u32) -> u64 {
        self.received(slice).saturating_sub(self.given(slice))
    }

    /// Requests refused as global in `slice`.
    pub(super) fn refused(self, slice: u32) -> u64 {
        tagged(self.q().refused.load(Ordering::Relaxed), slice)
    }

    /// What the host was asked for in `slice`: admitted (kept, less what
    /// it holds unspent) and refused as global.
    pub(super) fn asked(self, slice: u32) -> u64 {
        self.kept(slice).saturating_sub(self.held(slice)) + self.refused(slice)
    }

    /// What the host was asked for in the slice before `slice` (or in the
    /// last it pulled in before it). At a slice's first pull the host word
    /// still holds the slice just over, whose figure `prev_demand` gets
    /// only at the deposit. Capped: the words come from a file anyone with
    /// write access may have scribbled on.
    pub(super) fn asked_before(self, slice: u32) -> u64 {
        let (last, _) = self.last();
        if last == slice.wrapping_sub(1) {
            self.asked(last)
        } else {
            self.q()
                .prev_demand
                .load(Ordering::Relaxed)
                .min(u32::MAX as u64)
        }
    }

    /// What the host spent in the slice before `slice` (as
    /// [`Account::asked_before`] reads it, refusals apart).
    pub(super) fn spent_before(self, slice: u32) -> u64 {
        let (last, left) = self.last();
        if (last, left) != (0, 0) && last == slice.wrapping_sub(1) {
            self.granted(last)
                .saturating_sub(self.given(last))
                .saturating_sub(left)
                + self.fell_back(last)
        } else {
            self.q().prev_spent.load(Ordering::Relaxed)
        }
        .min(u32::MAX as u64)
    }

    /// What the host spent in its last full slice (the share fallback's
    /// rate).
    pub(super) fn last_spent(self) -> u64 {
        self.q().prev_spent.load(Ordering::Relaxed)
    }

    /// Spends `n` of the host's quota of `slice`: the permits left after,
    /// or `None` when there are not enough (nothing taken).
    #[inline]
    pub(super) fn spend(self, slice: u32, n: u32) -> Option<u32> {
        let host = &self.q().host;
        let mut word = host.load(Ordering::Relaxed);
        loop {
            let left = word as u32;
            if (word >> 32) as u32 != slice || left < n {
                return None;
            }
            match host.compare_exchange_weak(
                word,
                word - n as u64,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(left - n),
                Err(now) => word = now,
            }
        }
    }

    /// Gives back what a spend took when a later check refused: to the
    /// host word, or out of the fallback's count; nothing once the slice
    /// changed.
    #[inline]
    pub(super) fn unspend(self, spent: Spent, n: u32) {
        let (word, slice) = match spent {
            Spent::Quota(slice) => (&self.q().host, slice),
            Spent::Fallback(slice) => (&self.q().fallback_admitted, slice),
        };
        let _ = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
            let count = w & 0xffff_ffff;
            let back = match spent {
                Spent::Quota(_) => (count + n as u64 <= u32::MAX as u64).then(|| w + n as u64),
                Spent::Fallback(_) => (count >= n as u64).then(|| w - n as u64),
            };
            ((w >> 32) as u32 == slice).then_some(back).flatten()
        });
    }

    /// Counts `n` requests refused as global in `slice`.
    pub(super) fn count_refused(self, slice: u32, n: u32) {
        count_in(&self.q().refused, slice, n as u64);
    }

    /// Counts `n` requests the fallback admitted in `slice`.
    pub(super) fn count_fallback(self, slice: u32, n: u32) {
        count_in(&self.q().fallback_admitted, slice, n as u64);
    }

    /// Counts `n` requests the fallback admits in `slice` if what the host
    /// then holds of it ([`Account::holds`]) stays within `limit`: a
    /// compare-and-swap on the fallback's count, as the host's processes
    /// admit against the same limit. The other words are read before it (a
    /// grant landing meanwhile is counted from the next request on).
    /// Whether it counted.
    pub(super) fn count_fallback_within(self, slice: u32, n: u32, limit: u64) -> bool {
        let (store, given) = (
            self.granted(slice) + self.reserved(slice),
            self.given(slice),
        );
        self.q()
            .fallback_admitted
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                let fell = tagged(w, slice) + n as u64;
                ((store + fell).saturating_sub(given) <= limit).then(|| tag(slice, fell))
            })
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::testing::slot;

    const S: u32 = 40;

    #[test]
    fn the_claim_counts_every_permit_taken_and_holds_nets_the_give_backs() {
        let slot = slot();
        let (q, a) = (&slot.quota, Account::of(&slot));
        q.slice_granted.store(tag(S, 100), Ordering::Relaxed);
        q.fallback_admitted.store(tag(S, 7), Ordering::Relaxed);
        slot.reserved.store(tag(S, 20), Ordering::Relaxed);
        slot.given.store(tag(S, 30), Ordering::Relaxed);
        assert_eq!(
            (a.received(S), a.taken(S), a.holds(S), a.kept(S)),
            (107, 127, 97, 77)
        );
        // Words of another slice count nothing for this one.
        assert_eq!((a.taken(S + 1), a.holds(S + 1)), (0, 0));
        // The fallback counts within a limit on what the host holds.
        assert!(!a.count_fallback_within(S, 4, 100), "97 + 4 is past 100");
        assert!(a.count_fallback_within(S, 3, 100));
        assert_eq!((a.fell_back(S), a.holds(S)), (10, 100));
        assert!(a.count_fallback_within(S + 1, 5, 5), "a new slice, afresh");
        assert!(a.has_reservation());
    }

    /// A grant past what fits (a share, after the fallback admissions made
    /// while the ask was out) counts in the claim, as the key charged it,
    /// and is stranded: none of it can be spent.
    #[test]
    fn a_grant_past_what_fits_is_claimed_and_stranded() {
        let slot = slot();
        let (q, a) = (&slot.quota, Account::of(&slot));
        a.count_fallback(S, 960);
        // A share of 1,000: judged with the grant in the claim, so another
        // process's fallback meanwhile sees it too.
        let over = || a.taken(S).saturating_sub(1000);
        assert_eq!(a.deposit(S, 146, over, |_| false), 40);
        assert_eq!((a.held(S), a.taken(S)), (40, 1106));
        assert_eq!(q.stranded.load(Ordering::Relaxed), 106);
        assert_eq!(a.deposit(S, 10, || 0, |_| false), 10);
        assert_eq!((a.held(S), a.taken(S)), (50, 1116));
    }

    #[test]
    fn asked_is_what_was_admitted_and_refused() {
        let slot = slot();
        let (q, a) = (&slot.quota, Account::of(&slot));
        q.slice_granted.store(tag(S, 100), Ordering::Relaxed);
        q.host.store(tag(S, 40), Ordering::Relaxed);
        a.count_refused(S, 15);
        assert_eq!(a.asked(S), 75);
        // At the next slice's first pull the word still holds this one.
        assert_eq!((a.asked_before(S + 1), a.spent_before(S + 1)), (75, 60));
        q.prev_demand.store(9, Ordering::Relaxed);
        q.prev_spent.store(8, Ordering::Relaxed);
        assert_eq!((a.asked_before(S + 2), a.spent_before(S + 2)), (9, 8));
    }

    #[test]
    fn a_spend_takes_only_from_its_slice_and_unspend_puts_back() {
        let slot = slot();
        let a = Account::of(&slot);
        slot.quota.host.store(tag(S, 5), Ordering::Relaxed);
        assert_eq!(a.spend(S, 3), Some(2));
        assert_eq!(a.spend(S, 3), None);
        assert_eq!(a.spend(S + 1, 1), None);
        a.unspend(Spent::Quota(S), 3);
        assert_eq!(a.held(S), 5);
        a.unspend(Spent::Quota(S - 1), 3);
        assert_eq!(a.held(S), 5, "a slice over takes nothing back");
        a.count_fallback(S, 4);
        a.unspend(Spent::Fallback(S), 3);
        assert_eq!(a.fell_back(S), 1);
    }

    #[test]
    fn each_permit_is_claimed_from_one_shard() {
        let slot = slot();
        let a = Account::of(&slot);
        slot.quota
            .slice_granted
            .store(tag(S, 90), Ordering::Relaxed);
        a.count_shard_grant(S, 1, 30);
        a.count_shard_grant(S, 2, 20);
        a.count_fallback(S, 5);
        // Shard 0 holds the rest; the home shard (2) the fallback too.
        let claims: Vec<u64> = (0..3).map(|i| a.shard_claim(S, i, 2, 0)).collect();
        assert_eq!(claims, [40, 30, 25]);
        assert_eq!(claims.iter().sum::<u64>(), a.received(S));
        a.mark_shard_out(S, 1);
        assert_eq!((a.shards_out(S), a.shards_out(S + 1)), (0b10, 0));
    }
}
