//! Global quota across real processes and real Redis servers: accuracy per
//! slice, store outages and pauses, clock skew, a pull-lock holder killed,
//! and bad input. Every Redis test starts its own `redis-server` on a free
//! loopback port and stops it.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::redis::{Redis, RedisServer, free_port};
use common::worker::{self, Worker, Workers};
use common::*;
use flowctrl::{Decision, ErrorKind, Limited, QuotaState, Table, TableOptions, TaskConfig};

const RATE: f64 = 2000.0;

/// The tests that time what they measure (round trips per admission, how
/// fast an outage is noticed and left) run one at a time: on 2 cores, two of
/// them side by side stretched each other's timings past their budgets.
static TIMED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    TIMED.lock().unwrap_or_else(|e| e.into_inner())
}

/// A host of the store at `url` (`None`: the embedded store) whose clock is
/// `skew_ms` off.
fn quota_options(url: Option<String>, skew_ms: i64) -> TableOptions {
    options()
        .store_url(url)
        // These machines are shared and small: give Redis room to answer
        // under six busy processes (production keeps the few-ms default).
        .timeout(Duration::from_millis(100))
        .probe(Duration::from_millis(1000))
        .clock_skew_ms(skew_ms)
}

/// Runs `per_host` workers on each of `hosts` (table, skew) for `secs`, and
/// returns the admissions per slice summed over all of them.
fn run(
    scratch: &Scratch,
    hosts: &[(PathBuf, Option<String>, i64)],
    per_host: usize,
    secs: f64,
) -> BTreeMap<i64, u64> {
    run_at(scratch, hosts, per_host, secs, RATE)
}

/// [`run`] with a task of `rate` a second.
fn run_at(
    scratch: &Scratch,
    hosts: &[(PathBuf, Option<String>, i64)],
    per_host: usize,
    secs: f64,
    rate: f64,
) -> BTreeMap<i64, u64> {
    let start = monotonic() + Duration::from_millis(500);
    let mut workers = Vec::new();
    for (path, url, skew) in hosts {
        // Accuracy, not failover: a shared machine may answer a pull
        // late, and a store declared failed admits by the fallback.
        let opts = quota_options(url.clone(), *skew).timeout(Duration::from_secs(1));
        // Counting admissions by the store's clock as this host sees it
        // (wall + skew + offset).
        let worker = Worker::new("api", TaskConfig::new().global_rate(rate)).skew_ms(*skew);
        workers.extend(std::iter::repeat_n((path.clone(), opts, worker), per_host));
    }
    let tallies = Workers::fork(scratch, &workers, start, secs).tallies();
    assert!(
        tallies.iter().all(|t| t.errors == 0),
        "a worker saw an error"
    );
    worker::sum(&tallies).per_slice
}

/// Every full slice (not the first or last seen) admitted within
/// [0.98, 1.01] × the slice's quota.
fn assert_accurate(per_slice: &BTreeMap<i64, u64>) {
    assert_accurate_at(per_slice, RATE)
}

/// [`assert_accurate`] for a task of `rate` a second.
fn assert_accurate_at(per_slice: &BTreeMap<i64, u64>, rate: f64) {
    let slices: Vec<_> = per_slice.iter().collect();
    assert!(slices.len() >= 4, "too few slices: {per_slice:?}");
    for (slice, n) in &slices[1..slices.len() - 1] {
        let ratio = **n as f64 / rate;
        assert!(
            (0.98..=1.01).contains(&ratio),
            "slice {slice} admitted {n} of {rate}: {per_slice:?}"
        );
    }
    eprintln!("admitted per slice: {per_slice:?}");
}

#[test]
fn embedded_store_one_host_three_processes_admits_the_rate_per_slice() {
    let _timed = one_at_a_time();
    let scratch = Scratch::new("quota-embedded");
    let hosts = [(scratch.path("table"), None, 0)];
    assert_accurate(&run(&scratch, &hosts, 3, 5.0));
}

