//! The metric families of a table's exposition, one function per part of
//! the table. A family with no sample (no task has a global rate, no
//! balancer exists) is left out rather than sent empty.

use std::fmt;

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::Snapshot;
use crate::task::Histogram;
use crate::view::TaskSnapshot;

pub(super) type Labels = Vec<(&'static str, String)>;

pub(super) fn task(t: &TaskSnapshot) -> Labels {
    vec![("task", t.name.clone())]
}

pub(super) fn with(mut labels: Labels, key: &'static str, value: &str) -> Labels {
    labels.push((key, value.to_string()));
    labels
}

pub(super) fn counter<V: EncodeCounterValue>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    rows: Vec<(Labels, V)>,
) -> fmt::Result {
    if rows.is_empty() {
        return Ok(());
    }
    let mut family = e.encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
    for (labels, value) in &rows {
        family
            .encode_family(labels)?
            .encode_counter::<NoLabelSet, _, u64>(value, None)?;
    }
    Ok(())
}

pub(super) fn gauge<V: EncodeGaugeValue, L: EncodeLabelSet>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    rows: Vec<(L, V)>,
) -> fmt::Result {
    if rows.is_empty() {
        return Ok(());
    }
    let mut family = e.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
    for (labels, value) in &rows {
        family.encode_family(labels)?.encode_gauge(value)?;
    }
    Ok(())
}

/// A histogram family in seconds: per row, its buckets and sum.
pub(super) fn histogram(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: Vec<(Labels, &Histogram)>,
) -> fmt::Result {
    if rows.is_empty() {
        return Ok(());
    }
    let unit = Some(Unit::Seconds);
    let mut family = e.encode_descriptor(name, help, unit.as_ref(), MetricType::Histogram)?;
    for (labels, h) in &rows {
        // The encoder adds the buckets up unchecked: hand it the steps of
        // saturated running totals (the counts are words of the file).
        let mut total = 0u64;
        let steps: Vec<(f64, u64)> = h
            .buckets
            .iter()
            .map(|&(le, n)| {
                let next = total.saturating_add(n);
                let step = next - total;
                total = next;
                (le, step)
            })
            .collect();
        family
            .encode_family(labels)?
            .encode_histogram::<NoLabelSet>(seconds(h.sum_ns), total, &steps, None)?;
    }
    Ok(())
}

pub(super) fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// `flowctrl_build_info`: 1, labelled with this build's version and, for a
/// table, its file's layout version (a dashboard's legend, an alert on a
/// fleet running mixed versions).
pub(super) fn build_info(e: &mut DescriptorEncoder, layout: Option<u32>) -> fmt::Result {
    let mut labels: Labels = vec![("version", env!("CARGO_PKG_VERSION").to_string())];
    if let Some(layout) = layout {
        labels.push(("layout", layout.to_string()));
    }
    gauge(
        e,
        "flowctrl_build_info",
        "1, labelled with the flowctrl version serving the metrics and the layout version \
         of the table they read.",
        None,
        vec![(labels, 1u64)],
    )
}

/// The table's slots and processes.
pub(super) fn table(s: &Snapshot, e: &mut DescriptorEncoder) -> fmt::Result {
    build_info(e, Some(s.layout))?;
    let none = |v: u64| vec![(Labels::new(), v)];
    gauge(
        e,
        "flowctrl_table_tasks",
        "Tasks registered in the table.",
        None,
        none(s.tasks.len() as u64),
    )?;
    gauge(
        e,
        "flowctrl_table_task_slots",
        "Task slots of the table.",
        None,
        none(s.task_slots as u64),
    )?;
    gauge(
        e,
        "flowctrl_table_processes",
        "Attachment slots held by processes (or table handles), live or not reaped yet.",
        None,
        none(s.processes as u64),
    )?;
    gauge(
        e,
        "flowctrl_table_unreaped_processes",
        "Attachments whose process died and that no process has reaped yet.",
        None,
        none(s.unreaped as u64),
    )?;
    gauge(
        e,
        "flowctrl_table_process_slots",
        "Attachment slots of the table.",
        None,
        none(s.process_slots as u64),
    )
}

