//! Giving back an idle host's quota: the move of what the host word holds
//! into `given`, which a SIGKILL may cut at any instruction.
//!
//! The move is three steps under the pull lock:
//! 1. `giving` records what `given` will hold once the move is done;
//! 2. the host word is marked (its slice tag with the top bit flipped):
//!    admissions see no permits, and the word keeps the count in transit;
//! 3. `given` takes the recorded value, the host word is emptied, and
//!    `giving` is cleared.
//!
//! Whoever takes the lock next finishes a half-done move ([`finish`]): a
//! marked word means step 2 happened, so step 3 is done again (each of its
//! writes is idempotent); an unmarked one means the move never began or is
//! over. The permits are in one place at every instruction.

use std::sync::atomic::Ordering;

use super::{Account, crash_point, just_before, tagged};
use crate::format::TaskSlot;

impl Account<'_> {
    /// Finishes a give-back whose mover died or stalled (under the pull
    /// lock, before anything else touches the host word).
    pub(in crate::quota) fn finish_give_back(self) {
        finish(self.slot);
    }

    /// Takes every permit of `slice` out of the host word `seen` (it must
    /// still hold exactly that) into `given`, under the pull lock. Returns
    /// the permits taken out: 0 when the word moved meanwhile (not idle).
    pub(in crate::quota) fn give_back(self, seen: u64, slice: u32) -> u64 {
        take_out(self.slot, seen, slice)
    }
}

/// The top bit of the host word's slice tag: a give-back holds the word.
const MARK: u64 = 1 << 63;

fn given_in(slot: &TaskSlot, slice: u32) -> u64 {
    Account::of(slot).given(slice)
}

