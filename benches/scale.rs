//! Real processes at scale on one machine (run by `scripts/bench-scale.sh`,
//! which starts the servers): 8 simulated hosts (table files, each its own
//! host id) × 8 processes at saturating demand on one task, with small fixed
//! chunks so the store, not the quota, is the limit. Prints one Markdown row
//! per run: admitted/s in total, store operations (pull script calls) per
//! second, the servers' CPU (from `/proc/<pid>/stat`) and its split over them.
//!
//! FLOWCTRL_SCALE_URL: the store; FLOWCTRL_SCALE_NODES: `port:pid` of each
//! server, comma-separated; FLOWCTRL_SCALE_SHARDS, FLOWCTRL_SCALE_CHUNK;
//! FLOWCTRL_SCALE_TASK: the task; FLOWCTRL_SCALE_LABEL: the row's first cell.

use std::time::{Duration, Instant};

use flowctrl::{Decision, Table, TableOptions, TaskConfig};

const HOSTS: usize = 8;
const PROCESSES: usize = 8;
const RUN: Duration = Duration::from_secs(5);
const RUNS: usize = 3;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name}: run scripts/bench-scale.sh"))
}

/// (port, pid) of each server.
fn nodes() -> Vec<(u16, u32)> {
    env("FLOWCTRL_SCALE_NODES")
        .split(',')
        .map(|n| {
            let (port, pid) = n.split_once(':').expect("port:pid");
            (port.parse().unwrap(), pid.parse().unwrap())
        })
        .collect()
}

/// Pull script calls a server has run.
fn script_calls(port: u16) -> u64 {
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection()
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// CPU seconds (user + system) a process has used.
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command's closing parenthesis: utime is the 12th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / hz
}

/// One child process: saturating demand for `RUN`; exits with nothing,
/// writing its admissions to `out`.
fn child(
    dir: &std::path::Path,
    host: usize,
    config: TaskConfig,
    start: Instant,
    out: &std::path::Path,
) {
    let mut o = TableOptions::default();
    o.store.url = Some(env("FLOWCTRL_SCALE_URL"));
    o.store.timeout = Duration::from_millis(200);
    o.store.connect_timeout = Duration::from_millis(200);
    let table = Table::open(dir.join(format!("host{host}")), &o).unwrap();
    let task = table.task(&env("FLOWCTRL_SCALE_TASK"), &config).unwrap();
    while Instant::now() < start {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut admitted = 0u64;
    while start.elapsed() < RUN {
        match task.acquire(1) {
            Ok(Decision::Admitted(p)) => {
                admitted += 1;
                drop(p);
            }
            // As the tests' saturating callers: a refusal costs a short
            // sleep, so refused callers do not take the CPU from the others.
            Ok(Decision::Limited(_)) => std::thread::sleep(Duration::from_micros(200)),
            Err(e) => panic!("acquire: {e}"),
        }
    }
    std::fs::write(out, admitted.to_string()).unwrap();
}

/// What one run measured.
struct Measured {
    admitted_per_s: f64,
    ops_per_s: f64,
    /// The servers' CPU, in cores.
    cores: f64,
    /// Each server's share of the ops.
    split: Vec<f64>,
}

fn run(config: TaskConfig) -> Measured {
    let dir = std::env::temp_dir().join(format!("flowctrl-scale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let nodes = nodes();
    let start = Instant::now() + Duration::from_secs(2);
    let mut pids = Vec::new();
    for i in 0..HOSTS * PROCESSES {
        let out = dir.join(format!("out{i}"));
        // SAFETY: the child runs `child` and exits without returning.
        match unsafe { libc::fork() } {
            0 => {
                let ok =
                    std::panic::catch_unwind(|| child(&dir, i / PROCESSES, config, start, &out));
                // SAFETY: leaving the child without running the parent's state down.
                unsafe { libc::_exit(if ok.is_ok() { 0 } else { 1 }) }
            }
            -1 => panic!("fork failed"),
            pid => pids.push(pid),
        }
    }
    while Instant::now() < start {
        std::thread::sleep(Duration::from_millis(1));
    }
    let calls0: Vec<u64> = nodes.iter().map(|(port, _)| script_calls(*port)).collect();
    let cpu0: f64 = nodes.iter().map(|(_, pid)| cpu_s(*pid)).sum();
    std::thread::sleep(RUN);
    let calls1: Vec<u64> = nodes.iter().map(|(port, _)| script_calls(*port)).collect();
    let cpu1: f64 = nodes.iter().map(|(_, pid)| cpu_s(*pid)).sum();
    for pid in pids {
        let mut status = 0;
        // SAFETY: reaping our own children.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "a child failed"
        );
    }
    let admitted: u64 = (0..HOSTS * PROCESSES)
        .map(|i| {
            std::fs::read_to_string(dir.join(format!("out{i}")))
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    let _ = std::fs::remove_dir_all(&dir);
    let secs = RUN.as_secs_f64();
    let calls: Vec<u64> = calls1.iter().zip(&calls0).map(|(b, a)| b - a).collect();
    let total: u64 = calls.iter().sum();
    Measured {
        admitted_per_s: admitted as f64 / secs,
        ops_per_s: total as f64 / secs,
        cores: (cpu1 - cpu0) / secs,
        split: calls
            .iter()
            .map(|c| *c as f64 / total.max(1) as f64)
            .collect(),
    }
}

fn main() {
    let shards: u32 = env("FLOWCTRL_SCALE_SHARDS").parse().unwrap();
    let chunk: u32 = env("FLOWCTRL_SCALE_CHUNK").parse().unwrap();
    // A rate no run reaches: the store's throughput is the limit.
    let config = TaskConfig::new()
        .global_rate(10_000_000.0)
        .chunk(chunk)
        .shards(shards);
    let mut runs: Vec<Measured> = (0..RUNS).map(|_| run(config)).collect();
    // The median run by admissions.
    runs.sort_by(|a, b| a.admitted_per_s.total_cmp(&b.admitted_per_s));
    let m = &runs[runs.len() / 2];
    let split: Vec<String> = m
        .split
        .iter()
        .map(|x| format!("{:.0}", x * 100.0))
        .collect();
    println!(
        "| {} | {shards} | {} | {:.0} | {:.0} | {:.0} % | {:.0} | {} |",
        env("FLOWCTRL_SCALE_LABEL"),
        if chunk == 0 {
            "adaptive".to_string()
        } else {
            chunk.to_string()
        },
        m.admitted_per_s,
        m.ops_per_s,
        m.cores * 100.0,
        m.cores * 1e6 / m.ops_per_s.max(1.0),
        split.join(" / ")
    );
}
