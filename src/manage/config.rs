//! The manager's configuration: the hosts' TOML format, read by the same
//! parser and checks, with a `[manager]` section and, per task, `managed`
//! and a `[tasks."name".policy]`. One file can serve a fleet's hosts and
//! its manager: hosts skip what is the manager's.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::config_file::{ConfigFile, Section};
use crate::error::{Error, Result};
use crate::format::MAX_SLICE_QUOTA;
use crate::keyed::KeyRecord;
use crate::quota::{GlobalSettings, StoreOptions};

/// What `flowctrl manage` runs by.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagerConfig {
    /// The fleet's store (a Redis URL is required) and key prefix.
    pub store: StoreOptions,
    /// This instance's name in the lease (default `<hostname>-<pid>`).
    pub id: String,
    /// The lease's TTL: a standby takes over within 2 × this of the active
    /// manager's death (default 3 s).
    pub lease: Duration,
    /// Slices written ahead, at least 2 (default); raised to cover 2 ×
    /// the lease, so a failover never leaves a slice unwritten.
    pub ahead: u32,
    /// Alarm when a host's clock is this far off the store's (50 ms).
    pub skew_alarm: Duration,
    /// Alarm when a host that pulled stays silent this long (10 s).
    pub silent_alarm: Duration,
    /// The tasks whose thresholds the manager owns.
    pub tasks: BTreeMap<String, ManagedTask>,
    /// The keyed tasks whose keys' global rates the manager owns: their
    /// `key_global` fields, the overrides' included.
    pub keys: BTreeMap<String, KeyRecord>,
}

/// One managed task: its global numbers and how its threshold may move.
#[derive(Clone, Debug, PartialEq)]
pub struct ManagedTask {
    pub global: GlobalSettings,
    pub policy: Option<Policy>,
}

/// A dynamic threshold: bounds and targets. The threshold moves
/// only within `[min_rate, max_rate]`, once per slice, judged on the last
/// full slice that ran with it (see `manage::policy`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    pub min_rate: f64,
    pub max_rate: f64,
    /// Target: dropped ÷ (success + dropped) at most this (AIMD).
    pub dropped_ratio: Option<f64>,
    /// Target: the fleet's p99 round-trip at most this (a gradient).
    pub p99: Option<Duration>,
    /// Factor of a decrease beyond what the signal asks: below 1 leaves
    /// headroom under the measured capacity (default 1: none).
    pub backoff: f64,
}

/// `[manager]`'s values, each with where it is.
#[derive(Default)]
struct ManagerFields {
    id: Option<(String, String)>,
    lease_ms: Option<(u64, String)>,
    ahead: Option<(u32, String)>,
    skew_alarm_ms: Option<(u64, String)>,
    silent_alarm_ms: Option<(u64, String)>,
}

impl ManagerFields {
    const KEYS: [&str; 5] = [
        "id",
        "lease_ms",
        "ahead",
        "skew_alarm_ms",
        "silent_alarm_ms",
    ];

    fn read(section: &Section) -> Result<Self> {
        let mut f = Self::default();
        for e in &section.entries {
            let at = e.value_at.clone();
            match e.key.as_str() {
                "id" => f.id = Some((e.get(section)?, at)),
                "lease_ms" => f.lease_ms = Some((e.get(section)?, at)),
                "ahead" => f.ahead = Some((e.get(section)?, at)),
                "skew_alarm_ms" => f.skew_alarm_ms = Some((e.get(section)?, at)),
                "silent_alarm_ms" => f.silent_alarm_ms = Some((e.get(section)?, at)),
                _ => return Err(section.unknown(e, &Self::KEYS)),
            }
        }
        Ok(f)
    }
}

/// A task's `policy` section's values.
struct PolicyFields {
    min_rate: f64,
    max_rate: f64,
    dropped_ratio: Option<f64>,
    p99_ms: Option<f64>,
    backoff: Option<f64>,
}

impl PolicyFields {
    const KEYS: [&str; 5] = ["min_rate", "max_rate", "dropped_ratio", "p99_ms", "backoff"];