#[test]
fn redis_two_hosts_three_processes_each_admit_the_rate_per_slice() {
    let _timed = one_at_a_time();
    let redis = RedisServer::start();
    let scratch = Scratch::new("quota-redis");
    let hosts = [
        (scratch.path("a"), Some(redis.url()), 0),
        (scratch.path("b"), Some(redis.url()), 0),
    ];
    let per_slice = run(&scratch, &hosts, 3, 5.0);
    assert_accurate(&per_slice);
    for (path, url, skew) in &hosts {
        let table = Table::open(path, &quota_options(url.clone(), *skew)).unwrap();
        let stats = table.task("api", &TaskConfig::new()).unwrap().quota_stats();
        eprintln!("{}: {stats:?}", path.display());
    }
    let commands = redis.pull_round_trips();
    let admitted: u64 = per_slice.values().sum();
    eprintln!("Redis round trips per admitted request: {commands} / {admitted}");
    // A host pulls a handful of times per slice whatever the rate (the
    // chunk rule's 3 grants, refusals while demand outruns the slice's
    // release, one pull that finds the key empty): at this test's 2,400/s
    // over 2 hosts that measured 0.007–0.011 per admission. The 0.01 budget
    // holds at scale (benches/QUOTA.md, benches/SIMULATION.md); here a bound
    // of 0.02 still fails any pull per request or per few dozen (0.016 seen
    // with the whole suite and two benchmarks sharing the 2 cores).
    assert!(
        commands as f64 / admitted as f64 <= 0.02,
        "{commands} round trips for {admitted}"
    );
}

/// The store's work per admission at a rate where pulls are many: 2 hosts
/// of 3 processes each saturate a task of 10,000/s, and every command Redis
/// runs counts (a script call and each `redis.call` inside it), over the
/// full slices of the run (read at each slice's start: a run's first and
/// last slices are cut short, and their share of pulls varies). The figure
/// is kept in benches/QUOTA.md, "Redis commands per admission".
#[test]
fn redis_commands_per_admission_two_hosts_three_processes_at_10k() {
    let _timed = one_at_a_time();
    let redis = RedisServer::start();
    let scratch = Scratch::new("quota-commands");
    let hosts = [
        (scratch.path("a"), Some(redis.url()), 0),
        (scratch.path("b"), Some(redis.url()), 0),
    ];
    // (commands, script round trips) at the start of each wall second.
    let mut conn = redis.connection().unwrap();
    let sampler = std::thread::spawn(move || {
        let mut at = BTreeMap::new();
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(8) {
            let second = wall_us() / 1_000_000 + 1;
            let wait = second * 1_000_000 - wall_us();
            std::thread::sleep(Duration::from_micros(wait.max(0) as u64));
            let info: String = ::redis::cmd("INFO")
                .arg("commandstats")
                .query(&mut conn)
                .unwrap();
            let all = common::redis::commands_in(&info);
            let scripts = common::redis::command_calls(&info, &["evalsha", "script|load"]);
            at.insert(second, (all.values().sum::<u64>(), scripts));
        }
        at
    });
    let rate = 10_000.0;
    let per_slice = run_at(&scratch, &hosts, 3, 5.0, rate);
    assert_accurate_at(&per_slice, rate);
    let at = sampler.join().unwrap();
    let full: Vec<i64> = per_slice.keys().copied().collect();
    let (first, last) = (full[1], full[full.len() - 2]);
    let admitted: u64 = (first..=last).map(|s| per_slice[&s]).sum();
    let (total, scripts) = (
        at[&(last + 1)].0 - at[&first].0,
        at[&(last + 1)].1 - at[&first].1,
    );
    let commands = redis.commands();
    let (run_total, run_scripts, run_admitted) = (
        commands.values().sum::<u64>(),
        redis.pull_round_trips(),
        per_slice.values().sum::<u64>(),
    );
    eprintln!("commands in the run: {commands:?}");
    eprintln!(
        "whole run (first pulls and cut slices too): commands per admission: {:.4} \
         ({run_total} / {run_admitted}); script round trips per admission: {:.4} ({run_scripts})",
        run_total as f64 / run_admitted as f64,
        run_scripts as f64 / run_admitted as f64,
    );
    eprintln!(
        "full slices: commands per admission: {:.4} ({total} / {admitted}, slices {first}..={last}); \
         script round trips per admission: {:.4} ({scripts}); commands per script run: {:.2}",
        total as f64 / admitted as f64,
        scripts as f64 / admitted as f64,
        total as f64 / scripts as f64
    );
    // Measured 0.0089-0.0100 per admission over full slices at 5.3-5.5
    // commands a run (0.0135-0.0140 and 7.9-8.1 before the script read its
    // key once): a run's commands barely move with the machine's load, its
    // round trips do (see the test above).
    assert!(
        total as f64 / scripts as f64 <= 6.5,
        "{total} commands in {scripts} script runs"
    );
    assert!(
        total as f64 / admitted as f64 <= 0.02,
        "{total} commands for {admitted}"
    );
}

