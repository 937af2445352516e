//! `tasks`, `stats` and `check`: what a read-only view of the table reads,
//! as text for people or JSON for programs.

use std::fmt::Write;
use std::path::Path;

use flowctrl::{AttachedProcess, ConfigFile, ProcessStats, QuotaState, TaskSnapshot, View};
use serde_json::{Value, json};

use crate::Result;
use crate::json::{print_json, process_json, quota_json, settings_json, stats_json};
use crate::text::{auto, duration, ns, offset_us, or_none, rate, shards, table};

/// Where each field of a task's configuration in force comes from: the
/// store's record (global fields, while it is in force), the config file
/// (the fields it sets for the task), or else the code that registered the
/// task or last updated it.
fn sources(t: &TaskSnapshot, file: Option<&ConfigFile>) -> Vec<(&'static str, &'static str)> {
    const GLOBAL: [&str; 5] = [
        "global_rate",
        "slice_ms",
        "chunk",
        "fallback",
        "global_burst",
    ];
    let set = file.and_then(|f| f.tasks.get(&t.name));
    let in_file = |field: &str| {
        set.is_some_and(|c| match field {
            "local_rate" => c.local.local_rate.is_some(),
            "burst" => c.local.burst.is_some(),
            "max_concurrency" => c.local.max_concurrency.is_some(),
            "global_rate" => c.global.global_rate.is_some(),
            "slice_ms" => c.global.slice_ms.is_some(),
            "chunk" => c.global.chunk.is_some(),
            "fallback" => c.global.fallback.is_some(),
            "global_burst" => c.global.global_burst.is_some(),
            "limiter" => c.limiter.spec.is_some(),
            "min_limit" => c.limiter.min_limit.is_some(),
            "max_limit" => c.limiter.max_limit.is_some(),
            _ => c.limiter.initial_limit.is_some(),
        })
    };
    let store = t.settings.global_source == flowctrl::GlobalSource::Store;
    [
        "local_rate",
        "burst",
        "max_concurrency",
        "global_rate",
        "slice_ms",
        "chunk",
        "fallback",
        "global_burst",
        "limiter",
        "min_limit",
        "max_limit",
        "initial_limit",
    ]
    .into_iter()
    .map(|field| {
        let from = if store && GLOBAL.contains(&field) {
            "store"
        } else if in_file(field) {
            "file"
        } else {
            "code"
        };
        (field, from)
    })
    .collect()
}

/// `flowctrl tasks`: one row per task, its configuration in force, and
/// which fields come from the store or the config file.
pub(crate) fn tasks(path: &Path, json: bool, config: Option<&Path>) -> Result {
    let view = View::open(path)?.snapshot()?;
    let tasks = view.tasks();
    let file = config.map(ConfigFile::load).transpose()?;
    if json {
        let tasks: Vec<Value> = tasks
            .iter()
            .map(|t| {
                let from: serde_json::Map<String, Value> = sources(t, file.as_ref())
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), Value::from(v)))
                    .collect();
                json!({"name": t.name, "settings": settings_json(t), "sources": from})
            })
            .collect();
        return print_json(json!({"table": view.path().display().to_string(), "tasks": tasks}));
    }
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|t| {
            let (l, g) = (&t.settings.local, &t.settings.global);
            let global = g.global_rate != 0.0;
            let if_global = |s: String| if global { s } else { "-".into() };
            vec![
                t.name.clone(),
                rate(l.local_rate),
                l.burst.to_string(),
                or_none(l.max_concurrency as u64),
                t.settings.limiter.algorithm.name().to_string(),
                rate(g.global_rate),
                if_global(g.slice_ms.to_string()),
                if_global(auto(g.chunk)),
                if_global(g.fallback.to_string()),
                if_global(auto(g.global_burst)),
                if_global(t.settings.global_source.as_str().to_string()),
                from_text(&sources(t, file.as_ref())),
            ]
        })
        .collect();
    let header = [
        "TASK",
        "LOCAL_RATE",
        "BURST",
        "MAX_CONCURRENCY",
        "LIMITER",
        "GLOBAL_RATE",
        "SLICE_MS",
        "CHUNK",
        "FALLBACK",
        "GLOBAL_BURST",
        "SOURCE",
        "FROM",
    ];
    crate::text::print(&table(&header, &rows));
    Ok(())
}

/// "file: a, b; store: c, d": the fields not from the code.
fn from_text(sources: &[(&str, &str)]) -> String {
    let of = |from: &str| -> Vec<&str> {
        sources
            .iter()
            .filter(|(_, f)| *f == from)
            .map(|(k, _)| *k)
            .collect()
    };
    let parts: Vec<String> = ["store", "file"]
        .into_iter()
        .filter_map(|from| {
            let fields = of(from);
            (!fields.is_empty()).then(|| format!("{from}: {}", fields.join(",")))
        })
        .collect();
    if parts.is_empty() {
        "code".into()
    } else {
        parts.join("; ")
    }
}

