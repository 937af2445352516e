//! The manager's cost: store operations per task per slice, and the time
//! of one step, for 10, 1,000 and 10,000 managed tasks against the Redis
//! at FLOWCTRL_BENCH_REDIS (scripts/bench-manager.sh starts one). Static
//! tasks (no policy) and dynamic ones (a policy: one census read per task
//! per slice more). Store commands are counted by Redis itself
//! (`INFO commandstats`). Prints a Markdown table.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use flowctrl::manage::{ManagedTask, Manager, ManagerConfig, Policy};
use flowctrl::{GlobalSettings, StoreOptions};

const SLICE_MS: u32 = 1000;
const RUN: Duration = Duration::from_secs(6);

/// Commands Redis ran (those of scripts included), and requests: script
/// calls and census reads (HGETALL: no host runs here; the scripts call
/// none).
fn commands(conn: &mut redis::Connection) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    let mut all = 0;
    let mut requests = 0;
    for line in info.lines() {
        let Some(calls) = line
            .split("calls=")
            .nth(1)
            .and_then(|c| c.split(',').next()?.parse::<u64>().ok())
        else {
            continue;
        };
        all += calls;
        if ["cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_hgetall:"]
            .iter()
            .any(|c| line.starts_with(c))
        {
            requests += calls;
        }
    }
    (all, requests)
}

fn run(url: &str, tasks: usize, dynamic: bool) -> String {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_connection().unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    let policy = dynamic.then_some(Policy {
        min_rate: 100.0,
        max_rate: 10_000.0,
        dropped_ratio: Some(0.05),
        p99: None,
        backoff: 0.97,
    });
    let config = ManagerConfig {
        store: StoreOptions {
            url: Some(url.to_string()),
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(1),
            ..StoreOptions::default()
        },
        id: "bench".into(),
        lease: Duration::from_secs(3),
        ahead: 2,
        skew_alarm: Duration::from_millis(50),
        silent_alarm: Duration::from_secs(10),
        tasks: (0..tasks)
            .map(|i| {
                let global = GlobalSettings {
                    global_rate: 1000.0,
                    slice_ms: SLICE_MS,
                    ..GlobalSettings::default()
                };
                (format!("task-{i}"), ManagedTask { global, policy })
            })
            .collect::<BTreeMap<_, _>>(),
        keys: BTreeMap::new(),
    };
    let mut manager = Manager::new(config).unwrap();
    // The first step writes every task's record and slices: not steady.
    manager.step().unwrap();
    std::thread::sleep(manager.period());
    let before = commands(&mut conn);
    let began = Instant::now();
    let mut steps: Vec<Duration> = Vec::new();
    while began.elapsed() < RUN {
        let t = Instant::now();
        assert!(manager.step().unwrap(), "the bench's manager is active");
        steps.push(t.elapsed());
        std::thread::sleep(manager.period().saturating_sub(t.elapsed()));
    }
    let elapsed = began.elapsed().as_secs_f64();
    let after = commands(&mut conn);
    // Less the INFO call that counts.
    let ops = (after.0 - before.0).saturating_sub(1);
    let requests = after.1 - before.1;
    steps.sort();
    let median = steps[steps.len() / 2];
    let max = *steps.last().unwrap();
    let slices = elapsed * 1000.0 / SLICE_MS as f64;
    format!(
        "| {tasks} | {} | {:.2} | {:.2} | {:.0} | {:.2} | {:.2} | {} |",
        if dynamic { "dynamic" } else { "static" },
        requests as f64 / tasks as f64 / slices,
        ops as f64 / tasks as f64 / slices,
        ops as f64 / elapsed,
        median.as_secs_f64() * 1000.0,
        max.as_secs_f64() * 1000.0,
        steps.len(),
    )
}

fn main() {
    let Ok(url) = std::env::var("FLOWCTRL_BENCH_REDIS") else {
        eprintln!("set FLOWCTRL_BENCH_REDIS (scripts/bench-manager.sh does)");
        return;
    };
    println!(
        "| tasks | kind | requests per task per slice | commands per task per slice | commands/s | step median (ms) | step max (ms) | steps |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for tasks in [10, 1000, 10_000] {
        for dynamic in [false, true] {
            println!("{}", run(&url, tasks, dynamic));
        }
    }
}