#[test]
fn a_host_starting_late_in_a_slice_ramps_up_in_few_pulls() {
    // A host's first chunks are sized by its rate over the slice so far:
    // one that starts 800 ms into a 1 s slice, measured so, grew its chunk
    // by about 1.4 × a pull.
    let _timed = one_at_a_time();
    let redis = RedisServer::start();
    let scratch = Scratch::new("quota-ramp");
    let table = Table::open(
        scratch.path("t"),
        &quota_options(Some(redis.url()), 0).timeout(Duration::from_secs(1)),
    )
    .unwrap();
    let task = table
        .task("api", &TaskConfig::new().global_rate(400_000.0))
        .unwrap();
    // 800-850 ms into a slice, with 150 ms of it to go.
    while !(800_000..850_000).contains(&(wall_us() % 1_000_000)) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let slice = wall_us() / 1_000_000;
    let mut admitted = 0u64;
    while wall_us() % 1_000_000 < 950_000 && wall_us() / 1_000_000 == slice {
        let mut permit = task.acquire_raw(1).unwrap().expect("within the quota");
        task.release_raw(&mut permit, flowctrl::Outcome::Success)
            .unwrap();
        admitted += 1;
    }
    let pulls = redis.pull_round_trips();
    eprintln!("{admitted} admitted in {pulls} pulls");
    // Doubling from one permit: a pull per doubling of what it has, and a
    // few more at a quarter of the slice a chunk (measured 22 for 18
    // doublings; 52 by the rate over the slice so far).
    let doublings = (admitted as f64).log2().ceil() as u64;
    assert!(
        pulls <= doublings + 6,
        "{pulls} pulls for {admitted} admissions"
    );
}

#[test]
fn a_host_whose_clock_is_700_ms_ahead_spends_from_the_same_keys() {
    let _timed = one_at_a_time();
    let redis = RedisServer::start();
    let scratch = Scratch::new("quota-skew");
    let hosts = [
        (scratch.path("a"), Some(redis.url()), 0),
        (scratch.path("b"), Some(redis.url()), 700),
    ];
    assert_accurate(&run(&scratch, &hosts, 3, 5.0));
    let table = Table::open(scratch.path("b"), &quota_options(Some(redis.url()), 700)).unwrap();
    let offset = table
        .task("api", &TaskConfig::new())
        .unwrap()
        .quota_stats()
        .clock_offset_us;
    assert!(
        (-720_000..=-680_000).contains(&offset),
        "measured offset {offset} µs"
    );
}

