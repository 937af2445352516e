//! Per-key permits in flight, exact when a process dies at any
//! instruction: a key's `held` word moves only through `limit::ledger`,
//! whose lanes here are the processes' key records. A record is bound to
//! one entry while it holds anything; its `entry` word says which and
//! counts the threads of its process using it, so it is never rebound
//! under a thread that is moving it. A permit names its record (its
//! `key_record`), never the entry: what the record is bound to is the
//! truth a release and the reaper both read.
//!
//! A process has `records_for(processes)` records: the distinct keys
//! whose permits it can hold at once (32 bytes each).

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

use super::region::KeyRegion;
use crate::format::{KeyEntry, KeyRecord};
use crate::limit::ledger::{self, Lane, Update};

/// `entry` word: bound entry + 1 (low 32 bits; `OVERFLOW` + 1 wraps to 0,
/// so the overflow state is stored as `u32::MAX`), users (high 32 bits).
const USER: u64 = 1 << 32;
const OVERFLOW_BOUND: u64 = u32::MAX as u64;

fn bound(entry: u32) -> u64 {
    if entry == super::region::OVERFLOW {
        OVERFLOW_BOUND
    } else {
        entry as u64 + 1
    }
}

fn entry_of(word: u64) -> Option<u32> {
    match word as u32 as u64 {
        0 => None,
        OVERFLOW_BOUND => Some(super::region::OVERFLOW),
        e => Some(e as u32 - 1),
    }
}

fn lane<'a>(region: &'a KeyRegion, id: u32) -> Option<Lane<'a>> {
    let records = region.geometry.records;
    let record = region.record(id / records, id % records)?;
    Some(Lane {
        id,
        ledger: &record.ledger,
        intent: &record.intent,
    })
}

/// A record of `attach` in use by this thread for `entry`; dropped, it is
/// given up (the binding stays while the record holds permits).
pub(crate) struct Using<'a> {
    region: &'a KeyRegion,
    record: &'a KeyRecord,
    pub index: u32,
    attach: u32,
}

impl Drop for Using<'_> {
    fn drop(&mut self) {
        self.record.entry.fetch_sub(USER, AcqRel);
    }
}

impl<'a> Using<'a> {
    /// Takes a record of `attach` bound to `entry`, binding a free one if
    /// none is (`None`: all of the process's records hold other keys).
    pub(crate) fn take(region: &'a KeyRegion, attach: u32, entry: u32) -> Option<Self> {
        let records = region.geometry.records;
        let want = bound(entry);
        let start = (entry as u64 % records as u64) as u32;
        let mut free = None;
        for k in 0..records {
            let r = (start + k) % records;
            let record = region.record(attach, r)?;
            let mut w = record.entry.load(Acquire);
            loop {
                if w as u32 as u64 == want {
                    match record.entry.compare_exchange(w, w + USER, AcqRel, Acquire) {
                        Ok(_) => {
                            return Some(Self {
                                region,
                                record,
                                index: r,
                                attach,
                            });
                        }
                        Err(actual) => w = actual,
                    }
                } else {
                    break;
                }
            }
            if free.is_none() && w >> 32 == 0 && holds_nothing(record) {
                free = Some(r);
            }
        }
        // Rebind a free record: nobody uses it and it holds nothing.
        let r = free?;
        let record = region.record(attach, r)?;
        let w = record.entry.load(Acquire);
        if w >> 32 != 0 || !holds_nothing(record) {
            return None;
        }
        if let Some(old) = entry_of(w)
            && let Some(e) = region.entry(old)
        {
            // Its id is about to name another word's ops: no tag of it may
            // stay in the old one.
            let id = attach * records + r;
            ledger::untag(&e.held, |i| i == id);
        }
        record
            .entry
            .compare_exchange(w, want | USER, AcqRel, Acquire)
            .ok()?;
        Some(Self {
            region,
            record,
            index: r,
            attach,
        })
    }

    /// The record `index` of `attach`, for a release: `None` if it is not
    /// bound (a permit naming it is not one of its holds).
    pub(crate) fn named(region: &'a KeyRegion, attach: u32, index: u32) -> Option<Self> {
        let record = region.record(attach, index)?;
        let mut w = record.entry.load(Acquire);
        loop {
            entry_of(w)?;
            match record.entry.compare_exchange(w, w + USER, AcqRel, Acquire) {
                Ok(_) => {
                    return Some(Self {
                        region,
                        record,
                        index,
                        attach,
                    });
                }
                Err(actual) => w = actual,
            }
        }
    }

