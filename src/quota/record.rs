//! Thresholds owned by the store.
//!
//! A task's global numbers (`global_rate`, `slice_ms`, `chunk`, `fallback`,
//! `global_burst`) can live in one record per task in the store (for Redis
//! the hash `<prefix>cfg:{<task>}`, with a `version`). Every pull sends the
//! version this host last saw, and a change reaches every host at its next
//! pull — within one slice. To a task not spread over shards the script
//! sends the changed record with its reply; where the record keeps the
//! host's slicing and one shard and the slice's key exists, that pull is
//! granted first, else it answers "refresh" instead of a grant (a removed
//! record, version 0, is always a refresh, and a spread task's host reads
//! the record itself). So no key is made by numbers older than the
//! record's, and a slice admits what its key holds whatever the hosts
//! sent. The host checks the record as it checks its own configuration,
//! and adopts it: the task's copies take the record's
//! numbers (the request path reads nothing new) and its own are kept in
//! [`QuotaSlot::own`], for registrations to be compared with and for the
//! copies to return to when the record is removed. A record that fails the
//! checks is refused with a log line; the host keeps the numbers it has.
//!
//! Without a record, the first host to pull leaves its `slice_ms` in the
//! store (`<prefix>{<task>}:shape`, expiring two slices after its last
//! pull); a host cut in other slices adopts that slicing, counts a
//! `config_conflicts` and spends from the same keys, so two configurations
//! never add up. It returns to its own when the other host is gone.

use std::sync::atomic::Ordering;

use super::{GlobalConfig, GlobalSettings, Quota, TaskRef};
use crate::error::{Error, Result};
use crate::events::{self, Event};
use crate::format::{Fallback, Global, MAX_SLICE_QUOTA, QuotaSlot, TaskSlot};
use crate::shm::named::with_owner_lock;

/// Where a task's global numbers in force come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GlobalSource {
    /// This host's own configuration (or, while hosts disagree on
    /// `slice_ms`, the slicing of the host that created the task's keys).
    #[default]
    Local,
    /// The task's record in the store.
    Store,
}

impl GlobalSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Store => "store",
        }
    }
}

/// A task's record in the store, as [`super::Store::task_config`] reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StoredConfig {
    /// Increases with every write (the store's clock in µs at the write, or
    /// the previous version + 1).
    pub version: u64,
    pub settings: GlobalSettings,
}

/// What a pull answered instead of a grant: the task's numbers in the store
/// are not the ones this host sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refresh {
    /// The record's version is this (0: there is none any more).
    Record(u64),
    /// No record, and the task's keys are cut in slices of this many ms.
    Reslice(u32),
}

/// [`QuotaSlot::record`]: the copies hold the store record's numbers...
const ADOPTED: u64 = 1 << 63;
/// ...or this host's own with another host's `slice_ms`.
const RESLICED: u64 = 1 << 62;
/// The version of the store record this host last saw (adopted or refused).
const VERSION: u64 = (1 << 56) - 1;
/// The largest version the pull script compares exactly (a Lua number).
pub(crate) const MAX_VERSION: u64 = (1 << 53) - 1;

/// The record version to send with a pull, and whether the host spends by
/// the record (then the script skips the slicing check: the record decides).
pub(crate) fn seen(q: &QuotaSlot) -> (u64, bool) {
    let word = q.record.load(Ordering::Acquire);
    (word & VERSION, word & ADOPTED != 0)
}

/// Where the copies' global numbers come from.
pub(crate) fn source(slot: &TaskSlot) -> GlobalSource {
    // A reader views share: loaded as `format::load_acquire` says.
    if crate::format::load_acquire(&slot.quota.record) & ADOPTED != 0 {
        GlobalSource::Store
    } else {
        GlobalSource::Local
    }
}

/// This host's own global limit: the copies', unless they hold another's.
pub(crate) fn own(slot: &TaskSlot) -> Option<Global> {
    if slot.quota.record.load(Ordering::Acquire) & (ADOPTED | RESLICED) != 0 {
        slot.quota.own.load()
    } else {
        slot.global()
    }
}

/// This host's own global limit changes to `own` (the caller holds the
/// configuration lock and writes the copies next): returns the one the
/// copies are to hold. A store record in force stays in force, `own` kept
/// for when it goes; another host's slicing is forgotten (the next pull
/// asks again).
pub(crate) fn keep_own(slot: &TaskSlot, own: Option<Global>) -> Option<Global> {
    let q = &slot.quota;
    let word = q.record.load(Ordering::Acquire);
    if word & ADOPTED != 0 {
        q.own.store(own.as_ref());
        return slot.global();
    }
    q.record.store(word & VERSION, Ordering::Release);
    own
}

