//! A task spread over shards (see `shard`) when the node of one shard's
//! key does not answer (its master died, the cluster has not promoted a
//! replica yet) while the others do.
//!
//! **What is promised.** The store is then only partly there: the keys
//! that answer hold their own parts of the slice and no more, and the
//! dead shard's part is in a key nobody can reach. Lending it from the
//! live keys would need them to agree on how much of it the hosts had
//! already taken, and they cannot (different nodes, no shared command).
//! So the dead shard's part is decided the way a whole outage is: by the
//! task's fallback policy, scaled to that shard's part. Each host keeps
//! pulling the live shards' parts from their keys (exact, as always), and
//! grants itself its fallback rate × the dead part's fraction of the slice
//! (`share`: what the host spent in its last slice with every shard up,
//! kept while one is down, so every host's figure is of the same slice; a
//! number: that rate; `deny`: nothing; `local`: no bound, the local limits
//! alone),
//! released over the slice like a key would and less what it already took
//! of that shard in the slice, so a shard that dies mid-slice costs
//! nothing it had granted. The hosts' shares add up to the slice, so the
//! dead part is spent about whole, as a whole outage's fallback spends the
//! slice.
//!
//! **The accounting stays per shard.** What a host grants itself of shard
//! `i` is counted as shard `i`'s grant (`QuotaSlot::shard_granted`), so
//! every later pull from shard `i` claims it: the replica that takes the
//! slot over (which may also have missed the dead master's last
//! decrements) or a key created anew there deducts it once per host,
//! exactly as after a whole failover.
//!
//! **Every shard by shares.** In a slice an outage touched (a shard down,
//! part of one granted by the host itself, or fallback admissions after the
//! whole store failed, in this slice or the one before: the other hosts
//! come back up to a probe interval later, perhaps in the next slice, and
//! their keys learn only then what they admitted meanwhile), a host takes of *every* shard, live ones included,
//! no more than its fallback allowance of that shard's part, counting what
//! it claims from the shard (its grants, and on its home shard its
//! fallback admissions). The shares divide the slice then, not the fair
//! tails: the host reports no demand, so the keys hold nothing back for
//! it beyond what it will take, and it is not told to wait until its
//! demand would have used half an ask. So each host keeps to its share of the slice whichever way the slice goes on:
//! the whole store failing next (its fallback keeps to the same share),
//! the shard coming back (its key learns the other hosts' self-grants only
//! with their next pulls, so the first host back must not take them), or
//! nothing (docs/design/quota.md, "Shards"). The price, as in a whole
//! outage: a host asked for less than its share leaves the rest of it
//! unspent in those slices (the others keep to theirs). `deny` and `local` keep no share: their hosts pull the live
//! shards as usual.
//!
//! **The state.** While a shard is down the task is *failed* (the store
//! does not answer as a whole, and the fallback policy decides a part),
//! and stays so until every shard answers: no flipping between open and
//! failed by which shard a pull met first. Its pulls go on as open ones do
//! (the request path spends and pulls as usual) and skip the down shards;
//! one pull every probe interval (±20 %) tries every shard, and the first
//! that finds them all answering returns the task to *open*. When every
//! shard fails the task falls back whole, as with one key.

use std::sync::atomic::Ordering;

use super::account::Account;
use super::fallback::fallback_rate;
use super::phase;
use super::policy::part;
use super::store::wait_until_released;
use super::{Global, Quota, outage};
use crate::format::{Fallback, TaskSlot};

/// The bits of `shards` shards.
pub(super) fn all(shards: u32) -> u64 {
    (1 << shards) - 1
}

/// The shards this host found down (bits), whatever the slice.
pub(super) fn down(slot: &TaskSlot) -> u64 {
    slot.shards_down.load(Ordering::Relaxed) & 0xff
}

/// Whether some of the task's shards are down (the others answered last):
/// the task pulls on, the down ones' parts decided by the fallback.
pub(crate) fn partial(slot: &TaskSlot, g: Global) -> bool {
    g.shards > 1 && down(slot) & all(g.shards.min(8)) != 0
}

/// Whether this host granted itself part of a down shard in `slice`.
pub(super) fn granted_self_in(slot: &TaskSlot, slice: u32) -> bool {
    Account::of(slot).self_granted(slice) != 0
}

