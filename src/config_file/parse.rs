//! The file's shape (serde, unknown keys refused) and its checks: every
//! task's fields are validated by the same code that validates them in
//! code, and a refusal names the file, the line and the key.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::lines::Lines;
use super::section::{Raw, Section};
use super::{BalancerSection, ConfigFile, TableSection, fnv};
use crate::balance::BalancerConfig;
use crate::error::{Error, Result};
use crate::limit::adaptive::{LimiterConfig, Spec};
use crate::quota::{Fallback, GlobalConfig};
use crate::task::{LocalConfig, NO_CAP, TaskConfig, TaskSettings, zero_cap};
use crate::words::WaitOrder;
use crate::words::echo;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    table: TableFields,
    #[serde(default)]
    tasks: BTreeMap<String, Spanned<TaskFields>>,
    #[serde(default)]
    balancers: BTreeMap<String, Spanned<BalancerFields>>,
    /// `flowctrl manage`'s section: kept for it, not read by hosts.
    manager: Option<Raw>,
}

/// `[table]`: every value with its span, for an error at its line.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TableFields {
    path: Option<Spanned<String>>,
    store: Option<Spanned<String>>,
    key_prefix: Option<Spanned<String>>,
    store_timeout_ms: Option<Spanned<u32>>,
    connect_timeout_ms: Option<Spanned<u32>>,
    probe_interval_ms: Option<Spanned<u32>>,
    host_id: Option<Spanned<String>>,
    capacity: Option<Spanned<u32>>,
    max_processes: Option<Spanned<u32>>,
    lanes: Option<Spanned<u32>>,
    balancers: Option<Spanned<u32>>,
    backends_per_balancer: Option<Spanned<u32>>,
    mode: Option<Spanned<u32>>,
    shared: Option<Spanned<bool>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskFields {
    local_rate: Option<f64>,
    burst: Option<u32>,
    /// A whole number of at least 1, or "none" / "off" (see [`cap`]).
    max_concurrency: Option<Spanned<toml::Value>>,
    wait_order: Option<String>,
    barging: Option<bool>,
    shadow: Option<bool>,
    global_rate: Option<f64>,
    slice_ms: Option<u32>,
    chunk: Option<u32>,
    fallback: Option<FallbackField>,
    global_burst: Option<u32>,
    shards: Option<u32>,
    limiter: Option<String>,
    min_limit: Option<u32>,
    max_limit: Option<u32>,
    initial_limit: Option<u32>,
    /// The manager's: whether it owns the task's thresholds (default: when
    /// the task has a global_rate), and how it moves them.
    managed: Option<bool>,
    policy: Option<Raw>,
    /// Limits per caller (see `keys.rs`).
    key_rate: Option<Spanned<String>>,
    key_max_concurrency: Option<Spanned<toml::Value>>,
    key_capacity: Option<u32>,
    key_shadow: Option<bool>,
    key_overflow: Option<String>,
    key_global: Option<Spanned<String>>,
    key_global_slice: Option<Spanned<String>>,
    key_global_local: Option<Spanned<i64>>,
    key_global_fallback: Option<Spanned<String>>,
    key_overrides: Option<BTreeMap<String, super::keys::OverrideField>>,
}