/// Finishes a give-back whose mover died or stalled (under the pull lock,
/// before anything else touches the host word).
fn finish(slot: &TaskSlot) {
    let journal = slot.giving.load(Ordering::Acquire);
    if journal == 0 {
        return;
    }
    let host = slot.quota.host.load(Ordering::Acquire);
    if (host ^ MARK) >> 32 == journal >> 32 {
        complete(slot, host, journal);
    } else {
        let _ = slot
            .giving
            .compare_exchange(journal, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Takes every permit of `slice` out of the host word `seen` (it must still
/// hold exactly that) into `given`, under the pull lock. Returns the
/// permits taken out: 0 when the word moved meanwhile (not idle).
fn take_out(slot: &TaskSlot, seen: u64, slice: u32) -> u64 {
    finish(slot);
    // A marked word is of no slice's tag: nothing to take.
    let permits = tagged(seen, slice);
    if permits == 0 {
        return 0;
    }
    let journal = (slice as u64) << 32 | (given_in(slot, slice) + permits).min(u32::MAX as u64);
    if !begin(slot, journal) {
        return 0;
    }
    let marked = seen ^ MARK;
    if slot
        .quota
        .host
        .compare_exchange(seen, marked, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        let _ = slot
            .giving
            .compare_exchange(journal, 0, Ordering::AcqRel, Ordering::Relaxed);
        return 0;
    }
    // Tests of the half-done give-back: between the mark and its completion.
    crash_point("FLOWCTRL_TEST_DIE_IN_GIVE_BACK");
    complete(slot, marked, journal);
    permits
}

/// Step 1: records `journal` unless a journal is there. Under the lock,
/// after [`finish`], none is; one there is a mover's whose lock was broken
/// while it stalled (past the store's timeouts), and it may be marking the
/// word now. Overwritten, the next [`finish`] would pair that mover's mark
/// with this journal: `given` would count permits the word never held
/// (over-admission by the difference). So this give-back waits for the
/// next look.
fn begin(slot: &TaskSlot, journal: u64) -> bool {
    slot.giving
        .compare_exchange(0, journal, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// Step 3: `given` takes the journal's value (never moved back: a stalled
/// mover's late write must not undo a newer give-back), the marked word
/// `marked` is emptied, and the journal is cleared.
fn complete(slot: &TaskSlot, marked: u64, journal: u64) {
    let slice = (journal >> 32) as u32;
    let _ = slot
        .given
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
            let tag = (w >> 32) as u32;
            if tag == slice && w != 0 {
                Some(w.max(journal))
            } else if w != 0 && just_before(slice, tag) {
                // A stalled mover of a slice already over.
                None
            } else {
                // Any older tag (or another slicing's): replaced.
                Some(journal)
            }
        });
    // Counted by whoever empties the word: once, by the mover or by the
    // one who finished its move.
    if slot
        .quota
        .host
        .compare_exchange(
            marked,
            (slice as u64) << 32,
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_ok()
    {
        slot.given_total
            .fetch_add(marked & 0xffff_ffff, Ordering::Relaxed);
    }
    let _ = slot
        .giving
        .compare_exchange(journal, 0, Ordering::AcqRel, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::testing::slot;

    const S: u32 = 77;

    fn word(slice: u32, n: u64) -> u64 {
        (slice as u64) << 32 | n
    }

    #[test]
    fn a_give_back_moves_every_permit_to_given() {
        let slot = slot();
        slot.quota.host.store(word(S, 40), Ordering::Relaxed);
        slot.given.store(word(S, 5), Ordering::Relaxed);
        assert_eq!(take_out(&slot, word(S, 40), S), 40);
        assert_eq!(slot.quota.host.load(Ordering::Relaxed), word(S, 0));
        assert_eq!(given_in(&slot, S), 45);
        assert_eq!(slot.giving.load(Ordering::Relaxed), 0);
        assert_eq!(slot.given_total.load(Ordering::Relaxed), 40);
    }

    #[test]
    fn a_word_that_moved_is_not_idle() {
        let slot = slot();
        slot.quota.host.store(word(S, 39), Ordering::Relaxed);
        assert_eq!(take_out(&slot, word(S, 40), S), 0);
        assert_eq!(slot.quota.host.load(Ordering::Relaxed), word(S, 39));
        assert_eq!(given_in(&slot, S), 0);
        assert_eq!(slot.giving.load(Ordering::Relaxed), 0);
        // Nor one of another slice, nor an empty one.
        assert_eq!(take_out(&slot, word(S - 1, 39), S), 0);
        slot.quota.host.store(word(S, 0), Ordering::Relaxed);
        assert_eq!(take_out(&slot, word(S, 0), S), 0);
    }

    /// A mover killed after each of its steps: the next lock holder's
    /// `finish` leaves the permits in exactly one place.
    #[test]
    fn a_move_cut_after_any_step_is_finished_once() {
        for cut in 0..4 {
            let slot = slot();
            slot.quota.host.store(word(S, 40), Ordering::Relaxed);
            slot.given.store(word(S, 5), Ordering::Relaxed);
            let journal = word(S, 45);
            let marked = word(S, 40) ^ MARK;
            if cut >= 1 {
                slot.giving.store(journal, Ordering::Relaxed);
            }
            if cut >= 2 {
                slot.quota.host.store(marked, Ordering::Relaxed);
            }
            if cut >= 3 {
                slot.given.store(journal, Ordering::Relaxed);
            }
            finish(&slot);
            finish(&slot);
            let (host, given) = (
                tagged(slot.quota.host.load(Ordering::Relaxed), S),
                given_in(&slot, S),
            );
            assert_eq!(host + given, 45, "cut after step {cut}");
            assert_eq!(given, if cut >= 2 { 45 } else { 5 }, "cut after step {cut}");
            let counted = slot.given_total.load(Ordering::Relaxed);
            assert_eq!(
                counted,
                if cut >= 2 { 40 } else { 0 },
                "cut after step {cut}"
            );
            assert_eq!(slot.giving.load(Ordering::Relaxed), 0);
        }
    }

    /// A mover that stalled past the lock's bound finishes after the lock's
    /// breaker did, and after the breaker gave back more: its late writes
    /// undo nothing.
    #[test]
    fn a_stalled_movers_late_writes_undo_nothing() {
        let slot = slot();
        slot.quota.host.store(word(S, 40), Ordering::Relaxed);
        let journal = word(S, 40);
        let marked = word(S, 40) ^ MARK;
        slot.giving.store(journal, Ordering::Relaxed);
        slot.quota.host.store(marked, Ordering::Relaxed);
        // The breaker finishes it, a deposit brings 10, and it gives them
        // back too.
        finish(&slot);
        slot.quota.host.store(word(S, 10), Ordering::Relaxed);
        assert_eq!(take_out(&slot, word(S, 10), S), 10);
        assert_eq!(given_in(&slot, S), 50);
        // The stalled mover wakes up and completes its own move.
        complete(&slot, marked, journal);
        assert_eq!(given_in(&slot, S), 50);
        assert_eq!(slot.given_total.load(Ordering::Relaxed), 50);
        assert_eq!(slot.quota.host.load(Ordering::Relaxed), word(S, 0));
        assert_eq!(slot.giving.load(Ordering::Relaxed), 0);
    }

    /// A mover stalled between reading the word and writing its journal
    /// resumes after the lock's breaker began a move of its own and was
    /// killed after marking: the late journal must not take the place of
    /// the breaker's, or the next holder would count as given what the
    /// stalled mover saw (60), not what the mark holds (40): 20 permits
    /// the store would put back while the host spent them.
    #[test]
    fn a_stalled_movers_journal_takes_no_other_moves_place() {
        let slot = slot();
        slot.given.store(word(S, 5), Ordering::Relaxed);
        // The stalled mover saw 60 and computed its journal; admissions
        // then spent 20.
        let stale = word(S, 65);
        slot.quota.host.store(word(S, 40), Ordering::Relaxed);
        // The breaker: journal and mark, then killed.
        assert!(begin(&slot, word(S, 45)));
        slot.quota.host.store(word(S, 40) ^ MARK, Ordering::Relaxed);
        // The stalled mover wakes and writes its journal; the next holder
        // finishes what it finds before the stalled mover's mark (of a
        // word of 60) fails.
        if begin(&slot, stale) {
            finish(&slot);
        }
        finish(&slot);
        assert_eq!(given_in(&slot, S), 45);
        assert_eq!(slot.quota.host.load(Ordering::Relaxed), word(S, 0));
        assert_eq!(slot.given_total.load(Ordering::Relaxed), 40);
        assert_eq!(slot.giving.load(Ordering::Relaxed), 0);
    }

    /// Slice ids with their top bit set (slices of 250-860 ms today, of
    /// 1 s from 2038): the mark clears it, and the move still completes.
    #[test]
    fn a_slice_id_with_its_top_bit_set_is_marked_and_finished() {
        let top = S | 1 << 31;
        let slot_new = slot;
        let slot = slot_new();
        slot.quota.host.store(word(top, 40), Ordering::Relaxed);
        assert_eq!(take_out(&slot, word(top, 40), top), 40);
        assert_eq!(given_in(&slot, top), 40);
        // Cut after the mark: the next holder finishes it.
        let cut = slot_new();
        cut.quota
            .host
            .store(word(top, 40) ^ MARK, Ordering::Relaxed);
        cut.giving.store(word(top, 40), Ordering::Relaxed);
        finish(&cut);
        assert_eq!(cut.quota.host.load(Ordering::Relaxed), word(top, 0));
        assert_eq!(given_in(&cut, top), 40);
    }

    /// A host idle for slices on end: each give-back counts, however long
    /// ago the last one was.
    #[test]
    fn a_give_back_long_after_the_last_counts() {
        let slot = slot();
        slot.given.store(word(S, 10), Ordering::Relaxed);
        slot.quota.host.store(word(S + 6, 7), Ordering::Relaxed);
        assert_eq!(take_out(&slot, word(S + 6, 7), S + 6), 7);
        assert_eq!(given_in(&slot, S + 6), 7);
        // A stalled mover of slice S + 5 finishing late changes nothing.
        complete(&slot, word(S + 5, 3) ^ MARK, word(S + 5, 3));
        assert_eq!(given_in(&slot, S + 6), 7);
    }

    #[test]
    fn a_new_slice_starts_given_anew() {
        let slot = slot();
        slot.given.store(word(S, 45), Ordering::Relaxed);
        slot.quota.host.store(word(S + 1, 7), Ordering::Relaxed);
        assert_eq!(take_out(&slot, word(S + 1, 7), S + 1), 7);
        assert_eq!(given_in(&slot, S + 1), 7);
        assert_eq!(given_in(&slot, S), 0);
    }
}