/// Whether `slice`'s figures are an outage's: the store failing, a shard
/// known down (asked or not in the slice: the pull that rolls the slice
/// may be served by live shards alone), or part of one granted by the host
/// itself in it. Such a slice, left behind, keeps the figures of the slice
/// before: the share fallback would keep to a sliver.
pub(super) fn cut_short(slot: &TaskSlot, shards: u32, slice: u32) -> bool {
    phase::failed(&slot.quota)
        || down(slot) & all(shards.clamp(1, 8)) != 0
        || granted_self_in(slot, slice)
}

/// Marks shard `i` down or up. Under the pull lock.
pub(super) fn set_down(slot: &TaskSlot, i: u32, is_down: bool) {
    let word = slot.shards_down.load(Ordering::Relaxed);
    let mask = if is_down {
        word | 1 << i
    } else {
        word & !(1 << i)
    };
    slot.shards_down.store(mask, Ordering::Relaxed);
}

/// Forgets every shard's state: the whole store failed (its fallback and
/// probes take over), or the task is no longer spread.
pub(super) fn clear(slot: &TaskSlot) {
    let word = slot.shards_down.load(Ordering::Relaxed);
    slot.shards_down.store(word & !0xff, Ordering::Relaxed);
}

/// What a host granted itself of a down shard.
pub(super) struct SelfGrant {
    pub granted: u64,
    /// Ms until the part will have released another share of the ask (0:
    /// none to wait).
    pub wait_ms: u64,
    /// The host's allowance of the part is taken for the slice.
    pub used_up: bool,
}

impl Quota {
    /// This host's allowance of shard `i`'s part of `slice` while its node
    /// is down: the fallback rate's slice, scaled to the part; `None`: no
    /// bound (`local`, or `share` before the store ever answered).
    fn allowance_of(&self, slot: &TaskSlot, g: Global, i: u32, shards: u32) -> Option<u64> {
        let rate = match (g.fallback, fallback_rate(slot, g)) {
            (Fallback::Deny, _) => 0.0,
            (_, None) => return None,
            (_, Some(rate)) => rate,
        };
        let quota = g.quota.max(1) as f64;
        let slice = rate * g.slice_ms as f64 / 1000.0;
        Some((slice * part(g.quota as u64, shards, i) as f64 / quota).ceil() as u64)
    }

    /// In a slice touched by an outage (a shard down now, part of one
    /// granted by this host itself or fallback admissions in this slice or
    /// the one before), what this host
    /// may take of shard `i`'s part in all: its fallback allowance of that
    /// part (see the module doc). `None`: the shard is pulled as usual
    /// (no outage, or `deny` or `local`, whose fallback has no share to
    /// keep to), or a task of one key.
    pub(super) fn share_of(&self, slot: &TaskSlot, g: Global, at: (u32, u32, u32)) -> Option<u64> {
        let (slice, i, shards) = at;
        let before = slice.wrapping_sub(1);
        let fell_back = |s| Account::of(slot).fell_back(s) > 0;
        let touched = partial(slot, g)
            || Account::of(slot).self_granted(slice) != 0
            || Account::of(slot).self_granted(before) != 0
            || fell_back(slice)
            || fell_back(before);
        if !touched || matches!(g.fallback, Fallback::Deny) {
            return None;
        }
        self.allowance_of(slot, g, i, shards)
    }

