//! What the round-trip sketch costs threads of one process that release at
//! once: two threads, pinned to two cores, each acquire and release permits
//! of one task without limits (so no word of the task is shared between
//! them but what the sketch would share), against one thread alone. On a
//! table of this release each lane counts its threads' round trips in a
//! sketch of its own; on a table as 0.3.0 made it (no lane sketches) the
//! process's threads share one word per bucket. Both tables in one run,
//! rounds alternating; `scripts/bench-sketch.sh` writes benches/SKETCH.md.
//!
//! `FLOWCTRL_BENCH_ROUNDS` (default 15) rounds of `FLOWCTRL_BENCH_PAIRS`
//! (default 2,000,000) pairs per thread; prints a Markdown table of the
//! medians, ns per pair per thread.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier, mpsc};
use std::time::{Duration, Instant};

use flowctrl::{Outcome, Table, TableOptions, Task, TaskConfig};

/// The header's `total_size` (u64) and `lane_sketch_size` (u32) offsets.
const H_TOTAL_SIZE: usize = 56;
const H_LANE_SKETCH_SIZE: usize = 92;

/// A positive count from the environment, or `default` when unset.
fn env(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => match v.parse() {
            Ok(n) if n > 0 => n,
            _ => panic!("{name}={v:?}: expected a positive whole number"),
        },
    }
}

/// Pins the calling thread to `cpu` (a no-op where it cannot).
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET within its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
}

/// A table of this release at `path`, and a copy of it as 0.3.0 makes one:
/// its header names no lane sketches and its file ends at `total_size`.
fn tables(dir: &Path) -> (PathBuf, PathBuf) {
    let options = TableOptions {
        balancers: 0,
        ..TableOptions::default()
    };
    let own = dir.join("own");
    drop(Table::open(&own, &options).unwrap());
    let mut bytes = std::fs::read(&own).unwrap();
    let total = u64::from_le_bytes(bytes[H_TOTAL_SIZE..H_TOTAL_SIZE + 8].try_into().unwrap());
    bytes[H_LANE_SKETCH_SIZE..H_LANE_SKETCH_SIZE + 4].fill(0);
    bytes.truncate(total as usize);
    let shared = dir.join("shared");
    std::fs::write(&shared, bytes).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o600)).unwrap();
    (own, shared)
}

fn pairs(task: &Task, n: u64, rtt: Duration) {
    for _ in 0..n {
        let mut permit = task.acquire_raw(1).unwrap().unwrap();
        task.release_raw_rtt(&mut permit, Outcome::Success, Some(rtt))
            .unwrap();
    }
}

/// One case: its name, its task, whether the helper thread runs too.
struct Case {
    name: String,
    task: Arc<Task>,
    rtt: Duration,
    two: bool,
    ns: Vec<f64>,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds = env("FLOWCTRL_BENCH_ROUNDS", 15);
    let n = env("FLOWCTRL_BENCH_PAIRS", 2_000_000);
    let dir = std::env::temp_dir().join(format!("flowctrl-bench-sketch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (own, shared) = tables(&dir);
    let open = |path: &Path| {
        let table = Table::open(path, &TableOptions::default()).unwrap();
        Arc::new(table.task("t", &TaskConfig::new()).unwrap())
    };
    let (own, shared) = (open(&own), open(&shared));
    let mut cases = Vec::new();
    // 2 ms: bucket 2, on lane 0's line in 0.3.0's table; 40 ms: bucket 11,
    // on lane 2's line there. In this release's, both in the lane's own
    // sketch.
    for rtt in [Duration::from_millis(2), Duration::from_millis(40)] {
        for (what, task) in [("own lane sketches", &own), ("0.3.0 table", &shared)] {
            for two in [false, true] {
                cases.push(Case {
                    name: format!(
                        "{what}, {} ms, {}",
                        rtt.as_millis(),
                        if two { "two threads" } else { "one thread" }
                    ),
                    task: task.clone(),
                    rtt,
                    two,
                    ns: Vec::new(),
                });
            }
        }
    }

    // The helper thread: pinned to the second core, runs the pairs it is
    // sent between two barriers shared with the main thread.
    let barrier = Arc::new(Barrier::new(2));
    let (send, work) = mpsc::channel::<Option<(Arc<Task>, Duration)>>();
    let helper = {
        let barrier = barrier.clone();
        std::thread::spawn(move || {
            pin(1);
            while let Ok(Some((task, rtt))) = work.recv() {
                barrier.wait();
                pairs(&task, n, rtt);
                barrier.wait();
            }
        })
    };
    pin(0);
    // Both threads take their lanes (in turn: the main thread first).
    pairs(&own, 1, Duration::ZERO);
    send.send(Some((own.clone(), Duration::ZERO))).unwrap();
    barrier.wait();
    barrier.wait();

    for round in 0..rounds {
        // Alternate the order so that neither table always runs first.
        let order: Vec<usize> = if round % 2 == 0 {
            (0..cases.len()).collect()
        } else {
            (0..cases.len()).rev().collect()
        };
        for i in order {
            let case = &mut cases[i];
            if case.two {
                send.send(Some((case.task.clone(), case.rtt))).unwrap();
                barrier.wait();
            }
            let start = Instant::now();
            pairs(&case.task, n, case.rtt);
            if case.two {
                barrier.wait();
            }
            case.ns.push(start.elapsed().as_nanos() as f64 / n as f64);
        }
    }
    send.send(None).unwrap();
    helper.join().unwrap();

    println!("| case | median ns per pair per thread | min | max |");
    println!("|---|---:|---:|---:|");
    for case in &cases {
        let (min, max) = case
            .ns
            .iter()
            .fold((f64::MAX, 0f64), |(a, b), x| (a.min(*x), b.max(*x)));
        println!(
            "| {} | {:.1} | {:.1} | {:.1} |",
            case.name,
            median(&case.ns),
            min,
            max
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
