//! `set`'s fields of limits per caller (`key_*`): the default key limits,
//! their global rate, and overrides. Parsed whole before anything is
//! written; `--dry-run` says old -> new for each and writes nothing.

use std::path::Path;
use std::time::Duration;

use flowctrl::{
    Fallback, KeyConfig, KeyGlobal, KeyLimits, KeyOverflow, KeyRate, MAX_KEY_LEN, NO_CAP,
    TableSnapshot, TaskConfig,
};

use crate::set::{attach, cap, count};
use crate::{Result, invalid, usage, usage_of};

/// The key fields of `set`, parsed: `key_rate="10/s;1000/h"`,
/// `key_max_concurrency=N|none|off`, `key_shadow=true|false`,
/// `key_overflow=shared|admit`, `key_capacity=N` (a new key file only),
/// `key_global=RATE|none`, `key_global_slice=1m`, `key_global_local=N`,
/// `key_global_fallback=share|local|deny`, and
/// `key_override.NAME=RATES|unlimited|blocked|none` (none: removed).
#[derive(Default)]
pub(crate) struct KeyEdits {
    /// The default's fields given, in order.
    given: Vec<String>,
    rates: Option<KeyLimits>,
    /// 0: no cap per key.
    max_concurrency: Option<u32>,
    shadow: Option<bool>,
    overflow: Option<KeyOverflow>,
    capacity: Option<u32>,
    /// `key_global`: `Some(None)` takes it away.
    global: Option<Option<KeyRate>>,
    global_slice: Option<Duration>,
    global_local: Option<u32>,
    global_fallback: Option<Fallback>,
    overrides: Vec<(String, Option<KeyLimits>)>,
}

impl KeyEdits {
    pub(crate) fn parse(fields: &[String]) -> Result<Self> {
        let mut edits = Self::default();
        let mut seen: Vec<&str> = Vec::new();
        for field in fields {
            let Some((key, value)) = field.split_once('=') else {
                return Err(usage(format!("{field:?} is not KEY=VALUE")));
            };
            if seen.contains(&key) {
                return Err(usage(format!("{key} is given twice")));
            }
            seen.push(key);
            let value = value.trim();
            match key {
                "key_rate" => {
                    edits.rates = Some(KeyLimits::parse_rates(value).map_err(usage_of)?);
                }
                "key_max_concurrency" => {
                    let c = flowctrl::parse_cap(key, value).map_err(usage_of)?;
                    edits.max_concurrency = Some(if c == NO_CAP { 0 } else { c });
                }
                "key_shadow" => {
                    edits.shadow = Some(
                        value
                            .parse()
                            .map_err(|_| usage(format!("{key}={value:?} is not true or false")))?,
                    )
                }
                "key_overflow" => {
                    edits.overflow = Some(match value {
                        "shared" => KeyOverflow::Shared,
                        "admit" => KeyOverflow::Admit,
                        _ => return Err(usage(format!("{key}={value:?}: shared or admit"))),
                    })
                }
                "key_capacity" => edits.capacity = Some(count(key, value)?),
                "key_global" => {
                    edits.global = Some(match value {
                        "none" => None,
                        rate => Some(KeyRate::parse(rate).map_err(usage_of)?),
                    })
                }
                "key_global_slice" => {
                    edits.global_slice = Some(KeyGlobal::parse_slice(value).map_err(usage_of)?)
                }
                "key_global_local" => edits.global_local = Some(count(key, value)?),
                "key_global_fallback" => {
                    edits.global_fallback =
                        Some(KeyGlobal::parse_fallback(value).map_err(usage_of)?)
                }
                _ => match key.strip_prefix("key_override.") {
                    Some(k) if !k.is_empty() => {
                        let limits = match value {
                            "none" => None,
                            "unlimited" => Some(KeyLimits::unlimited()),
                            "blocked" => Some(KeyLimits::blocked()),
                            rates => Some(KeyLimits::parse_rates(rates).map_err(usage_of)?),
                        };
                        edits.overrides.push((k.to_string(), limits));
                        continue;
                    }
                    _ => {
                        return Err(usage(format!(
                            "unknown key {key:?}; the key fields are key_rate, \
                             key_max_concurrency, key_shadow, key_overflow, key_capacity, \
                             key_global, key_global_slice, key_global_local, \
                             key_global_fallback, key_override.NAME"
                        )));
                    }
                },
            }
            edits.given.push(key.to_string());
        }
        if edits.global == Some(None) && edits.global_fields() {
            return Err(usage(
                "key_global=none takes the keys' global rate away: give no \
                 key_global_slice, key_global_local or key_global_fallback with it",
            ));
        }
        Ok(edits)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.given.is_empty() && self.overrides.is_empty()
    }

