//! Keys' global rates owned by the store: a keyed task's record (for Redis
//! the hash `<prefix>{<task>}:k-cfg`) names the global rate of every key —
//! `key_global` for the keys without their own, `override:<key>` for named
//! ones — with a `version`. A rate's text is `<rate> <slice> <local>
//! <fallback>` (`100/s 1s 1 share`) or `none`.
//!
//! Every call a host makes for keys learns the record's version (and a
//! host that needs no call makes an empty one every [`HEARTBEAT_MS`], at
//! a call point when its default limits have a global rate (see `fleet`),
//! so a record reaches a host whose keys all stay within their allowance; a task
//! with neither a global rate nor a record makes one when a process starts,
//! so a record written later reaches it at its next start). Off
//! the request path, its keeper fetches a version it has not seen, checks
//! it as strictly as its own configuration, and adopts it: the global part
//! of the host's default and of each override becomes the record's (a key
//! the record names gets an override with the default's other limits), the
//! rest of its key limits stay its own. A record that fails the checks is
//! refused with a log line; the host keeps what it has. A host whose own
//! limits are written again (a restart, `flowctrl set`) adopts the record
//! again at its next call; removing the record leaves hosts on its numbers
//! until then.

use super::MAX_KEY_LEN;
use super::{KeyGlobal, KeyLimits, Keys, MAX_LOCAL};
use crate::error::{Error, ErrorKind, Result};
use crate::format::MAX_OVERRIDES;
use crate::quota::{MAX_RECORD_VERSION, Quota, Tend, key_record_key, record_version};
use crate::shm::Shm;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

/// The longest a host goes without a call for keys: how late a record
/// reaches a host that needs no call, and how often such a host is
/// counted in the census.
pub(crate) const HEARTBEAT_MS: u64 = 1000;
/// How long a keeper leaves a record it could not fetch before trying again.
const RETRY_MS: u64 = 1000;
/// [`crate::format::RecordWords::seen`]: the version was adopted (not refused).
const ADOPTED: u64 = 1 << 63;

/// The versions of the record in force on the host and of the last one it
/// refused (0: none), from the header's `seen` and `refused` words.
pub(crate) fn versions_of(seen: u64, refused: u64) -> (u64, u64) {
    let adopted = if seen & ADOPTED != 0 {
        seen & !ADOPTED
    } else {
        0
    };
    (adopted, refused)
}

/// [`versions_of`] a mapped key file.
pub(crate) fn versions(region: &super::KeyRegion) -> (u64, u64) {
    let r = &region.header().record;
    versions_of(
        crate::format::load_acquire(&r.seen),
        crate::format::load_acquire(&r.refused),
    )
}

/// A record's field of a key's rate.
const PREFIX: &str = "override:";

/// The global rates of a keyed task's keys, as a store record holds them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyRecord {
    /// The rate of every key the record does not name (`None`: none).
    pub default: Option<KeyGlobal>,
    /// Named keys' rates (`None`: the key has no global rate).
    pub overrides: Vec<(String, Option<KeyGlobal>)>,
}

impl KeyRecord {
    /// The record's fields, as the store keeps them (no version).
    pub fn fields(&self) -> Vec<(String, String)> {
        std::iter::once(("key_global".to_string(), text(self.default.as_ref())))
            .chain(
                self.overrides
                    .iter()
                    .map(|(k, g)| (format!("{PREFIX}{k}"), text(g.as_ref()))),
            )
            .collect()
    }

    /// The record a store's fields hold, checked as a host's own
    /// configuration is: its version and rates, or why it is refused.
    /// Fields of a later release are left alone.
    pub fn parse(fields: &[(String, String)]) -> Result<(u64, Self)> {
        let mut record = Self::default();
        let mut default = None;
        for (field, value) in fields {
            let at = |e: Error| {
                Error::invalid(format!(
                    "{} = {:?}: {}",
                    crate::words::echo(field),
                    crate::words::echo(value),
                    e.message()
                ))
            };
            if field == "key_global" {
                default = Some(rate_of(value).map_err(at)?);
            } else if let Some(key) = field.strip_prefix(PREFIX) {
                if key.is_empty() || key.len() > MAX_KEY_LEN {
                    return Err(at(Error::invalid(format!(
                        "a key is 1 to {MAX_KEY_LEN} bytes"
                    ))));
                }
                record
                    .overrides
                    .push((key.to_string(), rate_of(value).map_err(at)?));
            }
        }
        let version = record_version(fields).ok_or_else(|| {
            Error::invalid(format!(
                "its version is not a whole number 1..={MAX_RECORD_VERSION}"
            ))
        })?;
        record.default = default
            .ok_or_else(|| Error::invalid("it has no key_global (\"none\" for no default rate)"))?;
        if record.overrides.len() > MAX_OVERRIDES {
            return Err(Error::invalid(format!(
                "it names {} keys, more than a keyed task's {MAX_OVERRIDES} overrides",
                record.overrides.len()
            )));
        }
        record.overrides.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((version, record))
    }
}

