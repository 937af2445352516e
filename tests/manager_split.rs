//! Two equal hosts under a threshold the manager moves: each host (a real
//! process with its own table) is offered 300/s; its service completes
//! `CAPACITY` requests per wall second and a request past that is released
//! "dropped". `flowctrl manage` (real, against a real Redis) starts the
//! threshold at 600/s and moves it by the dropped ratio (target 5 %). The
//! capacity halves mid-run and comes back.
//!
//! Equal demand gets an equal share in every slice, whatever the threshold
//! does: a host given more than half drops what the other could have
//! served, the drops read as overload, and the threshold settles below the
//! service. And the policy finds the capacity: the settled threshold is
//! within [0.9, 1.1] × what the hosts complete, and so is their goodput.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::redis::RedisServer;
use common::*;
use flowctrl::{Decision, Outcome, Table, TableOptions, TaskConfig};

const HOSTS: usize = 2;
/// Requests/s offered to each host.
const OFFERED: f64 = 300.0;
/// Requests each host's service completes per wall second, per phase.
const CAPACITY: [u64; 3] = [100, 50, 100];
/// Seconds of each phase.
const PHASES: [u64; 3] = [10, 12, 18];
/// Callers per host.
const THREADS: usize = 3;
/// Slices (of 1 s) a phase gives the threshold to come near the capacity:
/// from half capacity five probes (+4, 8, 16, 32, 32 %) of two slices
/// each, after a slice or two held at the knee.
const SETTLE: u64 = 12;

/// The capacity per host in the second `s` of the run.
fn capacity_at(s: u64) -> u64 {
    let mut end = 0;
    for (cap, len) in CAPACITY.iter().zip(PHASES) {
        end += len;
        if s < end {
            return *cap;
        }
    }
    CAPACITY[2]
}

/// One host: open-loop callers until `end`; per wall second "admitted
/// success dropped" lines in `out`.
fn host(
    url: &str,
    path: &std::path::Path,
    id: &str,
    start: Duration,
    first: u64,
    out: &std::path::Path,
) -> i32 {
    let mut o = TableOptions::default();
    o.store.url = Some(url.to_string());
    o.store.timeout = Duration::from_millis(500);
    o.store.host_id = Some(id.to_string());
    let table = Table::open(path, &o).unwrap();
    let mut c = TaskConfig::default();
    c.global.global_rate = Some(600.0);
    c.global.slice_ms = Some(1000);
    let task = table.task("split", &c).unwrap();
    let total: u64 = PHASES.iter().sum();
    let end = start + Duration::from_secs(total);
    // The service: requests completed per wall second, shared by the callers.
    let served: Vec<std::sync::atomic::AtomicU64> =
        (0..total + 2).map(|_| Default::default()).collect();
    sleep_until(start);
    let counts = std::thread::scope(|scope| {
        let (task, served) = (&task, &served);
        let workers: Vec<_> = (0..THREADS)
            .map(|k| {
                scope.spawn(move || {
                    let period = Duration::from_secs_f64(THREADS as f64 / OFFERED);
                    let mut next = start + period.mul_f64(k as f64 / THREADS as f64);
                    let mut counts = managed::Counts::new();
                    while next < end {
                        sleep_until(next);
                        next += period;
                        if let Decision::Admitted(p) = task.acquire(1).unwrap() {
                            let second = (wall_us() / 1_000_000) as u64;
                            let s = second.saturating_sub(first).min(total + 1);
                            let n = served[s as usize]
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let ok = n < capacity_at(s);
                            let e = counts.entry(second).or_default();
                            e[0] += 1;
                            e[if ok { 1 } else { 2 }] += 1;
                            let outcome = if ok {
                                Outcome::Success
                            } else {
                                Outcome::Dropped
                            };
                            p.release(outcome).unwrap();
                        }
                    }
                    counts
                })
            })
            .collect();
        managed::sum(workers.into_iter().map(|w| w.join().unwrap()))
    });
    managed::write(out, &counts);
    0
}

