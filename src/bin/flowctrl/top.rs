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

use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::path::Path;
use std::time::{Duration, Instant};

use flowctrl::{BalancerSnapshot, TableSnapshot, TaskSnapshot, View};

use crate::show::state_name;
use crate::text::{duration, or_none, per_sec, table};
use crate::{Result, usage};

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

pub(crate) fn run(path: &Path, once: bool, interval: f64) -> Result {
    if !(0.01..=3600.0).contains(&interval) {
        return Err(usage(format!(
            "--interval must be between 0.01 and 3600 seconds, not {interval}"
        )));
    }
    // Redrawn in place only on a terminal.
    let clear = std::io::stdout().is_terminal();
    let interval = Duration::from_secs_f64(interval);
    let view = View::open(path)?;
    if once {
        let before = Sample::take(&view)?;
        std::thread::sleep(interval);
        let now = Sample::take(&view)?;
        show(&frame(view.path(), &before, &now), false);
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
                    show(&format!("flowctrl top  {}\n\n{e}\n", path.display()), clear);
                    std::thread::sleep(interval);
                    None
                }
            };
        }
        let Some(current) = &view else { continue };
        match Sample::take(current) {
            Ok(now) => {
                if let Some(before) = &before {
                    show(&frame(current.path(), before, &now), clear);
                }
                before = Some(now);
            }
            Err(e) => {
                show(
                    &format!(
                        "flowctrl top  {}\n\n{e}\n(opening it anew at the next pass)\n",
                        current.path().display()
                    ),
                    clear,
                );
                (view, before) = (None, None);
                std::thread::sleep(interval);
            }
        }
    }
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

fn frame(path: &Path, before: &Sample, now: &Sample) -> String {
    let secs = now.at.duration_since(before.at).as_secs_f64().max(1e-9);
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
    out.push_str(&tasks(&before.tasks, &now.tasks, secs));
    if !now.balancers.is_empty() {
        let _ = writeln!(out);
        out.push_str(&balancers(&before.balancers, &now.balancers, secs));
    }
    out
}

fn tasks(before: &[TaskSnapshot], now: &[TaskSnapshot], secs: f64) -> String {
    let rows: Vec<Vec<String>> = now
        .iter()
        .map(|t| {
            let old = before.iter().find(|b| b.name == t.name);
            let (s, q) = (&t.stats, &t.quota);
            let delta = |f: &dyn Fn(&TaskSnapshot) -> u64| {
                f(t).saturating_sub(old.map_or(0, f)) as f64 / secs
            };
            let samples = s.rtt_samples - old.map_or(0, |o| o.stats.rtt_samples.min(s.rtt_samples));
            let rtt_ns = s
                .rtt_sum_ns
                .saturating_sub(old.map_or(0, |o| o.stats.rtt_sum_ns));
            vec![
                t.name.clone(),
                per_sec(delta(&|t| t.stats.admitted)),
                per_sec(delta(&|t| t.stats.limited_local)),
                per_sec(delta(&|t| t.stats.limited_global)),
                per_sec(delta(&|t| t.stats.limited_concurrency)),
                per_sec(delta(&|t| t.quota.limited_fallback)),
                s.in_flight.to_string(),
                or_none(s.limit),
                match rtt_ns.checked_div(samples) {
                    Some(mean) => duration(Duration::from_nanos(mean)),
                    None => "-".into(),
                },
                q.state.map_or("-", state_name).to_string(),
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

fn balancers(before: &[BalancerSnapshot], now: &[BalancerSnapshot], secs: f64) -> String {
    let mut rows = Vec::new();
    for b in now {
        let old = before.iter().find(|o| o.name == b.name);
        let picks = |address: &str, picked: u64| {
            let was = old
                .and_then(|o| o.stats.backends.iter().find(|k| k.address == address))
                .map_or(0, |k| k.picked);
            picked.saturating_sub(was)
        };
        let total: u64 = b
            .stats
            .backends
            .iter()
            .map(|k| picks(&k.address, k.picked))
            .sum();
        for k in &b.stats.backends {
            let n = picks(&k.address, k.picked);
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
