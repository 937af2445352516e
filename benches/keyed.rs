//! Keyed decisions against governor's keyed limiter (its default
//! `DashMap` store), in the same run, on the same key sequences: one hot
//! key, a million keys uniform and Zipf(1.1), keys seen for the first time,
//! and two processes (governor: two threads) on a million keys.
//! `cargo bench --bench keyed` prints a Markdown table (medians of rounds);
//! `scripts/bench-keyed.sh` writes it into benches/KEYED.md.
//!
//! Every rate is far above what a loop reaches: each call is admitted and
//! does its full work.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Instant;

use flowctrl::{KeyConfig, KeyGlobal, KeyLimits, KeyRate, Table, TableOptions, Task, TaskConfig};
use governor::{Quota, RateLimiter};

const KEYS: usize = 1_000_000;
const OPS: usize = 2_000_000;
const ROUNDS: usize = 5;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// `n` draws of Zipf(s) over `keys` ranks (inverse CDF over the ranks'
/// cumulative weights).
fn zipf(keys: usize, s: f64, n: usize, rng: &mut Rng) -> Vec<u64> {
    let mut cdf = Vec::with_capacity(keys);
    let mut sum = 0.0;
    for k in 1..=keys {
        sum += 1.0 / (k as f64).powf(s);
        cdf.push(sum);
    }
    (0..n)
        .map(|_| {
            let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * sum;
            cdf.partition_point(|&c| c < u) as u64
        })
        .collect()
}

fn keyed_task(tag: &str, capacity: u32) -> (Task, std::path::PathBuf) {
    keyed_task_with(tag, capacity, None)
}

/// A keyed task whose keys may also have a global rate (on a table
/// without a store: the host keeps each key's slice alone).
fn keyed_task_with(
    tag: &str,
    capacity: u32,
    global: Option<KeyGlobal>,
) -> (Task, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("flowctrl-keyed-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(format!("{}.keys.0", path.display()));
    let table = Table::open(&path, &TableOptions::default()).unwrap();
    let task = table.task("bench", &TaskConfig::new()).unwrap();
    let mut limits = KeyLimits::new().rate(KeyRate::per_second(1e9).burst(1_000_000));
    if let Some(g) = global {
        limits = limits.global(g);
    }
    task.set_keys(&KeyConfig::new(limits).capacity(capacity))
        .unwrap();
    (task, path)
}

fn governor() -> governor::DefaultKeyedRateLimiter<u64> {
    let q = Quota::per_second(NonZeroU32::new(1_000_000_000).unwrap())
        .allow_burst(NonZeroU32::new(1_000_000).unwrap());
    RateLimiter::keyed(q)
}

/// ns per call, the median of `ROUNDS` passes over `keys`.
fn median(mut f: impl FnMut(&[u64]), keys: &[u64]) -> f64 {
    let mut runs: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            f(keys);
            t.elapsed().as_nanos() as f64 / keys.len() as f64
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[ROUNDS / 2]
}

fn flowctrl_pass(task: &Task) -> impl FnMut(&[u64]) + '_ {
    move |keys| {
        for k in keys {
            black_box(task.acquire_key_raw(&k.to_le_bytes(), 1).unwrap().is_ok());
        }
    }
}

fn governor_pass(g: &governor::DefaultKeyedRateLimiter<u64>) -> impl FnMut(&[u64]) + '_ {
    move |keys| {
        for k in keys {
            black_box(g.check_key(k).is_ok());
        }
    }
}

/// Decisions per second of two forked processes on the table at `path`.
fn two_processes(path: &std::path::Path, keys: &[u64]) -> f64 {
    let mut runs = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let pids: Vec<libc::pid_t> = (0..2)
            .map(|i| {
                // SAFETY: the child only runs the pass and exits.
                match unsafe { libc::fork() } {
                    0 => {
                        let t = Table::open(path, &TableOptions::default()).unwrap();
                        let task = t.task("bench", &TaskConfig::new()).unwrap();
                        let half = &keys[i * keys.len() / 2..(i + 1) * keys.len() / 2];
                        flowctrl_pass(&task)(half);
                        flowctrl_pass(&task)(half);
                        // SAFETY: leave without running the parent's exit code.
                        unsafe { libc::_exit(0) }
                    }
                    pid => pid,
                }
            })
            .collect();
        for pid in pids {
            let mut status = 0;
            // SAFETY: our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        }
        runs.push(keys.len() as f64 / started.elapsed().as_secs_f64());
    }
    runs.sort_by(f64::total_cmp);
    runs[ROUNDS / 2]
}

/// Decisions per second of two threads on one governor keyed limiter.
fn two_threads(g: &governor::DefaultKeyedRateLimiter<u64>, keys: &[u64]) -> f64 {
    let mut runs = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        std::thread::scope(|s| {
            for i in 0..2 {
                s.spawn(move || {
                    let half = &keys[i * keys.len() / 2..(i + 1) * keys.len() / 2];
                    governor_pass(g)(half);
                    governor_pass(g)(half);
                });
            }
        });
        runs.push(keys.len() as f64 / started.elapsed().as_secs_f64());
    }
    runs.sort_by(f64::total_cmp);
    runs[ROUNDS / 2]
}