    pub(crate) fn entry(&self) -> Option<(u32, &'a KeyEntry)> {
        let e = entry_of(self.record.entry.load(Acquire))?;
        Some((e, self.region.entry(e)?))
    }

    /// What the record holds.
    pub(crate) fn held(&self) -> i32 {
        ledger::ledger_held(self.record.ledger.load(Acquire))
    }

    /// Moves the key's count by `delta` through the record's lane; `cap`
    /// refuses an increase past it. `Busy` when another thread of the
    /// process is mid-move on the same record: the caller retries.
    pub(crate) fn update(&self, delta: i32, cap: Option<u64>) -> Update {
        let Some((_, entry)) = self.entry() else {
            return Update::Refused;
        };
        let records = self.region.geometry.records;
        let id = self.attach * records + self.index;
        let me = Lane {
            id,
            ledger: &self.record.ledger,
            intent: &self.record.intent,
        };
        ledger::update(&entry.held, |i| lane(self.region, i), me, delta, cap)
    }

    /// [`Using::update`], retried while another thread of the process moves
    /// the same record (a few instructions).
    pub(crate) fn update_spin(&self, delta: i32, cap: Option<u64>) -> Update {
        loop {
            match self.update(delta, cap) {
                Update::Busy => std::hint::spin_loop(),
                done => return done,
            }
        }
    }
}

fn holds_nothing(record: &KeyRecord) -> bool {
    let l = record.ledger.load(Acquire);
    ledger::ledger_held(l) == 0 && l >> 63 == 0
}

/// Gives back everything a dead attachment's records hold; idempotent and
/// crash-safe (each step is a ledger transaction). Returns the permits.
pub(crate) fn reclaim(region: &KeyRegion, attach: u32) -> i64 {
    let records = region.geometry.records;
    let mut given = 0i64;
    // Lanes that gave back more than they took first (see the tasks').
    let mut order: Vec<u32> = (0..records).collect();
    order.sort_by_key(|&r| {
        region
            .record(attach, r)
            .is_some_and(|rec| ledger::ledger_held(rec.ledger.load(Acquire)) >= 0)
    });
    for r in order {
        let Some(record) = region.record(attach, r) else {
            continue;
        };
        let w = record.entry.load(Acquire);
        let Some(e) = entry_of(w).and_then(|e| region.entry(e)) else {
            continue;
        };
        let id = attach * records + r;
        let me = Lane {
            id,
            ledger: &record.ledger,
            intent: &record.intent,
        };
        let resolve = |i| lane(region, i);
        ledger::settle(&e.held, resolve, me);
        given += ledger::drain(&e.held, resolve, me, |_, _| {}) as i64;
        ledger::untag(&e.held, |i| i == id);
        // The dead process's threads used it; nobody does now.
        record.entry.store(w as u32 as u64, Relaxed);
    }
    given
}

/// Permits the processes' records hold of each entry, against the
/// entries' words: (entry, in the word, in the records) where they differ.
pub(crate) fn drift(region: &KeyRegion) -> Vec<(u32, u64, i64)> {
    let mut sums: std::collections::HashMap<u32, i64> = Default::default();
    for attach in 0..region.geometry.processes {
        for r in 0..region.geometry.records {
            let Some(record) = region.record(attach, r) else {
                continue;
            };
            if let Some(e) = entry_of(record.entry.load(Acquire)) {
                *sums.entry(e).or_default() +=
                    ledger::ledger_held(record.ledger.load(Acquire)) as i64;
            }
        }
    }
    let mut out = Vec::new();
    let mut check = |e: u32, entry: &KeyEntry| {
        let word = ledger::word_count(entry.held.load(Acquire));
        let recorded = sums.get(&e).copied().unwrap_or(0);
        if word as i64 != recorded {
            out.push((e, word, recorded));
        }
    };
    for e in 0..region.entries() {
        if let Some(entry) = region.entry(e) {
            check(e, entry);
        }
    }
    check(super::region::OVERFLOW, &region.header().overflow);
    out
}