/// `flowctrl stats [TASK]`: every task's (or one task's) configuration,
/// counters, concurrency and quota; with `processes`, each live process's
/// share since it attached.
pub(crate) fn stats(path: &Path, task: Option<&str>, json: bool, processes: bool) -> Result {
    let view = View::open(path)?.snapshot()?;
    let tasks = match task {
        Some(name) => vec![view.task(name)?],
        None => view.tasks(),
    };
    let alive = view.processes();
    let mut shares = Vec::new();
    for t in &tasks {
        shares.push(if processes {
            Some(view.processes_of(&t.name)?)
        } else {
            None
        });
    }
    if json {
        let tasks: Vec<Value> = tasks
            .iter()
            .zip(&shares)
            .map(|(t, p)| {
                let mut v = json!({
                    "name": t.name,
                    "settings": settings_json(t),
                    "stats": stats_json(t),
                    "quota": quota_json(t),
                });
                if let Ok(Some(k)) = view.key_counters(&t.name) {
                    v["keys"] = crate::keys::stats_json(&k);
                }
                if let Some(p) = p {
                    v["processes"] = p.iter().map(|p| process_json(p, &alive)).collect();
                }
                v
            })
            .collect();
        let pool = view
            .lane_pool()
            .map(|(used, sets)| json!({"in_use": used, "sets": sets}));
        return print_json(json!({
            "table": view.path().display().to_string(),
            "lane_pool": pool,
            "tasks": tasks,
        }));
    }
    let mut out = String::new();
    if let Some((used, sets)) = view.lane_pool() {
        let _ = writeln!(out, "lane pool: {used} of {sets} sets in use");
    }
    for (i, (t, p)) in tasks.iter().zip(&shares).enumerate() {
        if i > 0 {
            out.push('\n');
        }
        task_text(&mut out, t);
        if let Ok(Some(k)) = view.key_counters(&t.name) {
            let _ = writeln!(
                out,
                "  keys: {} of {}; reused {}, overflowed {}, shadow refusals {}, refused by \
                 rate {}, by cap {}, by global rate {} (flowctrl keys {} lists them)",
                k.keys,
                k.capacity,
                k.reused,
                k.overflowed,
                k.shadow_refused,
                k.refused_rate,
                k.refused_concurrency,
                k.refused_global,
                crate::keys::escaped(t.name.as_bytes())
            );
        }
        if let Some(p) = p {
            processes_text(&mut out, p, &alive);
        }
    }
    if tasks.is_empty() {
        let _ = writeln!(out, "no tasks in {}", view.path().display());
    }
    crate::text::print(&out);
    Ok(())
}

/// `flowctrl check`: the table-wide check, read only. A drift or a
/// replaced file fails the command.
pub(crate) fn check(path: &Path) -> Result {
    let view = View::open(path)?.snapshot()?;
    let report = view.check();
    let tasks = view.tasks().len();
    let unreaped = view
        .processes()
        .iter()
        .filter(|p| p.alive == Some(false))
        .count();
    let mut out = String::new();
    if report.replaced {
        let _ = writeln!(out, "the path no longer names the table mapped (replaced)");
    }
    for (name, drift) in &report.drift {
        let _ = writeln!(
            out,
            "task {name:?}: the concurrency count is {drift:+} off what its ledgers hold"
        );
    }
    for name in &report.unchecked {
        let _ = writeln!(out, "task {name:?}: kept changing, not compared");
    }
    let mut key_drift = 0;
    for t in view.tasks() {
        if let Some(drift) = view.key_drift(&t.name)? {
            for (entry, counted, recorded) in &drift {
                let _ = writeln!(
                    out,
                    "task {:?}: key entry {entry} counts {counted} in flight, its processes' \
                     records hold {recorded}",
                    t.name
                );
            }
            key_drift += drift.len();
        }
    }
    if unreaped > 0 {
        let _ = writeln!(
            out,
            "{unreaped} dead process(es) not reaped yet (`flowctrl reap` gives back what they hold)"
        );
    }
    let ok = report.is_ok() && key_drift == 0;
    let verdict = if ok { "ok" } else { "FAILED" };
    let _ = writeln!(
        out,
        "{}: {verdict} ({tasks} tasks, {} compared, {} drifting, {key_drift} keys drifting)",
        view.path().display(),
        tasks - report.unchecked.len(),
        report.drift.len()
    );
    crate::text::print(&out);
    if ok {
        Ok(())
    } else {
        Err(crate::invalid(format!(
            "check of {} failed",
            view.path().display()
        )))
    }
}

