//! The file's shape (serde, unknown keys refused) and its checks: every
//! task's fields are validated by the same code that validates them in
//! code, and a refusal names the file, the line and the key.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::{BalancerSection, ConfigFile, TableSection, fnv};
use crate::balance::BalancerConfig;
use crate::error::{Error, Result};
use crate::limit::adaptive::{LimiterConfig, Spec};
use crate::quota::{Fallback, GlobalConfig};
use crate::task::{LocalConfig, TaskConfig, TaskSettings};
use crate::words::WaitOrder;

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
    manager: Option<Spanned<toml::Table>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TableFields {
    path: Option<String>,
    store: Option<String>,
    key_prefix: Option<String>,
    store_timeout_ms: Option<u32>,
    connect_timeout_ms: Option<u32>,
    probe_interval_ms: Option<u32>,
    host_id: Option<String>,
    capacity: Option<u32>,
    max_processes: Option<u32>,
    lanes: Option<u32>,
    balancers: Option<u32>,
    backends_per_balancer: Option<u32>,
    mode: Option<u32>,
    shared: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskFields {
    local_rate: Option<f64>,
    burst: Option<u32>,
    max_concurrency: Option<u32>,
    wait_order: Option<String>,
    barging: Option<bool>,
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
    policy: Option<Spanned<toml::Table>>,
    /// Limits per caller (see `keys.rs`).
    key_rate: Option<String>,
    key_max_concurrency: Option<u32>,
    key_capacity: Option<u32>,
    key_shadow: Option<bool>,
    key_overflow: Option<String>,
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

/// "file:line:column" of a byte offset.
fn at(path: &Path, text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("{}:{line}:{column}", path.display())
}

pub(super) fn parse(path: &Path, text: &str) -> Result<ConfigFile> {
    let file: File = toml::from_str(text).map_err(|e| {
        let message = e.message().trim_end();
        Error::invalid(match e.span() {
            // The line itself names the key a value error is about.
            Some(span) => {
                let start = text[..span.start.min(text.len())]
                    .rfind('\n')
                    .map_or(0, |i| i + 1);
                let line = text[start..].lines().next().unwrap_or("").trim();
                format!("{}: `{line}`: {message}", at(path, text, span.start))
            }
            None => format!("{}: {message}", path.display()),
        })
    })?;
    let refuse = |section: &str, name: &str, offset: usize, e: Error| {
        Error::invalid(format!(
            "{}: {section}.{name:?}: {}",
            at(path, text, offset),
            e.message()
        ))
    };
    let mut tasks = BTreeMap::new();
    let mut keys = BTreeMap::new();
    let mut managed = BTreeMap::new();
    for (name, fields) in file.tasks {
        let offset = fields.span().start;
        let mut fields = fields.into_inner();
        let policy = fields.policy.take().map(|p| {
            let at = at(path, text, p.span().start);
            (at, p.into_inner())
        });
        managed.insert(
            name.clone(),
            super::Managed {
                at: at(path, text, offset),
                managed: fields.managed.take(),
                policy,
            },
        );
        let key_fields = super::keys::Fields {
            rate: fields.key_rate.take(),
            max_concurrency: fields.key_max_concurrency.take(),
            capacity: fields.key_capacity.take(),
            shadow: fields.key_shadow.take(),
            overflow: fields.key_overflow.take(),
            overrides: fields.key_overrides.take(),
        };
        match super::keys::section(key_fields) {
            Ok(Some(k)) => {
                keys.insert(name.clone(), k);
            }
            Ok(None) => {}
            Err(e) => return Err(refuse("tasks", &name, offset, e)),
        }
        let config = task_config(fields)
            .and_then(|c| {
                crate::words::validate_name(&name, "task name")?;
                // The checks a registration makes, on the defaults below.
                c.over(TaskSettings::default())
                    .limits(&crate::clock::Clock::monotonic())?;
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
    let t = file.table;
    Ok(ConfigFile {
        path: path.to_path_buf(),
        table: TableSection {
            path: t.path.map(Into::into),
            store: t.store,
            key_prefix: t.key_prefix,
            store_timeout_ms: t.store_timeout_ms,
            connect_timeout_ms: t.connect_timeout_ms,
            probe_interval_ms: t.probe_interval_ms,
            host_id: t.host_id,
            capacity: t.capacity,
            max_processes: t.max_processes,
            lanes: t.lanes,
            balancers: t.balancers,
            backends_per_balancer: t.backends_per_balancer,
            mode: t.mode,
            shared: t.shared,
        },
        tasks,
        keys,
        balancers,
        manager: file
            .manager
            .map(|m| (at(path, text, m.span().start), m.into_inner())),
        managed,
        hash: fnv(text.as_bytes()),
    })
}

fn task_config(f: TaskFields) -> Result<TaskConfig> {
    Ok(TaskConfig {
        local: LocalConfig {
            local_rate: f.local_rate,
            burst: f.burst,
            max_concurrency: f.max_concurrency,
            wait_order: f.wait_order.as_deref().map(WaitOrder::parse).transpose()?,
            barging: f.barging,
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
