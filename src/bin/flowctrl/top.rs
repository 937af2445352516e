//! `top`: rates between two samples of a read-only view, redrawn every
//! interval (plain ANSI: clear, home, the frame) on a terminal, printed one
//! after the other (a blank line between, no escapes) into a pipe or a
//! file, or printed once.
//!
//! Each sample is one copy of the table ([`View::snapshot`]). A live `top`
//! keeps going whatever the table's owner does: a pass that cannot read
//! the table (it shrank under the view, its header changed) draws the error
//! instead of a frame, and the next pass opens the path anew, as it does
//! when the path names another file (a table replaced by a restarted
//! service is followed). `--once` reads one file for both samples; an
//! error of either is the command's.
//!
//! `--json` prints each frame as one JSON document on one line (no screen
//! clearing, on a terminal too), its tasks spelled as `stats --json` spells
//! them plus their rates; `--sort` orders the tasks by a key (the table's
//! order by default).

use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::path::Path;
use std::time::{Duration, Instant};

use flowctrl::{BalancerSnapshot, TableSnapshot, TaskSnapshot, View};
use serde_json::{Value, json};

use crate::json::{quota_json, stats_json};
use crate::show::state_name;
use crate::text::{duration, or_none, per_sec, table};
use crate::{Result, usage};

/// The order of a frame's tasks: `table` keeps the table's own order;
/// the numeric keys put the largest first, ties by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SortKey {
    /// The table's order (its slots).
    #[default]
    Table,
    /// The task's name, A to Z.
    Name,
    /// Admitted per second.
    Admitted,
    /// Refused per second, every reason summed (local, global,
    /// concurrency, fallback).
    Limited,
    /// Permits held now.
    #[value(name = "in_flight", alias = "in-flight")]
    InFlight,
    /// The concurrency limit in force.
    Limit,
    /// The mean round-trip time over the interval.
    Rtt,
}

/// How `top` prints its frames.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Options {
    pub once: bool,
    pub interval: f64,
    pub json: bool,
    pub sort: SortKey,
}

/// What one sample read.
struct Sample {
    at: Instant,
    tasks: Vec<TaskSnapshot>,
    balancers: Vec<BalancerSnapshot>,
    processes: usize,
    dead: usize,
}

impl Sample {
    fn take(view: &View) -> Result<Self> {
        let copy: TableSnapshot = view.snapshot()?;
        let processes = copy.processes();
        Ok(Self {
            at: Instant::now(),
            tasks: copy.tasks(),
            balancers: copy.balancers(),
            processes: processes.len(),
            dead: processes.iter().filter(|p| p.alive == Some(false)).count(),
        })
    }
}

pub(crate) fn run(path: &Path, options: Options) -> Result {
    let Options {
        once,
        interval,
        json,
        sort,
    } = options;
    if !(0.01..=3600.0).contains(&interval) {
        return Err(usage(format!(
            "--interval must be between 0.01 and 3600 seconds, not {interval}"
        )));
    }
    // Redrawn in place only on a terminal, and never as JSON.
    let clear = !json && std::io::stdout().is_terminal();
    let out = Output { clear, json, sort };
    let interval = Duration::from_secs_f64(interval);
    let view = View::open(path)?;
    if once {
        let before = Sample::take(&view)?;
        std::thread::sleep(interval);
        let now = Sample::take(&view)?;
        out.frame(view.path(), &before, &now);
        return Ok(());
    }
    let mut view = Some(view);
    let mut before = None;
    loop {
        if before.is_some() {
            std::thread::sleep(interval);
        }
        // A pass after an error, or with the path naming another file,
        // opens the path anew.
        if view.as_ref().is_none_or(View::replaced) {
            before = None;
            view = match View::open(path) {
                Ok(v) => Some(v),
                Err(e) => {
                    out.error(path, &e.to_string(), false);
                    std::thread::sleep(interval);
                    None
                }
            };
        }
        let Some(current) = &view else { continue };
        match Sample::take(current) {
            Ok(now) => {
                if let Some(before) = &before {
                    out.frame(current.path(), before, &now);
                }
                before = Some(now);
            }
            Err(e) => {
                out.error(current.path(), &e.to_string(), true);
                (view, before) = (None, None);
                std::thread::sleep(interval);
            }
        }
    }
}

/// Where and how the frames go.
struct Output {
    clear: bool,
    json: bool,
    sort: SortKey,
}

impl Output {
    fn frame(&self, path: &Path, before: &Sample, now: &Sample) {
        let secs = now.at.duration_since(before.at).as_secs_f64().max(1e-9);
        let rows = rows(&before.tasks, &now.tasks, secs, self.sort);
        if self.json {
            show_line(&frame_json(path, before, now, secs, &rows));
        } else {
            show(&frame(path, before, now, secs, &rows), self.clear);
        }
    }

