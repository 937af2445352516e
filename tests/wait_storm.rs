//! A storm of SIGKILLs of waiting processes: workers whose threads wait in
//! the task's queue, hold a permit 1 ms and wait again, killed at random
//! moments (queued, at the head, while their waiter thread hands a permit
//! over, while holding one). Meanwhile this process's own waiters must keep
//! being served, in the order they came; the cap must never be exceeded;
//! and at the end no permit may be lost or left queued.
//!
//! `FLOWCTRL_WAIT_STORM_KILLS` (default 500) sets the number of kills;
//! `FLOWCTRL_WAIT_STORM_SEED` replays a run.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use flowctrl::{Outcome, Table, TaskConfig};

const CAP: u32 = 4;
const TASK: &str = "queue";
/// Worker processes alive at once, each with this many waiting threads.
const WORKERS: usize = 4;
const THREADS: usize = 3;
/// This process's own waiters, whose order is checked.
const OBSERVERS: usize = 3;
/// Two waits that began further apart than this must be served in that
/// order (closer ones may have been descheduled between the clock read and
/// taking their ticket).
const ORDER_MARGIN: Duration = Duration::from_millis(50);

fn config() -> TaskConfig {
    TaskConfig::new().max_concurrency(CAP)
}

/// The worker process: not a test of its own (the storm runs it).
#[test]
#[ignore = "the worker process of the waiting storm, run by it"]
fn wait_storm_worker() {
    let path = std::env::var_os("FLOWCTRL_WAIT_STORM_PATH").expect("run by the storm");
    let table = Table::open(Path::new(&path), &options().capacity(4).processes(32)).unwrap();
    let task = table.task(TASK, &config()).unwrap();
    if let Some(stop) = std::env::var_os("FLOWCTRL_WAIT_STORM_OBSERVE") {
        return observe(&task, Path::new(&stop));
    }
    // Waits until it is killed.
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let task = task.clone();
            std::thread::spawn(move || {
                loop {
                    let d = task.acquire_wait(1, Some(Duration::from_secs(2)));
                    if let Some(p) = d.unwrap().permit() {
                        std::thread::sleep(Duration::from_millis(1));
                        p.release(Outcome::Success).unwrap();
                    }
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
}

static RESUMES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The observer process (never killed): its threads wait, hold 1 ms and
/// wait again until `stop` exists, then it prints every wait as
/// "began admitted" (µs on its own clock), for the storm to check order.
fn observe(task: &flowctrl::Task, stop: &Path) {
    // A wait the storm's stopped check froze mid-way is not judged: its
    // clock read and its ticket may be a whole freeze apart.
    extern "C" fn resumed(_: libc::c_int) {
        RESUMES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    // SAFETY: the handler only touches an atomic.
    unsafe { libc::signal(libc::SIGCONT, resumed as *const () as libc::sighandler_t) };
    let start = Instant::now();
    let waits: Arc<Mutex<Vec<(u128, u128)>>> = Arc::default();
    let threads: Vec<_> = (0..OBSERVERS)
        .map(|_| {
            let (task, waits, stop) = (task.clone(), waits.clone(), stop.to_path_buf());
            std::thread::spawn(move || {
                while !stop.exists() {
                    let resumes = RESUMES.load(std::sync::atomic::Ordering::Relaxed);
                    let began = start.elapsed().as_micros();
                    let d = task.acquire_wait(1, Some(Duration::from_secs(10))).unwrap();
                    let Some(p) = d.permit() else { continue };
                    let admitted = start.elapsed().as_micros();
                    if RESUMES.load(std::sync::atomic::Ordering::Relaxed) == resumes {
                        waits.lock().unwrap().push((began, admitted));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    p.release(Outcome::Success).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for (began, admitted) in waits.lock().unwrap().iter() {
        println!("{began} {admitted}");
    }
}

fn command(path: &Path) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        "wait_storm_worker",
        "-q",
        "--nocapture",
    ])
    .env("FLOWCTRL_WAIT_STORM_PATH", path)
    .stdin(Stdio::null())
    .stderr(Stdio::inherit());
    cmd
}

fn spawn_worker(path: &Path) -> libc::pid_t {
    let mut cmd = command(path);
    cmd.stdout(Stdio::null());
    // SAFETY: prctl is async-signal-safe; the worker dies with this thread.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn().expect("spawn worker").id() as libc::pid_t
}

/// SIGSTOPs `pids`, reaps, and checks that the live processes hold no more
/// than the cap (their ledgers); then SIGCONTs them. Returns whether the
/// count itself was above the cap (allowed mid-drain, by design) and the
/// failures found.
fn stopped_check(
    table: &Table,
    task: &flowctrl::Task,
    pids: &[libc::pid_t],
) -> (bool, Option<String>) {
    for &pid in pids {
        signal(pid, libc::SIGSTOP);
    }
    let mut failure = None;
    for &pid in pids {
        if let Err(exit) = wait_stopped(pid, Duration::from_secs(5)) {
            failure = Some(format!("process {pid} did not stop: {exit:?}"));
        }
    }
    table.reap();
    let live_held: i64 = task.stats_by_process().iter().map(|p| p.stats.held).sum();
    let in_flight = task.stats().in_flight;
    if live_held > CAP as i64 {
        failure = Some(format!(
            "cap {CAP} exceeded: live processes hold {live_held} (in_flight {in_flight})"
        ));
    }
    for &pid in pids {
        signal(pid, libc::SIGCONT);
    }
    (in_flight > CAP as u64, failure)
}

#[test]
fn waiting_processes_killed_at_random_leave_the_queue_exact_and_in_order() {
    let kills: u64 = std::env::var("FLOWCTRL_WAIT_STORM_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let seed = std::env::var("FLOWCTRL_WAIT_STORM_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| wall_us() as u64);
    eprintln!("waiting storm: {kills} kills, FLOWCTRL_WAIT_STORM_SEED={seed}");
    let mut rng = Rng::new(seed);
    let scratch = Scratch::new("wait-storm");
    let path = scratch.path("t");
    let table = Table::open(&path, &options().capacity(4).processes(32)).unwrap();
    let task = table.task(TASK, &config()).unwrap();

    let stop_file = scratch.path("stop");
    let observer = command(&path)
        .env("FLOWCTRL_WAIT_STORM_OBSERVE", &stop_file)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the observer");
    let observer_pid = observer.id() as libc::pid_t;
    let (mut checks, mut over_count, mut failures) = (0, 0, Vec::new());
    let mut children = KillOnDrop(Vec::new());
    let mut alive: Vec<(libc::pid_t, Instant)> = Vec::new();
    let begin = Instant::now();
    let mut killed = 0;
    while killed < kills {
        while alive.len() < WORKERS {
            let pid = spawn_worker(&path);
            children.add(pid);
            // Killed 5–60 ms after it starts: before it attaches, while its
            // threads wait, hand over or hold permits.
            let after = Duration::from_millis(5 + rng.below(55));
            alive.push((pid, Instant::now() + after));
        }
        let now = Instant::now();
        if let Some(i) = alive.iter().position(|(_, at)| *at <= now) {
            let (pid, _) = alive.swap_remove(i);
            kill(pid, libc::SIGKILL);
            wait(pid);
            children.forget(pid);
            killed += 1;
            if killed % 25 == 0 {
                let mut stopped: Vec<_> = alive.iter().map(|(pid, _)| *pid).collect();
                stopped.push(observer_pid);
                let (over, failure) = stopped_check(&table, &task, &stopped);
                checks += 1;
                over_count += over as u32;
                failures.extend(failure);
            }
        } else {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    for (pid, _) in alive.drain(..) {
        kill(pid, libc::SIGKILL);
        wait(pid);
        children.forget(pid);
    }
    let storm = begin.elapsed();
    // The observer keeps being served after the last kill too.
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&stop_file, b"").unwrap();
    let output = observer.wait_with_output().expect("the observer's waits");
    assert!(
        output.status.success(),
        "the observer failed: {:?}",
        output.status
    );
    let waits: Vec<(u128, u128)> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| {
            let (a, b) = l.split_once(' ')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect();
    table.reap();
    let s = task.stats();
    let margin = ORDER_MARGIN.as_micros();
    let inversions = waits
        .iter()
        .flat_map(|a| waits.iter().map(move |b| (a, b)))
        .filter(|(a, b)| a.0 + margin < b.0 && a.1 > b.1)
        .count();
    let longest_ms = waits.iter().map(|(b, a)| a - b).max().unwrap_or(0) / 1000;
    let storm_end = begin.elapsed().as_micros();
    eprintln!(
        "waiting storm: {killed} kills in {storm:?}, {checks} stopped checks ({over_count} \
         saw the count above the cap mid-drain); the observer was served {} times, longest \
         wait {longest_ms} ms, inversions {inversions}; reclaimed {}",
        waits.len(),
        s.reclaimed
    );
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(
        waits.len() > 100,
        "the observer starved: {} waits",
        waits.len()
    );
    let _ = storm_end;
    assert_eq!(inversions, 0, "live waiters were served out of order");
    assert_eq!((s.in_flight, s.held, s.waiting), (0, 0, 0), "{s:?}");
    assert_eq!(task.check().unwrap().drift(), 0);
    // Every permit is there to take.
    let permits: Vec<_> = (0..CAP)
        .map(|_| task.acquire(1).unwrap().permit().expect("a lost permit"))
        .collect();
    assert!(task.acquire(1).unwrap().permit().is_none());
    drop(permits);
}
