//! Global quota across real processes and real Redis servers: accuracy per
//! slice, store outages and pauses, clock skew, a pull-lock holder killed,
//! and bad input. Every Redis test starts its own `redis-server` on a free
//! loopback port and stops it.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::redis::RedisServer;
use common::*;
use flowctrl::{
    Decision, ErrorKind, Limited, QuotaState, Table, TableOptions, Task, TaskConfig,
};

const RATE: f64 = 2000.0;

fn options(url: Option<String>, skew_ms: i64) -> TableOptions {
    let mut o = TableOptions::default();
    o.store.url = url;
    // These machines are shared and small: give Redis room to answer under
    // six busy processes (production keeps the few-ms default).
    o.store.timeout = Duration::from_millis(100);
    o.store.probe_interval = Duration::from_millis(1000);
    o.store.clock_skew = Duration::from_millis(skew_ms.unsigned_abs());
    o.store.clock_skew_negative = skew_ms < 0;
    o
}

fn wall_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// One worker: saturating demand for `secs`, counting admissions per slice
/// by the store's clock as this host sees it (wall + skew + offset), written
/// to `out`. Exit 1 if any acquire returned an error.
fn worker(path: &Path, opts: TableOptions, skew_ms: i64, start: Duration, secs: f64, out: PathBuf) -> i32 {
    let table = Table::open(path, &opts).unwrap();
    let task = table
        .task("api", &TaskConfig::new().global_rate(RATE))
        .unwrap();
    sleep_until(start);
    let end = start + Duration::from_secs_f64(secs);
    let mut counts: BTreeMap<i64, u64> = BTreeMap::new();
    let mut errors = 0;
    while monotonic() < end {
        match task.acquire(1) {
            Ok(Decision::Admitted(p)) => {
                let offset = task.quota_stats().clock_offset_us;
                let slice = (wall_us() + skew_ms * 1000 + offset) / 1_000_000;
                *counts.entry(slice).or_default() += 1;
                drop(p);
            }
            Ok(Decision::Limited(_)) => std::thread::sleep(Duration::from_micros(200)),
            Err(e) => {
                errors += 1;
                raw_eprint(&format!("acquire failed: {e}\n"));
            }
        }
    }
    let text: String = counts.iter().map(|(s, n)| format!("{s} {n}\n")).collect();
    std::fs::write(out, text).unwrap();
    (errors > 0) as i32
}

/// Runs `per_host` workers on each of `hosts` (table, skew) for `secs`, and
/// returns the admissions per slice summed over all of them.
fn run(scratch: &Scratch, hosts: &[(PathBuf, Option<String>, i64)], per_host: usize, secs: f64) -> BTreeMap<i64, u64> {
    let start = monotonic() + Duration::from_millis(500);
    let mut pids = KillOnDrop::default();
    let mut outs = Vec::new();
    for (h, (path, url, skew)) in hosts.iter().enumerate() {
        for w in 0..per_host {
            let out = scratch.path(&format!("counts-{h}-{w}"));
            outs.push(out.clone());
            let (path, opts, skew) = (path.clone(), options(url.clone(), *skew), *skew);
            pids.add(fork_guarded(move || worker(&path, opts, skew, start, secs, out)));
        }
    }
    for pid in pids.0.clone() {
        assert_eq!(wait(pid), 0, "a worker saw an error");
        pids.forget(pid);
    }
    let mut total = BTreeMap::new();
    for out in outs {
        for line in std::fs::read_to_string(out).unwrap().lines() {
            let (s, n) = line.split_once(' ').unwrap();
            *total.entry(s.parse::<i64>().unwrap()).or_insert(0u64) += n.parse::<u64>().unwrap();
        }
    }
    total
}

/// Every full slice (not the first or last seen) admitted within
/// [0.98, 1.01] × the slice's quota.
fn assert_accurate(per_slice: &BTreeMap<i64, u64>) {
    let slices: Vec<_> = per_slice.iter().collect();
    assert!(slices.len() >= 4, "too few slices: {per_slice:?}");
    for (slice, n) in &slices[1..slices.len() - 1] {
        let ratio = **n as f64 / RATE;
        assert!(
            (0.98..=1.01).contains(&ratio),
            "slice {slice} admitted {n} of {RATE}: {per_slice:?}"
        );
    }
    eprintln!("admitted per slice: {per_slice:?}");
}

#[test]
fn embedded_store_one_host_three_processes_admits_the_rate_per_slice() {
    let scratch = Scratch::new("quota-embedded");
    let hosts = [(scratch.path("table"), None, 0)];
    assert_accurate(&run(&scratch, &hosts, 3, 5.0));
}

#[test]
fn redis_two_hosts_three_processes_each_admit_the_rate_per_slice() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("quota-redis");
    let hosts = [
        (scratch.path("a"), Some(redis.url()), 0),
        (scratch.path("b"), Some(redis.url()), 0),
    ];
    let per_slice = run(&scratch, &hosts, 3, 5.0);
    assert_accurate(&per_slice);
    for (path, url, skew) in &hosts {
        let table = Table::open(path, &options(url.clone(), *skew)).unwrap();
        let stats = table.task("api", &TaskConfig::new()).unwrap().quota_stats();
        eprintln!("{}: {stats:?}", path.display());
    }
    let commands = redis.pull_round_trips();
    let admitted: u64 = per_slice.values().sum();
    eprintln!("Redis round trips per admitted request: {commands} / {admitted}");
    assert!(commands as f64 / admitted as f64 <= 0.01, "{commands} round trips for {admitted}");
}

#[test]
fn a_host_whose_clock_is_700_ms_ahead_spends_from_the_same_keys() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("quota-skew");
    let hosts = [
        (scratch.path("a"), Some(redis.url()), 0),
        (scratch.path("b"), Some(redis.url()), 700),
    ];
    assert_accurate(&run(&scratch, &hosts, 3, 5.0));
    let table = Table::open(scratch.path("b"), &options(Some(redis.url()), 700)).unwrap();
    let offset = table.task("api", &TaskConfig::new()).unwrap().quota_stats().clock_offset_us;
    assert!((-720_000..=-680_000).contains(&offset), "measured offset {offset} µs");
}