/// `fallback = "share" | "local" | "deny"` or a number of requests/s.
#[derive(Deserialize)]
#[serde(untagged)]
enum FallbackField {
    Rate(f64),
    Name(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BalancerFields {
    /// `["10.0.0.1:80", ...]` (weight 1) or `[{ address = "...", weight = 2 }]`.
    backends: Option<Vec<BackendField>>,
    decay_ms: Option<u64>,
    failure_penalty_ms: Option<u64>,
    slow_start_ms: Option<u64>,
    default_rtt_ms: Option<u64>,
    retry_ratio: Option<f64>,
    retry_min_per_sec: Option<f64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum BackendField {
    Address(String),
    Weighted(WeightedBackend),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WeightedBackend {
    address: String,
    weight: u32,
}

pub(super) fn parse(path: &Path, text: &str) -> Result<ConfigFile> {
    let lines = Lines::new(path, text);
    let file: File = toml::from_str(text).map_err(|e| {
        // toml's message may quote the value whole: cut, like every echo.
        let message = crate::words::cut(&e.message().trim_end().replace('\n', " "), 200);
        Error::invalid(match e.span() {
            // The line itself names the key a value error is about.
            Some(span) => format!(
                "{}: `{}`: {message}",
                lines.at(span.start),
                line_echo(lines.text_of(span.start).trim())
            ),
            None => format!("{}: {message}", path.display()),
        })
    })?;
    let refuse_field = |section: &str, name: &str, offset: usize, e: Error, field: &str| {
        Error::invalid(format!(
            "{}: {section}.{}{field}: {}",
            lines.at(offset),
            echo(name),
            e.message()
        ))
    };
    let refuse = |section: &str, name: &str, offset: usize, e: Error| {
        refuse_field(section, name, offset, e, "")
    };
    // One clock for every task's checks (a rate's interval in its ticks).
    let clock = crate::clock::Clock::monotonic();
    let mut tasks = BTreeMap::new();
    let mut keys = BTreeMap::new();
    let mut managed = BTreeMap::new();
    for (name, fields) in file.tasks {
        let offset = fields.span().start;
        let mut fields = fields.into_inner();
        let policy = fields
            .policy
            .take()
            .map(|p| Section::new(p, format!("tasks.{}.policy", echo(&name)), &lines));
        managed.insert(
            name.clone(),
            super::Managed {
                at: lines.at(offset),
                managed: fields.managed.take(),
                policy,
            },
        );
        // Caps are checked at their own position: 0 is refused there.
        let at_cap = |key: &str, v: Option<Spanned<toml::Value>>| {
            cap(key, v)
                .map_err(|(offset, e)| refuse_field("tasks", &name, offset, e, &format!(".{key}")))
        };
        let key_cap = at_cap("key_max_concurrency", fields.key_max_concurrency.take())?;
        let task_cap = at_cap("max_concurrency", fields.max_concurrency.take())?;
        let key_fields = super::keys::Fields {
            rate: fields.key_rate.take(),
            // None: no cap per key (the key limits' 0).
            max_concurrency: key_cap.map(|c| if c == NO_CAP { 0 } else { c }),
            capacity: fields.key_capacity.take(),
            shadow: fields.key_shadow.take(),
            overflow: fields.key_overflow.take(),
            global: super::keys::GlobalFields {
                rate: fields.key_global.take(),
                slice: fields.key_global_slice.take(),
                local: fields.key_global_local.take(),
                fallback: fields.key_global_fallback.take(),
            },
            overrides: fields.key_overrides.take(),
        };
        match super::keys::section(key_fields) {
            Ok(Some(k)) => {
                keys.insert(name.clone(), k);
            }
            Ok(None) => {}
            Err((at, field, e)) => {
                return Err(refuse_field(
                    "tasks",
                    &name,
                    at.unwrap_or(offset),
                    e,
                    &field,
                ));
            }
        }
        let config = task_config(fields, task_cap)
            .and_then(|c| {
                crate::words::validate_name(&name, "task name")?;
                // The checks a registration makes, on the defaults below.
                c.over(TaskSettings::default()).limits(&clock)?;
                Ok(c)
            })
            .map_err(|e| refuse("tasks", &name, offset, e))?;
        tasks.insert(name, config);
    }
    let mut balancers = BTreeMap::new();
    for (name, fields) in file.balancers {
        let offset = fields.span().start;
        let section = balancer(fields.into_inner())
            .and_then(|b| {
                crate::words::validate_name(&name, "balancer name")?;
                Ok(b)
            })
            .map_err(|e| refuse("balancers", &name, offset, e))?;
        balancers.insert(name, section);
    }
    let (table, table_at) = table_section(file.table, &lines);
    Ok(ConfigFile {
        path: path.to_path_buf(),
        table,
        table_at,
        tasks,
        keys,
        balancers,
        manager: file
            .manager
            .map(|m| Section::new(m, "[manager]".into(), &lines)),
        managed,
        hash: fnv(text.as_bytes()),
    })
}

/// A line of the file for a message: its first 80 characters (with its
/// length said when longer), control characters escaped.
fn line_echo(line: &str) -> String {
    let mut out: String = line
        .chars()
        .take(80)
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect();
    if line.chars().count() > 80 {
        out.push_str(&format!("… ({} bytes)", line.len()));
    }
    out
}

/// The `[table]` values, and where each set one is ("file:line:column").
fn table_section(
    t: TableFields,
    lines: &Lines<'_>,
) -> (TableSection, BTreeMap<&'static str, String>) {
    let mut at = BTreeMap::new();
    macro_rules! take {
        ($field:ident) => {
            t.$field.map(|v| {
                at.insert(stringify!($field), lines.at(v.span().start));
                v.into_inner()
            })
        };
    }
    let section = TableSection {
        path: take!(path).map(Into::into),
        store: take!(store),
        key_prefix: take!(key_prefix),
        store_timeout_ms: take!(store_timeout_ms),
        connect_timeout_ms: take!(connect_timeout_ms),
        probe_interval_ms: take!(probe_interval_ms),
        host_id: take!(host_id),
        capacity: take!(capacity),
        max_processes: take!(max_processes),
        lanes: take!(lanes),
        balancers: take!(balancers),
        backends_per_balancer: take!(backends_per_balancer),
        mode: take!(mode),
        shared: take!(shared),
    };
    (section, at)
}

/// A cap as the file writes it: a whole number of at least 1, or "none" /
/// "off" ([`NO_CAP`]); 0 and anything else refused with the value's offset.
fn cap(
    key: &str,
    v: Option<Spanned<toml::Value>>,
) -> std::result::Result<Option<u32>, (usize, Error)> {
    let Some(v) = v else { return Ok(None) };
    let offset = v.span().start;
    let parsed = match v.into_inner() {
        toml::Value::Integer(0) => Err(zero_cap(key)),
        toml::Value::Integer(n) => match u32::try_from(n) {
            Ok(n) if n != NO_CAP => Ok(n),
            _ => Err(Error::invalid(format!("{key} {n} is out of range"))),
        },
        toml::Value::String(s) => crate::task::parse_cap(key, &s),
        _ => Err(Error::invalid(format!(
            "{key} must be a whole number of at least 1, or \"none\" / \"off\" (no cap)"
        ))),
    };
    parsed.map(Some).map_err(|e| (offset, e))
}

fn task_config(f: TaskFields, max_concurrency: Option<u32>) -> Result<TaskConfig> {
    Ok(TaskConfig {
        local: LocalConfig {
            local_rate: f.local_rate,
            burst: f.burst,
            max_concurrency,
            wait_order: f.wait_order.as_deref().map(WaitOrder::parse).transpose()?,
            barging: f.barging,
            shadow: f.shadow,
        },
        global: GlobalConfig {
            global_rate: f.global_rate,
            slice_ms: f.slice_ms,
            chunk: f.chunk,
            fallback: match f.fallback {
                None => None,
                Some(FallbackField::Rate(r)) => Some(Fallback::Rate(r)),
                Some(FallbackField::Name(n)) => Some(Fallback::parse(&n)?),
            },
            global_burst: f.global_burst,
            shards: f.shards,
        },
        limiter: LimiterConfig {
            spec: f.limiter.as_deref().map(Spec::parse).transpose()?,
            min_limit: f.min_limit,
            max_limit: f.max_limit,
            initial_limit: f.initial_limit,
        },
    })
}

fn balancer(f: BalancerFields) -> Result<BalancerSection> {
    let d = BalancerConfig::default();
    let ms = |v: Option<u64>, default| v.map_or(default, std::time::Duration::from_millis);
    let config = BalancerConfig {
        decay: ms(f.decay_ms, d.decay),
        failure_penalty: ms(f.failure_penalty_ms, d.failure_penalty),
        slow_start: ms(f.slow_start_ms, d.slow_start),
        default_rtt: ms(f.default_rtt_ms, d.default_rtt),
        retry_ratio: f.retry_ratio.unwrap_or(d.retry_ratio),
        retry_min_per_sec: f.retry_min_per_sec.unwrap_or(d.retry_min_per_sec),
    };
    config.params()?;
    let backends = f.backends.map(|list| {
        list.into_iter()
            .map(|b| match b {
                BackendField::Address(a) => (a, 1),
                BackendField::Weighted(w) => (w.address, w.weight),
            })
            .collect::<Vec<_>>()
    });
    if let Some(list) = &backends {
        let refs: Vec<(&str, u32)> = list.iter().map(|(a, w)| (a.as_str(), *w)).collect();
        crate::balance::validate_backends(&refs)?;
    }
    Ok(BalancerSection { config, backends })
}
