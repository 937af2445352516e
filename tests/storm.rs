//! Crash storms across real processes: workers SIGKILLed at random moments
//! while they acquire and release, and reapers SIGKILLed while they reclaim.
//! After every kill the shared concurrency count must equal the sum of the
//! ledgers, the cap must hold, and what the dead held must come back.
//!
//! `FLOWCTRL_STORM_KILLS` (default 150) sets the number of worker kills;
//! `FLOWCTRL_STORM_SEED` replays a run (every run prints its seed);
//! `scripts/storm.sh` runs the full 1,000 kills, release build, three times.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use flowctrl::{Limited, Outcome, RawPermit, Table, TableOptions, Task, TaskConfig};

/// The storms measure latencies: they run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const WORKERS: usize = 8;
const THREADS_PER_WORKER: usize = 2;
const CAP: u32 = 4;
const TASK: &str = "storm";
/// Budget for the background reaper: a dead process's permits come back
/// within this, at the 99th percentile, without anyone calling `reap`.
const RECLAIM_P99_BUDGET: Duration = Duration::from_millis(100);

fn storm_options() -> TableOptions {
    TableOptions {
        capacity: 8,
        max_processes: 32,
        ..Default::default()
    }
}

fn storm_config() -> TaskConfig {
    TaskConfig::new().max_concurrency(CAP)
}

/// Ends a worker process at once with a message: the driver sees the code.
fn die(code: i32, message: String) -> ! {
    raw_eprint(&format!("storm worker {}: {message}", std::process::id()));
    // SAFETY: ends this process.
    unsafe { libc::_exit(code) }
}

/// Entry point of the re-executed worker processes, not a test of its own:
/// ignored, so a plain `cargo test` does not run it, and the driver runs it
/// with `--ignored --exact storm_worker`. Run by hand, without the
/// environment the driver gives it, it fails.
#[test]
#[ignore = "the worker process of the storm tests, run by them"]
fn storm_worker() {
    match std::env::var("FLOWCTRL_STORM_ROLE").as_deref() {
        Ok("worker") => worker(),
        Ok(other) => panic!("unknown FLOWCTRL_STORM_ROLE {other:?}"),
        Err(_) => panic!(
            "storm_worker is the worker process of the storm tests, re-executed by them \
             with FLOWCTRL_STORM_ROLE=worker and its table in the environment; \
             run alone it has nothing to test"
        ),
    }
}

/// Loops acquire/release on the task from a few threads, until the stop file
/// appears.
fn worker() -> ! {
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| die(2, format!("{name} unset")));
    let path = PathBuf::from(env("FLOWCTRL_STORM_PATH"));
    let stop_file = PathBuf::from(env("FLOWCTRL_STORM_STOP"));
    let seed: u64 = env("FLOWCTRL_STORM_WORKER_SEED").parse().unwrap();
    let table =
        Table::open(&path, &storm_options()).unwrap_or_else(|e| die(2, format!("open: {e}")));
    let task = table
        .task(TASK, &storm_config())
        .unwrap_or_else(|e| die(2, format!("task: {e}")));
    let stop = AtomicBool::new(false);
    // Permits handed from one thread to another, which releases them (on its
    // own ledger lane: the acquirer's lane keeps +n, the releaser's goes -n).
    let piles: [Mutex<Vec<RawPermit>>; THREADS_PER_WORKER] = Default::default();
    std::thread::scope(|s| {
        for t in 0..THREADS_PER_WORKER {
            let (task, stop, stop_file, piles) = (&task, &stop, &stop_file, &piles);
            let rng = Rng::new(seed ^ ((t as u64) << 56));
            s.spawn(move || work(task, rng, stop, stop_file, t, piles));
        }
    });
    for pile in &piles {
        for mut permit in pile.lock().unwrap().drain(..) {
            if let Err(e) = task.release_raw(&mut permit, Outcome::Success) {
                die(4, format!("release of a handed-over permit at exit: {e}"));
            }
        }
    }
    drop(task);
    drop(table);
    // SAFETY: ends this process (the test harness has nothing left to do).
    unsafe { libc::_exit(0) }
}

