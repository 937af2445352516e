//! Chunk sizing: how much a host asks the store for, from its pace in the
//! slice (see `want`).

use std::sync::atomic::Ordering;

use super::pull::tagged;
use super::store::slice_of;
use super::{Global, Quota};
use crate::format::TaskSlot;

/// Chunks the adaptive rule aims for per slice at steady demand.
const PULLS_PER_SLICE: u64 = 3;

impl Quota {
    /// The chunk to ask for (see the module doc of `quota`): the host's
    /// recent admission rate times a third of a slice, never past the
    /// slice's end; past 100 hosts, in a slice's second half, what it spends
    /// by the slice's end less what it holds (the slice's last chunk: no
    /// pull for a sliver after it). A host whose demand comes in busy
    /// spells: no more than the rest of one like its last. At most 25 % of
    /// the slice's quota and its burst, at least the floor below.
    pub(in crate::quota) fn want(&self, slot: &TaskSlot, g: Global, n: u32) -> u64 {
        if g.chunk != 0 {
            return g.chunk.max(n) as u64;
        }
        let quota = g.quota as u64;
        // Past 100 hosts (the quota over the hosts the store last counted;
        // see sim/) there is no floor and the slice's last chunk lasts the
        // host to its end: a 1 % floor each let the first hundred take the
        // slice and strand most of it, and a small host asking its whole
        // slice at once was refused by the fair tails. Below, at least 1 % of
        // the slice, so a slow host does not pull often, and chunks of a
        // third of a slice to its end (a last chunk cut to what the host
        // spends by then cost the few hosts a pull more a slice). A host
        // with no history asks for one: until the store has answered it
        // does not know how many others there are.
        let pace = pace(self, slot, g);
        let want = if pace.last() {
            pace.to_end().saturating_sub(pace.held)
        } else {
            let horizon = pace.left_us.min(pace.slice_us / PULLS_PER_SLICE);
            pace.rate.saturating_mul(horizon) / 1_000_000
        };
        let floor = match pace.rate {
            0 => 1,
            _ if pace.many => 1,
            // Nor more than a third of a slice at its rate: a host whose
            // count of hosts is old (it last pulled early in a cold slice)
            // would take 1 % and strand most of it.
            rate => {
                (quota / 100).min(rate.saturating_mul(pace.slice_us / PULLS_PER_SLICE) / 1_000_000)
            }
        }
        .max(1);
        // A host whose demand comes in busy spells with quiet between (see
        // `spell`): the rest of its spell beyond what it holds, expected to
        // be what its last spell was asked for. No more: the rest would be
        // given back once the host goes quiet, a round trip more, and the
        // fair tails still count it as the host's. And in one chunk when
        // that is at most two: the chunk after it would be a sliver, for
        // another round trip.
        let want = match super::spell::rest(slot, g, pace.slice) {
            Some(rest) => {
                let rest = rest.saturating_sub(pace.held).max(1);
                if rest <= want.saturating_mul(2) {
                    rest
                } else {
                    want
                }
            }
            None => want,
        };
        // No more than a slice releases at once: a bigger ask would wait.
        want.clamp(floor, (quota / 4).max(floor))
            .min(g.burst() as u64)
            .max(n as u64)
    }
}

/// The host's pace in the current slice: its rate, the time left, and
/// what it holds.
pub(super) fn pace(me: &Quota, slot: &TaskSlot, g: Global) -> Pace {
    let q = &slot.quota;
    let slice_us = g.slice_ms as u64 * 1000;
    let now = me.store_now_us(q).max(0) as u64;
    let slice = slice_of(now as i64, g.slice_ms);
    let elapsed = now % slice_us;
    let (granted, held) = (
        tagged(q.slice_granted.load(Ordering::Relaxed), slice)
            .saturating_sub(super::idle::given_in(slot, slice)),
        tagged(q.host.load(Ordering::Relaxed), slice),
    );
    let spent = granted.saturating_sub(held);
    let rate_now = spent * 1_000_000 / elapsed.max(slice_us / 20);
    // At a slice's first pull the host word still holds the slice just
    // over, whose figure `prev_spent` only gets at the deposit (read
    // there, that first chunk was sized by the slice before: 1 after
    // a cold one). Saturating: the words come from a file anyone with
    // write access may have scribbled on.
    let word = q.host.load(Ordering::Relaxed);
    let last = (word >> 32) as u32;
    let prev = if word != 0 && last == slice.wrapping_sub(1) {
        tagged(q.slice_granted.load(Ordering::Relaxed), last)
            .saturating_sub(super::idle::given_in(slot, last))
            .saturating_sub(word & 0xffff_ffff)
            + tagged(q.fallback_admitted.load(Ordering::Relaxed), last)
    } else {
        q.prev_spent.load(Ordering::Relaxed)
    }
    .min(u32::MAX as u64);
    let rate_before = prev * 1000 / g.slice_ms as u64;
    let (quota, hosts) = (
        g.quota as u64,
        q.hosts_seen.load(Ordering::Relaxed).clamp(1, 1 << 20),
    );
    let many = quota / hosts / PULLS_PER_SLICE < quota / 100;
    // Past 100 hosts, a host refused more than it spent (it joined the
    // fleet, or came back) sizes by what it is asked, up to an equal share:
    // by its spending alone it ramps up from one permit in chunks each a
    // round trip apart, while the slice's release goes to the others.
    let asked = if many {
        let rate = super::fair::asked_in(slot, slice) * 1_000_000 / elapsed.max(slice_us / 20);
        rate.min(quota * 1000 / g.slice_ms as u64 / hosts)
    } else {
        0
    };
    Pace {
        many,
        rate: rate_now.max(rate_before).max(asked),
        slice_us,
        left_us: slice_us - elapsed,
        held,
        slice,
    }
}

/// What [`pace`] measured.
pub(super) struct Pace {
    /// Past 100 hosts: shares are small (see [`Quota::want`]).
    pub(super) many: bool,
    /// Permits/s the host spent, in this slice so far or in the last.
    pub(super) rate: u64,
    pub(super) slice_us: u64,
    /// µs to the slice's end.
    pub(super) left_us: u64,
    /// Permits of the slice the host holds.
    pub(super) held: u64,
    /// The slice, by the store's clock as this host has it.
    pub(super) slice: u32,
}

impl Pace {
    /// Past 100 hosts, in the slice's second half: the next chunk is its
    /// last.
    pub(super) fn last(&self) -> bool {
        self.many && self.left_us <= self.slice_us / 2
    }

    /// What the host spends by the slice's end at its rate.
    pub(super) fn to_end(&self) -> u64 {
        self.rate.saturating_mul(self.left_us) / 1_000_000
    }
}