    fn read(section: &Section) -> Result<Self> {
        let (mut min, mut max) = (None, None);
        let mut f = Self {
            min_rate: 0.0,
            max_rate: 0.0,
            dropped_ratio: None,
            p99_ms: None,
            backoff: None,
        };
        for e in &section.entries {
            match e.key.as_str() {
                "min_rate" => min = Some(e.get(section)?),
                "max_rate" => max = Some(e.get(section)?),
                "dropped_ratio" => f.dropped_ratio = Some(e.get(section)?),
                "p99_ms" => f.p99_ms = Some(e.get(section)?),
                "backoff" => f.backoff = Some(e.get(section)?),
                _ => return Err(section.unknown(e, &Self::KEYS)),
            }
        }
        let missing = |key: &str| {
            Error::invalid(format!(
                "{}: {}: missing key {key}",
                section.at, section.name
            ))
        };
        f.min_rate = min.ok_or_else(|| missing("min_rate"))?;
        f.max_rate = max.ok_or_else(|| missing("max_rate"))?;
        Ok(f)
    }
}

impl ManagerConfig {
    /// Reads and checks the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        Self::from_file(&ConfigFile::load(path)?)
    }

    /// Parses and checks `text` as the file at `path` would be.
    pub fn parse(path: &Path, text: &str) -> Result<Self> {
        Self::from_file(&ConfigFile::parse(path, text)?)
    }

    /// The manager's configuration in a parsed file, checked as `flowctrl
    /// manage` checks it: what `flowctrl config check` runs too. The
    /// `[table]` section is checked as a table's open checks it (the
    /// store URL, key prefix, timeouts, ...).
    pub fn from_file(file: &ConfigFile) -> Result<Self> {
        let shown = file.path.display();
        let fields = match &file.manager {
            Some(section) => ManagerFields::read(section)?,
            None => ManagerFields::default(),
        };
        let t = &file.table;
        let checked = crate::table::TableOptions::from_config(file)?.store;
        let ms = |v: Option<u32>, d: Duration| v.map_or(d, |ms| Duration::from_millis(ms as u64));
        let store = StoreOptions {
            // The manager is off the request path: a slow store is waited for.
            timeout: ms(t.store_timeout_ms, Duration::from_millis(500)),
            connect_timeout: ms(t.connect_timeout_ms, Duration::from_millis(500)),
            ..checked
        };
        if store.url.is_none() {
            return Err(Error::invalid(format!(
                "{shown}: [table] store: the manager needs the fleet's Redis URL"
            )));
        }
        store.check()?;
        let section_at = file
            .manager
            .as_ref()
            .map_or_else(|| shown.to_string(), |m| m.at.clone());
        let bad = |at: &Option<String>, what: String| {
            Error::invalid(format!(
                "{}: [manager] {what}",
                at.as_deref().unwrap_or(&section_at)
            ))
        };
        let (lease_ms, lease_at) = fields
            .lease_ms
            .map_or((3000, None), |(v, at)| (v, Some(at)));
        if !(300..=600_000).contains(&lease_ms) {
            return Err(bad(
                &lease_at,
                format!("lease_ms must be 300..=600000, not {lease_ms}"),
            ));
        }
        let lease = Duration::from_millis(lease_ms);
        let (ahead, ahead_at) = fields.ahead.map_or((2, None), |(v, at)| (v, Some(at)));
        if !(2..=64).contains(&ahead) {
            return Err(bad(
                &ahead_at,
                format!("ahead must be 2..=64 slices, not {ahead}"),
            ));
        }
        for (key, ms, max) in [
            ("skew_alarm_ms", &fields.skew_alarm_ms, 3_600_000),
            ("silent_alarm_ms", &fields.silent_alarm_ms, 86_400_000),
        ] {
            if let Some((ms, at)) = ms
                && !(1..=max).contains(ms)
            {
                return Err(bad(
                    &Some(at.clone()),
                    format!("{key} must be 1..={max}, not {ms}"),
                ));
            }
        }
        let (id, id_at) = match fields.id {
            Some((id, at)) => (id, Some(at)),
            None => (format!("{}-{}", hostname(), std::process::id()), None),
        };
        crate::words::validate_name(&id, "manager id").map_err(|e| bad(&id_at, e.to_string()))?;
        let mut tasks = BTreeMap::new();
        let mut keys = BTreeMap::new();
        for (name, task) in &file.managed {
            let config = &file.tasks[name];
            let record =
                file.keys.get(name).map(key_record).filter(|r| {
                    r.default.is_some() || r.overrides.iter().any(|(_, g)| g.is_some())
                });
            let here = |what: String| {
                Error::invalid(format!(
                    "{}: tasks.{}: {what}",
                    task.at,
                    crate::words::echo(name)
                ))
            };
            let has_rate = config.global.global_rate.is_some_and(|r| r > 0.0);
            let managed = task.managed.unwrap_or(has_rate || record.is_some());
            match (managed, &task.policy, has_rate) {
                (false, Some(_), _) => {
                    return Err(here(
                        "has a policy but managed = false: a task is managed or not".into(),
                    ));
                }
                (true, Some(_), false) => {
                    return Err(here(
                        "has a policy but no global_rate for it to move (keys' global rates \
                         are written as they are)"
                            .into(),
                    ));
                }
                (true, None, false) if record.is_none() => {
                    return Err(here(
                        "managed, but has no global_rate or key_global for the manager to write"
                            .into(),
                    ));
                }
                (false, None, _) => continue,
                (true, _, _) => {}
            }
            if let Some(record) = record {
                keys.insert(name.clone(), record);
            }
            if !has_rate {
                continue;
            }
            let global = config.global.over(GlobalSettings::default());
            let policy = match &task.policy {
                Some(section) => {
                    Some(policy(PolicyFields::read(section)?, &global).map_err(|e| {
                        Error::invalid(format!("{}: {}: {e}", section.at, section.name))
                    })?)
                }
                None => None,
            };
            tasks.insert(name.clone(), ManagedTask { global, policy });
        }
        if tasks.is_empty() && keys.is_empty() {
            return Err(Error::invalid(format!(
                "{shown}: no task to manage (a task with a global_rate or a key_global is \
                 managed)"
            )));
        }
        Ok(Self {
            store,
            id,
            lease,
            ahead,
            skew_alarm: Duration::from_millis(fields.skew_alarm_ms.map_or(50, |(ms, _)| ms)),
            silent_alarm: Duration::from_millis(
                fields.silent_alarm_ms.map_or(10_000, |(ms, _)| ms),
            ),
            tasks,
            keys,
        })
    }

    /// Slices written ahead for `slice_ms`: `ahead`, or more to outlast a
    /// failover (2 × the lease) with a slice to spare.
    pub fn ahead_for(&self, slice_ms: u32) -> u32 {
        let failover = (2 * self.lease.as_millis() as u64).div_ceil(slice_ms.max(1) as u64);
        self.ahead.max(failover as u32 + 1)
    }
}