/// A keyed task's record in the store, as the manager and the CLI write,
/// read and remove it (hosts read it on their own: see above).
impl crate::quota::Store {
    /// Writes `task`'s record of its keys' global rates: every host of the
    /// fleet adopts it within about a second. Returns its version.
    pub fn set_key_record(&self, task: &str, record: &KeyRecord) -> Result<u64> {
        crate::words::validate_name(task, "task name")?;
        let fields = record.fields();
        // Checked as a host will check it.
        let mut check = fields.clone();
        check.push(("version".into(), "1".into()));
        KeyRecord::parse(&check)?;
        self.write_record(&key_record_key(self.redis().prefix(), task), &fields)
    }

    /// `task`'s record of its keys' global rates and its version, `None`
    /// if it has none; an error names what a record written by hand gets
    /// wrong (hosts refuse it too, with a log line).
    pub fn key_record(&self, task: &str) -> Result<Option<(u64, KeyRecord)>> {
        crate::words::validate_name(task, "task name")?;
        let key = key_record_key(self.redis().prefix(), task);
        let fields = self.read_record(&key)?;
        if fields.is_empty() {
            return Ok(None);
        }
        KeyRecord::parse(&fields)
            .map(Some)
            .map_err(|e| Error::invalid(format!("the store's record {key}: {}", e.message())))
    }

    /// Removes `task`'s record of its keys' global rates: whether there
    /// was one. Hosts keep its rates until their own are written again.
    pub fn remove_key_record(&self, task: &str) -> Result<bool> {
        crate::words::validate_name(task, "task name")?;
        self.remove_record(&key_record_key(self.redis().prefix(), task))
    }
}

/// `100/s 1s 1 share`, or `none`.
fn text(g: Option<&KeyGlobal>) -> String {
    g.map_or_else(
        || "none".to_string(),
        |g| format!("{} {} {} {}", g.rate, g.slice_text(), g.local, g.fallback),
    )
}

/// A rate's text read back, checked.
fn rate_of(text: &str) -> Result<Option<KeyGlobal>> {
    if text == "none" {
        return Ok(None);
    }
    let parts: Vec<&str> = text.split(' ').collect();
    let [rate, slice, local, fallback] = parts[..] else {
        return Err(Error::invalid(
            "not \"<rate> <slice> <local> <fallback>\" (e.g. \"100/s 1s 1 share\") or \"none\"",
        ));
    };
    let local = local
        .parse::<i64>()
        .map_err(|_| Error::invalid(format!("the local allowance is 0 to {MAX_LOCAL}")))?;
    let mut g = KeyGlobal::from_fields(rate, Some(slice), Some(local), Some(fallback))
        .map_err(|(_, e)| e)?;
    // A slice of the rate's period is the default, written as none.
    if g.slice == Some(g.rate.period) {
        g.slice = None;
    }
    Ok(Some(g))
}

impl Keys {
    /// Whether the host has made no call for keys for [`HEARTBEAT_MS`].
    pub(crate) fn heartbeat_due(&self, quota: &Quota) -> bool {
        let now = quota.host_ms().max(0) as u64;
        let due = self.region.header().record.due.load(Acquire);
        // (Due later than two heartbeats: the host's clock stepped back.)
        now >= due || due > now + 2 * HEARTBEAT_MS
    }

    /// After a call for keys: the store's record is at `version` (0: none).
    pub(crate) fn note_record(&self, version: u64, host_ms: u64) {
        let r = &self.region.header().record;
        r.wanted.store(version, Relaxed);
        r.due.store(host_ms + HEARTBEAT_MS, Relaxed);
    }
}