/// Every task's counters, concurrency and configuration.
pub(super) fn tasks(tasks: &[TaskSnapshot], e: &mut DescriptorEncoder) -> fmt::Result {
    let each = |f: &dyn Fn(&TaskSnapshot) -> u64| -> Vec<(Labels, u64)> {
        tasks.iter().map(|t| (task(t), f(t))).collect()
    };
    counter(
        e,
        "flowctrl_requests_admitted",
        "Permits admitted, summed over every process that used the task.",
        None,
        each(&|t| t.stats.admitted),
    )?;
    counter(
        e,
        "flowctrl_requests_shadow_refused",
        "Permits the task's limits refused and shadow mode admitted (counted as admitted \
         and by the limit that refused them too).",
        None,
        each(&|t| t.stats.shadow_refused),
    )?;
    let mut limited = Vec::new();
    for t in tasks {
        for (reason, n) in [
            ("local", t.stats.limited_local),
            ("global", t.stats.limited_global),
            ("concurrency", t.stats.limited_concurrency),
            ("fallback", t.quota.limited_fallback),
        ] {
            limited.push((with(task(t), "reason", reason), n));
        }
    }
    counter(
        e,
        "flowctrl_requests_limited",
        "Permits refused, by the limit that refused them (fallback: the global \
         fallback policy while the store fails).",
        None,
        limited,
    )?;
    let mut released = Vec::new();
    for t in tasks {
        for (outcome, n) in [
            ("success", t.stats.released_success),
            ("dropped", t.stats.released_dropped),
            ("ignored", t.stats.released_ignored),
        ] {
            released.push((with(task(t), "outcome", outcome), n));
        }
    }
    counter(
        e,
        "flowctrl_requests_released",
        "Permits released, by outcome.",
        None,
        released,
    )?;
    counter(
        e,
        "flowctrl_permits_reclaimed",
        "Permits of processes that died holding them, given back by the reaper.",
        None,
        each(&|t| t.stats.reclaimed),
    )?;
    histogram(
        e,
        "flowctrl_permit_rtt",
        "Acquire-to-release time of the permits released as success or dropped. _sum \
         covers them all; the buckets and _count those in a process's lanes (see the \
         metrics reference).",
        tasks.iter().map(|t| (task(t), &t.rtt)).collect(),
    )?;
    counter(
        e,
        "flowctrl_permit_rtt_samples",
        "Permits whose times flowctrl_permit_rtt_seconds_sum adds up.",
        None,
        each(&|t| t.stats.rtt_samples),
    )?;
    histogram(
        e,
        "flowctrl_permit_wait",
        "Time the acquires that joined the task's queue waited in it, counted when they \
         left it (with a permit, at their deadline, or gone).",
        tasks.iter().map(|t| (task(t), &t.waited)).collect(),
    )?;
    gauge(
        e,
        "flowctrl_permits_in_flight",
        "Permits counted against the concurrency limit now, host-wide.",
        None,
        each(&|t| t.stats.in_flight),
    )?;
    counter(
        e,
        "flowctrl_acquires_unlaned",
        "Acquires decided without ledger lanes of their process's own: the table's \
         lane pool was empty.",
        None,
        each(&|t| t.stats.unlaned),
    )?;
    counter(
        e,
        "flowctrl_acquires_unlaned_refused",
        "Of those, acquires of a capped task, refused as limited by concurrency.",
        None,
        each(&|t| t.stats.unlaned_refused),
    )?;
    gauge(
        e,
        "flowctrl_acquires_waiting",
        "Acquires waiting for a permit now, host-wide, in the task's queue.",
        None,
        each(&|t| t.stats.waiting),
    )?;
    let limited_tasks = tasks.iter().filter(|t| t.stats.limit != 0);
    gauge(
        e,
        "flowctrl_concurrency_limit",
        "The concurrency limit applied now (the adaptive limit or max_concurrency); \
         tasks without one are left out.",
        None,
        limited_tasks.map(|t| (task(t), t.stats.limit)).collect(),
    )?;
    let adaptive: Vec<_> = tasks
        .iter()
        .filter(|t| t.settings.limiter.is_adaptive())
        .collect();
    gauge(
        e,
        "flowctrl_adaptive_baseline_rtt",
        "The adaptive limiter's no-load RTT estimate.",
        Some(Unit::Seconds),
        adaptive
            .iter()
            .map(|t| (task(t), seconds(t.stats.baseline_rtt_ns)))
            .collect(),
    )?;
    gauge(
        e,
        "flowctrl_adaptive_recent_rtt",
        "The RTT of the adaptive limiter's last window with samples.",
        Some(Unit::Seconds),
        adaptive
            .iter()
            .map(|t| (task(t), seconds(t.stats.recent_rtt_ns)))
            .collect(),
    )?;
    config(tasks, e)
}

