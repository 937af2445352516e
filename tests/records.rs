//! Thresholds owned by the store: a task's record wins over every host's
//! own numbers, a change reaches every host within a slice, removing it
//! returns them to their own; without a record, hosts cut in other slices
//! spend by the first host's; bad records are refused, never obeyed. Real
//! `redis-server`, hosts as tables of their own (each its host id).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::redis::RedisServer;
use common::*;
use flowctrl::{
    Decision, ErrorKind, Fallback, GlobalConfig, GlobalSource, Store, StoreOptions, Table, Task,
    TaskConfig,
};

/// How often a host probes a failed store.
const PROBE: Duration = Duration::from_millis(100);

fn store(url: &str) -> Store {
    Store::open(&StoreOptions {
        url: Some(url.to_string()),
        timeout: Duration::from_millis(500),
        ..StoreOptions::default()
    })
    .unwrap()
}

fn rate(r: f64) -> GlobalConfig {
    GlobalConfig {
        global_rate: Some(r),
        ..GlobalConfig::default()
    }
}

/// Saturating demand from two threads per task for `secs`, counting
/// admissions per second of the wall clock (the store's, on one machine);
/// `during` runs meanwhile, and `stop(i)` ends task `i`'s threads early.
fn saturate(tasks: &[Task], secs: f64, during: impl FnOnce(&dyn Fn(usize))) -> BTreeMap<i64, u64> {
    let stops: Vec<AtomicBool> = tasks.iter().map(|_| AtomicBool::new(false)).collect();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    std::thread::scope(|scope| {
        let workers: Vec<_> = tasks
            .iter()
            .zip(&stops)
            .flat_map(|(task, stop)| [(task, stop), (task, stop)])
            .map(|(task, stop)| {
                scope.spawn(move || {
                    let mut counts: BTreeMap<i64, u64> = BTreeMap::new();
                    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
                        match task.acquire(1).unwrap() {
                            Decision::Admitted(p) => {
                                *counts.entry(wall_us() / 1_000_000).or_default() += 1;
                                drop(p);
                            }
                            Decision::Limited(_) => std::thread::sleep(Duration::from_micros(200)),
                        }
                    }
                    counts
                })
            })
            .collect();
        during(&|i| stops[i].store(true, Ordering::Relaxed));
        let mut total: BTreeMap<i64, u64> = BTreeMap::new();
        for w in workers {
            for (s, n) in w.join().unwrap() {
                *total.entry(s).or_default() += n;
            }
        }
        total
    })
}

/// The full seconds of a run (not its first nor its last).
fn full(per_second: &BTreeMap<i64, u64>) -> Vec<(i64, u64)> {
    let all: Vec<_> = per_second.iter().map(|(s, n)| (*s, *n)).collect();
    all[1..all.len() - 1].to_vec()
}

