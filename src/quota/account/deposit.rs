//! Depositing a grant into the host's quota, and reservations: a grant the
//! store made ahead of the slice's release, kept aside until usable.
//!
//! `slice_granted` (what the claim counts) takes a grant before the host
//! word does: a kill between the two leaves the claim counting permits the
//! table never got, which the key keeps charging (the chunk is lost to the
//! host). In the other order the claim would fall short of a grant the
//! table holds, and the redeem of the dead puller's lock would hand it
//! over a second time.
//!
//! A reservation (`reserved`: slice | permits) counts in the claim until
//! it is moved into the host word. The move empties the word before the
//! deposit: a kill between the two leaves the claim short of the key's
//! charge, which the redeem of the dead mover's lock hands back exactly.

use std::sync::atomic::Ordering;

use super::{Account, crash_point, just_before, tag, tagged};

impl Account<'_> {
    /// Adds `granted` permits of `slice` to the host's quota (under the
    /// pull lock). A newer slice restarts from zero: what was left of the
    /// old one is stranded, and the old one's figures (spent, asked) are
    /// kept for sizing and for the share fallback. A grant for a slice
    /// already over is stranded whole and counts in no claim.
    /// `over()`, read once the claim counts the grant, is what the host
    /// then holds past what it may (a share it keeps to): that much of the
    /// grant stays out of the host word, counted in the claim as the key
    /// charged it, and stranded. Read after the claim, so another process
    /// deciding by the fallback meanwhile sees the grant and keeps out of
    /// it. The stranded part counts in the slice's figures as spent, as the
    /// key charged it, until the next full slice's replace them.
    /// `touched(s)`: slice `s` was spent with a shard down (see `down`):
    /// like one an outage cut short, its figures are not the host's share.
    /// Returns the permits that reached the host word.
    pub(in crate::quota) fn deposit(
        self,
        slice: u32,
        granted: u64,
        over: impl Fn() -> u64,
        touched: impl Fn(u32) -> bool,
    ) -> u64 {
        let q = self.q();
        q.granted.fetch_add(granted, Ordering::Relaxed);
        let mut word = q.host.load(Ordering::Acquire);
        let late = word != 0 && just_before(slice, (word >> 32) as u32);
        let sg = q.slice_granted.load(Ordering::Relaxed);
        let mut usable = granted;
        if !late {
            q.slice_granted
                .store(tag(slice, tagged(sg, slice) + granted), Ordering::Relaxed);
            usable -= over().min(granted);
            q.stranded.fetch_add(granted - usable, Ordering::Relaxed);
        }
        // Tests of the kill inside the deposit: between the claim and the
        // host word.
        crash_point("FLOWCTRL_TEST_DIE_IN_DEPOSIT");
        loop {
            let (current, left) = ((word >> 32) as u32, word & 0xffff_ffff);
            let next = if current == slice {
                word + usable.min(u32::MAX as u64 - left)
            } else if word != 0 && just_before(slice, current) {
                q.stranded.fetch_add(usable, Ordering::Relaxed);
                return 0;
            } else {
                tag(slice, usable)
            };
            match q
                .host
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if current != slice && word != 0 {
                        q.stranded.fetch_add(left, Ordering::Relaxed);
                        // A slice an outage cut short (a fallback after it,
                        // or a shard down in it) keeps the figures from
                        // before: the share fallback would keep to a sliver.
                        if !(self.fell_back_since(current) || touched(current)) {
                            self.close(current, tagged(sg, current), left);
                        }
                    }
                    return usable;
                }
                Err(now) => word = now,
            }
        }
    }

    /// Keeps the figures of `slice`, which the host word leaves with
    /// `left` unspent of `granted`: what the host spent (the share
    /// fallback's rate if the store fails next) and was asked for.
    fn close(self, slice: u32, granted: u64, left: u64) {
        let q = self.q();
        let spent = granted
            .saturating_sub(self.given(slice))
            .saturating_sub(left)
            + self.fell_back(slice);
        q.prev_spent.store(spent, Ordering::Relaxed);
        q.prev_demand
            .store(spent + self.refused(slice), Ordering::Relaxed);
    }

    /// Keeps a reservation of `granted` permits of `slice` (under the pull
    /// lock). A host asks only once its last one was moved, so the word is
    /// empty; one of an older slice left unmoved is stranded. A
    /// compare-and-swap, not a store: a holder only stuck past the lock's
    /// bound may still be finishing its pull while the breaker moves it.
    pub(in crate::quota) fn keep_reserved(self, slice: u32, granted: u64) {
        let add = |word: u64| tag(slice, tagged(word, slice) + granted);
        let (Ok(word) | Err(word)) =
            self.slot
                .reserved
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| Some(add(w)));
        if word != 0 && (word >> 32) as u32 != slice {
            let q = self.q();
            q.granted.fetch_add(word & 0xffff_ffff, Ordering::Relaxed);
            q.stranded.fetch_add(word & 0xffff_ffff, Ordering::Relaxed);
        }
        self.slot
            .reserved_total
            .fetch_add(granted, Ordering::Relaxed);
    }

    /// Moves the reservation into the host's quota (under the pull lock,
    /// once it is usable); `touched` as [`Account::deposit`]'s. Returns the
    /// permits moved.
    pub(in crate::quota) fn move_reserved(self, touched: impl Fn(u32) -> bool) -> u64 {
        let word = self.slot.reserved.swap(0, Ordering::AcqRel);
        if word == 0 {
            return 0;
        }
        let permits = word & 0xffff_ffff;
        // Tests of the lost reservation: between the two.
        crash_point("FLOWCTRL_TEST_DIE_IN_MOVE");
        self.deposit((word >> 32) as u32, permits, || 0, touched);
        permits
    }
}