fn task_text(out: &mut String, t: &TaskSnapshot) {
    let (s, q) = (&t.stats, &t.quota);
    let (l, g) = (&t.settings.local, &t.settings.global);
    let limiter = &t.settings.limiter;
    let _ = writeln!(out, "task {}", t.name);
    let mut line = |key: &str, value: String| {
        let _ = writeln!(out, "  {key:<12}{value}");
    };
    line(
        "local",
        format!(
            "local_rate {}  burst {}  max_concurrency {}",
            rate(l.local_rate),
            l.burst,
            or_none(l.max_concurrency as u64)
        ),
    );
    line(
        "limiter",
        if limiter.is_adaptive() {
            format!(
                "{limiter}  min {} max {} initial {}",
                limiter.min, limiter.max, limiter.initial
            )
        } else {
            limiter.to_string()
        },
    );
    if g.global_rate != 0.0 {
        line(
            "global",
            format!(
                "global_rate {}  slice_ms {}  chunk {}  fallback {}  global_burst {}{}  source {}",
                rate(g.global_rate),
                g.slice_ms,
                auto(g.chunk),
                g.fallback,
                auto(g.global_burst),
                shards(g.shards),
                t.settings.global_source.as_str()
            ),
        );
    }
    line("admitted", s.admitted.to_string());
    line(
        "limited",
        format!(
            "local {}  global {}  concurrency {}  fallback {}",
            s.limited_local, s.limited_global, s.limited_concurrency, q.limited_fallback
        ),
    );
    line(
        "released",
        format!(
            "success {}  dropped {}  ignored {}",
            s.released_success, s.released_dropped, s.released_ignored
        ),
    );
    line("reclaimed", s.reclaimed.to_string());
    if s.unlaned != 0 {
        line(
            "unlaned",
            format!(
                "{} (refused {}): the lane pool was empty",
                s.unlaned, s.unlaned_refused
            ),
        );
    }
    line(
        "in flight",
        format!("{} / {}", s.in_flight, or_none(s.limit)),
    );
    line(
        "rtt",
        match s.mean_rtt() {
            Some(mean) => format!("mean {} over {} permits", duration(mean), s.rtt_samples),
            None => "-".into(),
        },
    );
    if limiter.is_adaptive() {
        line(
            "adaptive",
            format!(
                "baseline rtt {}  recent rtt {}",
                ns(s.baseline_rtt_ns),
                ns(s.recent_rtt_ns)
            ),
        );
    }
    if let Some(state) = q.state {
        line(
            "quota",
            format!(
                "{}  granted {}  reserved {}  returned {}  stranded {}  hosts {}  clock offset {}",
                state_name(state),
                q.granted,
                q.reserved,
                q.returned,
                q.stranded,
                q.hosts_seen,
                offset_us(q.clock_offset_us)
            ),
        );
        let mean = q.pull_ns_sum.checked_div(q.pulls).unwrap_or(0);
        let (pulls, failed) = (q.pulls, q.failed_pulls);
        let (mean, max, created) = (ns(mean), ns(q.pull_ns_max), q.keys_created);
        let pulls =
            format!("{pulls}  failed {failed}  mean {mean}  max {max}  keys created {created}");
        line("pulls", pulls);
        if q.shards_down != 0 {
            let down: Vec<String> = (0..64)
                .filter(|i| q.shards_down >> i & 1 == 1)
                .map(|i| i.to_string())
                .collect();
            line("shards down", down.join(" "));
        }
        line(
            "time",
            format!(
                "open {}  limited {}  failed {}",
                duration(ms(q.open_ms)),
                duration(ms(q.limited_ms)),
                duration(ms(q.failed_ms))
            ),
        );
        line(
            "conflicts",
            format!("host {}  config {}", q.host_conflicts, q.config_conflicts),
        );
    }
}

fn processes_text(out: &mut String, shares: &[ProcessStats], alive: &[AttachedProcess]) {
    let rows: Vec<Vec<String>> = shares
        .iter()
        .map(|p| {
            let s = &p.stats;
            vec![
                p.slot.to_string(),
                p.pid.to_string(),
                alive_name(p.slot, alive).to_string(),
                s.admitted.to_string(),
                s.limited_local.to_string(),
                s.limited_global.to_string(),
                s.limited_concurrency.to_string(),
                s.released_success.to_string(),
                s.released_dropped.to_string(),
                s.released_ignored.to_string(),
                s.in_flight.to_string(),
            ]
        })
        .collect();
    let header = [
        "SLOT",
        "PID",
        "ALIVE",
        "ADMITTED",
        "LIM_LOCAL",
        "LIM_GLOBAL",
        "LIM_CONC",
        "SUCCESS",
        "DROPPED",
        "IGNORED",
        "IN_FLIGHT",
    ];
    let _ = writeln!(out, "  processes");
    for line in table(&header, &rows).lines() {
        let _ = writeln!(out, "    {line}");
    }
}

fn alive_name(slot: u32, alive: &[AttachedProcess]) -> &'static str {
    match alive.iter().find(|p| p.slot == slot).and_then(|p| p.alive) {
        Some(true) => "yes",
        Some(false) => "dead",
        None => "?",
    }
}

pub(crate) fn state_name(state: QuotaState) -> &'static str {
    match state {
        QuotaState::Open => "open",
        QuotaState::Limited => "limited",
        QuotaState::Failed => "failed",
    }
}

fn ms(ms: u64) -> std::time::Duration {
    std::time::Duration::from_millis(ms)
}