    /// A pass that could not read the table: its error where a frame
    /// would be (`{"table", "error"}` as JSON).
    fn error(&self, path: &Path, error: &str, again: bool) {
        if self.json {
            show_line(&json!({"table": path.display().to_string(), "error": error}));
        } else {
            let next = if again {
                "(opening it anew at the next pass)\n"
            } else {
                ""
            };
            show(
                &format!("flowctrl top  {}\n\n{error}\n{next}", path.display()),
                self.clear,
            );
        }
    }
}

/// Prints one JSON document on one line, flushed (a reader of the pipe
/// gets each frame as it is drawn).
fn show_line(value: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

/// Prints a frame: escaped, after clearing the screen when `clear`, else
/// after a blank line when another came before.
fn show(frame: &str, clear: bool) {
    static FIRST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
    let text = crate::text::printable(frame);
    let mut out = std::io::stdout().lock();
    let first = FIRST.swap(false, std::sync::atomic::Ordering::Relaxed);
    let _ = if clear {
        write!(out, "\x1b[H\x1b[2J{text}")
    } else if first {
        write!(out, "{text}")
    } else {
        write!(out, "\n{text}")
    };
    let _ = out.flush();
}

/// A task's rates between two samples.
struct Row<'a> {
    task: &'a TaskSnapshot,
    admitted: f64,
    limited_local: f64,
    limited_global: f64,
    limited_concurrency: f64,
    limited_fallback: f64,
    /// The mean RTT of the samples taken in the interval.
    rtt_ns: Option<u64>,
}

impl Row<'_> {
    fn limited(&self) -> f64 {
        self.limited_local + self.limited_global + self.limited_concurrency + self.limited_fallback
    }
}

/// Every task's rates, in the order `sort` asks for.
fn rows<'a>(
    before: &[TaskSnapshot],
    now: &'a [TaskSnapshot],
    secs: f64,
    sort: SortKey,
) -> Vec<Row<'a>> {
    let mut rows: Vec<Row<'a>> = now
        .iter()
        .map(|t| {
            let old = before.iter().find(|b| b.name == t.name);
            let s = &t.stats;
            let delta = |f: &dyn Fn(&TaskSnapshot) -> u64| {
                f(t).saturating_sub(old.map_or(0, f)) as f64 / secs
            };
            let samples = s.rtt_samples - old.map_or(0, |o| o.stats.rtt_samples.min(s.rtt_samples));
            let rtt_ns = s
                .rtt_sum_ns
                .saturating_sub(old.map_or(0, |o| o.stats.rtt_sum_ns));
            Row {
                task: t,
                admitted: delta(&|t| t.stats.admitted),
                limited_local: delta(&|t| t.stats.limited_local),
                limited_global: delta(&|t| t.stats.limited_global),
                limited_concurrency: delta(&|t| t.stats.limited_concurrency),
                limited_fallback: delta(&|t| t.quota.limited_fallback),
                rtt_ns: rtt_ns.checked_div(samples),
            }
        })
        .collect();
    let by_name = |a: &Row, b: &Row| a.task.name.cmp(&b.task.name);
    let largest = |a: f64, b: f64| b.total_cmp(&a);
    match sort {
        SortKey::Table => {}
        SortKey::Name => rows.sort_by(by_name),
        SortKey::Admitted => {
            rows.sort_by(|a, b| largest(a.admitted, b.admitted).then_with(|| by_name(a, b)))
        }
        SortKey::Limited => {
            rows.sort_by(|a, b| largest(a.limited(), b.limited()).then_with(|| by_name(a, b)))
        }
        SortKey::InFlight => rows.sort_by(|a, b| {
            (b.task.stats.in_flight.cmp(&a.task.stats.in_flight)).then_with(|| by_name(a, b))
        }),
        SortKey::Limit => rows.sort_by(|a, b| {
            (b.task.stats.limit.cmp(&a.task.stats.limit)).then_with(|| by_name(a, b))
        }),
        SortKey::Rtt => rows.sort_by(|a, b| (b.rtt_ns.cmp(&a.rtt_ns)).then_with(|| by_name(a, b))),
    }
    rows
}

fn frame(path: &Path, before: &Sample, now: &Sample, secs: f64, rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "flowctrl top  {}  processes {} ({} dead)  rates over {:.1} s",
        path.display(),
        now.processes,
        now.dead,
        secs
    );
    let _ = writeln!(out);
    out.push_str(&tasks(rows));
    if !now.balancers.is_empty() {
        let _ = writeln!(out);
        out.push_str(&balancers(&before.balancers, &now.balancers, secs));
    }
    out
}

