//! A fleet that stays exact: the global quota through the failures a fleet
//! on one Redis meets. A key lost and created anew (a restart, a failover to
//! an empty replica) deducts what each host already took of its slice, once;
//! an outage admits by the fallback policy (by default each host's own
//! share), not the global rate on every host; deny, local and a fixed rate
//! behave as named, under the local limits. Real `redis-server`s on
//! loopback, real processes.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::redis::RedisServer;
use common::worker::{self, Tally, Worker, Workers};
use common::*;
use flowctrl::{Decision, Fallback, QuotaState, Table, TableOptions, TaskConfig};

const RATE: f64 = 2000.0;
/// How often a host probes a failed store.
const PROBE: Duration = Duration::from_millis(100);

/// The slice key's `left` field, as the store has it.
fn left(redis: &RedisServer, task: &str, slice: u64) -> i64 {
    let v: Option<String> =
        redis.command(&["HGET", &format!("flowctrl:{{{task}}}:{slice}"), "left"]);
    v.map_or(-1, |v| v.parse().unwrap())
}

/// The current 60-s slice, and whether at least `margin` of it is left.
fn minute_slice(margin: Duration) -> Option<u64> {
    let ms = (wall_us() / 1000) as u64;
    (60_000 - ms % 60_000 > margin.as_millis() as u64).then_some(ms / 60_000)
}

