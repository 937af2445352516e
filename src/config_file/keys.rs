//! A task's limits per caller in the file:
//!
//! ```toml
//! [tasks.api]
//! key_rate = "10/second;1000/hour"   # every key; up to three rates
//! key_max_concurrency = 5            # per key in flight on the host
//! key_global = "5000/hour"           # every key across the fleet
//! key_global_slice = "1m"            # its slices (default: its period)
//! key_global_local = 1               # per host and slice without the store
//! key_global_fallback = "share"      # or "local", "deny": the store failing
//! key_capacity = 100000              # keys the key file holds (at its making)
//! key_shadow = true                  # count "would refuse", admit
//! key_overflow = "shared"            # or "admit"
//! [tasks.api.key_overrides]
//! "premium-key" = { key_rate = "100/second", key_global = "50000/hour" }
//! "internal" = "unlimited"
//! "abuser" = "blocked"
//! ```
//!
//! Applied host-wide like the task's other fields; the file's overrides
//! replace the task's overrides as a whole (the file wins over code). A
//! refusal names the field, at its own line where the file says it.

use std::collections::BTreeMap;

use toml::Spanned;

use crate::error::{Error, Result};
use crate::keyed::{KeyConfig, KeyGlobal, KeyLimits, KeyOverflow};
use crate::task::Task;

/// An override as written: `"unlimited"`, `"blocked"`, rates, or a table
/// of `key_rate`, `key_max_concurrency`, `key_shadow` and the `key_global`
/// fields. Read from the TOML value by hand: serde's untagged enums buffer
/// and recurse, and the file is also read on the reaper thread's small
/// stack.
pub(crate) type OverrideField = Spanned<toml::Value>;

/// The key fields of one task, as read.
pub(super) struct Fields {
    pub rate: Option<Spanned<String>>,
    pub max_concurrency: Option<u32>,
    pub capacity: Option<u32>,
    pub shadow: Option<bool>,
    pub overflow: Option<String>,
    pub global: GlobalFields<Spanned<String>, Spanned<i64>>,
    pub overrides: Option<BTreeMap<String, OverrideField>>,
}

/// The `key_global` fields of a task (spanned) or of an override.
#[derive(Default)]
pub(super) struct GlobalFields<S, N> {
    pub rate: Option<S>,
    pub slice: Option<S>,
    pub local: Option<N>,
    pub fallback: Option<S>,
}

/// A refusal of a task's key fields: where (`None`: the task's section),
/// the field's path after the task (`.key_global_slice`), and why.
pub(super) type Refusal = (Option<usize>, String, Error);

/// A task's limits per caller, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct KeySection {
    pub config: KeyConfig,
    /// Named keys and their limits, in the file's order of names.
    pub overrides: Vec<(String, KeyLimits)>,
}

/// A key's global rate from its fields, or the field that is wrong and
/// why. The other fields without `key_global` are refused, never ignored.
fn global(
    f: &GlobalFields<&str, i64>,
) -> std::result::Result<Option<KeyGlobal>, (&'static str, Error)> {
    let Some(rate) = f.rate else {
        for (field, set) in [
            ("key_global_slice", f.slice.is_some()),
            ("key_global_local", f.local.is_some()),
            ("key_global_fallback", f.fallback.is_some()),
        ] {
            if set {
                return Err((
                    field,
                    Error::invalid(format!(
                        "{field} needs key_global, the key's rate across the fleet \
                         (e.g. key_global = \"1000/hour\")"
                    )),
                ));
            }
        }
        return Ok(None);
    };
    KeyGlobal::from_fields(rate, f.slice, f.local, f.fallback).map(Some)
}

fn limits(
    rate: Option<&str>,
    cap: Option<u32>,
    shadow: Option<bool>,
    global: Option<KeyGlobal>,
) -> Result<KeyLimits> {
    let mut l = match rate {
        Some(r) => KeyLimits::parse_rates(r)?,
        None => KeyLimits::new(),
    };
    l.max_concurrency = cap.unwrap_or(0);
    l.shadow = shadow.unwrap_or(false);
    l.global = global;
    l.validate()?;
    Ok(l)
}