/// A frame as one JSON document: each task as `stats --json` has it
/// (`name`, `stats`, `quota`) with its `rates` per second over the
/// interval and the interval's mean `rtt_ns`; each balancer's backends.
fn frame_json(path: &Path, before: &Sample, now: &Sample, secs: f64, rows: &[Row]) -> Value {
    let tasks: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "name": r.task.name,
                "rates": {
                    "admitted": r.admitted,
                    "limited_local": r.limited_local,
                    "limited_global": r.limited_global,
                    "limited_concurrency": r.limited_concurrency,
                    "limited_fallback": r.limited_fallback,
                },
                "rtt_ns": r.rtt_ns,
                "stats": stats_json(r.task),
                "quota": quota_json(r.task),
            })
        })
        .collect();
    json!({
        "table": path.display().to_string(),
        "interval_s": secs,
        "processes": now.processes,
        "dead_processes": now.dead,
        "tasks": tasks,
        "balancers": balancers_json(&before.balancers, &now.balancers, secs),
    })
}

fn tasks(rows: &[Row]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let t = r.task;
            vec![
                t.name.clone(),
                per_sec(r.admitted),
                per_sec(r.limited_local),
                per_sec(r.limited_global),
                per_sec(r.limited_concurrency),
                per_sec(r.limited_fallback),
                t.stats.in_flight.to_string(),
                or_none(t.stats.limit),
                match r.rtt_ns {
                    Some(mean) => duration(Duration::from_nanos(mean)),
                    None => "-".into(),
                },
                t.quota.state.map_or("-", state_name).to_string(),
            ]
        })
        .collect();
    let header = [
        "TASK",
        "ADMITTED/S",
        "LOCAL/S",
        "GLOBAL/S",
        "CONCURRENCY/S",
        "FALLBACK/S",
        "IN_FLIGHT",
        "LIMIT",
        "RTT",
        "QUOTA",
    ];
    table(&header, &rows)
}

/// Each backend's picks between the two samples, in `b`'s order.
fn picks(before: &[BalancerSnapshot], b: &BalancerSnapshot) -> Vec<u64> {
    let old = before.iter().find(|o| o.name == b.name);
    b.stats
        .backends
        .iter()
        .map(|k| {
            let was = old
                .and_then(|o| o.stats.backends.iter().find(|o| o.address == k.address))
                .map_or(0, |o| o.picked);
            k.picked.saturating_sub(was)
        })
        .collect()
}

fn balancers(before: &[BalancerSnapshot], now: &[BalancerSnapshot], secs: f64) -> String {
    let mut rows = Vec::new();
    for b in now {
        let picks = picks(before, b);
        let total: u64 = picks.iter().sum();
        for (k, &n) in b.stats.backends.iter().zip(&picks) {
            rows.push(vec![
                b.name.clone(),
                k.address.clone(),
                match (n * 100).checked_div(total) {
                    Some(_) => format!("{:.1}%", n as f64 * 100.0 / total as f64),
                    None => "-".into(),
                },
                per_sec(n as f64 / secs),
                k.in_flight.to_string(),
                duration(k.rtt),
                k.weight.to_string(),
                if k.ejected_for.is_zero() {
                    "-".into()
                } else {
                    format!("{} ({} in a row)", duration(k.ejected_for), k.ejections)
                },
            ]);
        }
    }
    let header = [
        "BALANCER",
        "BACKEND",
        "SHARE",
        "PICKS/S",
        "IN_FLIGHT",
        "RTT",
        "WEIGHT",
        "EJECTED",
    ];
    table(&header, &rows)
}

/// The balancers of a JSON frame: each backend's share of the interval's
/// picks (0 to 1, null without picks), picks per second, and its state.
fn balancers_json(before: &[BalancerSnapshot], now: &[BalancerSnapshot], secs: f64) -> Value {
    now.iter()
        .map(|b| {
            let picks = picks(before, b);
            let total: u64 = picks.iter().sum();
            let backends: Vec<Value> = b
                .stats
                .backends
                .iter()
                .zip(&picks)
                .map(|(k, &n)| {
                    json!({
                        "address": k.address,
                        "share": (total > 0).then(|| n as f64 / total as f64),
                        "picks_per_s": n as f64 / secs,
                        "picked": k.picked,
                        "in_flight": k.in_flight,
                        "rtt_ns": k.rtt.as_nanos() as u64,
                        "weight": k.weight,
                        "ejected_for_ms": k.ejected_for.as_millis() as u64,
                        "ejections": k.ejections,
                    })
                })
                .collect();
            json!({"name": b.name, "backends": backends})
        })
        .collect()
}