    /// Refuses edits of the keys' global rates while the store's record
    /// (version `record`, 0: none) owns them: the host would adopt the
    /// record again within a second, undoing them.
    fn not_the_records(&self, name: &str, record: u64) -> Result<()> {
        let global = self.global.is_some()
            || self.global_fields()
            || self
                .overrides
                .iter()
                .any(|(_, l)| l.as_ref().is_some_and(|l| l.global.is_some()));
        if record != 0 && global {
            return Err(crate::invalid(format!(
                "task {name:?}'s keys' global rates come from the store's record (version \
                 {record}): change them there (flowctrl manage's file, or \
                 Store::set_key_record)"
            )));
        }
        Ok(())
    }

    /// Whether a field of the global rate other than `key_global` is given.
    fn global_fields(&self) -> bool {
        self.global_slice.is_some() || self.global_local.is_some() || self.global_fallback.is_some()
    }

    /// The task's default key configuration with these edits over
    /// `current` (`None`: the task has no key limits yet).
    fn apply(&self, name: &str, current: Option<&KeyConfig>) -> Result<KeyConfig> {
        let mut config = current.cloned().unwrap_or_default();
        if let Some(rates) = &self.rates {
            let mut limits = KeyLimits::new()
                .max_concurrency(config.limits.max_concurrency)
                .shadow(config.limits.shadow);
            for r in rates.rates() {
                limits = limits.rate(*r);
            }
            // The global rate is a field of its own: kept.
            limits.global = config.limits.global;
            config.limits = limits;
        }
        if let Some(c) = self.max_concurrency {
            config.limits.max_concurrency = c;
        }
        if let Some(s) = self.shadow {
            config.limits.shadow = s;
        }
        if let Some(o) = self.overflow {
            config.overflow = o;
        }
        if let Some(keys) = self.capacity {
            if current.is_some_and(|c| c.capacity as u64 != (keys as u64).div_ceil(8) * 8) {
                return Err(invalid(format!(
                    "task {name:?} holds {} keys: key_capacity is set when its key file \
                     is made",
                    current.map_or(0, |c| c.capacity)
                )));
            }
            config.capacity = keys;
        }
        config.limits.global = self.global_over(name, config.limits.global)?;
        Ok(config)
    }

    /// The keys' global rate with the `key_global*` fields over `current`:
    /// a field not given keeps its value.
    fn global_over(&self, name: &str, current: Option<KeyGlobal>) -> Result<Option<KeyGlobal>> {
        let mut g = match (self.global, current) {
            (Some(None), _) => return Ok(None),
            (Some(Some(rate)), Some(c)) => KeyGlobal { rate, ..c },
            (Some(Some(rate)), None) => KeyGlobal::new(rate),
            (None, Some(c)) => c,
            (None, None) if self.global_fields() => {
                return Err(invalid(format!(
                    "task {name:?}'s keys have no global rate: give key_global=RATE with \
                     key_global_slice, key_global_local or key_global_fallback"
                )));
            }
            (None, None) => return Ok(None),
        };
        if let Some(slice) = self.global_slice {
            g.slice = Some(slice);
        }
        if let Some(local) = self.global_local {
            g.local = local;
        }
        if let Some(fallback) = self.global_fallback {
            g.fallback = fallback;
        }
        Ok(Some(g))
    }
}