/// The keeper's look at a task's keys: an active host's call at its call
/// point (see `fleet`), an empty call if none was made for
/// [`HEARTBEAT_MS`], then the record adopted if the store holds one this
/// host has not seen.
impl Tend for Keys {
    fn tend(&self, shm: &Shm, quota: &Quota, task: &str) {
        if !quota.keeps_keys() {
            return;
        }
        let served = self.call_when_due(quota, task);
        let h = self.region.header();
        let r = &h.record;
        let now = quota.host_ms().max(0) as u64;
        // A task without a global rate or a record costs the store a call
        // per process start, not one a second; one whose default limits
        // have a global rate makes its heartbeat at a call point
        // (`call_when_due`).
        let kept = !served
            && (h.any_global.load(Acquire) != 0
                || r.wanted.load(Acquire) != 0
                || r.seen.load(Acquire) != 0);
        let due = r.due.load(Acquire);
        let first = !self.looked.swap(true, Relaxed) && !served;
        if first
            || kept
                && now >= due
                && r.due
                    .compare_exchange(due, now + HEARTBEAT_MS, AcqRel, Relaxed)
                    .is_ok()
        {
            self.heartbeat(quota, task);
        }
        let (wanted, seen) = (r.wanted.load(Acquire), r.seen.load(Acquire));
        if wanted == seen & !ADOPTED || now < self.retry_ms.load(Relaxed) {
            return;
        }
        match self.fetch(shm, quota, task, wanted) {
            Ok(()) => self.retry_ms.store(0, Relaxed),
            Err(e) => {
                self.retry_ms.store(now + RETRY_MS, Relaxed);
                crate::events::report(
                    crate::events::Event::StoreFailed,
                    task,
                    format_args!("task {task:?}: the keys' record is not read: {e}"),
                );
            }
        }
    }
}

impl Keys {
    /// Reads the record and adopts it (or refuses it, with a log line).
    fn fetch(&self, shm: &Shm, quota: &Quota, task: &str, wanted: u64) -> Result<()> {
        let r = &self.region.header().record;
        let Some(fields) = quota.key_record(task)? else {
            return Ok(());
        };
        if fields.is_empty() {
            // No record (any more): the rates adopted stay (see above).
            r.seen.store(0, Release);
            return Ok(());
        }
        // A record the host's limits cannot take (an invalid argument from
        // `adopt`) is refused as one that fails to parse is; any other
        // error (the config lock) is the keeper's, tried again.
        let checked = KeyRecord::parse(&fields).and_then(|(version, record)| {
            match self.adopt(shm, &record) {
                Err(e) if e.kind() != ErrorKind::InvalidArgument => Ok(Err(e)),
                adopted => adopted.map(|()| Ok(version)),
            }
        });
        match checked {
            Ok(Err(e)) => return Err(e),
            Ok(Ok(version)) => {
                r.seen.store(version | ADOPTED, Release);
                crate::events::report(
                    crate::events::Event::RecordAdopted,
                    task,
                    format_args!(
                        "task {task:?}: keys' global rates from the store's record (version \
                         {version})"
                    ),
                );
            }
            Err(e) => {
                // The version the store's script reported, as it read it: a
                // refused record is fetched again only when it changes.
                let version = wanted & !ADOPTED;
                r.seen.store(version, Release);
                r.refused.store(version, Release);
                // A store record's event (flowctrl::store, its task named
                // as `task`), not a config file's.
                crate::events::report(
                    crate::events::Event::RecordRefused,
                    task,
                    format_args!(
                        "task {task:?}: the store's record of keys' global rates (version \
                         {version}) is refused, the host keeps its own: {e}"
                    ),
                );
            }
        }
        Ok(())
    }

    /// One call without asks: the census counts the host, and the reply
    /// carries the record's version.
    fn heartbeat(&self, quota: &Quota, task: &str) {
        let sent = quota.host_us();
        // The slice is immaterial without asks.
        let slice = (sent.max(0) as u64) / 1_000_000;
        if let Some(Ok(reply)) = quota.pull_keys(task, (slice, 1000), &[], &[]) {
            self.note_answer(quota, sent, (slice, 1000), &reply);
        }
    }

