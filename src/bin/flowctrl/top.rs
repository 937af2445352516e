//! `top`: rates between two samples of a read-only view, redrawn every
//! interval (plain ANSI: clear, home, the frame), or printed once.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use flowctrl::{BalancerSnapshot, TaskSnapshot, View};

use crate::show::state_name;
use crate::text::{duration, or_none, per_sec, table};
use crate::{Result, invalid};

/// What one sample read.
struct Sample {
    at: Instant,
    tasks: Vec<TaskSnapshot>,
    balancers: Vec<BalancerSnapshot>,
    processes: usize,
    dead: usize,
}

impl Sample {
    fn take(view: &View) -> Self {
        let processes = view.processes();
        Self {
            at: Instant::now(),
            tasks: view.tasks(),
            balancers: view.balancers(),
            processes: processes.len(),
            dead: processes.iter().filter(|p| p.alive == Some(false)).count(),
        }
    }
}

pub(crate) fn run(path: &Path, once: bool, interval: f64) -> Result {
    if !(0.1..=3600.0).contains(&interval) {
        return Err(invalid(format!(
            "--interval must be between 0.1 and 3600 seconds, not {interval}"
        )));
    }
    let view = View::open(path)?;
    let interval = Duration::from_secs_f64(interval);
    let mut before = Sample::take(&view);
    loop {
        std::thread::sleep(interval);
        let now = Sample::take(&view);
        let frame = frame(&view, &before, &now);
        let text = crate::text::printable(&frame);
        let mut out = std::io::stdout().lock();
        let _ = if once {
            write!(out, "{text}")
        } else {
            write!(out, "\x1b[H\x1b[2J{text}")
        };
        let _ = out.flush();
        if once {
            return Ok(());
        }
        before = now;
    }
}

fn frame(view: &View, before: &Sample, now: &Sample) -> String {
    let secs = now.at.duration_since(before.at).as_secs_f64().max(1e-9);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "flowctrl top  {}  processes {} ({} dead)  rates over {:.1} s",
        view.path().display(),
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