/// `set --dry-run` of the key fields: each field given, old -> new,
/// checked as setting them would check them.
pub(crate) fn preview(view: &TableSnapshot, name: &str, keys: &KeyEdits) -> Result {
    let (current, after) = check(view, name, keys)?;
    let before = current.unwrap_or_default();
    let (old_g, new_g) = (before.limits.global, after.limits.global);
    let mut list = Vec::new();
    for key in &keys.given {
        let (old, new) = match key.as_str() {
            "key_rate" => (key_rates(&before.limits), key_rates(&after.limits)),
            "key_max_concurrency" => (
                cap(before.limits.max_concurrency),
                cap(after.limits.max_concurrency),
            ),
            "key_shadow" => (
                before.limits.shadow.to_string(),
                after.limits.shadow.to_string(),
            ),
            "key_overflow" => (
                overflow(before.overflow).into(),
                overflow(after.overflow).into(),
            ),
            "key_capacity" => (
                current.map_or("-".into(), |c| c.capacity.to_string()),
                after.capacity.to_string(),
            ),
            "key_global" => (global_text(old_g), global_text(new_g)),
            "key_global_slice" => (
                old_g.map_or("none".into(), |g| g.slice_text()),
                new_g.map_or("none".into(), |g| g.slice_text()),
            ),
            "key_global_local" => (
                old_g.map_or("none".into(), |g| g.local.to_string()),
                new_g.map_or("none".into(), |g| g.local.to_string()),
            ),
            "key_global_fallback" => (
                old_g.map_or("none".into(), |g| g.fallback.to_string()),
                new_g.map_or("none".into(), |g| g.fallback.to_string()),
            ),
            _ => continue,
        };
        list.push(format!("{key} {old} -> {new}"));
    }
    for (k, limits) in &keys.overrides {
        let new = match limits {
            None => "none (removed)".to_string(),
            Some(l) => override_text(l),
        };
        list.push(format!("key_override.{k} -> {new}"));
    }
    crate::text::line(format_args!(
        "task {name:?}: {} (dry run: nothing changed)",
        list.join(", ")
    ));
    Ok(())
}

/// Writes the key fields: the default's, then the overrides.
/// What `keys` would make of the task's key configuration, checked as a
/// write would check it (before any is made): (current, after).
pub(crate) fn check(
    view: &TableSnapshot,
    name: &str,
    keys: &KeyEdits,
) -> Result<(Option<KeyConfig>, KeyConfig)> {
    let current = view.key_config(name)?;
    let after = keys.apply(name, current.as_ref())?;
    keys.not_the_records(name, view.key_counters(name)?.map_or(0, |s| s.record))?;
    after.limits.validate()?;
    for (key, limits) in &keys.overrides {
        if key.len() > MAX_KEY_LEN {
            return Err(invalid(format!(
                "key_override.{}...: a key is at most {MAX_KEY_LEN} bytes",
                key.chars().take(16).collect::<String>()
            )));
        }
        if let Some(l) = limits {
            l.validate()?;
        }
    }
    Ok((current, after))
}

pub(crate) fn set(path: &Path, name: &str, edits: &KeyEdits) -> Result {
    let table = attach(path)?;
    let task = table.task(name, &TaskConfig::new())?;
    let current = task.key_config()?;
    let config = edits.apply(name, current.as_ref())?;
    edits.not_the_records(name, task.key_record_versions()?.map_or(0, |v| v.0))?;
    if !edits.given.is_empty() || current.is_none() {
        task.set_keys(&config)?;
    }
    for (k, l) in &edits.overrides {
        task.set_key_override(k.as_bytes(), l.as_ref())?;
    }
    let after = task.key_config()?.unwrap_or_default();
    let rates: Vec<String> = after.limits.rates().map(|r| r.to_string()).collect();
    println!(
        "task {name:?}: key_rate {:?}, key_max_concurrency {}, key_shadow {}, key_overflow {}, \
         key_global {}, {} keys{}",
        rates.join(";"),
        after.limits.max_concurrency,
        after.limits.shadow,
        overflow(after.overflow),
        global_text(after.limits.global),
        after.capacity,
        if edits.overrides.is_empty() {
            String::new()
        } else {
            format!("; {} override(s) set", edits.overrides.len())
        }
    );
    Ok(())
}

