//! Hot tasks: a slice's quota spread over `shards` store keys, each with
//! its own hash tag (so, on a Redis Cluster, its own node), so one task's
//! pulls are not bound by one node.
//!
//! Shard `i` holds its part of the slice's quota and burst (equal parts,
//! the remainder to the first shards: the parts add up to the slice, so the
//! slice's total stays exact) and releases it over the slice like a whole
//! key. A pull starts at a shard picked by the host's id and its pull count
//! (hosts, and one host's pulls, spread over the shards) and moves on to
//! the next while it has been granted less than it asked: a shard used up
//! or holding back what it has not released yet does not stop a host while
//! another has quota. A shard found used up is skipped for the rest of the
//! slice (`QuotaSlot::shards_out`).
//!
//! Each shard charges a host with what it granted it, and a key created
//! anew deducts what the host claims beyond that: so a host claims, per
//! shard, its grants from that shard (`QuotaSlot::shard_granted`), and its
//! fallback admissions from its home shard only — every permit it took is
//! claimed from exactly one key. A shard whose node does not answer is
//! skipped, its part granted by the fallback and claimed as its own
//! (see `down`).

use std::sync::atomic::Ordering;

use super::account::Account;
use super::keyed::{KeyBatch, KeyReply};
use super::policy::{home, part};
use super::record::{Refresh, version_of};
use super::script::Fields;
use super::store::{Ask, QuotaStore, Reply};
use super::{Global, Quota, down};
use crate::error::Result;
use crate::format::{MAX_SHARDS, QuotaSlot, TaskSlot};

/// The task's store as one pull sees it: the host's store, decorated to
/// spread the pull over the task's shards (a store that spreads, a task
/// with `shards` past 1) as the module doc says. Its other calls are the
/// inner store's.
pub(super) struct Spread<'a> {
    quota: &'a Quota,
    slot: &'a TaskSlot,
    g: Global,
    /// Every shard not used up is asked, the down ones included.
    probe: bool,
}

impl<'a> Spread<'a> {
    pub(super) fn over(quota: &'a Quota, slot: &'a TaskSlot, g: Global, probe: bool) -> Self {
        Spread {
            quota,
            slot,
            g,
            probe,
        }
    }
}