    /// Grants this host up to `want` of down shard `i`'s part of `slice`
    /// (see the module doc), of which it `taken` already (what it claims
    /// from the shard); counted as shard `i`'s grant by the caller. Under
    /// the pull lock.
    pub(super) fn grant_self(
        &self,
        slot: &TaskSlot,
        g: Global,
        (slice, i, shards): (u32, u32, u32),
        want: u64,
        taken: u64,
    ) -> SelfGrant {
        let q = &slot.quota;
        let Some(allow) = self.allowance_of(slot, g, i, shards) else {
            Account::of(slot).mark_self_granted(slice, i);
            return SelfGrant {
                granted: want,
                wait_ms: 0,
                used_up: false,
            };
        };
        // Released over the slice as the key releases its part.
        let elapsed = outage::elapsed_ms(self.store_now_us(q), slice, g.slice_ms);
        let room = outage::share_released(allow, g, elapsed).saturating_sub(taken);
        let granted = want.min(room);
        if granted > 0 {
            Account::of(slot).mark_self_granted(slice, i);
        }
        // Paced as a live shard paces: until another share of the ask
        // (over the shards) is released beyond this grant.
        let wait_ms = if granted < want && taken + granted < allow {
            let target = (taken + granted + want.div_ceil(shards.max(1) as u64)).min(allow);
            let burst = outage::share_burst(allow, g);
            wait_until_released(allow, burst, target, elapsed, g.slice_ms)
        } else {
            0
        };
        SelfGrant {
            granted,
            wait_ms,
            used_up: taken + granted >= allow,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::store::slice_of;

    fn setup(fallback: Fallback) -> (Quota, Box<TaskSlot>, Global) {
        let (quota, slot) = (
            crate::quota::testing::quota(),
            crate::quota::testing::slot(),
        );
        slot.quota.prev_spent.store(30_000, Ordering::Relaxed);
        let g = Global {
            rate: 1000.0,
            quota: 60_000,
            slice_ms: 60_000,
            chunk: 0,
            fallback,
            global_burst: 0,
            shards: 3,
        };
        (quota, slot, g)
    }

    /// A shard found down cuts the slice short before any self-grant: the
    /// slice the master died in, rolled by a pull the live shards served,
    /// is not the share fallback's figure.
    #[test]
    fn a_shard_known_down_cuts_the_slice_short() {
        let (me, slot, _) = setup(Fallback::Share);
        let slice = slice_of(me.store_now_us(&slot.quota), 60_000);
        assert!(!cut_short(&slot, 3, slice));
        set_down(&slot, 1, true);
        assert!(cut_short(&slot, 3, slice) && !granted_self_in(&slot, slice));
        // A shard of a spread no longer in force counts for nothing.
        assert!(!cut_short(&slot, 1, slice));
        set_down(&slot, 1, false);
        assert!(!cut_short(&slot, 3, slice));
    }

    #[test]
    fn shards_go_down_and_up_apart_from_the_self_grants() {
        let (_, slot, g) = setup(Fallback::Share);
        assert!(!partial(&slot, g));
        set_down(&slot, 2, true);
        assert!(partial(&slot, g) && down(&slot) == 0b100);
        assert!(!partial(&slot, Global { shards: 1, ..g }));
        set_down(&slot, 2, false);
        assert!(!partial(&slot, g));
        set_down(&slot, 0, true);
        clear(&slot);
        assert_eq!(down(&slot), 0);
    }

    /// Half the slice's spend last slice: half of each part, never more in
    /// the slice however often asked, and the key's pulls keep to the rest.
    #[test]
    fn a_down_part_is_granted_at_the_hosts_share_and_no_more() {
        let (me, slot, g) = setup(Fallback::Share);
        let slice = slice_of(me.store_now_us(&slot.quota), g.slice_ms);
        let at = (slice, 1, 3);
        assert_eq!(me.share_of(&slot, g, at), None, "no outage: no share");
        set_down(&slot, 1, true);
        // 30,000 of 60,000 spent last slice: half of shard 1's 20,000, and
        // half of each live shard's part too.
        assert_eq!(me.share_of(&slot, g, at), Some(10_000));
        assert_eq!(me.share_of(&slot, g, (slice, 0, 3)), Some(10_000));
        let mut total = 0;
        for _ in 0..50 {
            let taken = Account::of(&slot).shard_claim(slice, 1, 2, 0);
            let own = me.grant_self(&slot, g, at, 5_000, taken);
            Account::of(&slot).count_shard_grant(slice, 1, own.granted);
            total += own.granted;
        }
        assert!((1..=10_000).contains(&total), "{total}");
        assert!(granted_self_in(&slot, slice) && !granted_self_in(&slot, slice + 1));
        // Back up: the rest of the slice still by shares.
        set_down(&slot, 1, false);
        assert_eq!(me.share_of(&slot, g, at), Some(10_000));
        // And the next (another host may come back only then), not after.
        assert_eq!(me.share_of(&slot, g, (slice + 1, 1, 3)), Some(10_000));
        assert_eq!(me.share_of(&slot, g, (slice + 2, 1, 3)), None);
        let deny = setup(Fallback::Deny);
        let own = deny.0.grant_self(&deny.1, deny.2, at, 5_000, 0);
        assert!(own.granted == 0 && own.used_up);
        set_down(&deny.1, 1, true);
        assert_eq!(
            deny.0.share_of(&deny.1, deny.2, at),
            None,
            "deny: live shards as usual"
        );
        let local = setup(Fallback::Local);
        let own = local.0.grant_self(&local.1, local.2, at, 5_000, 0);
        assert!(own.granted == 5_000 && !own.used_up);
    }
}