fn key_rates(l: &KeyLimits) -> String {
    let rates: Vec<String> = l.rates().map(|r| r.to_string()).collect();
    format!("{:?}", rates.join(";"))
}

fn overflow(o: KeyOverflow) -> &'static str {
    match o {
        KeyOverflow::Shared => "shared",
        KeyOverflow::Admit => "admit",
    }
}

fn override_text(l: &KeyLimits) -> String {
    if *l == KeyLimits::unlimited() {
        "unlimited".into()
    } else if *l == KeyLimits::blocked() {
        "blocked".into()
    } else {
        key_rates(l)
    }
}

/// A global rate as `flowctrl keys` and `set` say it: `1000/h slice 1m
/// local 1 fallback share (16 a slice)`, or `none`.
pub(crate) fn global_text(g: Option<KeyGlobal>) -> String {
    match g {
        Some(g) => format!("{g} ({} a slice)", g.permits()),
        None => "none".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split(',').map(str::to_string).collect()
    }

    #[test]
    fn global_fields_parse_merge_and_bad_ones_are_named() {
        let e = KeyEdits::parse(&words(
            "key_global=1000/h,key_global_slice=1m,key_global_local=2,key_global_fallback=deny",
        ))
        .unwrap();
        let g = e.apply("api", None).unwrap().limits.global.unwrap();
        assert_eq!(g.to_string(), "1000/h slice 1m local 2 fallback deny");
        // A field alone changes that field; the rest is kept.
        let current = KeyConfig::new(KeyLimits::new().global(g));
        let e = KeyEdits::parse(&words("key_global_local=5,key_rate=10/s")).unwrap();
        let after = e.apply("api", Some(&current)).unwrap().limits;
        assert_eq!(after.global, Some(g.local(5)));
        assert_eq!(after.rates().count(), 1, "key_rate keeps the global rate");
        let e = KeyEdits::parse(&words("key_global=none")).unwrap();
        assert_eq!(e.apply("api", Some(&current)).unwrap().limits.global, None);
        let e = KeyEdits::parse(&words("key_global_slice=1s")).unwrap();
        let err = e.apply("api", None).unwrap_err().to_string();
        assert!(err.contains("no global rate"), "{err}");
        for (bad, says) in [
            ("key_global=fast", "key rate"),
            ("key_global_slice=1 fortnight", "unknown unit"),
            ("key_global_local=-1", "not a whole number"),
            ("key_global_fallback=5", "\"share\", \"local\" or \"deny\""),
            ("key_global=none,key_global_local=1", "key_global=none"),
            ("key_global=1/s,key_global=2/s", "given twice"),
        ] {
            let err = match KeyEdits::parse(&words(bad)) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("{bad} parsed"),
            };
            assert!(err.contains(says), "{bad}: {err}");
        }
        assert_eq!(
            KeyGlobal::new(KeyRate::per_second(1.0))
                .slice(Duration::from_millis(90_000))
                .slice_text(),
            "90s"
        );
        assert_eq!(
            KeyGlobal::new(KeyRate::per_second(1.0))
                .slice(Duration::from_millis(500))
                .slice_text(),
            "500ms"
        );
        assert_eq!(
            KeyGlobal::new(KeyRate::per_second(1.0))
                .slice(Duration::from_secs(7200))
                .slice_text(),
            "2h"
        );
    }
}