#[test]
fn equal_hosts_share_equally_while_the_manager_finds_the_capacity() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("manager-split");
    let url = redis.url();
    let file = scratch.path("fleet.toml");
    std::fs::write(
        &file,
        format!(
            "[table]\nstore = \"{url}\"\n[manager]\nlease_ms = 1000\n\
             [tasks.\"split\"]\nglobal_rate = 600\nslice_ms = 1000\n\
             [tasks.\"split\".policy]\nmin_rate = 50\nmax_rate = 1000\ndropped_ratio = 0.05\n"
        ),
    )
    .unwrap();
    let _manager = managed::Manager::start(&file, &scratch.path("manager.log"));
    // The run starts on a wall second two seconds from now.
    let now_ms = wall_us() as u64 / 1000;
    let first = now_ms / 1000 + 3;
    let start = monotonic() + Duration::from_millis(first * 1000 - now_ms);
    let total: u64 = PHASES.iter().sum();
    let mut pids = KillOnDrop::default();
    for i in 0..HOSTS {
        let (url, path, out) = (
            url.clone(),
            scratch.path(&format!("host-{i}")),
            scratch.path(&format!("counts-{i}")),
        );
        pids.add(fork_guarded(move || {
            host(&url, &path, &format!("host-{i}"), start, first, &out)
        }));
    }
    // The threshold in force, polled: (second, threshold).
    let mut thresholds: BTreeMap<u64, f64> = BTreeMap::new();
    let end = start + Duration::from_secs(total);
    while monotonic() < end {
        let t: Option<f64> = redis.command(&["HGET", "flowctrl:{split}:manager", "threshold"]);
        thresholds.insert(wall_us() as u64 / 1_000_000, t.unwrap_or(600.0));
        std::thread::sleep(Duration::from_millis(50));
    }
    for pid in std::mem::take(&mut pids.0) {
        assert_eq!(wait(pid), 0, "a host failed");
    }
    let mut rows: BTreeMap<u64, [[u64; 3]; HOSTS]> = BTreeMap::new();
    for i in 0..HOSTS {
        for (s, c) in managed::read(&scratch.path(&format!("counts-{i}"))) {
            rows.entry(s).or_default()[i] = c;
        }
    }
    let row = |s: u64| rows.get(&s).copied().unwrap_or_default();
    // The threshold a second ran with: the last one read before it began
    // (the manager writes ahead of the slice it moves).
    let threshold = |s: u64| thresholds.range(..s).next_back().map_or(600.0, |(_, t)| *t);
    let shown: Vec<String> = (first..first + total)
        .map(|s| {
            let r = row(s);
            format!(
                "{}: {:.0} {:?} dropped {:?}",
                s - first,
                threshold(s),
                r.map(|h| h[0]),
                r.map(|h| h[2])
            )
        })
        .collect();
    eprintln!("second: threshold admitted dropped\n{}", shown.join("\n"));

    // Equal demand, equal share: in every second the slice is divided
    // (from the manager's first threshold on, its first second included),
    // the two hosts' admissions differ by a few permits. Before it, the
    // start value covers all both hosts ask: nothing is divided, and a
    // host without history is still ramping its chunks up.
    let divided = (first..first + total)
        .find(|s| threshold(*s) < 600.0)
        .expect("the manager moved the threshold");
    let uneven: Vec<&String> = (divided..first + total)
        .zip(&shown[(divided - first) as usize..])
        .filter(|(s, _)| {
            let [a, b] = row(*s).map(|h| h[0]);
            a.abs_diff(b) > 6
        })
        .map(|(_, line)| line)
        .collect();
    assert!(
        uneven.is_empty(),
        "hosts asking the same got unequal shares: {uneven:?}"
    );

    // The policy finds the capacity in each phase: within SETTLE slices
    // of the change the threshold is within [0.9, 1.1] × the capacity, and
    // from there to the phase's end its median is, and so is the goodput.
    let mut at = first;
    for (cap, len) in CAPACITY.iter().zip(PHASES) {
        let capacity = (*cap * HOSTS as u64) as f64;
        let near = |t: f64| (0.9 * capacity..=1.1 * capacity).contains(&t);
        let back = (at..at + SETTLE)
            .find(|s| near(threshold(*s)))
            .unwrap_or_else(|| panic!("no threshold near {capacity}/s within {SETTLE} slices"));
        let settled = back..at + len;
        let mut held: Vec<f64> = settled.clone().map(threshold).collect();
        held.sort_by(f64::total_cmp);
        let median = held[held.len() / 2];
        let goodput = settled
            .clone()
            .map(|s| row(s).iter().map(|h| h[1]).sum::<u64>() as f64)
            .sum::<f64>()
            / settled.clone().count() as f64;
        eprintln!(
            "capacity {capacity}/s: near it {} slices in; threshold median {median:.0}, goodput {goodput:.0}/s",
            back - at
        );
        assert!(
            near(median),
            "threshold {median} settled for a capacity of {capacity}/s"
        );
        assert!(
            goodput >= 0.9 * capacity,
            "goodput {goodput}/s of {capacity}/s"
        );
        at += len;
    }
}