/// The fields of a record, as the store keeps them (strings).
pub(crate) fn fields(s: &GlobalSettings) -> Vec<(&'static str, String)> {
    vec![
        ("global_rate", s.global_rate.to_string()),
        ("slice_ms", s.slice_ms.to_string()),
        ("chunk", s.chunk.to_string()),
        ("fallback", s.fallback.to_string()),
        ("global_burst", s.global_burst.to_string()),
        ("shards", s.shards.to_string()),
    ]
}

/// Checks what a record may hold: the fields of a task's global limit, a
/// rate above 0 (removing the record, not a rate of 0, returns hosts to
/// their own numbers).
pub(crate) fn check(settings: &GlobalSettings) -> Result<Global> {
    settings.validate()?.ok_or_else(|| {
        Error::invalid(
            "a stored global_rate must be above 0: remove the record to return hosts \
             to their own configuration",
        )
    })
}

/// A record's version as the pull script reads it: a whole number
/// 1..=2^53; anything else is no record.
pub(crate) fn version_of(fields: &[(String, String)]) -> Option<u64> {
    fields
        .iter()
        .find(|(k, _)| k == "version")
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .filter(|v| (1..=MAX_VERSION).contains(v))
}

/// The settings a record holds, or why they are refused.
pub(crate) fn parse(fields: &[(String, String)]) -> Result<GlobalSettings> {
    let mut config = GlobalConfig::default();
    for (key, value) in fields {
        let bad = |what: &str| {
            Error::invalid(format!(
                "{} = {} is not {what}",
                crate::words::echo(key),
                crate::words::echo(value)
            ))
        };
        let count = || value.parse::<u32>().map_err(|_| bad("a count"));
        match key.as_str() {
            "global_rate" => config.global_rate = Some(value.parse().map_err(|_| bad("a rate"))?),
            "slice_ms" => config.slice_ms = Some(count()?),
            "chunk" => config.chunk = Some(count()?),
            "global_burst" => config.global_burst = Some(count()?),
            "shards" => config.shards = Some(count()?),
            "fallback" => config.fallback = Some(Fallback::parse(value)?),
            // The version, or a later release's field: not this one's to judge.
            _ => {}
        }
    }
    if config.global_rate.is_none() {
        return Err(Error::invalid("it has no global_rate"));
    }
    let settings = config.over(GlobalSettings::default());
    check(&settings)?;
    Ok(settings)
}

/// The slice word's view of `g` cut in slices of `slice_ms`.
fn resliced(g: Global, slice_ms: u32) -> Global {
    let quota = (g.rate * slice_ms as f64 / 1000.0).floor() as u32;
    let quota = quota.clamp(1, MAX_SLICE_QUOTA);
    Global {
        slice_ms,
        quota,
        chunk: g.chunk.min(quota),
        global_burst: g.global_burst.min(quota),
        ..g
    }
}

impl Quota {
    /// Applies a pull's "refresh" answer; the caller holds the pull lock.
    pub(super) fn refresh(&self, t: TaskRef<'_>, refresh: Refresh) -> Result<()> {
        match refresh {
            Refresh::Record(0) => self.adopt(t, None),
            Refresh::Record(version) => {
                // The script's version is the one to send next: if the
                // record changed since, the next pull says so again.
                let settings = match self.store.record_at(t.task, version)? {
                    Some(fields) => parse(&fields),
                    None => Err(Error::invalid("it was removed while being read")),
                };
                self.adopt(t, Some((version.min(VERSION), settings)))
            }
            Refresh::Reslice(slice_ms) => self.reslice(t, slice_ms),
        }
    }

    /// Adopts the store's record (`None`: there is none: back to our own).
    fn adopt(&self, t: TaskRef<'_>, record: Option<(u64, Result<GlobalSettings>)>) -> Result<()> {
        let (slot, task) = (t.slot, t.task);
        let q = &slot.quota;
        // Dropped after the lock: its lines are written once it is free.
        let _defer = events::defer();
        with_owner_lock(t.shm, &slot.config_lock, "the task's configuration", || {
            let word = q.record.load(Ordering::Acquire);
            let before = slot.global();
            let Some((version, settings)) = record else {
                if word & ADOPTED != 0 {
                    let own = q.own.load();
                    slot.write_global(own.as_ref());
                    events::report(
                        Event::RecordRemoved,
                        task,
                        format_args!(
                            "task {task:?}: its store record was removed; back to this \
                             host's own global limit"
                        ),
                    );
                    rescale(q, before, own);
                }
                q.record
                    .store(word & RESLICED & !ADOPTED, Ordering::Release);
                return;
            };
            match settings.and_then(|s| check(&s)) {
                Ok(g) => {
                    if word & (ADOPTED | RESLICED) == 0 {
                        q.own.store(before.as_ref());
                    }
                    slot.write_global(Some(&g));
                    q.record.store(version | ADOPTED, Ordering::Release);
                    events::report(
                        Event::RecordAdopted,
                        task,
                        format_args!(
                            "task {task:?}: adopted its store record (version {version}): \
                             global_rate {}, slice_ms {}",
                            g.rate, g.slice_ms
                        ),
                    );
                    rescale(q, before, Some(g));
                }
                Err(e) => {
                    events::report(
                        Event::RecordRefused,
                        task,
                        format_args!(
                            "task {task:?}: its store record (version {version}) is refused: \
                             {e}; keeping the numbers in force"
                        ),
                    );
                    q.record
                        .store(word & (ADOPTED | RESLICED) | version, Ordering::Release);
                }
            }
        })
    }

