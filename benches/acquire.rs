//! The cost of a decision, against governor's direct rate limiter measured in
//! the same run. `scripts/bench.sh` runs this and writes benches/RESULTS.md.
//!
//! Every case keeps the limit far above what the loop can reach, so each call
//! is admitted and does its full work (a rejection is cheaper).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use flowctrl::{Outcome, Table, TableOptions, Task, TaskConfig};
use governor::{Quota, RateLimiter};

/// A rate no loop reaches: every call admitted, every call moves the GCRA word.
const RATE: f64 = 1e9;
/// A burst wide enough (~0.4 ms at RATE) that the few microseconds by which
/// vCPU time-stamp counters of this kind of VM disagree never reject a call.
const BURST: u32 = 1_000_000;

/// A cap no loop reaches either: the capped cases pay the full ledger
/// transaction on acquire and on release.
const CAP: u32 = 1_000_000;

/// The table's two tasks: rate only, and rate with a cap.
fn tasks(tag: &str) -> (Task, Task, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("flowctrl-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let table = Table::open(&path, &TableOptions::default()).unwrap();
    let config = TaskConfig::new().local_rate(RATE).burst(BURST);
    let task = table.task("bench", &config).unwrap();
    let capped = table.task("capped", &config.max_concurrency(CAP)).unwrap();
    (task, capped, path)
}

fn governor() -> governor::DefaultDirectRateLimiter {
    let per_second = NonZeroU32::new(1_000_000_000).unwrap();
    RateLimiter::direct(Quota::per_second(per_second).allow_burst(NonZeroU32::new(BURST).unwrap()))
}

#[inline(always)]
fn pair(task: &Task) {
    let mut permit = task.acquire_raw(1).unwrap().unwrap();
    task.release_raw(&mut permit, Outcome::Success).unwrap();
}

fn one_thread(c: &mut Criterion) {
    let (task, capped, path) = tasks("1t");
    let limiter = governor();
    let mut g = c.benchmark_group("one_thread");
    g.bench_function("flowctrl_acquire", |b| {
        b.iter(|| black_box(task.acquire_raw(1).unwrap().is_ok()))
    });
    g.bench_function("flowctrl_acquire_release", |b| b.iter(|| pair(&task)));
    g.bench_function("flowctrl_capped_acquire_release", |b| {
        b.iter(|| pair(&capped))
    });
    g.bench_function("governor_check", |b| {
        b.iter(|| black_box(limiter.check().is_ok()))
    });
    g.finish();
    let _ = std::fs::remove_file(path);
}

/// Wall time for `iters` calls made by each of two threads at once.
fn two_threads_time(iters: u64, work: impl Fn() + Sync) -> Duration {
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let spawned = s.spawn(|| {
            barrier.wait();
            for _ in 0..iters {
                work();
            }
        });
        barrier.wait();
        let start = Instant::now();
        for _ in 0..iters {
            work();
        }
        spawned.join().unwrap();
        start.elapsed()
    })
}

fn two_threads(c: &mut Criterion) {
    let (task, _, path) = tasks("2t");
    let limiter = governor();
    let mut g = c.benchmark_group("two_threads");
    g.bench_function("flowctrl_acquire_release", |b| {
        b.iter_custom(|iters| two_threads_time(iters, || pair(&task)))
    });
    g.bench_function("governor_check", |b| {
        b.iter_custom(|iters| {
            two_threads_time(iters, || {
                black_box(limiter.check().is_ok());
            })
        })
    });
    g.finish();
    let _ = std::fs::remove_file(path);
}

/// Wall time for `iters` pairs made by each of two forked processes at once,
/// each attached to the same table and task. The children start together on
/// a shared CLOCK_MONOTONIC instant and report their own loop time.
fn two_processes_time(path: &std::path::Path, name: &str, iters: u64) -> Duration {
    let start_at = monotonic_ns() + 20_000_000;
    let mut pipes = Vec::new();
    for _ in 0..2 {
        let mut fds = [0; 2];
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child runs the loop and `_exit`s without returning.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let table = Table::open(path, &TableOptions::default()).unwrap();
            let task = table.task(name, &TaskConfig::new()).unwrap();
            pair(&task);
            while monotonic_ns() < start_at {}
            let t0 = Instant::now();
            for _ in 0..iters {
                pair(&task);
            }
            let ns = t0.elapsed().as_nanos() as u64;
            unsafe {
                libc::write(fds[1], (&ns as *const u64).cast(), 8);
                libc::_exit(0);
            }
        }
        unsafe { libc::close(fds[1]) };
        pipes.push((pid, fds[0]));
    }
    let mut slowest = 0u64;
    for (pid, fd) in pipes {
        let mut ns = 0u64;
        unsafe {
            assert_eq!(libc::read(fd, (&mut ns as *mut u64).cast(), 8), 8);
            libc::close(fd);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        slowest = slowest.max(ns);
    }
    Duration::from_nanos(slowest)
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn two_processes(c: &mut Criterion) {
    let (_task, _capped, path) = tasks("2p");
    let mut g = c.benchmark_group("two_processes");
    g.bench_function("flowctrl_acquire_release", |b| {
        b.iter_custom(|iters| two_processes_time(&path, "bench", iters))
    });
    g.bench_function("flowctrl_capped_acquire_release", |b| {
        b.iter_custom(|iters| two_processes_time(&path, "capped", iters))
    });
    g.finish();
    let _ = std::fs::remove_file(path);
}

/// What any rate decision costs at least on this machine: one clock read and
/// one compare-and-swap (governor's `check()` is exactly these two).
fn floor(c: &mut Criterion) {
    let clock = flowctrl::clock::Clock::detect();
    let word = std::sync::atomic::AtomicU64::new(0);
    let mut g = c.benchmark_group("floor");
    g.bench_function("clock_read", |b| b.iter(|| black_box(clock.now())));
    g.bench_function("compare_and_swap", |b| {
        b.iter(|| {
            let v = word.load(std::sync::atomic::Ordering::Relaxed);
            black_box(word.compare_exchange(
                v,
                v + 1,
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            ))
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(40);
    targets = floor, one_thread, two_threads, two_processes
}
criterion_main!(benches);