/// Polls until every task has `global_rate`; how long it took.
fn until_rate(tasks: &[Task], rate: f64, within: Duration) -> Duration {
    let began = Instant::now();
    while tasks
        .iter()
        .any(|t| t.settings().global.global_rate != rate)
    {
        assert!(
            began.elapsed() < within,
            "not adopted within {within:?}: {:?}",
            tasks.iter().map(|t| t.settings()).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    began.elapsed()
}

#[test]
fn a_stored_record_wins_and_its_changes_reach_every_host_within_a_slice() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("records-win");
    let url = redis.url();
    let fleet = store(&url);
    assert_eq!(fleet.task_config("api").unwrap(), None);
    let v1 = fleet.set_task_config("api", &rate(1000.0)).unwrap();
    let stored = fleet.task_config("api").unwrap().unwrap();
    assert_eq!((stored.version, stored.settings.global_rate), (v1, 1000.0));
    // Each host's own number is 3000/s: the record's 1000 wins.
    let own = TaskConfig::new().global_rate(3000.0);
    let tables: Vec<Table> = ["a", "b"]
        .iter()
        .map(|h| Table::open(scratch.path(h), &host_options(&url, *h).probe(PROBE)).unwrap())
        .collect();
    let tasks: Vec<Task> = tables
        .iter()
        .map(|t| t.task("api", &own).unwrap())
        .collect();
    let mut adopted = Duration::ZERO;
    let mut changed = (0, 0);
    let per_second = saturate(&tasks, 6.5, |_| {
        std::thread::sleep(Duration::from_millis(3300));
        let before = wall_us() / 1_000_000;
        let v2 = fleet.set_task_config("api", &rate(500.0)).unwrap();
        assert!(v2 > v1, "versions grow");
        changed = (before, wall_us() / 1_000_000);
        adopted = until_rate(&tasks, 500.0, Duration::from_secs(1));
    });
    eprintln!("per second: {per_second:?}; adopted by both in {adopted:?}");
    for (second, n) in full(&per_second) {
        // The slice the change fell in serves out its key, made before.
        let by = |quota: f64| (0.98..=1.01).contains(&(n as f64 / quota));
        let ok = if second <= changed.0 {
            by(1000.0)
        } else if second > changed.1 {
            by(500.0)
        } else {
            by(1000.0) || by(500.0)
        };
        assert!(
            ok,
            "second {second} (changed in {changed:?}) admitted {n}: {per_second:?}"
        );
    }
    for t in &tasks {
        let s = t.settings();
        assert_eq!(s.global_source, GlobalSource::Store);
        assert_eq!(s.global.global_rate, 500.0);
        assert_eq!(
            t.quota_stats().config_conflicts,
            0,
            "a record is no conflict"
        );
    }
    // Removing the record returns every host to its own number.
    assert!(fleet.remove_task_config("api").unwrap());
    assert!(!fleet.remove_task_config("api").unwrap());
    let per_second = saturate(&tasks, 3.5, |_| {
        until_rate(&tasks, 3000.0, Duration::from_secs(1));
    });
    for t in &tasks {
        assert_eq!(t.settings().global_source, GlobalSource::Local);
    }
    let last = full(&per_second);
    let (_, n) = last[last.len() - 1];
    assert!((2940..=3030).contains(&n), "back to 3000/s: {per_second:?}");
}

/// A record change reaches an unsharded task's host in the reply of its
/// next pull: where the record keeps its slicing and the slice's key
/// exists, that pull is granted too (one script run, the record read
/// inside it: no bounce, no read of the record of its own); where the
/// slicing changes, the host is refused once and asks again, the record
/// still carried by the reply.
#[test]
fn a_record_change_rides_on_the_next_pull() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("records-ride");
    let url = redis.url();
    let fleet = store(&url);
    fleet.set_task_config("api", &rate(10_000.0)).unwrap();
    let table = Table::open(scratch.path("a"), &host_options(&url, "a")).unwrap();
    let task = table
        .task("api", &TaskConfig::new().global_rate(3000.0))
        .unwrap();
    // Early in a slice, so the key outlives the steps below.
    sleep_until(common::hosts::next_wall_second() + Duration::from_millis(50));
    assert!(task.pull_quota(10).unwrap().is_ok());
    assert_eq!(task.settings().global.global_rate, 10_000.0);
    let calls = |name: &str| redis.commands().get(name).copied().unwrap_or(0);
    let counts = || (calls("evalsha"), calls("hgetall"), calls("hget"));
    fleet.set_task_config("api", &rate(8_000.0)).unwrap();
    let before = counts();
    let granted = task.pull_quota(10).unwrap();
    let after = counts();
    assert_eq!(granted, Ok(10), "granted across the change");
    assert_eq!(task.settings().global.global_rate, 8_000.0, "and adopted");
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1, 1),
        "one script run, the record read inside it (evalsha, hgetall): {before:?} -> {after:?}"
    );

    // A new slicing: the key is cut otherwise, so no grant by the old one.
    fleet
        .set_task_config(
            "api",
            &GlobalConfig {
                slice_ms: Some(500),
                ..rate(8_000.0)
            },
        )
        .unwrap();
    let before = counts();
    assert!(task.pull_quota(10).unwrap().is_ok());
    let after = counts();
    assert_eq!(task.settings().global.slice_ms, 500, "adopted");
    // HGETALL: the record, inside the first run, and the slice before's
    // key, read when the second run creates the new slicing's key (a read
    // of the record of the host's own would be a third).
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (2, 2),
        "refused once, then granted: {before:?} -> {after:?}"
    );
}

