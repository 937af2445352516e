//! Hosts as real processes: each host a table file of its own (its own host
//! id), each process a forked child at saturating demand, counting its
//! admissions per slice of the store's clock; and a watcher in the test's
//! process that records when host 0's task leaves and re-enters "open".

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use flowctrl::{QuotaState, Table, TableOptions, TaskConfig};

use super::worker::{self, Worker, Workers};
use super::*;

pub const TASK: &str = "api";

/// What the processes of a run saw.
pub struct Run {
    /// Admissions per slice (1 s), all processes.
    pub per_slice: BTreeMap<i64, u64>,
    /// The same, per host.
    pub per_host: Vec<BTreeMap<i64, u64>>,
    /// Host 0's quota statistics at the end.
    pub stats: flowctrl::QuotaStats,
    /// Every host's, host 0's first.
    pub all_stats: Vec<flowctrl::QuotaStats>,
    pub errors: u64,
    pub slowest: Duration,
    /// Host 0's task: when (since the start) it first left "open", and when
    /// it was open again after that.
    pub failed_at: Option<Duration>,
    pub open_again_at: Option<Duration>,
    /// How often host 0's task went from "failed" back to "open" (as seen
    /// every 5 ms): once per outage, unless it flips.
    pub reopened: u32,
    /// Every shard host 0's task reported down (`QuotaStats::shards_down`)
    /// in those samples, or'ed.
    pub shards_down_seen: u64,
}

/// The monotonic instant at which the wall clock reads the next whole
/// second.
pub fn next_wall_second() -> Duration {
    let now_us = wall_us() as u64;
    let next = (now_us / 1_000_000 + 1) * 1_000_000;
    monotonic() + Duration::from_micros(next - now_us)
}

/// `hosts` hosts × `procs` processes at saturating demand on task `name`
/// (with `config`) for `secs` from
/// `start`; `during(start)` runs in this process meanwhile (it kills a
/// server), while a watcher polls host 0's state.
pub fn run(
    scratch: &Scratch,
    opts: &TableOptions,
    (hosts, procs): (usize, usize),
    (name, config): (&str, TaskConfig),
    secs: f64,
    during: impl FnOnce(Duration) + Send,
) -> Run {
    let paths: Vec<PathBuf> = (0..hosts)
        .map(|h| scratch.path(&format!("host{h}")))
        .collect();
    let watch_tables: Vec<Table> = paths
        .iter()
        .map(|p| Table::open(p, opts).unwrap())
        .collect();
    let watch: Vec<_> = watch_tables
        .iter()
        .map(|t| t.task(name, &config).unwrap())
        .collect();
    let watched = &watch[0];
    let start = next_wall_second();
    let worker = Worker::new(name, config);
    let workers: Vec<_> = paths
        .iter()
        .flat_map(|p| std::iter::repeat_n((p.clone(), opts.clone(), worker.clone()), procs))
        .collect();
    let workers = Workers::fork(scratch, &workers, start, secs);
    let (mut failed_at, mut open_again_at, mut reopened) = (None, None, 0);
    let mut shards_down_seen = 0;
    std::thread::scope(|scope| {
        scope.spawn(|| during(start));
        sleep_until(start);
        let mut last = None;
        // FLOWCTRL_TEST_TRACE=1: every host's quota state and counts every
        // 5 ms on stderr (how a short slice was traced).
        let trace = std::env::var_os("FLOWCTRL_TEST_TRACE").is_some();
        while monotonic() < start + Duration::from_secs_f64(secs) {
            let stats = watched.quota_stats();
            let state = stats.state;
            if trace {
                let at = monotonic().saturating_sub(start).as_millis();
                for (h, t) in watch.iter().enumerate() {
                    let (q, s) = (t.quota_stats(), t.stats());
                    eprintln!(
                        "trace {at} ms h{h} {:?} pulls {} failed {} granted {} admitted {} lim_global {} lim_fallback {} down {}",
                        q.state,
                        q.pulls,
                        q.failed_pulls,
                        q.granted,
                        s.admitted,
                        s.limited_global,
                        q.limited_fallback,
                        q.shards_down
                    );
                }
            }
            shards_down_seen |= stats.shards_down;
            let at = monotonic().saturating_sub(start);
            if last == Some(QuotaState::Failed) && state == Some(QuotaState::Open) {
                reopened += 1;
            }
            if state != Some(QuotaState::Limited) {
                last = state;
            }
            if failed_at.is_none() && state == Some(QuotaState::Failed) {
                failed_at = Some(at);
            } else if failed_at.is_some()
                && open_again_at.is_none()
                && state == Some(QuotaState::Open)
            {
                open_again_at = Some(at);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let tallies = workers.tallies();
    let all = worker::sum(&tallies);
    Run {
        per_slice: all.per_slice,
        per_host: tallies
            .chunks(procs)
            .map(|host| worker::sum(host).per_slice)
            .collect(),
        stats: watched.quota_stats(),
        all_stats: watch.iter().map(|t| t.quota_stats()).collect(),
        errors: all.errors,
        slowest: all.slowest,
        failed_at,
        open_again_at,
        reopened,
        shards_down_seen,
    }
}

/// Asserts every full slice (not the first nor the last) admitted within
/// [0.98, 1.01] × `quota`.
pub fn assert_slices_exact(run: &Run, quota: f64) {
    let slices: Vec<_> = run.per_slice.iter().collect();
    assert!(slices.len() >= 4, "{:?}", run.per_slice);
    for (slice, n) in &slices[1..slices.len() - 1] {
        let ratio = **n as f64 / quota;
        assert!(
            (0.98..=1.01).contains(&ratio),
            "slice {slice} admitted {n} of {quota}: {:?}",
            run.per_slice
        );
    }
}