    /// Cuts this host's slices as the task's keys are cut (no record).
    fn reslice(&self, t: TaskRef<'_>, slice_ms: u32) -> Result<()> {
        let (slot, task) = (t.slot, t.task);
        let q = &slot.quota;
        let _defer = events::defer();
        with_owner_lock(t.shm, &slot.config_lock, "the task's configuration", || {
            let word = q.record.load(Ordering::Acquire);
            let before = slot.global();
            let Some(own) = own(slot) else { return };
            let next = if slice_ms == own.slice_ms {
                q.record.store(word & VERSION, Ordering::Release);
                own
            } else {
                if word & (ADOPTED | RESLICED) == 0 {
                    q.own.store(Some(&own));
                }
                q.record.store(word & VERSION | RESLICED, Ordering::Release);
                q.config_conflicts.fetch_add(1, Ordering::Relaxed);
                events::report(
                    Event::ConfigConflict,
                    task,
                    format_args!(
                        "task {task:?}: its keys are cut in slices of {slice_ms} ms by another \
                         host, this host's are {} ms: hosts disagree on slice_ms; spending by \
                         the keys' slices",
                        own.slice_ms
                    ),
                );
                resliced(own, slice_ms)
            };
            slot.write_global(Some(&next));
            rescale(q, before, Some(next));
        })
    }
}

/// After the copies' slicing changed: the pacing was for the old slices,
/// and the last slice's spending is scaled to the new length (the share
/// fallback reads it as a rate). The slice-tagged words need nothing: tags
/// of the old slicing match no slice of the new.
fn rescale(q: &QuotaSlot, before: Option<Global>, after: Option<Global>) {
    let (Some(before), Some(after)) = (before, after) else {
        return;
    };
    if before.slice_ms == after.slice_ms {
        return;
    }
    q.paced_until.store(0, Ordering::Release);
    let spent = q.prev_spent.load(Ordering::Relaxed).min(u32::MAX as u64);
    q.prev_spent.store(
        spent * after.slice_ms as u64 / before.slice_ms as u64,
        Ordering::Relaxed,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn records_parse_and_bad_ones_are_refused_with_their_field() {
        let r = record(&[
            ("version", "7"),
            ("global_rate", "2000"),
            ("slice_ms", "500"),
            ("fallback", "deny"),
            ("later_field", "x"),
        ]);
        assert_eq!(version_of(&r), Some(7));
        let s = parse(&r).unwrap();
        assert_eq!(
            (s.global_rate, s.slice_ms, s.fallback),
            (2000.0, 500, Fallback::Deny)
        );
        for (field, value, says) in [
            ("global_rate", "-5", "global_rate"),
            ("global_rate", "0", "above 0"),
            ("global_rate", "lots", "a rate"),
            ("slice_ms", "5", "slice_ms"),
            ("chunk", "-1", "a count"),
            ("fallback", "maybe", "fallback"),
            ("shards", "0", "shards must be 1..=6"),
            ("shards", "7", "shards must be 1..=6"),
        ] {
            let mut r = record(&[("version", "1"), ("global_rate", "100")]);
            r.retain(|(k, _)| k != field);
            r.push((field.to_string(), value.to_string()));
            let err = parse(&r).unwrap_err().to_string();
            assert!(err.contains(says), "{field}={value}: {err}");
        }
        assert!(parse(&record(&[("version", "1")])).is_err());
        for bad in ["x", "0", "1.5", "9007199254740992", "-3"] {
            assert_eq!(version_of(&record(&[("version", bad)])), None, "{bad}");
        }
    }

    #[test]
    fn another_slicing_keeps_the_rate() {
        let g = GlobalSettings {
            global_rate: 1000.0,
            chunk: 900,
            ..GlobalSettings::default()
        }
        .validate()
        .unwrap()
        .unwrap();
        let r = resliced(g, 500);
        assert_eq!((r.quota, r.slice_ms, r.chunk), (500, 500, 500));
        assert_eq!(resliced(g, 100).quota, 100);
    }
}