#[test]
fn registrations_and_updates_are_of_the_hosts_own_numbers_under_a_record() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("records-own");
    let url = redis.url();
    let fleet = store(&url);
    fleet
        .set_task_config(
            "api",
            &GlobalConfig {
                global_rate: Some(800.0),
                slice_ms: Some(500),
                fallback: Some(Fallback::Deny),
                ..GlobalConfig::default()
            },
        )
        .unwrap();
    let table = Table::open(scratch.path("a"), &host_options(&url, "a").probe(PROBE)).unwrap();
    let own = TaskConfig::new().global_rate(3000.0).local_rate(5000.0);
    let task = table.task("api", &own).unwrap();
    assert_eq!(task.pull_quota(10).unwrap(), Ok(10));
    let s = task.settings();
    assert_eq!(s.global_source, GlobalSource::Store);
    assert_eq!(
        (s.global.global_rate, s.global.slice_ms, s.global.fallback),
        (800.0, 500, Fallback::Deny),
        "the record's numbers, its slicing included"
    );
    // The keys are cut in the record's 500 ms slices.
    let slice = wall_us() / 1000 / 500;
    let keys: Vec<String> = redis.command(&["KEYS", "flowctrl:{api}:*"]);
    assert!(
        keys.iter()
            .filter_map(|k| k.rsplit(':').next()?.parse::<i64>().ok())
            .any(|s| (slice - 2..=slice).contains(&s)),
        "{keys:?} (slice {slice})"
    );
    // Another process of the host registers with the same own numbers:
    // no mismatch with the store's; different own numbers still mismatch.
    let again = Table::open(scratch.path("a"), &host_options(&url, "a").probe(PROBE)).unwrap();
    again.task("api", &own).unwrap();
    let err = again
        .task("api", &TaskConfig::new().global_rate(2000.0))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConfigMismatch, "{err}");
    // An update changes the host's own numbers; the record stays in force.
    task.update(&TaskConfig::new().global_rate(2500.0).local_rate(4000.0))
        .unwrap();
    let s = task.settings();
    assert_eq!(
        (s.global_source, s.global.global_rate),
        (GlobalSource::Store, 800.0)
    );
    assert_eq!(s.local.local_rate, 4000.0);
    fleet.remove_task_config("api").unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(task.pull_quota(10).unwrap(), Ok(10));
    let s = task.settings();
    assert_eq!(s.global_source, GlobalSource::Local);
    assert_eq!(
        (s.global.global_rate, s.global.slice_ms, s.global.fallback),
        (2500.0, 1000, Fallback::Share),
        "back to its own, as updated"
    );
}

#[test]
fn hosts_cut_in_other_slices_spend_from_the_same_keys_until_the_other_goes() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("records-slices");
    let url = redis.url();
    let a = Table::open(scratch.path("a"), &host_options(&url, "a").probe(PROBE)).unwrap();
    let b = Table::open(scratch.path("b"), &host_options(&url, "b").probe(PROBE)).unwrap();
    let tasks = [
        a.task("api", &TaskConfig::new().global_rate(1000.0))
            .unwrap(),
        b.task("api", &TaskConfig::new().global_rate(1000.0).slice_ms(500))
            .unwrap(),
    ];
    let per_second = saturate(&tasks, 5.5, |_| {});
    eprintln!("per second: {per_second:?}");
    // One key set: 1000 per second, never the two slicings added up.
    for (second, n) in full(&per_second) {
        assert!(
            (980..=1010).contains(&n),
            "second {second} admitted {n}: {per_second:?}"
        );
    }
    let conflicts: Vec<u64> = tasks
        .iter()
        .map(|t| t.quota_stats().config_conflicts)
        .collect();
    let slices: Vec<u32> = tasks.iter().map(|t| t.settings().global.slice_ms).collect();
    assert_eq!(slices[0], slices[1], "one slicing: {slices:?}");
    assert!(
        conflicts.iter().filter(|c| **c > 0).count() == 1,
        "the host that adopted the other's slicing counts it: {conflicts:?}"
    );
    // The first host goes: its slicing expires with its keys, and the other
    // returns to its own.
    let (gone, stays) = if conflicts[0] > 0 { (1, 0) } else { (0, 1) };
    let own = [1000, 500][stays];
    eprintln!("host {gone} stops pulling");
    let began = Instant::now();
    while tasks[stays].settings().global.slice_ms != own {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "stuck in the other's slicing"
        );
        let _ = tasks[stays].acquire(1).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(tasks[stays].settings().global_source, GlobalSource::Local);
}

/// Writes a record by hand, as an operator's typo would.
fn hand_written(redis: &RedisServer, fields: &[(&str, &str)]) {
    let mut args = vec!["HSET", "flowctrl:cfg:{api}"];
    for (k, v) in fields {
        args.push(k);
        args.push(v);
    }
    redis.command::<()>(&args);
}