/// The loop of one worker thread: mostly acquire(1) and release at once;
/// sometimes acquire(2), hold a while, or hand the permit to the other thread.
fn work(
    task: &Task,
    mut rng: Rng,
    stop: &AtomicBool,
    stop_file: &Path,
    me: usize,
    piles: &[Mutex<Vec<RawPermit>>; THREADS_PER_WORKER],
) {
    for i in 0u64.. {
        if i % 256 == 0 && (stop.load(Ordering::Relaxed) || stop_file.exists()) {
            stop.store(true, Ordering::Relaxed);
            return;
        }
        let handed = piles[me].lock().unwrap().pop();
        if let Some(mut permit) = handed
            && let Err(e) = task.release_raw(&mut permit, Outcome::Dropped)
        {
            die(4, format!("release of a handed-over permit: {e}"));
        }
        let n = if rng.one_in(16) { 2 } else { 1 };
        match task.acquire_raw(n) {
            Ok(Ok(mut permit)) => {
                let r = rng.below(64);
                if r < 4 {
                    piles[(me + 1) % THREADS_PER_WORKER]
                        .lock()
                        .unwrap()
                        .push(permit);
                    continue;
                } else if r < 5 {
                    std::thread::sleep(Duration::from_micros(20 + rng.below(400)));
                } else if r < 12 {
                    for _ in 0..rng.below(2000) {
                        std::hint::spin_loop();
                    }
                }
                if let Err(e) = task.release_raw(&mut permit, Outcome::Success) {
                    die(4, format!("release: {e}"));
                }
            }
            Ok(Err(Limited::Concurrency)) => {
                if rng.one_in(4) {
                    std::thread::yield_now();
                }
            }
            Ok(Err(other)) => die(5, format!("limited by {other:?} with no rate set")),
            Err(e) => die(3, format!("acquire: {e}")),
        }
    }
}

struct Driver {
    path: PathBuf,
    stop_file: PathBuf,
    seed: u64,
    spawned: u64,
    children: KillOnDrop,
}