    /// Makes `record`'s rates the global part of the default and of every
    /// override but an unlimited or blocked one, adding an override (the
    /// default's other limits) for each key it names that has none.
    pub(crate) fn adopt(&self, shm: &Shm, record: &KeyRecord) -> Result<()> {
        let named: Vec<(u64, Option<KeyGlobal>)> = record
            .overrides
            .iter()
            .map(|(k, g)| Ok((self.hash(k.as_bytes())?.ident, *g)))
            .collect::<Result<_>>()?;
        self.write(shm, |c, clock| {
            let mut default = KeyLimits::load(&c.default, clock);
            default.global = record.default;
            let overflow_admit = c.default.flags() & crate::format::LIMITS_OVERFLOW_ADMIT != 0;
            let mut keys = super::config::overrides_in(c, clock);
            for (ident, limits) in &mut keys {
                // An unlimited or blocked key takes no global rate.
                if limits.is_unlimited() || limits.is_blocked() {
                    continue;
                }
                limits.global = match named.iter().find(|(i, _)| i == ident) {
                    Some((_, g)) => *g,
                    None => record.default,
                };
            }
            for (ident, g) in &named {
                if !keys.iter().any(|(i, _)| i == ident) {
                    let mut limits = default;
                    limits.global = *g;
                    keys.push((*ident, limits));
                }
            }
            if keys.len() > MAX_OVERRIDES {
                return Err(Error::invalid(format!(
                    "the record's keys and the host's overrides are {}, more than a keyed \
                     task's {MAX_OVERRIDES}",
                    keys.len()
                )));
            }
            default.validate()?;
            for (_, l) in &keys {
                l.validate()?;
            }
            default.store(&c.default, clock, overflow_admit);
            super::config::write_overrides(c, clock, &keys);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyRate;
    use std::time::Duration;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_record_reads_back_what_it_wrote() {
        let g = KeyGlobal::new(KeyRate::parse("100/s").unwrap())
            .slice(Duration::from_millis(500))
            .local(3)
            .fallback(crate::Fallback::Deny);
        let record = KeyRecord {
            default: Some(KeyGlobal::new(KeyRate::parse("10/m").unwrap())),
            overrides: vec![("acme".into(), Some(g)), ("free".into(), None)],
        };
        let mut f = record.fields();
        f.push(("version".into(), "17".into()));
        f.push(("a later release's field".into(), "x".into()));
        assert_eq!(KeyRecord::parse(&f).unwrap(), (17, record.clone()));
    }

    #[test]
    fn a_hostile_record_is_refused_with_the_field_to_blame() {
        let ok = [("version", "5"), ("key_global", "10/s 1s 1 share")];
        assert!(KeyRecord::parse(&fields(&ok)).is_ok());
        for (bad, why) in [
            (vec![("key_global", "10/s 1s 1 share")], "version"),
            (vec![("version", "0"), ("key_global", "none")], "version"),
            (vec![("version", "x"), ("key_global", "none")], "version"),
            (
                vec![("version", "9007199254740993"), ("key_global", "none")],
                "version",
            ),
            (vec![("version", "5")], "no key_global"),
            (vec![("version", "5"), ("key_global", "10/s")], "key_global"),
            (
                vec![("version", "5"), ("key_global", "10/s 1s 32 share")],
                "local",
            ),
            (
                vec![("version", "5"), ("key_global", "10/s 1s 1 maybe")],
                "fallback",
            ),
            (
                vec![("version", "5"), ("key_global", "-1/s 1s 1 share")],
                "key_global",
            ),
            (
                vec![("version", "5"), ("key_global", "1/h 1ms 1 share")],
                "key_global",
            ),
            (
                vec![("version", "5"), ("key_global", "1/h 1s 1 share")],
                "permits",
            ),
            (
                vec![
                    ("version", "5"),
                    ("key_global", "none"),
                    ("override:", "none"),
                ],
                "1 to",
            ),
        ] {
            let err = KeyRecord::parse(&fields(&bad)).unwrap_err();
            assert!(err.message().contains(why), "{bad:?}: {err}");
        }
        let many: Vec<(String, String)> = (0..=MAX_OVERRIDES)
            .map(|i| (format!("{PREFIX}k{i}"), "none".to_string()))
            .chain(fields(&ok))
            .collect();
        assert!(
            KeyRecord::parse(&many)
                .unwrap_err()
                .message()
                .contains("overrides")
        );
    }
}
