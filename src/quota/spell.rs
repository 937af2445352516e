//! Busy spells: a host whose demand comes in bursts with quiet between.
//!
//! Sized by its rate alone, each burst takes two or three chunks, and the
//! keeper gives the last back once the burst is over: a round trip more per
//! spell (docs/design/quota.md, "Busy spells"). So the keeper's look also marks when a host is quiet (nothing spent,
//! nothing refused, for as long as a give-back waits): what the host was
//! asked for between two quiet spells is its busy spell's demand. A host
//! whose last spell was at least the give-back floor asks for no more than
//! the rest of a spell like it (in one chunk, up to twice the usual), and
//! does not pull ahead once it holds that (`chunk`, `pull`): a spell that
//! runs longer pulls when the host runs dry.
//!
//! The `spell` word of the task slot is an estimate only chunk sizing
//! reads: keepers of two processes racing on it cost nothing but that.

use std::sync::atomic::Ordering;

use super::account::Account;
use super::{Global, policy};
use crate::format::TaskSlot;

/// What the host was asked for in `slice` (see `fair`), and in the slice
/// before it.
fn asked_around(slot: &TaskSlot, slice: u32) -> (u64, u64) {
    (
        Account::of(slot).asked(slice),
        Account::of(slot).asked_before(slice),
    )
}

/// The `spell` word: the slice of the mark (its low 16 bits) | what the
/// host was asked for in it then (24 bits) | what its last busy spell was
/// asked for (24 bits; 0 = not known).
const SPELL_BITS: u64 = 24;
const SPELL_MAX: u64 = (1 << SPELL_BITS) - 1;

/// What the host was asked for since the mark in `word`, if that was in
/// `slice` or the one before.
fn asked_since(slot: &TaskSlot, word: u64, slice: u32) -> Option<u64> {
    if word == 0 {
        return None;
    }
    let (at, mark) = ((word >> 48) as u16, (word >> SPELL_BITS) & SPELL_MAX);
    let (now, prev) = asked_around(slot, slice);
    if at == slice as u16 {
        Some(now.saturating_sub(mark))
    } else if at == slice.wrapping_sub(1) as u16 {
        Some(now + prev.saturating_sub(mark))
    } else {
        None
    }
}

/// The host has been idle (nothing spent, nothing refused) for a while
/// (the keeper's look, before any give-back): what it was asked for since
/// the last look that found it so, if anything, is its last busy spell's
/// demand, and the mark moves to now. Without a mark in this slice or the
/// last, the spell is not known: a host that just started, or came back
/// after slices away, starts over.
pub(super) fn mark_quiet(slot: &TaskSlot, slice: u32) {
    let word = slot.spell.load(Ordering::Relaxed);
    let now = asked_around(slot, slice).0;
    let spell = match asked_since(slot, word, slice) {
        // Still the same quiet spell.
        Some(0) => return,
        Some(since) => since,
        None => 0,
    };
    slot.spell.store(
        match spell {
            _ if now > SPELL_MAX => 0,
            spell => (slice as u16 as u64) << 48 | now << SPELL_BITS | spell.min(SPELL_MAX),
        },
        Ordering::Relaxed,
    );
}

/// Past its last quiet spell, what the host will likely still be asked
/// for before its next: what its last busy spell was asked for, less what
/// this one was so far (what it holds is not asked for yet). `None` while
/// not known (no two quiet spells seen, or the last more than a slice
/// ago), once this spell has outrun the last (a host that never goes quiet
/// sizes its chunks by its rate alone), or when the last was smaller than
/// the give-back floor: what such a spell leaves over is kept, not given
/// back, so sizing by it saves no round trip, and a host asking a request
/// or two between pauses would pull for each.
pub(super) fn rest(slot: &TaskSlot, g: Global, slice: u32) -> Option<u64> {
    let word = slot.spell.load(Ordering::Relaxed);
    let last = word & SPELL_MAX;
    let hosts = slot.quota.hosts_seen.load(Ordering::Relaxed);
    if last == 0 || last < policy::give_back_floor(g.quota as u64, hosts) {
        return None;
    }
    let done = asked_since(slot, word, slice)?;
    (done < last).then(|| last - done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Fallback;

    const S: u32 = 1000;

    fn slot() -> Box<TaskSlot> {
        let slot = crate::quota::testing::slot();
        // 1,000 hosts on 500,000 a slice: the give-back floor is 62.
        slot.quota.hosts_seen.store(1000, Ordering::Relaxed);
        slot
    }

    fn global() -> Global {
        Global {
            rate: 500_000.0,
            quota: 500_000,
            slice_ms: 1000,
            chunk: 0,
            fallback: Fallback::Share,
            global_burst: 0,
            shards: 1,
        }
    }

    /// The host was asked for `asked` of `slice` (all granted and spent).
    fn asked(slot: &TaskSlot, slice: u32, asked: u64) {
        let q = &slot.quota;
        q.slice_granted
            .store((slice as u64) << 32 | asked, Ordering::Relaxed);
        q.host.store((slice as u64) << 32, Ordering::Relaxed);
    }

    #[test]
    fn a_busy_spell_between_two_quiet_looks_is_learnt() {
        let (slot, g) = (slot(), global());
        asked(&slot, S, 20);
        // The first quiet look only marks: no spell is known yet.
        mark_quiet(&slot, S);
        assert_eq!(rest(&slot, g, S), None);
        mark_quiet(&slot, S);
        asked(&slot, S, 320);
        assert_eq!(rest(&slot, g, S), None, "still the first spell");
        mark_quiet(&slot, S);
        assert_eq!(rest(&slot, g, S), Some(300));
        // A look that finds it quiet again changes nothing.
        mark_quiet(&slot, S);
        assert_eq!(rest(&slot, g, S), Some(300));
        // The next spell, into the next slice: what is left of one like it.
        asked(&slot, S + 1, 100);
        slot.quota.prev_demand.store(320, Ordering::Relaxed);
        assert_eq!(rest(&slot, g, S + 1), Some(200));
        // Past it: sized by its rate alone.
        asked(&slot, S + 1, 300);
        assert_eq!(rest(&slot, g, S + 1), None);
    }

    #[test]
    fn a_host_back_after_slices_away_starts_over() {
        let (slot, g) = (slot(), global());
        mark_quiet(&slot, S);
        asked(&slot, S, 300);
        mark_quiet(&slot, S);
        assert_eq!(rest(&slot, g, S), Some(300));
        // Three slices later: the mark is too old to count from.
        asked(&slot, S + 3, 50);
        assert_eq!(rest(&slot, g, S + 3), None);
        mark_quiet(&slot, S + 3);
        assert_eq!(rest(&slot, g, S + 3), None);
        asked(&slot, S + 3, 350);
        mark_quiet(&slot, S + 3);
        assert_eq!(rest(&slot, g, S + 3), Some(300));
    }

    #[test]
    fn a_spell_below_the_give_back_floor_sizes_nothing() {
        let (slot, g) = (slot(), global());
        mark_quiet(&slot, S);
        asked(&slot, S, 61);
        mark_quiet(&slot, S);
        assert_eq!(rest(&slot, g, S), None);
        // With 100 hosts the floor is 625: a spell of 600 is below it too.
        slot.quota.hosts_seen.store(100, Ordering::Relaxed);
        asked(&slot, S, 661);
        mark_quiet(&slot, S);
        assert_eq!(rest(&slot, g, S), None);
        slot.quota.hosts_seen.store(1000, Ordering::Relaxed);
        assert_eq!(rest(&slot, g, S), Some(600));
    }
}