#[test]
fn bad_records_are_refused_with_their_field_and_never_obeyed() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("records-bad");
    let url = redis.url();
    let fleet = store(&url);
    for bad in [
        rate(0.0),
        rate(-1.0),
        rate(f64::NAN),
        GlobalConfig::default(),
        GlobalConfig {
            slice_ms: Some(5),
            ..rate(100.0)
        },
        GlobalConfig {
            chunk: Some(1000),
            ..rate(100.0)
        },
        GlobalConfig {
            global_burst: Some(1000),
            ..rate(100.0)
        },
    ] {
        let err = fleet.set_task_config("api", &bad).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{bad:?}: {err}");
    }
    assert!(fleet.set_task_config("", &rate(1.0)).is_err());
    assert_eq!(fleet.task_config("api").unwrap(), None, "nothing written");

    let table = Table::open(scratch.path("a"), &host_options(&url, "a").probe(PROBE)).unwrap();
    let task = table
        .task("api", &TaskConfig::new().global_rate(1000.0))
        .unwrap();
    for (fields, says) in [
        (vec![("version", "5"), ("global_rate", "-5")], "global_rate"),
        (vec![("version", "6"), ("global_rate", "lots")], "a rate"),
        (
            vec![
                ("version", "7"),
                ("global_rate", "100"),
                ("fallback", "maybe"),
            ],
            "fallback",
        ),
        (
            vec![("version", "8"), ("slice_ms", "500")],
            "no global_rate",
        ),
        (vec![("version", "x"), ("global_rate", "5")], "version"),
        (vec![("version", "1e30"), ("global_rate", "5")], "version"),
    ] {
        redis.command::<()>(&["DEL", "flowctrl:cfg:{api}"]);
        hand_written(&redis, &fields);
        let err = fleet.task_config("api").unwrap_err();
        assert!(err.to_string().contains(says), "{fields:?}: {err}");
        // The host refuses it and keeps spending by its own numbers: no
        // loop of refreshes, no stall.
        assert_eq!(task.pull_quota(10).unwrap(), Ok(10), "{fields:?}");
        assert_eq!(task.pull_quota(10).unwrap(), Ok(10), "{fields:?}");
        let s = task.settings();
        assert_eq!(
            (s.global_source, s.global.global_rate),
            (GlobalSource::Local, 1000.0),
            "{fields:?}"
        );
    }
    // A good record is adopted; a bad edit of it keeps the good numbers.
    redis.command::<()>(&["DEL", "flowctrl:cfg:{api}"]);
    // Its whole slice released at once: this part is not about smoothing.
    let whole = GlobalConfig {
        global_burst: Some(400),
        ..rate(400.0)
    };
    fleet.set_task_config("api", &whole).unwrap();
    assert_eq!(task.pull_quota(10).unwrap(), Ok(10));
    assert_eq!(task.settings().global.global_rate, 400.0);
    hand_written(
        &redis,
        &[("version", "9007199254740000"), ("global_rate", "-1")],
    );
    assert_eq!(task.pull_quota(10).unwrap(), Ok(10));
    let s = task.settings();
    assert_eq!(
        (s.global_source, s.global.global_rate),
        (GlobalSource::Store, 400.0)
    );
    // The census reads the record's slicing when not told.
    assert_eq!(
        fleet.fleet("api", None).unwrap().slice_ms,
        1000,
        "a refused record's slicing is not read either"
    );
}

/// A shape key set by hand (or corrupted) to a slicing no host may have is
/// refused as a store failure: a log line, a failed pull counted, the
/// fallback deciding, the store probed once per probe interval. Obeyed, it
/// cut the host's slices to 1 ms: nothing admitted, ~10,000 pulls a second.
#[test]
fn an_out_of_range_shape_key_is_refused_and_floods_nothing() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("records-shape");
    let url = redis.url();
    for shape in ["1", "0", "-5", "99", "60001", "1e300", "1.5"] {
        redis.command::<()>(&["SET", "flowctrl:{api}:shape", shape]);
        let table = Table::open(
            scratch.path(&format!("t{shape}")),
            &host_options(&url, "a").probe(PROBE),
        )
        .unwrap();
        let task = table
            .task(
                "api",
                &TaskConfig::new()
                    .global_rate(1000.0)
                    .fallback(Fallback::Rate(200.0)),
            )
            .unwrap();
        let before = redis.pull_round_trips();
        let counts = saturate(std::slice::from_ref(&task), 1.0, |_| {});
        let admitted: u64 = counts.values().sum();
        let pulls = redis.pull_round_trips() - before;
        let q = task.quota_stats();
        // One probe per 100 ms interval (±20 %), and the first pull.
        assert!(pulls <= 20, "shape {shape}: {pulls} pulls in 1 s");
        assert!(q.failed_pulls >= 1, "shape {shape}: {q:?}");
        assert!(
            admitted >= 50,
            "shape {shape}: the fallback admitted {admitted}"
        );
        assert_eq!(task.settings().global.slice_ms, 1000, "shape {shape}");
        drop(task);
        drop(table);
    }
}