/// The record of a keyed task's keys' global rates in its file: the
/// default's, and each override's that differs from it.
fn key_record(section: &crate::config_file::KeySection) -> KeyRecord {
    let default = section.config.limits.global;
    KeyRecord {
        default,
        overrides: section
            .overrides
            .iter()
            .filter(|(_, l)| l.global != default)
            .map(|(k, l)| (k.clone(), l.global))
            .collect(),
    }
}

fn policy(f: PolicyFields, global: &GlobalSettings) -> Result<Policy> {
    let (rate, slice_ms) = (global.global_rate, global.slice_ms);
    let finite = |v: f64| v.is_finite() && v > 0.0;
    if !finite(f.min_rate) || !finite(f.max_rate) {
        return Err(Error::invalid("min_rate and max_rate must be above 0"));
    }
    // A threshold is written as whole permits per slice, 1..=MAX_SLICE_QUOTA:
    // a bound out of that range would be reported but not enforced.
    for (name, bound) in [("min_rate", f.min_rate), ("max_rate", f.max_rate)] {
        let permits = (bound * slice_ms as f64 / 1000.0).floor();
        if !(1.0..=MAX_SLICE_QUOTA as f64).contains(&permits) {
            return Err(Error::invalid(format!(
                "{name} {} × slice_ms {slice_ms} gives {} permits per slice: it must be \
                 1..={MAX_SLICE_QUOTA}",
                crate::words::num(bound),
                crate::words::num(permits)
            )));
        }
    }
    if f.min_rate > f.max_rate {
        return Err(Error::invalid(format!(
            "the bounds are inverted: min_rate {} > max_rate {}",
            crate::words::num(f.min_rate),
            crate::words::num(f.max_rate)
        )));
    }
    if !(f.min_rate..=f.max_rate).contains(&rate) {
        return Err(Error::invalid(format!(
            "global_rate {} is outside [min_rate {}, max_rate {}]",
            crate::words::num(rate),
            crate::words::num(f.min_rate),
            crate::words::num(f.max_rate)
        )));
    }
    if f.dropped_ratio.is_none() && f.p99_ms.is_none() {
        return Err(Error::invalid(
            "a policy needs a target: dropped_ratio, p99_ms or both",
        ));
    }
    if let Some(r) = f.dropped_ratio
        && !(r > 0.0 && r < 1.0)
    {
        return Err(Error::invalid(format!(
            "dropped_ratio must be in (0, 1), not {}",
            crate::words::num(r)
        )));
    }
    if let Some(ms) = f.p99_ms
        && !(ms > 0.0 && ms <= 500.0)
    {
        return Err(Error::invalid(format!(
            "p99_ms must be in (0, 500] (the hosts' sketch tops out near 537 ms), not {}",
            crate::words::num(ms)
        )));
    }
    let backoff = f.backoff.unwrap_or(1.0);
    if !(backoff > 0.0 && backoff <= 1.0) {
        return Err(Error::invalid(format!(
            "backoff must be in (0, 1], not {}",
            crate::words::num(backoff)
        )));
    }
    Ok(Policy {
        min_rate: f.min_rate,
        max_rate: f.max_rate,
        dropped_ratio: f.dropped_ratio,
        p99: f.p99_ms.map(|ms| Duration::from_secs_f64(ms / 1000.0)),
        backoff,
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or_else(|| "manager".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(manager: &str, policy: &str) -> Result<ManagerConfig> {
        let text = format!(
            "[table]\nstore = \"redis://127.0.0.1:1\"\n[manager]\n{manager}\n\
             [tasks.\"api\"]\nglobal_rate = 400\nslice_ms = 100\n\
             [tasks.\"api\".policy]\ndropped_ratio = 0.1\n{policy}\n"
        );
        ManagerConfig::parse(Path::new("m.toml"), &text)
    }

    #[test]
    fn alarms_and_bounds_out_of_range_are_refused() {
        let bounds = "min_rate = 10\nmax_rate = 1000";
        assert!(parse("", bounds).is_ok());
        for (manager, policy, says) in [
            (
                "silent_alarm_ms = 0",
                bounds,
                "silent_alarm_ms must be 1..=86400000, not 0",
            ),
            (
                "skew_alarm_ms = 0",
                bounds,
                "skew_alarm_ms must be 1..=3600000, not 0",
            ),
            (
                "skew_alarm_ms = 18446744073709551",
                bounds,
                "skew_alarm_ms must be 1..=3600000",
            ),
            // 5/s in 100 ms slices: half a permit, written as 1.
            (
                "",
                "min_rate = 5\nmax_rate = 1000",
                "min_rate 5 × slice_ms 100 gives 0",
            ),
            (
                "",
                "min_rate = 10\nmax_rate = 1e12",
                "max_rate 1000000000000 × slice_ms",
            ),
        ] {
            let err = parse(manager, policy).unwrap_err().to_string();
            assert!(err.contains(says), "{manager} {policy}: {err}");
            assert!(err.starts_with("m.toml:"), "{err}");
        }
    }
}
