//! A task's limits per caller in the file:
//!
//! ```toml
//! [tasks.api]
//! key_rate = "10/second;1000/hour"   # every key; up to three rates
//! key_max_concurrency = 5            # per key in flight on the host
//! key_capacity = 100000              # keys the key file holds (at its making)
//! key_shadow = true                  # count "would refuse", admit
//! key_overflow = "shared"            # or "admit"
//! [tasks.api.key_overrides]
//! "premium-key" = { key_rate = "100/second" }
//! "internal" = "unlimited"
//! "abuser" = "blocked"
//! ```
//!
//! Applied host-wide like the task's other fields; the file's overrides
//! replace the task's overrides as a whole (the file wins over code).

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::keyed::{KeyConfig, KeyLimits, KeyOverflow};
use crate::task::Task;

/// An override as written: `"unlimited"`, `"blocked"`, rates, or a table
/// of `key_rate`, `key_max_concurrency`, `key_shadow`. Read from the TOML
/// value by hand: serde's untagged enums buffer and recurse, and the file
/// is also read on the reaper thread's small stack.
pub(crate) type OverrideField = toml::Value;

/// The key fields of one task, as read.
pub(super) struct Fields {
    pub rate: Option<String>,
    pub max_concurrency: Option<u32>,
    pub capacity: Option<u32>,
    pub shadow: Option<bool>,
    pub overflow: Option<String>,
    pub overrides: Option<BTreeMap<String, OverrideField>>,
}

/// A task's limits per caller, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct KeySection {
    pub config: KeyConfig,
    /// Named keys and their limits, in the file's order of names.
    pub overrides: Vec<(String, KeyLimits)>,
}

fn limits(rate: Option<&str>, cap: Option<u32>, shadow: Option<bool>) -> Result<KeyLimits> {
    let mut l = match rate {
        Some(r) => KeyLimits::parse_rates(r)?,
        None => KeyLimits::new(),
    };
    l.max_concurrency = cap.unwrap_or(0);
    l.shadow = shadow.unwrap_or(false);
    l.validate()?;
    Ok(l)
}

fn override_limits(v: &toml::Value) -> Result<KeyLimits> {
    match v {
        toml::Value::String(w) => match w.as_str() {
            "unlimited" => Ok(KeyLimits::unlimited()),
            "blocked" => Ok(KeyLimits::blocked()),
            rates => limits(Some(rates), None, None),
        },
        toml::Value::Table(t) => {
            let mut rate = None;
            let mut cap = None;
            let mut shadow = None;
            for (k, v) in t {
                match (k.as_str(), v) {
                    ("key_rate", toml::Value::String(r)) => rate = Some(r.as_str()),
                    ("key_max_concurrency", toml::Value::Integer(0)) => {
                        return Err(crate::task::zero_cap("key_max_concurrency"));
                    }
                    ("key_max_concurrency", toml::Value::Integer(n)) => {
                        cap = Some(u32::try_from(*n).map_err(|_| {
                            Error::invalid(format!("key_max_concurrency {n} is out of range"))
                        })?)
                    }
                    ("key_max_concurrency", toml::Value::String(w)) => {
                        let c = crate::task::parse_cap("key_max_concurrency", w)?;
                        cap = Some(if c == crate::task::NO_CAP { 0 } else { c });
                    }
                    ("key_shadow", toml::Value::Boolean(b)) => shadow = Some(*b),
                    _ => {
                        return Err(Error::invalid(format!(
                            "unknown or mistyped field {k:?} (key_rate = \"...\", \
                             key_max_concurrency = N or \"none\", key_shadow = true|false)"
                        )));
                    }
                }
            }
            limits(rate, cap, shadow)
        }
        _ => Err(Error::invalid(
            "\"unlimited\", \"blocked\", rates such as \"10/second\", or a table".to_string(),
        )),
    }
}

pub(super) fn section(f: Fields) -> Result<Option<KeySection>> {
    let any = f.rate.is_some()
        || f.max_concurrency.is_some()
        || f.capacity.is_some()
        || f.shadow.is_some()
        || f.overflow.is_some()
        || f.overrides.is_some();
    if !any {
        return Ok(None);
    }
    let overflow = match f.overflow.as_deref() {
        None | Some("shared") => KeyOverflow::Shared,
        Some("admit") => KeyOverflow::Admit,
        Some(other) => {
            return Err(Error::invalid(format!(
                "key_overflow must be \"shared\" or \"admit\", not {other:?}"
            )));
        }
    };
    let capacity = f.capacity.unwrap_or(crate::keyed::DEFAULT_KEY_CAPACITY);
    if !(1..=crate::keyed::MAX_KEY_CAPACITY).contains(&capacity) {
        return Err(Error::invalid(format!(
            "key_capacity must be between 1 and {}, not {capacity}",
            crate::keyed::MAX_KEY_CAPACITY
        )));
    }
    let config = KeyConfig {
        limits: limits(f.rate.as_deref(), f.max_concurrency, f.shadow)?,
        capacity,
        overflow,
    };
    let mut overrides = Vec::new();
    for (key, o) in f.overrides.unwrap_or_default() {
        if key.len() > crate::keyed::MAX_KEY_LEN {
            return Err(Error::invalid(format!(
                "key_overrides: a key of {} bytes is longer than {}",
                key.len(),
                crate::keyed::MAX_KEY_LEN
            )));
        }
        let l = override_limits(&o)
            .map_err(|e| Error::invalid(format!("key_overrides.{key:?}: {}", e.message())))?;
        overrides.push((key, l));
    }
    if overrides.len() > crate::format::MAX_OVERRIDES {
        return Err(Error::invalid(format!(
            "key_overrides: at most {} keys, not {}",
            crate::format::MAX_OVERRIDES,
            overrides.len()
        )));
    }
    Ok(Some(KeySection { config, overrides }))
}

/// Gives `task` the section's limits where they differ from the task's;
/// true if anything was written.
pub(crate) fn apply_keys(task: &Task, section: &KeySection) -> Result<bool> {
    let current = task.key_config()?;
    let mut changed = false;
    let wanted = task.normalized_key_limits(&section.config.limits);
    let same = current.is_some_and(|c| c.limits == wanted && c.overflow == section.config.overflow);
    if !same {
        // An existing key file keeps its capacity: compare by what it holds.
        let config = match current {
            Some(c) => KeyConfig {
                capacity: c.capacity,
                ..section.config
            },
            None => section.config,
        };
        task.set_keys(&config)?;
        changed = true;
    }
    let overrides: Vec<(&[u8], KeyLimits)> = section
        .overrides
        .iter()
        .map(|(k, l)| (k.as_bytes(), *l))
        .collect();
    changed |= task.replace_key_overrides(&overrides)?;
    Ok(changed)
}