/// `flowctrl check`'s comparison: each task's concurrency count less the
/// sum of its processes' ledgers (0 when exact).
pub(super) fn drift(drift: &[(String, i64)], e: &mut DescriptorEncoder) -> fmt::Result {
    gauge(
        e,
        "flowctrl_concurrency_drift",
        "The task's concurrency count less the sum of its processes' ledgers, as flowctrl \
         check compares them (0 when exact; positive: capacity leaked, negative: handed out \
         twice). Left out for a task too busy to read at one instant.",
        None,
        drift
            .iter()
            .map(|(name, d)| (vec![("task", name.clone())], *d))
            .collect(),
    )
}

/// The configuration in force, as gauges (limits to draw beside the
/// rates) and one info series per task.
fn config(tasks: &[TaskSnapshot], e: &mut DescriptorEncoder) -> fmt::Result {
    let each = |f: &dyn Fn(&TaskSnapshot) -> f64| -> Vec<(Labels, f64)> {
        tasks.iter().map(|t| (task(t), f(t))).collect()
    };
    gauge(
        e,
        "flowctrl_config_local_rate",
        "local_rate in force, requests per second for the host (0 = none).",
        None,
        each(&|t| t.settings.local.local_rate),
    )?;
    gauge(
        e,
        "flowctrl_config_burst",
        "burst in force, permits.",
        None,
        each(&|t| t.settings.local.burst as f64),
    )?;
    gauge(
        e,
        "flowctrl_config_max_concurrency",
        "max_concurrency in force, permits (0 = none).",
        None,
        each(&|t| t.settings.local.max_concurrency as f64),
    )?;
    gauge(
        e,
        "flowctrl_config_global_rate",
        "global_rate in force, requests per second for the cluster (0 = none).",
        None,
        each(&|t| t.settings.global.global_rate),
    )?;
    let info: Vec<_> = tasks
        .iter()
        .map(|t| {
            let labels = with(task(t), "limiter", &t.settings.limiter.to_string());
            let labels = with(labels, "global_source", t.settings.global_source.as_str());
            (
                with(labels, "fallback", &t.settings.global.fallback.to_string()),
                1u64,
            )
        })
        .collect();
    gauge(
        e,
        "flowctrl_task_info",
        "1 per task, labelled with its limiter, where its global numbers come from \
         (local or store) and its fallback policy.",
        None,
        info,
    )
}

/// Keyed tasks: their key files' counters. Per-key series are left out:
/// a million callers would be a million series (`flowctrl keys` lists the
/// hottest).
pub(super) fn keys(keys: &[(String, crate::KeyStats)], e: &mut DescriptorEncoder) -> fmt::Result {
    let each = |f: &dyn Fn(&crate::KeyStats) -> u64| -> Vec<(Labels, u64)> {
        keys.iter()
            .map(|(name, s)| (vec![("task", name.clone())], f(s)))
            .collect()
    };
    gauge(
        e,
        "flowctrl_key_capacity",
        "Keys the keyed task's key file holds.",
        None,
        each(&|s| s.capacity as u64),
    )?;
    counter(
        e,
        "flowctrl_keys_inserted",
        "Keys given an empty entry of the key file.",
        None,
        each(&|s| s.inserted),
    )?;
    counter(
        e,
        "flowctrl_keys_reused",
        "Keys given the entry of a key whose state carried nothing.",
        None,
        each(&|s| s.reused),
    )?;
    counter(
        e,
        "flowctrl_keys_overflowed",
        "Keyed decisions taken on the shared overflow state (every entry live).",
        None,
        each(&|s| s.overflowed),
    )?;
    counter(
        e,
        "flowctrl_keys_shadow_refused",
        "Keyed requests a limit in shadow mode would have refused (admitted).",
        None,
        each(&|s| s.shadow_refused),
    )?;
    let mut refused = Vec::new();
    for (name, s) in keys {
        for (reason, n) in [
            ("rate", s.refused_rate),
            ("concurrency", s.refused_concurrency),
            ("global", s.refused_global),
            ("records", s.records_full),
        ] {
            refused.push((with(vec![("task", name.clone())], "reason", reason), n));
        }
    }
    counter(
        e,
        "flowctrl_keys_refused",
        "Keyed requests refused by a key's limit, by the limit (records: the process held \
         permits of as many keys as it has records; global: the key's global rate).",
        None,
        refused,
    )
}
