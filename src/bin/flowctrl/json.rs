//! The JSON documents of `flowctrl tasks`, `stats` and `fleet`: one
//! encoder per value, so every command spells a field the same way.

use flowctrl::{AttachedProcess, ProcessStats, TaskSnapshot};
use serde_json::{Value, json};

use crate::Result;
use crate::show::state_name;

pub(crate) fn settings_json(t: &TaskSnapshot) -> Value {
    let (l, g, m) = (&t.settings.local, &t.settings.global, &t.settings.limiter);
    json!({
        "local_rate": l.local_rate,
        "burst": l.burst,
        "max_concurrency": l.max_concurrency,
        "shadow": l.shadow,
        "limiter": m.to_string(),
        "min_limit": m.min,
        "max_limit": m.max,
        "initial_limit": m.initial,
        "global_rate": g.global_rate,
        "slice_ms": g.slice_ms,
        "chunk": g.chunk,
        "fallback": g.fallback.to_string(),
        "global_burst": g.global_burst,
        "shards": g.shards,
        "global_source": t.settings.global_source.as_str(),
    })
}

pub(crate) fn counters_json(s: &flowctrl::TaskStats) -> Value {
    json!({
        "admitted": s.admitted,
        "limited_local": s.limited_local,
        "limited_global": s.limited_global,
        "limited_concurrency": s.limited_concurrency,
        "released_success": s.released_success,
        "released_dropped": s.released_dropped,
        "released_ignored": s.released_ignored,
        "reclaimed": s.reclaimed,
        "in_flight": s.in_flight,
        "held": s.held,
        "waiting": s.waiting,
        "unlaned": s.unlaned,
        "unlaned_refused": s.unlaned_refused,
        "shadow_refused": s.shadow_refused,
        "rtt_sum_ns": s.rtt_sum_ns,
        "rtt_samples": s.rtt_samples,
    })
}

pub(crate) fn stats_json(t: &TaskSnapshot) -> Value {
    let s = &t.stats;
    let mut v = counters_json(s);
    v["limited_fallback"] = json!(t.quota.limited_fallback);
    v["limit"] = json!(s.limit);
    v["baseline_rtt_ns"] = json!(s.baseline_rtt_ns);
    v["recent_rtt_ns"] = json!(s.recent_rtt_ns);
    v
}

pub(crate) fn quota_json(t: &TaskSnapshot) -> Value {
    let q = &t.quota;
    json!({
        "state": q.state.map(state_name),
        "pulls": q.pulls,
        "failed_pulls": q.failed_pulls,
        "pull_ns_sum": q.pull_ns_sum,
        "pull_ns_max": q.pull_ns_max,
        "granted": q.granted,
        "stranded": q.stranded,
        "open_ms": q.open_ms,
        "limited_ms": q.limited_ms,
        "failed_ms": q.failed_ms,
        "clock_offset_us": q.clock_offset_us,
        "hosts_seen": q.hosts_seen,
        "host_conflicts": q.host_conflicts,
        "config_conflicts": q.config_conflicts,
        "keys_created": q.keys_created,
        "shards_down": q.shards_down,
        "reserved": q.reserved,
        "returned": q.returned,
    })
}

pub(crate) fn process_json(p: &ProcessStats, alive: &[AttachedProcess]) -> Value {
    let live = alive
        .iter()
        .find(|a| a.slot == p.slot)
        .and_then(|a| a.alive);
    let mut v = counters_json(&p.stats);
    v["slot"] = json!(p.slot);
    v["pid"] = json!(p.pid);
    v["alive"] = json!(live);
    v
}

pub(crate) fn print_json(value: Value) -> Result {
    let text = serde_json::to_string_pretty(&value)
        .map_err(|e| crate::invalid(format!("cannot write JSON: {e}")))?;
    println!("{text}");
    Ok(())
}