impl QuotaStore for Spread<'_> {
    /// One pull for `ask.want` permits of the task's slice (under the pull
    /// lock): from its one key, or over its shards as the module doc says.
    /// The reply adds the shards' grants up; `left` is 0 once every shard
    /// is used up, and the wait is the shortest a shard asked for.
    ///
    /// A shard whose node fails is marked down and the pull moves on to
    /// the next; after the shards that answer, the down ones' parts are
    /// granted by the fallback (see `down`). `probe`: every shard not used
    /// up is asked, the down ones included, even once the ask is met (for
    /// nothing then: the key still learns the host's claim). The pull fails
    /// only when no shard answers and every one is down: the whole store
    /// failed, and its fallback takes over.
    ///
    /// A shard is asked only while the pull can still end within the
    /// lock's bound (`stale_after`) if that request fails the slowest way
    /// (an idle connection timing out, a connect, a command): nodes that
    /// hang rather than refuse would otherwise let the lock be broken under
    /// a live pull. The shards left unasked are asked by the next pull.
    fn pull(&self, ask: &Ask<'_>) -> Result<Reply> {
        let (slot, g, probe, ask) = (self.slot, self.g, self.probe, *ask);
        let (q, account) = (&slot.quota, Account::of(slot));
        let shards = if self.quota.store.spreads() {
            g.shards.clamp(1, MAX_SHARDS)
        } else {
            1
        };
        if shards == 1 {
            if down::down(slot) != 0 {
                down::clear(slot);
            }
            return self.quota.store.pull(&Ask { shards: 1, ..ask });
        }
        let (slice, home) = (ask.slice, home(&self.quota.host, shards));
        let start = (home as u64 + q.pulls.load(Ordering::Relaxed)) % shards as u64;
        let mut sum: Option<Reply> = None;
        let mut wait = u64::MAX;
        let (mut repaired, mut failure) = (false, None);
        let began = std::time::Instant::now();
        let slowest = self.quota.options.connect_timeout + 2 * self.quota.options.timeout;
        let mut asked = false;
        let mut k = 0;
        while k < shards {
            let i = (start as u32 + k) % shards;
            let got = sum.map_or(0, |s| s.granted);
            let is_down = down::down(slot) & 1 << i != 0;
            if account.shards_out(slice) & 1 << i != 0 || (is_down && !probe) {
                k += 1;
                continue;
            }
            let quota = part(ask.quota, shards, i);
            let claim = account.shard_claim(slice, i, home, got);
            let mut want = ask.want.saturating_sub(got).min(quota);
            let mut demand = ask.demand;
            if let Some(share) = self.quota.share_of(slot, g, (slice, i, shards)) {
                // Kept to its share: no fair tail to be owed (see `down`).
                want = want.min(share.saturating_sub(claim));
                demand = 0;
            }
            if asked && began.elapsed() + slowest > self.quota.stale_after() {
                break;
            }
            asked = true;
            let answer = self.quota.store.pull(&Ask {
                shard: i,
                shards,
                quota,
                burst: part(ask.burst, shards, i).max(1),
                want,
                claimed: claim,
                // Nor a give-back (see `give_back`).
                given: 0,
                gives_back: false,
                demand,
                // One reservation per host word: not over several keys.
                reserve: false,
                ..ask
            });
            let reply = match answer {
                Ok(reply) => reply,
                Err(e) => {
                    // Moves on: the shards that answer are pulled from, and
                    // this one's part is the fallback's below.
                    q.failed_pulls.fetch_add(1, Ordering::Relaxed);
                    if !is_down {
                        super::notes::shard_failed(
                            ask.task,
                            i,
                            &e,
                            g,
                            self.quota.options.probe_interval,
                        );
                    }
                    down::set_down(slot, i, true);
                    failure = Some(e);
                    k += 1;
                    continue;
                }
            };
            down::set_down(slot, i, false);
            if let (Some(Refresh::Record(version)), 1.., false) = (reply.refresh, i, repaired) {
                // A copy the store lost, or a write it missed: the
                // canonical record decides, and the copy is rewritten.
                let fields = self.quota.store.record(ask.task)?;
                if fields.as_deref().and_then(version_of).unwrap_or(0) != version {
                    self.quota.store.repair_copy(
                        ask.task,
                        (i, shards),
                        fields.as_deref().unwrap_or(&[]),
                    )?;
                    repaired = true;
                    continue;
                }
            }
            if reply.refresh.is_some() || reply.slice != slice {
                if got > 0 {
                    break;
                }
                return Ok(reply);
            }
            account.count_shard_grant(slice, i, reply.granted);
            if reply.left == 0 {
                account.mark_shard_out(slice, i);
            } else if reply.wait_ms > 0 {
                wait = wait.min(reply.wait_ms);
            }
            sum = Some(add(sum, reply));
            if got + reply.granted >= ask.want && !probe {
                break;
            }
            k += 1;
        }
        let down_now = down::down(slot) & down::all(shards);
        if let Some(e) = failure
            && sum.is_none()
            && down_now == down::all(shards)
        {
            down::clear(slot);
            return Err(e);
        }
        // The down shards' parts, by the fallback.
        let mut used_up = account.shards_out(slice);
        let parts = down_now & !used_up;
        for i in (0..shards).filter(|i| parts & 1 << i != 0) {
            let got = sum.map_or(0, |s| s.granted);
            let want = ask.want.saturating_sub(got);
            let taken = account.shard_claim(slice, i, home, got);
            let own = self
                .quota
                .grant_self(slot, g, (slice, i, shards), want, taken);
            account.count_shard_grant(slice, i, own.granted);
            if own.used_up {
                used_up |= 1 << i;
            } else if own.wait_ms > 0 {
                wait = wait.min(own.wait_ms);
            }
            let mut reply = sum.unwrap_or_else(|| self.quota.no_answer(q, slice));
            reply.granted += own.granted;
            sum = Some(reply);
        }
        let all_out = used_up & down::all(shards) == down::all(shards);
        let mut reply = sum.unwrap_or_else(|| self.quota.no_answer(q, slice));
        reply.left = if all_out { 0 } else { reply.left.max(1) };
        reply.wait_ms = if reply.granted >= ask.want || wait == u64::MAX {
            0
        } else {
            wait
        };
        Ok(reply)
    }

    fn pull_keys(&self, batch: &KeyBatch<'_>) -> Option<Result<KeyReply>> {
        self.quota.store.pull_keys(batch)
    }

    fn keeps_keys(&self) -> bool {
        self.quota.store.keeps_keys()
    }

    fn shares_host_clock(&self) -> bool {
        self.quota.store.shares_host_clock()
    }

    fn keeper(&self) -> bool {
        self.quota.store.keeper()
    }

    fn describe(&self) -> String {
        self.quota.store.describe()
    }

    fn record(&self, task: &str) -> Result<Option<Fields>> {
        self.quota.store.record(task)
    }

    fn record_at(&self, task: &str, version: u64) -> Result<Option<Fields>> {
        self.quota.store.record_at(task, version)
    }

    fn key_record(&self, task: &str) -> Result<Option<Fields>> {
        self.quota.store.key_record(task)
    }

    fn spreads(&self) -> bool {
        self.quota.store.spreads()
    }

    fn repair_copy(&self, task: &str, at: (u32, u32), fields: &[(String, String)]) -> Result<()> {
        self.quota.store.repair_copy(task, at, fields)
    }
}

impl Quota {
    /// The reply of a pull no shard answered: nothing granted, the clock
    /// and the census as last measured.
    fn no_answer(&self, q: &QuotaSlot, slice: u32) -> Reply {
        Reply {
            slice,
            granted: 0,
            left: 0,
            store_us: super::store::wall_us()
                + self.skew_us
                + q.offset_us.load(Ordering::Relaxed) as i64,
            hosts: q.hosts_seen.load(Ordering::Relaxed),
            host_conflict: false,
            wait_ms: 0,
            config_conflict: false,
            refresh: None,
            created: false,
            usable_ms: 0,
            went_on: false,
        }
    }
}

/// Two shards' replies as one: their grants added up, the later one's
/// clock and key.
fn add(sum: Option<Reply>, reply: Reply) -> Reply {
    match sum {
        None => reply,
        Some(s) => Reply {
            granted: s.granted + reply.granted,
            store_us: reply.store_us,
            hosts: s.hosts.max(reply.hosts),
            host_conflict: s.host_conflict || reply.host_conflict,
            config_conflict: s.config_conflict || reply.config_conflict,
            created: s.created || reply.created,
            ..reply
        },
    }
}