fn main() {
    // `cargo bench` passes --bench; any other argument filters nothing.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut rows = Vec::new();
    let (task, path) = keyed_task("present", KEYS as u32);
    let g = governor();
    // Present keys: every key of the million inserted first.
    let all: Vec<u64> = (0..KEYS as u64).collect();
    flowctrl_pass(&task)(&all);
    governor_pass(&g)(&all);
    let stats = task.key_stats().unwrap().unwrap();
    let cases: [(&str, Vec<u64>); 3] = [
        ("1 hot key", vec![7; OPS]),
        (
            "1 M keys, uniform",
            (0..OPS).map(|_| rng.next() % KEYS as u64).collect(),
        ),
        ("1 M keys, Zipf(1.1)", zipf(KEYS, 1.1, OPS, &mut rng)),
    ];
    for (name, keys) in &cases {
        let f = median(flowctrl_pass(&task), keys);
        let gv = median(governor_pass(&g), keys);
        rows.push((name.to_string(), f, gv));
    }
    // The same keys with a global rate of 60,000/s each, in slices of a
    // second, on a table alone (no store: the host keeps each key's slice;
    // a key past its allowance takes its whole slice at once): what the
    // global words cost a decision. Against governor's local limiter on
    // the same keys (it has no global rate).
    let (global_task, global_path) = keyed_task_with(
        "global",
        KEYS as u32,
        Some(KeyGlobal::new(KeyRate::per_second(60_000.0))),
    );
    flowctrl_pass(&global_task)(&all);
    for (name, keys) in &cases[1..] {
        let f = median(flowctrl_pass(&global_task), keys);
        let gv = median(governor_pass(&g), keys);
        rows.push((format!("{name}, with a global rate"), f, gv));
    }
    drop(global_task);
    let global_prefix = format!("{}.keys.", global_path.display());
    for e in std::fs::read_dir(global_path.parent().unwrap())
        .unwrap()
        .flatten()
    {
        if e.path().display().to_string().starts_with(&global_prefix) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let _ = std::fs::remove_file(&global_path);
    // Keys seen for the first time: a fresh file and map each round, the
    // same million new keys; the file holds them all.
    let fresh: Vec<u64> = (0..KEYS as u64).map(|k| k + (1 << 40)).collect();
    let mut f_runs = Vec::new();
    let mut g_runs = Vec::new();
    for round in 0..ROUNDS {
        let (t, p) = keyed_task(&format!("fresh{round}"), KEYS as u32);
        let started = Instant::now();
        flowctrl_pass(&t)(&fresh);
        f_runs.push(started.elapsed().as_nanos() as f64 / KEYS as f64);
        drop(t);
        let prefix = format!("{}.keys.", p.display());
        for e in std::fs::read_dir(p.parent().unwrap()).unwrap().flatten() {
            if e.path().display().to_string().starts_with(&prefix) {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let _ = std::fs::remove_file(&p);
        let gl = governor();
        let started = Instant::now();
        governor_pass(&gl)(&fresh);
        g_runs.push(started.elapsed().as_nanos() as f64 / KEYS as f64);
    }
    f_runs.sort_by(f64::total_cmp);
    g_runs.sort_by(f64::total_cmp);
    rows.push((
        "first sight of a key (insert)".into(),
        f_runs[ROUNDS / 2],
        g_runs[ROUNDS / 2],
    ));
    // Two processes (forked, each its own table handle) against two
    // threads on one governor map: decisions per second, all together.
    let uniform = &cases[1].1;
    let f_rate = two_processes(&path, uniform);
    let g_rate = two_threads(&g, uniform);
    let dir = path.parent().unwrap();
    let prefix = format!("{}.keys.", path.file_name().unwrap().to_string_lossy());
    let key_file: u64 = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum();
    println!("| case | flowctrl ns/decision | governor ns/check_key | ratio |\n|---|---|---|---|");
    for (name, f, gv) in &rows {
        println!("| {name} | {f:.1} | {gv:.1} | {:.2} |", f / gv);
    }
    println!(
        "| 1 M keys, uniform, two processes (governor: two threads), M decisions/s | {:.2} | \
         {:.2} | {:.2} |",
        f_rate / 1e6,
        g_rate / 1e6,
        f_rate / g_rate
    );
    println!(
        "\nKey file for {KEYS} keys: {key_file} bytes ({:.1} MiB, {:.1} B a key); \
         {} keys placed, {} decisions on the overflow state while inserting them.",
        key_file as f64 / (1 << 20) as f64,
        key_file as f64 / KEYS as f64,
        stats.keys,
        stats.overflowed
    );
    drop(task);
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let _ = std::fs::remove_file(&path);
}