/// Runs two workers for 6 s; `outage` starts at 1.5 s and `recover` at
/// 3.5 s. Returns when the host entered the failed state and when it left
/// it, measured from the outage and the recovery.
fn outage(
    redis: &mut RedisServer,
    outage: impl FnOnce(&mut RedisServer),
    recover: impl FnOnce(&mut RedisServer),
) -> (Duration, Duration) {
    let scratch = Scratch::new("quota-outage");
    let path = scratch.path("table");
    let opts = quota_options(Some(redis.url()), 0);
    let table = Table::open(&path, &opts).unwrap();
    let task = table
        .task(
            "api",
            &TaskConfig::new().global_rate(RATE).fallback_rate(400.0),
        )
        .unwrap();
    let start = monotonic() + Duration::from_millis(300);
    let worker = Worker::new(
        "api",
        TaskConfig::new().global_rate(RATE).fallback_rate(400.0),
    )
    .pause(Duration::from_micros(300));
    let workers = Workers::fork(
        &scratch,
        &[
            (path.clone(), opts.clone(), worker.clone()),
            (path.clone(), opts.clone(), worker),
        ],
        start,
        6.0,
    );
    let state_after = |from: Duration, wanted: fn(QuotaState) -> bool| {
        while !task.quota_stats().state.is_some_and(wanted) {
            assert!(
                monotonic() - from < Duration::from_secs(3),
                "state {:?}",
                task.quota_stats()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        monotonic() - from
    };
    sleep_until(start + Duration::from_millis(1500));
    assert_ne!(task.quota_stats().state, Some(QuotaState::Failed));
    let down = monotonic();
    outage(redis);
    let to_failed = state_after(down, |s| s == QuotaState::Failed);
    sleep_until(start + Duration::from_millis(3500));
    let up = monotonic();
    recover(redis);
    let to_open = state_after(up, |s| s != QuotaState::Failed);
    for tally in workers.tallies() {
        let slowest = tally.slowest.as_micros();
        assert_eq!(tally.errors, 0, "no caller may see an error");
        // One command timeout (100 ms here) plus scheduling slack.
        assert!(slowest < 180_000, "an acquire took {slowest} µs");
        assert!(tally.admitted() > 1000, "kept serving: {tally:?}");
        eprintln!(
            "worker: {} errors, slowest acquire {slowest} µs, {} admitted",
            tally.errors,
            tally.admitted()
        );
    }
    let stats = task.quota_stats();
    assert!(
        stats.failed_pulls >= 1 && stats.failed_ms >= 1000,
        "{stats:?}"
    );
    eprintln!("failed after {to_failed:?}, open again after {to_open:?}: {stats:?}");
    (to_failed, to_open)
}

#[test]
fn redis_killed_and_restarted_falls_back_and_recovers() {
    let _timed = one_at_a_time();
    let mut redis = RedisServer::start();
    let (to_failed, to_open) = outage(&mut redis, |r| r.kill(), |r| r.restart());
    // The host notices at its next pull (at the latest at the next slice).
    assert!(to_failed < Duration::from_millis(1200), "{to_failed:?}");
    // Probes every second ±20 %, then the probe's own round trip and the
    // workers' next pull (1.36 s seen in a clean-clone run).
    assert!(to_open < Duration::from_millis(1500), "{to_open:?}");
}

#[test]
fn redis_paused_falls_back_within_a_command_timeout_and_recovers() {
    let _timed = one_at_a_time();
    let mut redis = RedisServer::start();
    let (to_failed, to_open) = outage(
        &mut redis,
        |r| r.command::<()>(&["CLIENT", "PAUSE", "60000", "WRITE"]),
        |r| r.command::<()>(&["CLIENT", "UNPAUSE"]),
    );
    assert!(to_failed < Duration::from_millis(1300), "{to_failed:?}");
    // As after a restart: a probe interval ±20 %, then the round trips.
    assert!(to_open < Duration::from_millis(1500), "{to_open:?}");
}

#[test]
fn a_pull_lock_holder_killed_mid_pull_is_replaced_within_100_ms() {
    let _timed = one_at_a_time();
    let redis = RedisServer::start();
    let scratch = Scratch::new("quota-holder");
    let path = scratch.path("table");
    let slow = quota_options(Some(redis.url()), 0).timeout(Duration::from_secs(30));
    let config = TaskConfig::new().global_rate(RATE);
    let table = Table::open(&path, &quota_options(Some(redis.url()), 0)).unwrap();
    let task = table.task("api", &config).unwrap();
    let (ready, go) = (Pipe::new(), Pipe::new());
    let mut pids = KillOnDrop::default();
    let holder = {
        let path = path.clone();
        fork_guarded(move || {
            let table = Table::open(&path, &slow).unwrap();
            let task = table.task("api", &config).unwrap();
            ready.send(1);
            go.recv();
            let _ = task.pull_quota(100); // blocks: Redis is paused
            0
        })
    };
    pids.add(holder);
    ready.recv();
    redis.command::<()>(&["CLIENT", "PAUSE", "60000", "WRITE"]);
    go.send(1);
    std::thread::sleep(Duration::from_millis(300));
    let killed = monotonic();
    kill(holder, libc::SIGKILL);
    assert!(wait(holder) < 0);
    pids.forget(holder);
    redis.command::<()>(&["CLIENT", "UNPAUSE"]);
    // This process takes the lock over and pulls.
    let granted = loop {
        match task.acquire(1).unwrap() {
            Decision::Admitted(_) => break monotonic() - killed,
            Decision::Limited(_) => {
                assert!(
                    monotonic() - killed < Duration::from_secs(2),
                    "never pulled"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    };
    eprintln!("pulled {granted:?} after the holder was killed");
    assert!(granted < Duration::from_millis(100), "{granted:?}");
}

#[test]
fn bad_input_is_refused_clearly_and_never_blocks() {
    let scratch = Scratch::new("quota-bad");
    for url in [
        "http://127.0.0.1:6379",
        "redis://host?timeout_ms=0",
        "redis://[::1",
    ] {
        let err = Table::open(scratch.path("t"), &TableOptions::default().store(url)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{url}: {err}");
    }
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    for (config, what) in [
        (TaskConfig::new().global_rate(-1.0), "global_rate"),
        (TaskConfig::new().global_rate(f64::NAN), "global_rate"),
        (TaskConfig::new().global_rate(f64::INFINITY), "global_rate"),
        (
            TaskConfig::new().global_rate(100.0).slice_ms(99),
            "slice_ms",
        ),
        (
            TaskConfig::new().global_rate(100.0).slice_ms(60_001),
            "slice_ms",
        ),
        (TaskConfig::new().global_rate(0.5), "per slice"),
        (TaskConfig::new().global_rate(100.0).chunk(101), "chunk"),
        (
            TaskConfig::new().global_rate(100.0).fallback_rate(f64::NAN),
            "fallback_rate",
        ),
    ] {
        let err = table.task("bad", &config).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{config:?}");
        assert!(err.message().contains(what), "{err}");
    }
    // global_rate 0 is documented: no global limit.
    let open = table
        .task("open", &TaskConfig::new().global_rate(0.0))
        .unwrap();
    assert_eq!(
        open.pull_quota(1).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let task = table
        .task("g", &TaskConfig::new().global_rate(100.0))
        .unwrap();
    for want in [0, 101] {
        assert_eq!(
            task.pull_quota(want).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }

    // Unreachable at open: opening works, decisions fall back at once and
    // an explicit pull says why.
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}/0");
    let table = Table::open(scratch.path("u"), &quota_options(Some(url), 0)).unwrap();
    let task = table
        .task(
            "u",
            &TaskConfig::new().global_rate(1000.0).fallback_rate(50.0),
        )
        .unwrap();
    let began = Instant::now();
    assert!(matches!(task.acquire(1).unwrap(), Decision::Admitted(_)));
    assert!(began.elapsed() < Duration::from_millis(150));
    assert_eq!(task.quota_stats().state, Some(QuotaState::Failed));
    let err = task.pull_quota(10).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Store, "{err}");
    assert!(
        err.message().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );

    // A key that holds no number: the store is failed, callers keep going.
    let redis = RedisServer::start();
    let table = Table::open(scratch.path("n"), &quota_options(Some(redis.url()), 0)).unwrap();
    let task = table
        .task("n", &TaskConfig::new().global_rate(1000.0).slice_ms(60_000))
        .unwrap();
    let slice = (wall_us() / 1000 / 60_000) as u32;
    for s in [slice, slice + 1] {
        redis.command::<()>(&["HSET", &format!("flowctrl:{{n}}:{s}"), "left", "lots"]);
    }
    let err = task.pull_quota(10).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Store);
    assert!(err.message().contains("integer"), "{err}");
    assert!(matches!(task.acquire(1).unwrap(), Decision::Admitted(_)));
    assert!(matches!(
        task.acquire(1).unwrap(),
        Decision::Admitted(_) | Decision::Limited(Limited::Global)
    ));
}

/// A store that answers every request, but one byte every 20 ms (a reply
/// of 108 bytes: 2.16 s): every read of the reply succeeds within any
/// per-read timeout, so only a bound on the whole request stops it. The
/// first acquire decides (by the fallback) within the request bound,
/// connect_timeout + timeout, and an explicit pull fails within it with an
/// error that says so.
#[test]
fn a_trickling_store_holds_no_caller_past_the_request_bound() {
    let _timed = one_at_a_time();
    let trickler = common::trickle::Trickler::start();
    let scratch = Scratch::new("quota-trickle");
    let opts = quota_options(Some(trickler.url()), 0)
        .connect_timeout(Duration::from_millis(50))
        .timeout(Duration::from_millis(100));
    let bound = Duration::from_millis(150);
    // A loaded 2-core machine may deschedule the caller for a while.
    let margin = Duration::from_millis(100);
    let table = Table::open(scratch.path("t"), &opts).unwrap();
    let task = table
        .task(
            "api",
            &TaskConfig::new().global_rate(1000.0).fallback_rate(50.0),
        )
        .unwrap();
    let began = Instant::now();
    let decision = task.acquire(1).unwrap();
    let first = began.elapsed();
    assert!(matches!(
        decision,
        Decision::Admitted(_) | Decision::Limited(Limited::Global)
    ));
    drop(decision);
    let began = Instant::now();
    let err = task.pull_quota(10).unwrap_err();
    let pull = began.elapsed();
    eprintln!("first acquire {first:?}, explicit pull {pull:?}: {err}");
    assert!(first < bound + margin, "the first acquire took {first:?}");
    assert!(pull < bound + margin, "the explicit pull took {pull:?}");
    assert_eq!(err.kind(), ErrorKind::Store, "{err}");
    assert!(
        err.message().contains("the store timed out after")
            && err.message().contains("(a request's bound: 150 ms)"),
        "{err}"
    );

    // Two trickling sentinels: each asked is cut at its own connect
    // timeout, and adds it to the bound (150 + 2 × 50 ms). A cluster whose
    // node trickles: its connect is cut at the connect timeout.
    let other = common::trickle::Trickler::start();
    let addrs = format!("127.0.0.1:{},127.0.0.1:{}", trickler.port, other.port);
    for (url, bound) in [
        (format!("redis+sentinel://{addrs}/mymaster"), 250),
        (format!("redis+cluster://{addrs}"), 150),
    ] {
        let mut opts = opts.clone();
        opts.store.url = Some(url.clone());
        let table = Table::open(scratch.path(&format!("t{bound}")), &opts).unwrap();
        let task = table
            .task("api", &TaskConfig::new().global_rate(1000.0))
            .unwrap();
        let began = Instant::now();
        let err = task.pull_quota(10).unwrap_err();
        let took = began.elapsed();
        eprintln!("{url}: explicit pull {took:?}: {err}");
        assert!(
            took < Duration::from_millis(bound) + margin,
            "{url}: the explicit pull took {took:?}"
        );
        assert_eq!(err.kind(), ErrorKind::Store, "{err}");
        assert!(
            err.message().contains("the store timed out after")
                && err
                    .message()
                    .contains(&format!("(a request's bound: {bound} ms)")),
            "{err}"
        );
    }
}

/// Workers pulling all the time (a chunk of 20 from Redis) are SIGKILLed at
/// random instants — inside pulls too — and replaced; a survivor keeps
/// acquiring. The task never freezes: a dead holder's pull lock is taken
/// over at once, so the survivor never waits long; and the store is never
/// asked for more than one slice's quota per slice.
#[test]
fn pull_lock_survives_a_kill_storm() {
    let _timed = one_at_a_time();
    let kills = env_number("FLOWCTRL_QUOTA_STORM_KILLS", 200);
    let redis = RedisServer::start();
    let scratch = Scratch::new("quota-storm");
    let path = scratch.path("table");
    let config = TaskConfig::new().global_rate(1_000_000.0).chunk(20);
    let opts = quota_options(Some(redis.url()), 0);
    let spawn = || {
        let (path, opts) = (path.clone(), opts.clone());
        fork_guarded(move || {
            let table = Table::open(&path, &opts).unwrap();
            let task = table.task("api", &config).unwrap();
            loop {
                if let Err(e) = task.acquire(1) {
                    raw_eprint(&format!("acquire failed: {e}\n"));
                    return 1;
                }
            }
        })
    };
    let survivor = {
        let (path, opts, out) = (path.clone(), opts.clone(), scratch.path("gap"));
        fork_guarded(move || {
            let table = Table::open(&path, &opts).unwrap();
            let task = table.task("api", &config).unwrap();
            let (mut last, mut gap) = (Instant::now(), Duration::ZERO);
            let end = Instant::now() + Duration::from_secs(600);
            while !Path::new(&format!("{}.stop", out.display())).exists() && Instant::now() < end {
                match task.acquire(1) {
                    Ok(Decision::Admitted(_)) => {
                        gap = gap.max(last.elapsed());
                        last = Instant::now();
                    }
                    Ok(Decision::Limited(_)) => {}
                    Err(e) => {
                        raw_eprint(&format!("survivor: {e}\n"));
                        return 1;
                    }
                }
            }
            std::fs::write(&out, gap.as_micros().to_string()).unwrap();
            0
        })
    };
    let mut workers = KillOnDrop::default();
    workers.add(survivor);
    let mut live: Vec<_> = (0..3).map(|_| spawn()).collect();
    live.iter().for_each(|p| workers.add(*p));
    let mut rng = Rng::new(seed_from_env("FLOWCTRL_QUOTA_STORM_SEED"));
    let began = Instant::now();
    for _ in 0..kills {
        std::thread::sleep(Duration::from_micros(2000 + rng.below(8000)));
        let i = rng.below(live.len() as u64) as usize;
        kill(live[i], libc::SIGKILL);
        assert!(wait(live[i]) < 0, "a worker exited by itself");
        workers.forget(live[i]);
        live[i] = spawn();
        workers.add(live[i]);
    }
    let storm = began.elapsed();
    std::fs::write(format!("{}.stop", scratch.path("gap").display()), "").unwrap();
    assert_eq!(wait(survivor), 0);
    workers.forget(survivor);
    let gap: u64 = std::fs::read_to_string(scratch.path("gap"))
        .unwrap()
        .parse()
        .unwrap();
    let table = Table::open(&path, &opts).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    let (stats, quota) = (task.stats(), task.quota_stats());
    eprintln!(
        "{kills} kills in {storm:?}; longest wait of the survivor {gap} µs; {stats:?}; {quota:?}"
    );
    // A dead holder is seen at once; a live one pulls within a command.
    assert!(
        gap < 250_000,
        "the survivor waited {gap} µs between admissions"
    );
    assert!(quota.granted >= stats.admitted, "{quota:?} {stats:?}");
    let slices = storm.as_secs() + 3;
    assert!(quota.granted <= slices * 1_000_000, "{quota:?}");
}

/// TLS and AUTH through the URL: a Redis with a TLS port only and a
/// password, its certificate signed by a CA made here (trusted through
/// `SSL_CERT_FILE`, which the system roots loader reads).
#[test]
fn tls_and_auth_through_the_url() {
    let scratch = Scratch::new("quota-tls");
    let tls = common::tls::Tls::make();
    let server = Redis::new().tls(&tls).password("s3cret").server();
    let port = server.port;
    let (table, ca) = (scratch.path("t"), tls.ca.clone());
    let exit = run_in_child(Duration::from_secs(30), move || {
        set_env_in_child("SSL_CERT_FILE", &ca);
        let opts = quota_options(Some(format!("rediss://:s3cret@127.0.0.1:{port}/0")), 0)
            .connect_timeout(Duration::from_secs(2));
        let t = Table::open(&table, &opts).unwrap();
        let task = t
            .task("tls", &TaskConfig::new().global_rate(100.0))
            .unwrap();
        let granted = task.pull_quota(10).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(granted, Ok(10));
        // A wrong password is a store error naming the store, not the password.
        let bad = quota_options(Some(format!("rediss://:wrong@127.0.0.1:{port}/0")), 0)
            .connect_timeout(Duration::from_secs(2));
        let t = Table::open(table.with_extension("bad"), &bad).unwrap();
        let task = t
            .task("tls", &TaskConfig::new().global_rate(100.0))
            .unwrap();
        let err = task.pull_quota(10).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Store, "{err}");
        assert!(!err.message().contains("wrong"), "{err}");
        0
    });
    assert_eq!(exit, Exit::Code(0));
}

/// The other ways to a server, over flowctrl's own connections: a unix
/// socket (`unix://path?db=&pass=`), and RESP3 (`protocol=resp3`: HELLO 3
/// with AUTH) with a db; each pull lands in the URL's db.
#[test]
fn unix_sockets_resp3_auth_and_db_through_the_url() {
    let scratch = Scratch::new("quota-unix");
    let socket = scratch.path("redis.sock");
    let server = Redis::new()
        .password("s3cret")
        .unix_socket(&socket)
        .server();
    let port = server.port;
    let mut control = server.connection().unwrap();
    for (url, db, task) in [
        (
            format!("unix://{}?db=2&pass=s3cret", socket.display()),
            2,
            "unix",
        ),
        (
            format!("redis://:s3cret@127.0.0.1:{port}/3?protocol=resp3"),
            3,
            "resp3",
        ),
    ] {
        let opts = quota_options(Some(url.clone()), 0).connect_timeout(Duration::from_millis(500));
        let table = Table::open(scratch.path(task), &opts).unwrap();
        let t = table
            .task(task, &TaskConfig::new().global_rate(100.0))
            .unwrap();
        assert_eq!(
            t.pull_quota(10).unwrap_or_else(|e| panic!("{url}: {e}")),
            Ok(10),
            "{url}"
        );
        let keys: Vec<String> = ::redis::pipe()
            .cmd("SELECT")
            .arg(db)
            .ignore()
            .cmd("KEYS")
            .arg(format!("*{{{task}}}*"))
            .query::<(Vec<String>,)>(&mut control)
            .unwrap()
            .0;
        assert!(!keys.is_empty(), "{url}: no key of the task in db {db}");
    }
}
