//! What the views show of a keyed task: its counters, and its keys ranked
//! by what they were admitted and refused, by name where one is kept.

use std::sync::atomic::Ordering::Relaxed;

use super::global::{self, Now, Seen};
use super::region::KeyRegion;
use crate::format::{BUCKET_KEYS, IDENT_LOCK, KeyCounter};
use crate::limit::ledger::word_count;

/// A keyed task's key file in numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyStats {
    /// Keys the file holds at most, and those holding an entry now.
    pub capacity: u32,
    pub keys: u32,
    /// Keys whose state carries something now (limited or holding permits).
    pub live: u32,
    pub inserted: u64,
    /// Entries given to a new key from a key whose state carried nothing.
    pub reused: u64,
    /// Decisions on the shared overflow state (every entry live).
    pub overflowed: u64,
    /// Requests a limit in shadow mode would have refused.
    pub shadow_refused: u64,
    pub refused_rate: u64,
    pub refused_concurrency: u64,
    /// Refused by a key's global rate (its slice spent fleet-wide, or the
    /// host's fallback share of it, or waiting for the store).
    pub refused_global: u64,
    /// Refused for want of a record (distinct keys held by one process).
    pub records_full: u64,
    /// Records per process.
    pub records: u32,
    /// The version of the store's record of the keys' global rates the
    /// host adopted (0: none, or none since its own limits were written or
    /// the record removed), and of the last one it refused (0: none).
    pub record: u64,
    pub record_refused: u64,
}

/// One key, for `flowctrl keys`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyInfo {
    /// Its first bytes as kept for display (`None`: not kept), and whether
    /// they are all of it.
    pub name: Option<Vec<u8>>,
    pub whole: bool,
    pub ident: u64,
    pub admitted: u64,
    pub refused: u64,
    pub in_flight: u64,
    /// Whether its state carries something now.
    pub live: bool,
    /// Its global rate on this host, as of the last slice it was asked in
    /// (`None`: no global rate, or never asked).
    pub global: Option<KeyGlobalNow>,
}

/// A key's global rate on one host, in the last slice it was asked in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyGlobalNow {
    /// The slice (low 24 bits of its id: store ms ÷ slice ms).
    pub slice: u64,
    /// Hot on the host: it spends chunks from the store, with no
    /// allowance (it pulled, or was asked past its allowance lately).
    pub hot: bool,
    /// Asked in the slice, admitted on the host's own, and held of a
    /// chunk the store granted.
    pub asked: u64,
    pub local: u64,
    pub held: u64,
    /// The store said the slice is spent.
    pub spent: bool,
    /// A request waits for the host's next call to the store.
    pub waiting: bool,
    /// Admitting by the fallback's share (the store failed).
    pub fallback: bool,
}

/// [`KeyGlobalNow`] of entry `index`, holding the key `ident`.
fn global_now(region: &KeyRegion, index: u32, ident: u64) -> Option<KeyGlobalNow> {
    let w = region.globals(index)?;
    let tag = global::tag_of(ident);
    let seen = Seen::unpack(w.seen.load(Relaxed));
    if seen.tag != tag || w.seen.load(Relaxed) == 0 {
        return None;
    }
    let now = Now::unpack(w.now.load(Relaxed));
    let current = now.tag == tag && now.slice == seen.slice;
    Some(KeyGlobalNow {
        slice: seen.slice,
        hot: seen.pulled || seen.hot_for > 0,
        asked: seen.asked,
        local: if current { now.local } else { 0 },
        held: if current { now.held } else { 0 },
        spent: current && now.exhausted,
        waiting: seen.wants,
        fallback: current && now.fallback,
    })
}

/// The counters alone, as [`KeyRegion::counters`] read them: `keys` from
/// the inserts (an entry, once given, always holds a key), `live` left 0
/// (counting it reads every entry).
pub(crate) fn counters_only(
    counters: [u64; crate::format::KEY_COUNTERS],
    (seen, refused): (u64, u64),
    capacity: u32,
) -> KeyStats {
    let c = |k: KeyCounter| counters[k as usize];
    let (record, record_refused) = super::record::versions_of(seen, refused);
    KeyStats {
        capacity,
        keys: c(KeyCounter::Inserted).min(capacity as u64) as u32,
        inserted: c(KeyCounter::Inserted),
        reused: c(KeyCounter::Reused),
        overflowed: c(KeyCounter::Overflowed),
        shadow_refused: c(KeyCounter::ShadowRefused),
        refused_rate: c(KeyCounter::RefusedRate),
        refused_concurrency: c(KeyCounter::RefusedConcurrency),
        refused_global: c(KeyCounter::RefusedGlobal),
        records_full: c(KeyCounter::RecordsFull),
        record,
        record_refused,
        ..KeyStats::default()
    }
}

pub(crate) fn key_stats(region: &KeyRegion, now: u64) -> KeyStats {
    let mut s = KeyStats {
        capacity: region.entries(),
        inserted: region.counter(KeyCounter::Inserted),
        reused: region.counter(KeyCounter::Reused),
        overflowed: region.counter(KeyCounter::Overflowed),
        shadow_refused: region.counter(KeyCounter::ShadowRefused),
        refused_rate: region.counter(KeyCounter::RefusedRate),
        refused_concurrency: region.counter(KeyCounter::RefusedConcurrency),
        refused_global: region.counter(KeyCounter::RefusedGlobal),
        records_full: region.counter(KeyCounter::RecordsFull),
        records: region.geometry.records,
        ..KeyStats::default()
    };
    (s.record, s.record_refused) = super::record::versions(region);
    for b in 0..region.geometry.buckets {
        let bucket = region.bucket(b);
        for i in 0..BUCKET_KEYS {
            let id = bucket.ident[i].load(Relaxed);
            if id == 0 || id & IDENT_LOCK != 0 {
                continue;
            }
            s.keys += 1;
            let e = &bucket.entries[i];
            if e.tat.iter().any(|t| t.load(Relaxed) > now) || word_count(e.held.load(Relaxed)) != 0
            {
                s.live += 1;
            }
        }
    }
    s
}

/// The `top` keys by `rank` (admitted or refused), most first.
pub(crate) fn key_infos(
    region: &KeyRegion,
    now: u64,
    top: usize,
    by_refused: bool,
) -> Vec<KeyInfo> {
    let mut all = Vec::new();
    for b in 0..region.geometry.buckets {
        let bucket = region.bucket(b);
        for i in 0..BUCKET_KEYS {
            let id = bucket.ident[i].load(Relaxed);
            if id == 0 || id & IDENT_LOCK != 0 {
                continue;
            }
            let e = &bucket.entries[i];
            let (admitted, refused) = (e.admitted.load(Relaxed), e.refused.load(Relaxed));
            all.push((
                if by_refused { refused } else { admitted },
                id,
                admitted,
                refused,
                e,
                b * BUCKET_KEYS as u32 + i as u32,
            ));
        }
    }
    all.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
    all.truncate(top);
    all.into_iter()
        .map(|(_, ident, admitted, refused, e, index)| {
            let name = super::names::name_of(region, ident);
            KeyInfo {
                whole: name.as_ref().is_some_and(|n| n.1),
                name: name.map(|n| n.0),
                ident,
                admitted,
                refused,
                in_flight: word_count(e.held.load(Relaxed)),
                live: e.tat.iter().any(|t| t.load(Relaxed) > now)
                    || word_count(e.held.load(Relaxed)) != 0,
                global: global_now(region, index, ident),
            }
        })
        .collect()
}