fn wait_for_minute_slice(margin: Duration) -> u64 {
    loop {
        if let Some(s) = minute_slice(margin) {
            return s;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_key_created_anew_deducts_what_each_host_took_once() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("fleet-anew");
    // The whole slice released at once: this test is of deductions.
    let config = TaskConfig::new()
        .global_rate(2000.0)
        .slice_ms(60_000)
        .global_burst(120_000);
    let quota = 120_000i64; // 2000/s × 60 s
    let slice = wait_for_minute_slice(Duration::from_secs(10));
    let a = Table::open(
        scratch.path("a"),
        &host_options(&redis.url(), "host-a").probe(PROBE),
    )
    .unwrap();
    let b = Table::open(
        scratch.path("b"),
        &host_options(&redis.url(), "host-b").probe(PROBE),
    )
    .unwrap();
    let (ta, tb) = (a.task("t", &config).unwrap(), b.task("t", &config).unwrap());
    assert_eq!(ta.pull_quota(300).unwrap(), Ok(300));
    assert_eq!(tb.pull_quota(200).unwrap(), Ok(200));
    assert_eq!(left(&redis, "t", slice), quota - 500);
    // The store loses the key (a restart, a failover to an empty replica).
    redis.command::<()>(&["FLUSHALL"]);
    // Each host's first pull from the new key pays for what it already had.
    assert_eq!(ta.pull_quota(100).unwrap(), Ok(100));
    assert_eq!(left(&redis, "t", slice), quota - 300 - 100);
    assert_eq!(tb.pull_quota(100).unwrap(), Ok(100));
    assert_eq!(left(&redis, "t", slice), quota - 500 - 200);
    // Once: later pulls cost only what they take.
    assert_eq!(ta.pull_quota(50).unwrap(), Ok(50));
    assert_eq!(tb.pull_quota(50).unwrap(), Ok(50));
    assert_eq!(left(&redis, "t", slice), quota - 500 - 200 - 100);
    assert_eq!(ta.quota_stats().hosts_seen, 2);
    // A census record of garbage reads as a host the key knows nothing of:
    // it deducts what host-a claims (all it took this slice) once more —
    // fewer admitted, never more.
    let key = format!("flowctrl:{{t}}:{slice}");
    redis.command::<()>(&["HSET", &key, "host-a", "garbage"]);
    assert_eq!(ta.pull_quota(10).unwrap(), Ok(10));
    assert_eq!(
        left(&redis, "t", slice),
        quota - 500 - 200 - 100 - (300 + 100 + 50) - 10
    );
    assert_eq!(
        slice,
        minute_slice(Duration::ZERO).unwrap(),
        "stayed in one slice"
    );
}

#[test]
fn fallback_admissions_are_deducted_when_the_store_returns() {
    let mut redis = RedisServer::start();
    let scratch = Scratch::new("fleet-fallback");
    let slice = wait_for_minute_slice(Duration::from_secs(15));
    let opts = host_options(&redis.url(), "host-a").probe(PROBE);
    let table = Table::open(scratch.path("a"), &opts).unwrap();
    let task = table
        .task(
            "t",
            &TaskConfig::new()
                .global_rate(100.0)
                .slice_ms(60_000)
                .global_burst(6000)
                .fallback(Fallback::Local),
        )
        .unwrap();
    assert_eq!(task.pull_quota(40).unwrap(), Ok(40));
    redis.kill();
    // Spend the 40, then admit 25 more by the local fallback.
    let mut admitted = 0;
    while admitted < 65 {
        match task.acquire(1).unwrap() {
            Decision::Admitted(_) => admitted += 1,
            Decision::Limited(why) => panic!("refused after {admitted}: {why:?}"),
        }
    }
    assert_eq!(task.quota_stats().state, Some(QuotaState::Failed));
    redis.restart();
    // The first pull from the new key pays for the 40 the lost key granted
    // and the 25 of the fallback.
    assert_eq!(task.pull_quota(10).unwrap(), Ok(10));
    assert_eq!(left(&redis, "t", slice), 6000 - 40 - 25 - 10);
    assert_eq!(task.pull_quota(10).unwrap(), Ok(10));
    assert_eq!(left(&redis, "t", slice), 6000 - 40 - 25 - 20, "once");
    assert_eq!(
        slice,
        minute_slice(Duration::ZERO).unwrap(),
        "stayed in one slice"
    );
}

/// Forks the workers (table, pace) at `start`; `during` runs in this process
/// meanwhile; sums their tallies.
fn run(
    scratch: &Scratch,
    workers: &[(PathBuf, TableOptions, Option<f64>)],
    config: TaskConfig,
    start: Duration,
    secs: f64,
    during: impl FnOnce(),
) -> Tally {
    let workers: Vec<_> = workers
        .iter()
        .map(|(path, opts, pace)| {
            let worker = Worker::new("api", config).pace(*pace);
            (path.clone(), opts.clone(), worker)
        })
        .collect();
    let forked = Workers::fork(scratch, &workers, start, secs);
    during();
    worker::sum(&forked.tallies())
}

/// The monotonic instant at which the wall clock reads the next whole
/// second plus `offset`.
fn at_wall_second(seconds_ahead: u64, offset: Duration) -> Duration {
    let now_us = wall_us() as u64;
    let next = (now_us / 1_000_000 + seconds_ahead) * 1_000_000;
    monotonic() + Duration::from_micros(next - now_us) + offset
}

/// Two hosts × three processes (saturating demand, or `pace` requests/s
/// each); Redis killed at `kill` after the start of the third second and
/// restarted `down` later. Every full slice, the recovery slice included,
/// admits within [0.98, 1.01] × the quota.
fn restart_keeps_every_slice_exact(kill: Duration, down: Duration, pace: Option<f64>) {
    let mut redis = RedisServer::start();
    let scratch = Scratch::new("fleet-restart");
    let url = redis.url();
    let hosts = [scratch.path("h0"), scratch.path("h1")];
    let opts = host_options(&url, None).probe(PROBE);
    let workers: Vec<_> = hosts
        .iter()
        .flat_map(|h| std::iter::repeat_n((h.clone(), opts.clone(), pace), 3))
        .collect();
    let watch = Table::open(&hosts[0], &host_options(&url, None).probe(PROBE)).unwrap();
    let config = TaskConfig::new().global_rate(RATE);
    let watched = watch.task("api", &config).unwrap();
    let start = at_wall_second(1, Duration::ZERO);
    let run = run(&scratch, &workers, config, start, 6.0, || {
        sleep_until(start + Duration::from_secs(2) + kill);
        redis.kill();
        sleep_until(start + Duration::from_secs(2) + kill + down);
        redis.restart();
    });
    assert_eq!(run.errors, 0, "no caller sees an error");
    let keys: Vec<String> = redis.command(&["KEYS", "*"]);
    for key in keys.iter().filter(|k| !k.ends_with(":shape")) {
        let all: Vec<String> = redis.command(&["HGETALL", key]);
        eprintln!("{key}: {all:?}");
    }
    let q = watched.quota_stats();
    assert!(
        q.failed_pulls >= 1 && q.failed_ms > 0,
        "the outage was seen: {q:?}"
    );
    let slices: Vec<_> = run.per_slice.iter().collect();
    assert!(slices.len() >= 5, "{:?}", run.per_slice);
    for (slice, n) in &slices[1..slices.len() - 1] {
        let ratio = **n as f64 / RATE;
        assert!(
            (0.98..=1.01).contains(&ratio),
            "slice {slice} admitted {n} of {RATE}: {:?}",
            run.per_slice
        );
    }
    eprintln!("admitted per slice: {:?}; {q:?}", run.per_slice);
}

#[test]
fn a_restart_across_a_slice_edge_hands_nothing_out_twice() {
    // Saturating demand: down from 50 ms before an edge to 250 ms after it.
    // The new slice starts in fallback, then its key is created with the
    // store back and pays for what the fallback admitted.
    restart_keeps_every_slice_exact(Duration::from_millis(950), Duration::from_millis(300), None);
}

#[test]
fn a_restart_inside_a_slice_hands_nothing_out_twice() {
    // Saturating demand: the slice releases its quota over its length, so
    // hosts are pulling when the store dies 200 ms in; it is back at 500 ms,
    // its key lost with grants and fallback admissions behind it.
    restart_keeps_every_slice_exact(Duration::from_millis(200), Duration::from_millis(300), None);
}

/// Three hosts with uneven demand (1,200, 600 and 200 /s) against a global
/// 1,000/s; Redis down for 10 s. By the share policy (the default) each host
/// keeps what it spent per second before the outage: the cluster admits
/// within [0.9, 1.1] × 1,000 in every full second of it, and no request
/// fails or waits more than a store timeout.
#[test]
fn an_outage_keeps_the_cluster_near_its_global_rate() {
    let mut redis = RedisServer::start();
    let scratch = Scratch::new("fleet-outage");
    let url = redis.url();
    let opts = host_options(&url, None)
        .probe(Duration::from_secs(1))
        .timeout(Duration::from_millis(100));
    let workers: Vec<_> = [1200.0, 600.0, 200.0]
        .iter()
        .enumerate()
        .map(|(i, pace)| (scratch.path(&format!("h{i}")), opts.clone(), Some(*pace)))
        .collect();
    let config = TaskConfig::new().global_rate(1000.0);
    let watch = Table::open(&workers[0].0, &opts).unwrap();
    let watched = watch.task("api", &config).unwrap();
    let start = at_wall_second(1, Duration::ZERO);
    let (down, up) = (Duration::from_millis(3500), Duration::from_millis(13_500));
    let mut hosts_seen = 0;
    let run = run(&scratch, &workers, config, start, 15.0, || {
        sleep_until(start + down);
        hosts_seen = watched.quota_stats().hosts_seen;
        redis.kill();
        sleep_until(start + up);
        redis.restart();
    });
    assert_eq!(hosts_seen, 3, "the census counts three hosts");
    assert_eq!(run.errors, 0);
    assert!(
        run.slowest < Duration::from_millis(180),
        "an acquire took {:?}",
        run.slowest
    );
    let first = *run.per_slice.keys().next().unwrap();
    // The outage's full seconds: from the one after the kill to the one
    // before the restart.
    for s in first + 4..first + 13 {
        let n = run.per_slice.get(&s).copied().unwrap_or(0);
        assert!(
            (900..=1100).contains(&n),
            "second {} of the outage admitted {n}: {:?}",
            s - first - 3,
            run.per_slice
        );
    }
    let q = watched.quota_stats();
    assert!(
        q.limited_fallback > 0,
        "host 0 asked for more than its share: {q:?}"
    );
    eprintln!("admitted per second: {:?}; host 0: {q:?}", run.per_slice);
}

#[test]
fn deny_local_and_a_rate_under_the_local_limits_in_an_outage() {
    let mut redis = RedisServer::start();
    let scratch = Scratch::new("fleet-policies");
    let table = Table::open(
        scratch.path("t"),
        &host_options(&redis.url(), None).probe(PROBE),
    )
    .unwrap();
    let deny = table
        .task(
            "deny",
            &TaskConfig::new()
                .global_rate(1000.0)
                .chunk(1)
                .fallback(Fallback::Deny),
        )
        .unwrap();
    let local = table
        .task(
            "local",
            &TaskConfig::new()
                .global_rate(1000.0)
                .chunk(1)
                .local_rate(50.0)
                .burst(5)
                .fallback(Fallback::Local),
        )
        .unwrap();
    // The fallback policies' rule (docs/guide/global-limits.md): a fallback
    // rate above the local rate applies the local rate, and one below it
    // applies itself.
    let above = table
        .task(
            "above",
            &TaskConfig::new()
                .global_rate(2000.0)
                .chunk(1)
                .local_rate(40.0)
                .burst(4)
                .fallback_rate(400.0),
        )
        .unwrap();
    let below = table
        .task(
            "below",
            &TaskConfig::new()
                .global_rate(2000.0)
                .chunk(1)
                .local_rate(800.0)
                .burst(4)
                .fallback_rate(40.0),
        )
        .unwrap();
    for t in [&deny, &local, &above, &below] {
        assert!(matches!(t.acquire(1).unwrap(), Decision::Admitted(_)));
    }
    redis.kill();
    let count = |task: &flowctrl::Task, for_ms: u64| {
        let end = Instant::now() + Duration::from_millis(for_ms);
        let mut admitted = 0;
        while Instant::now() < end {
            if let Decision::Admitted(_) = task.acquire(1).unwrap() {
                admitted += 1;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        admitted
    };
    // Let each notice the outage (chunks of 1: its next pull fails), then
    // measure.
    for t in [&deny, &local, &above, &below] {
        count(t, 50);
        assert_eq!(
            t.quota_stats().state,
            Some(QuotaState::Failed),
            "{}",
            t.name()
        );
    }
    assert_eq!(count(&deny, 300), 0, "deny refuses everything");
    assert!(deny.quota_stats().limited_fallback > 0);
    assert_eq!(
        deny.stats().limited_global,
        0,
        "fallback refusals are counted apart"
    );
    let n = count(&local, 1000);
    assert!(
        (40..=60).contains(&n),
        "local: the local rate of 50/s, got {n}"
    );
    let n = count(&above, 1000);
    assert!((32..=48).contains(&n), "fallback 400 under local 40: {n}");
    let n = count(&below, 1000);
    assert!((32..=48).contains(&n), "fallback 40 under local 800: {n}");
    redis.restart();
    let began = Instant::now();
    while deny.quota_stats().state == Some(QuotaState::Failed) {
        assert!(
            began.elapsed() < Duration::from_secs(3),
            "deny never recovered"
        );
        let _ = deny.acquire(1).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        matches!(deny.acquire(1).unwrap(), Decision::Admitted(_)),
        "deny recovers"
    );
}

#[test]
fn policies_are_settings_and_bad_ones_are_refused() {
    let scratch = Scratch::new("fleet-config");
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    let t = table
        .task("t", &TaskConfig::new().global_rate(100.0))
        .unwrap();
    assert_eq!(
        t.settings().global.fallback,
        Fallback::Share,
        "share is the default"
    );
    t.update(&TaskConfig::new().fallback(Fallback::Deny))
        .unwrap();
    assert_eq!(t.settings().global.fallback, Fallback::Deny);
    t.update(&TaskConfig::new().fallback_rate(0.0)).unwrap();
    assert_eq!(
        t.settings().global.fallback,
        Fallback::Share,
        "rate 0 is the default"
    );
    t.update(&TaskConfig::new().fallback_rate(25.0)).unwrap();
    assert_eq!(t.settings().global.fallback, Fallback::Rate(25.0));
    let err = table
        .task("t", &TaskConfig::new().fallback(Fallback::Local))
        .unwrap_err();
    assert!(err.message().contains("fallback 25 (asked local)"), "{err}");
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        assert!(
            t.update(&TaskConfig::new().fallback_rate(bad)).is_err(),
            "{bad}"
        );
    }
    assert_eq!(
        t.settings().global.fallback,
        Fallback::Rate(25.0),
        "unchanged"
    );
    assert_eq!(Fallback::parse("deny").unwrap(), Fallback::Deny);
    assert_eq!(Fallback::parse("12.5").unwrap(), Fallback::Rate(12.5));
    assert!(Fallback::parse("sometimes").is_err());
    let mut o = TableOptions::default();
    o.store.host_id = Some("two words".into());
    assert!(Table::open(scratch.path("h"), &o).is_err());
}

#[test]
fn the_census_lists_the_live_hosts_and_a_shared_host_id_is_detected() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("fleet-census");
    let config = TaskConfig::new().global_rate(1000.0).global_burst(1000);
    let tables: Vec<_> = (0..3)
        .map(|i| {
            Table::open(
                scratch.path(&format!("h{i}")),
                &host_options(&redis.url(), None).probe(PROBE),
            )
            .unwrap()
        })
        .collect();
    let tasks: Vec<_> = tables
        .iter()
        .map(|t| t.task("api", &config).unwrap())
        .collect();
    // Two more tables under one id: the second's claims go backwards.
    let twins: Vec<_> = (0..2)
        .map(|i| {
            Table::open(
                scratch.path(&format!("twin{i}")),
                &host_options(&redis.url(), "twin").probe(PROBE),
            )
            .unwrap()
        })
        .collect();
    let twin_tasks: Vec<_> = twins
        .iter()
        .map(|t| t.task("api", &config).unwrap())
        .collect();
    // Pull early in one slice, so every pull lands in it.
    sleep_until(at_wall_second(1, Duration::from_millis(50)));
    let pulled = wall_us() / 1_000_000;
    for (i, t) in tasks.iter().enumerate() {
        assert_eq!(
            t.pull_quota(10 * (i as u64 + 1)).unwrap(),
            Ok(10 * (i as u64 + 1))
        );
    }
    assert_eq!(twin_tasks[0].pull_quota(100).unwrap(), Ok(100));
    assert_eq!(twin_tasks[0].pull_quota(100).unwrap(), Ok(100));
    assert_eq!(twin_tasks[1].pull_quota(5).unwrap(), Ok(5));
    assert_eq!(
        twin_tasks[1].quota_stats().host_conflicts,
        1,
        "a claim went backwards"
    );
    assert_eq!(tasks[0].quota_stats().host_conflicts, 0);
    assert_eq!(wall_us() / 1_000_000, pulled, "stayed in one slice");
    // A record nobody wrote is skipped, never trusted.
    let key = format!("flowctrl:{{api}}:{pulled}");
    redis.command::<()>(&["HSET", &key, "intruder", "not a record"]);
    sleep_until(at_wall_second(1, Duration::from_millis(10)));
    let mut o = TableOptions::default().store;
    o.url = Some(redis.url());
    let store = flowctrl::Store::open(&o).unwrap();
    let fleet = store.fleet("api", None).unwrap();
    assert_eq!(fleet.quota, Some(1000));
    let hosts: Vec<_> = fleet.hosts.iter().map(|h| h.host.as_str()).collect();
    assert_eq!(
        hosts.len(),
        4,
        "three hosts and the twins' one id: {fleet:?}"
    );
    assert!(
        hosts.contains(&"twin") && !hosts.contains(&"intruder"),
        "{fleet:?}"
    );
    let mut granted: Vec<_> = fleet
        .hosts
        .iter()
        .filter(|h| h.host != "twin")
        .map(|h| (h.granted, h.asked, h.claimed, h.slice as i64))
        .collect();
    granted.sort();
    assert_eq!(
        granted,
        [
            (10, 10, 0, pulled),
            (20, 20, 0, pulled),
            (30, 30, 0, pulled)
        ],
        "{fleet:?}"
    );
    // Bad input: a clear error, no store touched.
    assert!(flowctrl::Store::open(&TableOptions::default().store).is_err());
    assert!(store.fleet("", Some(1000)).is_err());
    assert!(store.fleet("api", Some(0)).is_err());
}

/// A pull of 1 that tries again after a store error: on a loaded machine a
/// loopback connect can fail at once (EAGAIN), and what the test checks is
/// the accounting of the pulls that reached the store, not the connect.
fn pull_through_hiccups(task: &flowctrl::Task) -> Result<u64, flowctrl::Limited> {
    for _ in 0..5 {
        match task.pull_quota(1) {
            Ok(pulled) => return pulled,
            Err(e) if e.kind() == flowctrl::ErrorKind::Store => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("{e}"),
        }
    }
    panic!("the store failed five pulls in a row")
}

/// Thirty pullers die between the store's grant and the deposit into the
/// table (a test hook aborts them exactly there, where a SIGKILL would lose
/// the chunk). Whoever takes a dead holder's lock redeems what the key
/// charged and the host never received: at the end the key has charged the
/// host with exactly what reached its table.
#[test]
fn chunks_granted_to_a_puller_that_died_before_the_deposit_are_redeemed() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("fleet-lost-chunk");
    let path = scratch.path("t");
    let opts = host_options(&redis.url(), "storm").probe(PROBE);
    let config = TaskConfig::new()
        .global_rate(1000.0)
        .slice_ms(60_000)
        .global_burst(60_000);
    let slice = wait_for_minute_slice(Duration::from_secs(20));
    let table = Table::open(&path, &opts).unwrap();
    let task = table.task("lost", &config).unwrap();
    let mut died = 0;
    for i in 0..30 {
        let (path, opts) = (path.clone(), opts.clone());
        let pid = fork_guarded(move || {
            arm_crash_point("FLOWCTRL_TEST_DIE_AFTER_GRANT");
            let table = Table::open(&path, &opts).unwrap();
            let task = table.task("lost", &config).unwrap();
            let _ = task.pull_quota(10);
            0 // not reached when the store granted anything
        });
        match wait_timeout(pid, Duration::from_secs(10)) {
            Exit::Signal(libc::SIGKILL) => died += 1,
            Exit::TimedOut => panic!("puller {pid} hung (10 s)"),
            _ => {}
        }
        if i % 7 == 3 {
            assert!(pull_through_hiccups(&task).is_ok());
        }
    }
    assert_eq!(died, 30, "every puller died after its grant");
    assert!(pull_through_hiccups(&task).is_ok());
    // Charged = received, less what the table's keeper gave back while the
    // host sat idle between pullers.
    let key = format!("flowctrl:{{lost}}:{slice}");
    let record = || -> Option<String> { redis.command(&["HGET", &key, "storm"]) };
    let (charged, kept) = settled(|| {
        let q = task.quota_stats();
        // No record: say what the store holds, for the next reader.
        let Some(record) = record() else {
            let held: Vec<String> = redis.command(&["HGETALL", &key]);
            let keys: Vec<String> = redis.command(&["KEYS", "flowctrl:*"]);
            panic!(
                "no record of host storm in {key} (slice now {:?}): {held:?}; keys {keys:?}; {q:?}",
                minute_slice(Duration::ZERO)
            );
        };
        let charged: u64 = record.split(' ').next().unwrap().parse().unwrap();
        (charged, q.granted - q.returned)
    });
    let q = task.quota_stats();
    assert_eq!(charged, kept, "charged = received: {:?} {q:?}", record());
    assert_eq!(left(&redis, "lost", slice), 60_000 - charged as i64);
    assert!(charged >= 30 * 10, "{charged}");
    assert_eq!(
        slice,
        minute_slice(Duration::ZERO).unwrap(),
        "stayed in one slice"
    );
}

/// Pullers killed inside the deposit, between the claim (what the host
/// tells the store it took) and the host word: each chunk is lost to the
/// host, the key keeps charging it, and it is never handed out a second
/// time. The host then admits the slice's quota less the lost chunks,
/// exactly. (With the claim written after the host word, each redeem
/// handed back every chunk the table held and the claim did not count:
/// 6,100 of 4,000 admitted.)
#[test]
fn a_puller_killed_inside_the_deposit_never_hands_its_chunk_out_twice() {
    const SLICE_MS: u64 = 4000;
    const QUOTA: u64 = 4000;
    const CHUNK: u32 = 10;
    const DEATHS: u64 = 20;
    let redis = RedisServer::start();
    let scratch = Scratch::new("fleet-deposit");
    let path = scratch.path("t");
    let opts = host_options(&redis.url(), "dep").probe(PROBE);
    let config = TaskConfig::new()
        .global_rate((QUOTA * 1000 / SLICE_MS) as f64)
        .slice_ms(SLICE_MS as u32)
        .global_burst(QUOTA as u32)
        .chunk(CHUNK);
    let slice_now = || {
        let ms = (wall_us() / 1000) as u64;
        (ms / SLICE_MS, ms % SLICE_MS)
    };
    while slice_now().1 > 500 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let slice = slice_now().0;
    let table = Table::open(&path, &opts).unwrap();
    let task = table.task("dep", &config).unwrap();
    let mut died = 0;
    for _ in 0..DEATHS {
        let (path, opts) = (path.clone(), opts.clone());
        let pid = fork_guarded(move || {
            arm_crash_point("FLOWCTRL_TEST_DIE_IN_DEPOSIT");
            let table = Table::open(&path, &opts).unwrap();
            let task = table.task("dep", &config).unwrap();
            let _ = task.pull_quota(CHUNK as u64);
            0 // not reached when the store granted anything
        });
        match wait_timeout(pid, Duration::from_secs(10)) {
            Exit::Signal(libc::SIGKILL) => died += 1,
            Exit::TimedOut => panic!("puller {pid} hung (10 s)"),
            _ => {}
        }
    }
    assert_eq!(died, DEATHS, "every puller died in its deposit");
    // The parent spends the rest of the slice, a permit at a time.
    let mut admitted = 0;
    let began = Instant::now();
    loop {
        match task.acquire_raw(1).unwrap() {
            Ok(mut p) => {
                task.release_raw(&mut p, flowctrl::Outcome::Success)
                    .unwrap();
                admitted += 1;
            }
            // Refused with the key used up: the host holds nothing either.
            Err(_) if left(&redis, "dep", slice) == 0 => break,
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
        assert!(
            began.elapsed() < Duration::from_secs(3),
            "{admitted} admitted"
        );
    }
    assert_eq!(slice_now().0, slice, "the run outlived its slice");
    let q = task.quota_stats();
    assert_eq!(
        admitted,
        QUOTA - DEATHS * CHUNK as u64,
        "the lost chunks admitted again: {q:?}"
    );
    let charged = || -> u64 {
        let rec: String = redis.command(&["HGET", &format!("flowctrl:{{dep}}:{slice}"), "dep"]);
        rec.split(' ').next().unwrap().parse().unwrap()
    };
    let (charged, kept) = settled(|| {
        let q = task.quota_stats();
        (charged(), q.granted - q.returned)
    });
    assert_eq!(charged, kept, "{q:?}");
}

/// Admission instants (µs of the store's clock) of saturating workers on
/// `hosts` tables, three processes each, for `secs`.
fn admission_times(
    redis: &RedisServer,
    scratch: &Scratch,
    hosts: usize,
    config: TaskConfig,
    secs: f64,
) -> Vec<i64> {
    let start = at_wall_second(1, Duration::ZERO);
    let mut pids = KillOnDrop::default();
    let mut outs = Vec::new();
    for h in 0..hosts {
        for w in 0..3 {
            let out = scratch.path(&format!("times-{h}-{w}"));
            outs.push(out.clone());
            let (path, opts) = (
                scratch.path(&format!("h{h}")),
                host_options(&redis.url(), None).probe(PROBE),
            );
            pids.add(fork_guarded(move || {
                let table = Table::open(&path, &opts).unwrap();
                let task = table.task("smooth", &config).unwrap();
                sleep_until(start);
                let end = start + Duration::from_secs_f64(secs);
                let mut times = Vec::new();
                while monotonic() < end {
                    match task.acquire(1) {
                        Ok(Decision::Admitted(_)) => {
                            times.push(wall_us() + task.quota_stats().clock_offset_us)
                        }
                        Ok(Decision::Limited(_)) => std::thread::sleep(Duration::from_micros(100)),
                        Err(e) => {
                            raw_eprint(&format!("acquire failed: {e}"));
                            return 1;
                        }
                    }
                }
                let text: String = times.iter().map(|t| format!("{t}\n")).collect();
                std::fs::write(out, text).unwrap();
                0
            }));
        }
    }
    for pid in pids.0.clone() {
        assert_eq!(wait(pid), 0);
        pids.forget(pid);
    }
    let mut times: Vec<i64> = outs
        .iter()
        .flat_map(|o| {
            std::fs::read_to_string(o)
                .unwrap()
                .lines()
                .map(|l| l.parse().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    times.sort();
    times
}

/// A global limit is as smooth as a local one: at saturating demand, every
/// 100 ms window admits at most 1.1 × rate × 0.1 s + burst, every sliding
/// 1 s window at most 1.05 × rate + burst, each full slice within
/// [0.98, 1.01] × its quota, with at most 0.01 store round trips per
/// admission — for one host and for three.
#[test]
fn a_global_limit_is_released_over_its_slice() {
    const RATE: f64 = 10_000.0;
    let burst = RATE * 0.25; // the default: 250 ms of the rate
    for hosts in [1, 3] {
        let redis = RedisServer::start();
        let scratch = Scratch::new("fleet-smooth");
        let config = TaskConfig::new().global_rate(RATE);
        let times = admission_times(&redis, &scratch, hosts, config, 4.0);
        let (first, last) = (times[0], *times.last().unwrap());
        // Whole windows inside the run, skipping the first and last 100 ms.
        let count = |from: i64, len: i64| {
            times.partition_point(|t| *t < from + len) - times.partition_point(|t| *t < from)
        };
        let (mut worst_100, mut worst_1000) = (0, 0);
        let mut at = first + 100_000;
        while at + 1_000_000 < last - 100_000 {
            worst_100 = worst_100.max(count(at, 100_000));
            worst_1000 = worst_1000.max(count(at, 1_000_000));
            at += 5_000;
        }
        let mut per_slice: BTreeMap<i64, u64> = BTreeMap::new();
        for t in &times {
            *per_slice.entry(t / 1_000_000).or_default() += 1;
        }
        let trips = redis.pull_round_trips();
        eprintln!(
            "{hosts} host(s): worst 100 ms {worst_100}, worst 1 s {worst_1000}, per slice {per_slice:?}, \
             {trips} round trips for {} admissions",
            times.len()
        );
        assert!(
            worst_100 as f64 <= 1.1 * RATE * 0.1 + burst,
            "100 ms: {worst_100}"
        );
        assert!(
            worst_1000 as f64 <= 1.05 * RATE + burst,
            "1 s: {worst_1000}"
        );
        let slices: Vec<_> = per_slice.values().collect();
        for n in &slices[1..slices.len() - 1] {
            let ratio = **n as f64 / RATE;
            assert!((0.98..=1.01).contains(&ratio), "{per_slice:?}");
        }
        assert!(
            trips as f64 / times.len() as f64 <= 0.01,
            "{trips} round trips"
        );
    }
}

/// Hosts that disagree on `global_rate` and have no record to agree on:
/// each slice's key is created by one of them, every host spends by its
/// numbers (two thresholds never add up), and the disagreement is counted.
#[test]
fn hosts_with_different_thresholds_spend_by_the_keys_and_are_counted() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("fleet-mixed");
    let url = redis.url();
    let start = at_wall_second(1, Duration::ZERO);
    let mut workers = Vec::new();
    for (h, rate) in [(0, 2000.0), (1, 3000.0)] {
        let (path, opts) = (
            scratch.path(&format!("h{h}")),
            host_options(&url, None).probe(PROBE),
        );
        let worker = Worker::new("api", TaskConfig::new().global_rate(rate));
        workers.extend(std::iter::repeat_n((path, opts, worker), 3));
    }
    let tallies = Workers::fork(&scratch, &workers, start, 5.0).tallies();
    let per_slice = worker::sum(&tallies).per_slice;
    let slices: Vec<_> = per_slice.iter().collect();
    // Each slice by its creator's threshold, 2000 or 3000 (the keys have
    // expired by now): never the two added up.
    for (slice, n) in &slices[1..slices.len() - 1] {
        let by = |quota: f64| (0.98..=1.01).contains(&(**n as f64 / quota));
        assert!(
            by(2000.0) || by(3000.0),
            "slice {slice}: {n} admitted: {per_slice:?}"
        );
    }
    let conflicts: u64 = (0..2)
        .map(|h| {
            let t = Table::open(
                scratch.path(&format!("h{h}")),
                &host_options(&url, None).probe(PROBE),
            )
            .unwrap();
            t.task("api", &TaskConfig::new())
                .unwrap()
                .quota_stats()
                .config_conflicts
        })
        .sum();
    assert!(conflicts > 0, "the disagreement is counted");
    eprintln!("per slice: {per_slice:?}; conflicts {conflicts}");
}