/// An override's limits, or the refusal: the field (if one is to blame)
/// and why.
fn override_limits(v: &toml::Value) -> std::result::Result<KeyLimits, (Option<&str>, Error)> {
    let whole = |e| (None, e);
    match v {
        toml::Value::String(w) => match w.as_str() {
            "unlimited" => Ok(KeyLimits::unlimited()),
            "blocked" => Ok(KeyLimits::blocked()),
            rates => limits(Some(rates), None, None, None).map_err(whole),
        },
        toml::Value::Table(t) => {
            let mut rate = None;
            let mut cap = None;
            let mut shadow = None;
            let mut g = GlobalFields::default();
            for (k, v) in t {
                let field = |e| (Some(k.as_str()), e);
                match (k.as_str(), v) {
                    ("key_rate", toml::Value::String(r)) => rate = Some(r.as_str()),
                    ("key_max_concurrency", toml::Value::Integer(0)) => {
                        return Err(field(crate::task::zero_cap("key_max_concurrency")));
                    }
                    ("key_max_concurrency", toml::Value::Integer(n)) => {
                        cap = Some(u32::try_from(*n).map_err(|_| {
                            field(Error::invalid(format!(
                                "key_max_concurrency {n} is out of range"
                            )))
                        })?)
                    }
                    ("key_max_concurrency", toml::Value::String(w)) => {
                        let c = crate::task::parse_cap("key_max_concurrency", w).map_err(field)?;
                        cap = Some(if c == crate::task::NO_CAP { 0 } else { c });
                    }
                    ("key_shadow", toml::Value::Boolean(b)) => shadow = Some(*b),
                    ("key_global", toml::Value::String(r)) => g.rate = Some(r.as_str()),
                    ("key_global_slice", toml::Value::String(s)) => g.slice = Some(s.as_str()),
                    ("key_global_local", toml::Value::Integer(n)) => g.local = Some(*n),
                    ("key_global_fallback", toml::Value::String(f)) => {
                        g.fallback = Some(f.as_str())
                    }
                    _ => {
                        return Err(field(Error::invalid(format!(
                            "unknown or mistyped field {k:?} (key_rate = \"...\", \
                             key_max_concurrency = N or \"none\", key_shadow = true|false, \
                             key_global = \"...\", key_global_slice = \"1s\", \
                             key_global_local = N, key_global_fallback = \"share\"|\"local\"|\"deny\")"
                        ))));
                    }
                }
            }
            let global = global(&g).map_err(|(f, e)| (Some(f), e))?;
            limits(rate, cap, shadow, global).map_err(whole)
        }
        _ => Err(whole(Error::invalid(
            "\"unlimited\", \"blocked\", rates such as \"10/second\", or a table".to_string(),
        ))),
    }
}

pub(super) fn section(f: Fields) -> std::result::Result<Option<KeySection>, Refusal> {
    let g = &f.global;
    let any = f.rate.is_some()
        || f.max_concurrency.is_some()
        || f.capacity.is_some()
        || f.shadow.is_some()
        || f.overflow.is_some()
        || g.rate.is_some()
        || g.slice.is_some()
        || g.local.is_some()
        || g.fallback.is_some()
        || f.overrides.is_some();
    if !any {
        return Ok(None);
    }
    let whole = |e: Error| (None, String::new(), e);
    let overflow = match f.overflow.as_deref() {
        None | Some("shared") => KeyOverflow::Shared,
        Some("admit") => KeyOverflow::Admit,
        Some(other) => {
            return Err(whole(Error::invalid(format!(
                "key_overflow must be \"shared\" or \"admit\", not {other:?}"
            ))));
        }
    };
    let capacity = f.capacity.unwrap_or(crate::keyed::DEFAULT_KEY_CAPACITY);
    if !(1..=crate::keyed::MAX_KEY_CAPACITY).contains(&capacity) {
        return Err(whole(Error::invalid(format!(
            "key_capacity must be between 1 and {}, not {capacity}",
            crate::keyed::MAX_KEY_CAPACITY
        ))));
    }
    let text = GlobalFields {
        rate: g.rate.as_ref().map(|s| s.get_ref().as_str()),
        slice: g.slice.as_ref().map(|s| s.get_ref().as_str()),
        local: g.local.as_ref().map(|n| *n.get_ref()),
        fallback: g.fallback.as_ref().map(|s| s.get_ref().as_str()),
    };
    let global = global(&text).map_err(|(field, e)| {
        let at = match field {
            "key_global_slice" => g.slice.as_ref().map(|s| s.span().start),
            "key_global_local" => g.local.as_ref().map(|n| n.span().start),
            "key_global_fallback" => g.fallback.as_ref().map(|s| s.span().start),
            _ => g.rate.as_ref().map(|s| s.span().start),
        };
        (at, format!(".{field}"), e)
    })?;
    let rate = f.rate.as_ref().map(|r| r.get_ref().as_str());
    if let Some(r) = &f.rate {
        KeyLimits::parse_rates(r.get_ref())
            .map_err(|e| (Some(r.span().start), ".key_rate".to_string(), e))?;
    }
    let config = KeyConfig {
        limits: limits(rate, f.max_concurrency, f.shadow, global).map_err(whole)?,
        capacity,
        overflow,
    };
    let mut overrides = Vec::new();
    for (key, o) in f.overrides.unwrap_or_default() {
        let at = o.span().start;
        let path = format!(".key_overrides.{}", crate::words::echo(&key));
        if key.len() > crate::keyed::MAX_KEY_LEN {
            return Err((
                Some(at),
                ".key_overrides".to_string(),
                Error::invalid(format!(
                    "a key of {} bytes is longer than {}",
                    key.len(),
                    crate::keyed::MAX_KEY_LEN
                )),
            ));
        }
        let l = override_limits(o.get_ref()).map_err(|(field, e)| {
            let path = match field {
                Some(f) => format!("{path}.{f}"),
                None => path.clone(),
            };
            (Some(at), path, e)
        })?;
        overrides.push((key, l));
    }
    if overrides.len() > crate::format::MAX_OVERRIDES {
        return Err((
            None,
            ".key_overrides".to_string(),
            Error::invalid(format!(
                "at most {} keys, not {}",
                crate::format::MAX_OVERRIDES,
                overrides.len()
            )),
        ));
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