impl Driver {
    fn spawn(&mut self) -> libc::pid_t {
        self.spawned += 1;
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--ignored",
            "--exact",
            "storm_worker",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("FLOWCTRL_STORM_ROLE", "worker")
        .env("FLOWCTRL_STORM_PATH", &self.path)
        .env("FLOWCTRL_STORM_STOP", &self.stop_file)
        .env(
            "FLOWCTRL_STORM_WORKER_SEED",
            Rng::new(self.seed ^ self.spawned).next_u64().to_string(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
        // SAFETY: prctl is async-signal-safe; the worker dies with this thread.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let pid = cmd.spawn().expect("spawn worker").id() as libc::pid_t;
        self.children.add(pid);
        pid
    }
}

#[derive(Default)]
struct Figures {
    kills: u64,
    killed_before_attach: u64,
    checks: u64,
    max_drift: i64,
    cap_exceeded: u64,
    /// Checks that found the count above the cap (mid-drain, by design).
    over_count: u64,
    reclaim: Vec<Duration>,
    not_reclaimed: u64,
    max_in_flight_seen: u64,
}

/// SIGSTOPs every worker, reaps from the driver, and checks the count against
/// the ledgers and the cap; then SIGCONTs them. Returns the failures found.
fn stopped_check(
    table: &Table,
    task: &Task,
    raw: &RawTable,
    slot: usize,
    workers: &mut Vec<libc::pid_t>,
    figures: &mut Figures,
    context: &str,
) -> Vec<String> {
    let mut failures = Vec::new();
    for &pid in workers.iter() {
        signal(pid, libc::SIGSTOP);
    }
    workers.retain(|&pid| match wait_stopped(pid, Duration::from_secs(5)) {
        Ok(()) => true,
        Err(Exit::TimedOut) => {
            failures.push(format!("{context}: worker {pid} did not stop within 5 s"));
            true
        }
        Err(exit) => {
            failures.push(format!(
                "{context}: worker {pid} ended on its own: {exit:?}"
            ));
            false
        }
    });
    table.reap();
    figures.checks += 1;
    match task.check() {
        Ok(c) => {
            figures.max_drift = figures.max_drift.max(c.drift().abs());
            figures.max_in_flight_seen = figures.max_in_flight_seen.max(c.in_flight);
            // What the live processes hold (their ledgers, with an op of
            // theirs in flight if it landed) never exceeds the cap. The count
            // itself may, briefly and by design, while a dead process's
            // lanes are drained (negative lanes first: the count errs on the
            // side of the cap); that is only counted.
            let me = std::process::id();
            let rows = task.stats_by_process();
            let live_held: i64 = rows
                .iter()
                .filter(|p| p.pid == me || workers.contains(&(p.pid as libc::pid_t)))
                .map(|p| p.stats.held)
                .sum();
            if live_held > CAP as i64 {
                figures.cap_exceeded += 1;
                failures.push(format!(
                    "{context}: cap {CAP} exceeded: live processes hold {live_held} (in_flight {}, \
                     held {}); per process (pid, slot, held) {:?}",
                    c.in_flight,
                    c.held,
                    rows.iter()
                        .map(|p| (p.pid, p.slot, p.stats.held))
                        .collect::<Vec<_>>()
                ));
            }
            if c.in_flight > CAP as u64 {
                figures.over_count += 1;
            }
            if c.drift() != 0 || raw.drift(slot) != 0 {
                failures.push(format!(
                    "{context}: drift {} (in_flight {} held {}; raw oracle drift {}); per \
                     process {:?}\n{}",
                    c.drift(),
                    c.in_flight,
                    c.held,
                    raw.drift(slot),
                    task.stats_by_process()
                        .iter()
                        .map(|p| (p.pid, p.slot, p.stats.held))
                        .collect::<Vec<_>>(),
                    raw.describe_lanes(slot)
                ));
            }
        }
        Err(e) => failures.push(format!(
            "{context}: check failed with everyone stopped: {e}"
        )),
    }
    for &pid in workers.iter() {
        signal(pid, libc::SIGCONT);
    }
    failures
}

/// Workers loop on a contended cap; the driver SIGKILLs one at a random
/// moment, measures how long the background reapers take to give its
/// permits back (no `reap` call), then stops everyone, reaps, and checks the
/// count exactly; a replacement worker takes the dead one's place.
#[test]
fn kill_storm() {
    kill_storm_with(storm_options());
}

/// The storm on a pooled table with fewer lane sets than workers: sets are
/// taken, folded back when their process dies and taken again, some workers
/// find the pool empty meanwhile, and every check of the storm holds.
#[test]
fn kill_storm_on_pooled_lanes() {
    kill_storm_with(TableOptions {
        lanes: WORKERS as u32 - 2,
        ..storm_options()
    });
}

fn kill_storm_with(options: TableOptions) {
    let _serial = serial();
    let kills = env_number("FLOWCTRL_STORM_KILLS", 150);
    let seed = seed_from_env("FLOWCTRL_STORM_SEED");
    eprintln!(
        "kill storm: {kills} kills, {WORKERS} workers × {THREADS_PER_WORKER} threads, cap {CAP}, \
         FLOWCTRL_STORM_SEED={seed:#x}"
    );
    let mut rng = Rng::new(seed);
    let scratch = Scratch::new("storm");
    let mut driver = Driver {
        path: scratch.path("table"),
        stop_file: scratch.path("stop"),
        seed,
        spawned: 0,
        children: KillOnDrop::default(),
    };
    let table = Table::open(&driver.path, &options).unwrap();
    let task = table.task(TASK, &storm_config()).unwrap();
    let raw = RawTable::open(&driver.path);
    let slot = raw.find_task(TASK).unwrap();
    let started = Instant::now();
    let mut last = task.stats();
    let mut workers: Vec<libc::pid_t> = (0..WORKERS).map(|_| driver.spawn()).collect();
    let mut figures = Figures::default();
    let mut failures = Vec::new();
    // Let the first workers attach and get going.
    std::thread::sleep(Duration::from_millis(100));

    for k in 0..kills {
        let context = format!("kill {k} (seed {seed:#x})");
        if !rng.one_in(10) {
            std::thread::sleep(Duration::from_micros(rng.below(12_000)));
        }
        let victim = workers.swap_remove(rng.below(workers.len() as u64) as usize);
        let attachment = task
            .stats_by_process()
            .into_iter()
            .find(|p| p.pid == victim as u32)
            .map(|p| p.slot);
        signal(victim, libc::SIGKILL);
        let killed = Instant::now();
        figures.kills += 1;
        match wait_timeout(victim, Duration::from_secs(5)) {
            exit if exit.killed_by(libc::SIGKILL) => {}
            other => failures.push(format!(
                "{context}: worker {victim} ended {other:?}, not by our SIGKILL"
            )),
        }
        driver.children.forget(victim);

        // The background reapers' latency: poll, never reap.
        match attachment {
            None => figures.killed_before_attach += 1,
            Some(attachment) => loop {
                let listed = task
                    .stats_by_process()
                    .iter()
                    .any(|p| p.pid == victim as u32 && p.slot == attachment);
                if !listed {
                    figures.reclaim.push(killed.elapsed());
                    break;
                }
                if killed.elapsed() > Duration::from_secs(3) {
                    figures.not_reclaimed += 1;
                    failures.push(format!(
                        "{context}: slot {attachment} of dead worker {victim} still listed after 3 s \
                         without reap"
                    ));
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            },
        }

        failures.extend(stopped_check(
            &table,
            &task,
            &raw,
            slot,
            &mut workers,
            &mut figures,
            &context,
        ));
        // Counters never go back, whoever's lanes they were counted on.
        let now = task.stats();
        for (what, before, after) in [
            ("admitted", last.admitted, now.admitted),
            (
                "released_success",
                last.released_success,
                now.released_success,
            ),
            (
                "limited_concurrency",
                last.limited_concurrency,
                now.limited_concurrency,
            ),
            ("reclaimed", last.reclaimed, now.reclaimed),
        ] {
            if after < before {
                failures.push(format!(
                    "{context}: {what} went back from {before} to {after}"
                ));
            }
        }
        last = now;
        while workers.len() < WORKERS {
            workers.push(driver.spawn());
        }
        if failures.len() > 20 {
            failures.push("(stopping early: too many failures)".into());
            break;
        }
    }

    // Clean shutdown: every worker releases and exits 0.
    std::fs::write(&driver.stop_file, b"stop").unwrap();
    for pid in workers.drain(..) {
        match wait_timeout(pid, Duration::from_secs(10)) {
            Exit::Code(0) => {}
            other => failures.push(format!("worker {pid} did not exit cleanly: {other:?}")),
        }
        driver.children.forget(pid);
    }
    table.reap();
    let end = task.check().unwrap();
    let stats = task.stats();
    let rows = task.stats_by_process();
    if end.in_flight != 0 || end.held != 0 || raw.drift(slot) != 0 {
        failures.push(format!(
            "after every worker exited: in_flight {} held {} (raw drift {})\n{}",
            end.in_flight,
            end.held,
            raw.drift(slot),
            raw.describe_lanes(slot)
        ));
    }
    if rows.len() != 1 || rows[0].pid != std::process::id() {
        failures.push(format!("attachments left after shutdown: {rows:?}"));
    }
    // Every dead worker's set came back: only the driver's own may be held.
    let mine = rows.first().map(|r| r.slot as usize);
    let driver_sets = mine.and_then(|m| raw.pair_set(slot, m)).is_some() as u32;
    if let Some((used, sets)) = table.lane_pool()
        && used != driver_sets
    {
        failures.push(format!(
            "lane sets in use after shutdown: {used} of {sets}, the driver holds {driver_sets}"
        ));
    }
    let elapsed = started.elapsed();

    let mut reclaim = figures.reclaim.clone();
    reclaim.sort();
    let (p50, p99, max) = (
        percentile(&reclaim, 50.0),
        percentile(&reclaim, 99.0),
        reclaim.last().copied().unwrap_or_default(),
    );
    let released = stats.released_success + stats.released_dropped + stats.released_ignored;
    eprintln!(
        "kill storm figures (seed {seed:#x}):\n  kills {} ({} before the worker attached), \
         {:.1} s\n  drift checks {} (everyone stopped), max |drift| {}, cap exceeded by live \
         holders {} (max in_flight seen {}, count above cap mid-drain {})\n  reclaim latency without reap: n {} p50 {:.1} ms p99 {:.1} ms \
         max {:.1} ms, not reclaimed in 3 s: {}\n  admitted {} released {} reclaimed {} \
         (admitted - released - reclaimed = {}: kills between a count move and its counter)\n  \
         unlaned {} (refused {}), lane pool {:?}",
        figures.kills,
        figures.killed_before_attach,
        elapsed.as_secs_f64(),
        figures.checks,
        figures.max_drift,
        figures.cap_exceeded,
        figures.max_in_flight_seen,
        figures.over_count,
        reclaim.len(),
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        figures.not_reclaimed,
        stats.admitted,
        released,
        stats.reclaimed,
        stats.admitted as i64 - released as i64 - stats.reclaimed as i64,
        stats.unlaned,
        stats.unlaned_refused,
        table.lane_pool(),
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        p99 <= RECLAIM_P99_BUDGET,
        "reclaim latency p99 {p99:?} is over the {RECLAIM_P99_BUDGET:?} budget (seed {seed:#x})"
    );
}

// ---- reapers killed mid-reclaim ---------------------------------------------

const RECLAIM_TASKS: [&str; 8] = ["r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"];
const CHURN: &str = "churn";
const MAX_ROUNDS: u64 = 8;
const DEAD_PER_ROUND: u64 = 120;
/// Reaper processes started (and most of them killed) in all.
const REAPERS: u64 = 200;
const REAPERS_PER_ROUND: u64 = 25;
/// Step of the kill moment from one reaper to the next, in µs.
const RECLAIM_RATCHET: u64 = 40;

fn reclaim_options() -> TableOptions {
    TableOptions {
        capacity: 16,
        max_processes: 256,
        ..Default::default()
    }
}

fn big_cap() -> TaskConfig {
    TaskConfig::new().max_concurrency(100_000)
}

/// What dead worker `w` of `round` acquires on task `t` (on one thread) and
/// gives back (on another thread, so that lane goes negative).
fn plan(round: u64, w: u64, t: u64) -> (u32, u32) {
    let acquired = ((w * 7 + t * 3 + round) % 5) as u32;
    let released = if acquired >= 2 {
        ((w + t) % 2) as u32
    } else {
        0
    };
    (acquired, released)
}

/// The holder: a live process that holds `t + 1` of each task and is stopped
/// for the whole test (its reaper thread does not run).
fn holder_body(path: &Path, ready: Pipe) -> i32 {
    let table = Table::open(path, &reclaim_options()).unwrap();
    let mut permits = Vec::new();
    for (t, name) in RECLAIM_TASKS.iter().enumerate() {
        let task = table.task(name, &TaskConfig::new()).unwrap();
        for _ in 0..=t {
            permits.push(task.acquire_raw(1).unwrap().unwrap());
        }
    }
    ready.send(1);
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn dead_worker_body(path: &Path, round: u64, w: u64, ready: Pipe) -> i32 {
    let table = Table::open(path, &reclaim_options()).unwrap();
    for (t, name) in RECLAIM_TASKS.iter().enumerate() {
        let task = table.task(name, &TaskConfig::new()).unwrap();
        let (acquired, released) = plan(round, w, t as u64);
        let mut permits: Vec<_> = (0..acquired)
            .map(|_| task.acquire_raw(1).unwrap().unwrap())
            .collect();
        let giving: Vec<_> = permits.drain(..released as usize).collect();
        let task2 = task.clone();
        std::thread::spawn(move || {
            for mut p in giving {
                task2.release_raw(&mut p, Outcome::Success).unwrap();
            }
        })
        .join()
        .unwrap();
        // The rest stay held (plain data: nothing releases them on exit).
        drop(permits);
    }
    // In some workers a thread keeps moving the count of another task: it is
    // stopped, then killed, wherever it is in an op.
    let churn = table.task(CHURN, &TaskConfig::new()).unwrap();
    if w.is_multiple_of(6) {
        std::thread::spawn(move || {
            loop {
                if let Ok(Ok(mut p)) = churn.acquire_raw(1) {
                    let _ = churn.release_raw(&mut p, Outcome::Ignored);
                }
            }
        });
    }
    std::thread::sleep(Duration::from_millis(2));
    ready.send(1);
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Dead workers pile up while no reaper runs (every live process is
/// stopped), then processes whose only job is to attach (which reaps) or to
/// reap are SIGKILLed 0–2 ms after they start, ~200 times. After every kill
/// the table (quiescent: everyone is stopped or dead) must be exact; at the
/// end, what the dead held must have come back, exactly once.
#[test]
fn reapers_killed_mid_reclaim() {
    reapers_killed_with(reclaim_options());
}

/// The same on a pooled table: the reapers killed are also folding the dead
/// workers' lane sets back, and every count must still come out once.
#[test]
fn reapers_killed_mid_reclaim_on_pooled_lanes() {
    reapers_killed_with(TableOptions {
        // Room for every live and dead pair at once (a dead worker's acquires
        // must not be refused for want of a set: the plan counts on them).
        lanes: 9 * 256,
        ..reclaim_options()
    });
}

fn reapers_killed_with(options: TableOptions) {
    let _serial = serial();
    let seed = seed_from_env("FLOWCTRL_STORM_SEED");
    let mut rng = Rng::new(seed ^ 0x5eed);
    eprintln!("reapers killed mid-reclaim: FLOWCTRL_STORM_SEED={seed:#x}");
    let scratch = Scratch::new("reapers");
    let path = scratch.path("table");
    {
        // Register the tasks, then detach: the test process reaps nothing.
        let table = Table::open(&path, &options).unwrap();
        for name in RECLAIM_TASKS.iter().chain([&CHURN]) {
            table.task(name, &big_cap()).unwrap();
        }
    }
    let raw = RawTable::open(&path);
    let slots: Vec<usize> = RECLAIM_TASKS
        .iter()
        .chain([&CHURN])
        .map(|name| raw.find_task(name).unwrap())
        .collect();
    let mut children = KillOnDrop::default();
    let mut failures = Vec::new();

    let ready = Pipe::new();
    let holder = fork_guarded(|| holder_body(&path, ready));
    children.add(holder);
    assert_eq!(
        ready.recv_timeout(Duration::from_secs(10)),
        Some(1),
        "holder did not start"
    );
    signal(holder, libc::SIGSTOP);
    wait_stopped(holder, Duration::from_secs(5)).expect("holder stops");

    let mut expected = [0i64; RECLAIM_TASKS.len()];
    let (mut killed, mut finished) = (0u64, 0u64);
    let (mut killed_mid_sweep, mut killed_before_work) = (0u64, 0u64);
    let mut first_round_progress = Vec::new();
    // SAFETY: prctl on this thread: sleeps end within 1 µs of their time.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1) };
    let mut reapers = 0u64;
    let mut round = 0u64;
    let mut batch_left = Vec::new();
    let dead = |raw: &RawTable| -> Vec<(u32, u64)> {
        raw.live_attachments()
            .into_iter()
            .filter(|(_, _, pid)| *pid != holder as u64)
            .map(|(slot, epoch, _)| (slot, epoch))
            .collect()
    };
    while reapers < REAPERS && round < MAX_ROUNDS && failures.len() <= 20 {
        let before_batch = dead(&raw);
        let workers: Vec<_> = (0..DEAD_PER_ROUND)
            .map(|w| {
                let pid = fork_guarded(|| dead_worker_body(&path, round, w, ready));
                children.add(pid);
                pid
            })
            .collect();
        for _ in &workers {
            assert_eq!(
                ready.recv_timeout(Duration::from_secs(20)),
                Some(1),
                "round {round}: a worker did not get ready"
            );
        }
        for &pid in &workers {
            signal(pid, libc::SIGSTOP);
        }
        for &pid in &workers {
            wait_stopped(pid, Duration::from_secs(5)).expect("worker stops");
        }
        for &pid in &workers {
            signal(pid, libc::SIGKILL);
        }
        for &pid in &workers {
            let exit = wait_timeout(pid, Duration::from_secs(5));
            assert!(exit.killed_by(libc::SIGKILL), "worker {pid}: {exit:?}");
            children.forget(pid);
        }
        let batch: Vec<_> = dead(&raw)
            .into_iter()
            .filter(|d| !before_batch.contains(d))
            .collect();
        for w in 0..workers.len() {
            for (t, e) in expected.iter_mut().enumerate() {
                let (a, r) = plan(round, w as u64, t as u64);
                *e += (a - r) as i64;
            }
        }
        for (i, &slot) in slots.iter().enumerate() {
            let drift = raw.drift(slot);
            if drift != 0 {
                failures.push(format!(
                    "round {round}, before any reaper: task {i} drift {drift}\n{}",
                    raw.describe_lanes(slot)
                ));
            }
        }

        // Reapers, each SIGKILLed 0–2 ms after it starts. The kill moments ratchet through 0–2 ms in steps of
        // RECLAIM_RATCHET (with jitter, and one in twelve anywhere in
        // 0–2 ms): each reaper tends to get a little further than the last,
        // through the open, the claim and into a sweep of the batch that
        // takes a few ms.
        for k in 0u64.. {
            let dead_before = dead(&raw);
            if k >= REAPERS_PER_ROUND || reapers >= REAPERS {
                break;
            }
            reapers += 1;
            let mode = rng.below(3);
            let micros = if rng.one_in(12) {
                rng.below(2001)
            } else {
                (k * RECLAIM_RATCHET + rng.below(RECLAIM_RATCHET)).min(2000)
            };
            let delay = Duration::from_micros(micros);
            let pid = fork_guarded(|| {
                let Ok(table) = Table::open(&path, &reclaim_options()) else {
                    return 2;
                };
                if mode >= 1 {
                    table.reap();
                }
                if mode == 2 {
                    let _ = table.task(RECLAIM_TASKS[0], &TaskConfig::new());
                    table.reap();
                    drop(table);
                } else {
                    std::mem::forget(table);
                }
                0
            });
            children.add(pid);
            // Sleep rather than spin: on a busy machine a spinning driver is
            // descheduled for whole time slices, and a sleeper is woken on time.
            let forked = Instant::now();
            std::thread::sleep(delay);
            signal(pid, libc::SIGKILL);
            let actual = forked.elapsed().as_micros() as u64;
            let exit = wait_timeout(pid, Duration::from_secs(5));
            let was_killed = exit.killed_by(libc::SIGKILL);
            match exit {
                _ if was_killed => killed += 1,
                Exit::Code(0) => finished += 1,
                other => failures.push(format!("round {round} reaper {k}: ended {other:?}")),
            }
            children.forget(pid);
            let dead_after = dead(&raw);
            let progress = dead_before.iter().any(|d| !dead_after.contains(d));
            let work_left = dead_before.iter().any(|d| dead_after.contains(d));
            if was_killed && work_left {
                if progress {
                    killed_mid_sweep += 1;
                } else {
                    killed_before_work += 1;
                }
            }
            if round == 0 && k < 40 {
                first_round_progress.push((micros, actual, dead_before.len(), dead_after.len()));
            }
            for (t, &slot) in slots.iter().enumerate() {
                let drift = raw.drift(slot);
                if drift != 0 {
                    failures.push(format!(
                        "round {round}, reaper {k} (mode {mode}, killed after {delay:?}): task {t} \
                         drift {drift}\n{}",
                        raw.describe_lanes(slot)
                    ));
                }
            }
            if failures.len() > 20 {
                break;
            }
        }
        let now_dead = dead(&raw);
        batch_left.push(batch.iter().filter(|d| now_dead.contains(d)).count());
        round += 1;
    }

    // Finish the work in a process nobody kills, and check the sums.
    let table = Table::open(&path, &reclaim_options()).unwrap();
    table.reap();
    let holder_rows: Vec<_> = RECLAIM_TASKS
        .iter()
        .map(|name| {
            let task = table.task(name, &TaskConfig::new()).unwrap();
            task.stats_by_process()
                .into_iter()
                .find(|p| p.pid == holder as u32)
                .map(|p| p.stats.held)
        })
        .collect();
    let mut reclaimed_total = 0;
    for (t, name) in RECLAIM_TASKS.iter().enumerate() {
        let task = table.task(name, &TaskConfig::new()).unwrap();
        let check = task.check().unwrap();
        let stats = task.stats();
        reclaimed_total += stats.reclaimed;
        let holds = t as i64 + 1;
        if check.drift() != 0
            || check.in_flight as i64 != holds
            || stats.reclaimed as i64 != expected[t]
            || holder_rows[t] != Some(holds)
        {
            failures.push(format!(
                "task {name}: in_flight {} (holder holds {holds}, its row says {:?}), drift {}, \
                 reclaimed {} (the dead held {})\n{}",
                check.in_flight,
                holder_rows[t],
                check.drift(),
                stats.reclaimed,
                expected[t],
                raw.describe_lanes(slots[t])
            ));
        }
    }
    let churn = table
        .task(CHURN, &TaskConfig::new())
        .unwrap()
        .check()
        .unwrap();
    if churn.drift() != 0 || churn.in_flight != 0 {
        failures.push(format!(
            "task churn: in_flight {} drift {} with every churner dead\n{}",
            churn.in_flight,
            churn.drift(),
            raw.describe_lanes(slots[RECLAIM_TASKS.len()])
        ));
    }
    // The dead's lane sets came back: only the holder's and ours are held.
    if let Some((used, sets)) = table.lane_pool()
        && used > 2 * (RECLAIM_TASKS.len() as u32 + 1)
    {
        failures.push(format!(
            "{used} of {sets} lane sets still held with the dead reaped"
        ));
    }
    let live: Vec<_> = raw.live_attachments();
    let me = std::process::id() as u64;
    if live
        .iter()
        .any(|(_, _, pid)| *pid != me && *pid != holder as u64)
    {
        failures.push(format!(
            "dead attachments left after a final reap: {live:?}"
        ));
    }
    signal(holder, libc::SIGKILL);
    assert!(wait_timeout(holder, Duration::from_secs(5)).killed_by(libc::SIGKILL));
    children.forget(holder);
    eprintln!(
        "reapers killed mid-reclaim (seed {seed:#x}): {round} rounds, {} dead workers, {} reapers: \
         {killed} killed, \
         {finished} finished first; killed with dead attachments left: {killed_mid_sweep} after \
         reclaiming some, {killed_before_work} before reclaiming any; \
         dead workers of each round left unreclaimed after its reapers: {batch_left:?}; \
         reclaimed {reclaimed_total} (expected {}); first round (kill after µs: meant, actual; dead before, after): \
         {first_round_progress:?}",
        round * DEAD_PER_ROUND,
        killed + finished,
        expected.iter().sum::<i64>()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// ---- more threads than ledger lanes -----------------------------------------

/// Each process has four ledger lanes per task; threads beyond four take
/// turns. Sixteen threads in each of two processes hammer a cap of 4: no
/// operation may give up on busy lanes (a Timeout error) and the count ends
/// exact.
#[test]
fn more_threads_than_lanes() {
    let _serial = serial();
    const THREADS: usize = 16;
    const OPS: u64 = 4_000;
    let scratch = Scratch::new("lanes");
    let path = scratch.path("table");
    let config = TaskConfig::new().max_concurrency(CAP);
    let hammer = |path: &Path| -> Result<u64, String> {
        let table = Table::open(path, &storm_options()).map_err(|e| e.to_string())?;
        let task = table.task("lanes", &config).map_err(|e| e.to_string())?;
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let task = &task;
                    s.spawn(move || -> Result<u64, String> {
                        let mut rng = Rng::new(t as u64);
                        let mut admitted = 0;
                        for _ in 0..OPS {
                            match task.acquire_raw(1).map_err(|e| format!("acquire: {e}"))? {
                                Ok(mut p) => {
                                    admitted += 1;
                                    if rng.one_in(8) {
                                        std::thread::yield_now();
                                    }
                                    task.release_raw(&mut p, Outcome::Success)
                                        .map_err(|e| format!("release: {e}"))?;
                                }
                                Err(_) => std::thread::yield_now(),
                            }
                        }
                        Ok(admitted)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        })
    };
    let other = {
        let path = path.clone();
        fork_guarded(move || match hammer(&path) {
            Ok(_) => 0,
            Err(e) => {
                raw_eprint(&format!("second process: {e}"));
                1
            }
        })
    };
    let mine = hammer(&path);
    let exit = wait_timeout(other, Duration::from_secs(60));
    let table = Table::open(&path, &storm_options()).unwrap();
    let task = table.task("lanes", &config).unwrap();
    let c = task.check().unwrap();
    let s = task.stats();
    eprintln!(
        "{THREADS} threads × 2 processes × {OPS} ops, cap {CAP}: admitted {} ({} limited)",
        s.admitted, s.limited_concurrency
    );
    assert!(mine.is_ok(), "this process: {mine:?}");
    assert_eq!(exit, Exit::Code(0));
    assert_eq!((c.in_flight, c.held), (0, 0), "{s:?}");
    assert_eq!(s.admitted, s.released_success);
}
