//! Chunk sizing: how much a host asks the store for. The words are read
//! here into a [`Pace`]; the rule itself is `policy::chunk`.

use std::sync::atomic::Ordering;

use super::account::Account;
use super::policy::{self, Pace};
use super::store::slice_of;
use super::{Global, Quota};
use crate::format::TaskSlot;

impl Quota {
    /// The chunk to ask for when a request of `n` permits pulls: the
    /// task's fixed `chunk`, or by the host's pace (`policy::chunk`).
    pub(in crate::quota) fn want(&self, slot: &TaskSlot, g: Global, n: u32) -> u64 {
        if g.chunk != 0 {
            return g.chunk.max(n) as u64;
        }
        let pace = pace(self, slot, g);
        let rest = super::spell::rest(slot, g, pace.slice);
        policy::chunk(&pace, g.quota as u64, g.burst() as u64, n, rest)
    }
}

/// The host's pace in the current slice, from its words.
pub(super) fn pace(me: &Quota, slot: &TaskSlot, g: Global) -> Pace {
    let account = Account::of(slot);
    let slice_us = g.slice_ms as u64 * 1000;
    let now = me.store_now_us(&slot.quota).max(0) as u64;
    let slice = slice_of(now as i64, g.slice_ms);
    let elapsed = now % slice_us;
    let held = account.held(slice);
    let spent = account
        .granted(slice)
        .saturating_sub(account.given(slice))
        .saturating_sub(held);
    let quota = g.quota as u64;
    let hosts = slot
        .quota
        .hosts_seen
        .load(Ordering::Relaxed)
        .clamp(1, 1 << 20);
    let many = policy::many_hosts(quota, hosts);
    let spent_before = account.spent_before(slice);
    let rate = policy::pace_rate(
        policy::rate_of(spent, elapsed, slice_us),
        spent_before * 1000 / g.slice_ms as u64,
        policy::rate_of(account.asked(slice), elapsed, slice_us),
        many,
        quota * 1000 / g.slice_ms as u64 / hosts,
    );
    Pace {
        many,
        rate,
        slice_us,
        left_us: slice_us - elapsed,
        held,
        slice,
        fresh_kept: if spent_before == 0 && !many {
            spent + held
        } else {
            0
        },
    }
}
