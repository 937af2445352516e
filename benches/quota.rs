//! Global quota figures against a real Redis (started by
//! `scripts/bench-quota.sh`, which passes its URL in FLOWCTRL_BENCH_REDIS):
//! admitted/s of one process in global mode against one INCR round trip per
//! request and against the same process in local-only mode; round trips per
//! admitted request at saturating demand; the latency of an acquire in
//! global mode, pulls included; quota stranded per slice with two hosts of
//! uneven demand. Prints a Markdown report.

use std::time::{Duration, Instant};

use flowctrl::{Decision, Table, TableOptions, TaskConfig};

const RUN: Duration = Duration::from_secs(3);

fn url() -> String {
    std::env::var("FLOWCTRL_BENCH_REDIS").expect("FLOWCTRL_BENCH_REDIS: run scripts/bench-quota.sh")
}

fn table(dir: &std::path::Path, name: &str, store: Option<String>) -> Table {
    let mut o = TableOptions::default();
    o.store.url = store;
    Table::open(dir.join(name), &o).unwrap()
}

fn redis_conn() -> redis::Connection {
    redis::Client::open(url())
        .unwrap()
        .get_connection()
        .unwrap()
}

/// Round trips clients made for pulls (script calls and loads).
fn round_trips() -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis_conn())
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_script|load:"))
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

/// The pull script's server-side time per call, µs (`INFO commandstats`:
/// EVALSHA's `usec_per_call`), over 5,000 explicit pulls into one key that
/// holds `hosts` census records; `contended`: the hosts' demands exceed the
/// slice, so every pull past its due sums what the others are owed (one
/// pass over the records).
fn script_usec_per_call(dir: &std::path::Path, hosts: usize, contended: bool) -> f64 {
    let config = TaskConfig::new().global_rate(1e6).slice_ms(60_000);
    let tables: Vec<_> = (0..hosts)
        .map(|h| table(dir, &format!("script-{h}"), Some(url())))
        .collect();
    let tasks: Vec<_> = tables
        .iter()
        .map(|t| t.task("script", &config).unwrap())
        .collect();
    for t in &tasks {
        t.pull_quota(1).unwrap().unwrap();
    }
    if contended {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("flowctrl:{script}:*")
            .query(&mut redis_conn())
            .unwrap();
        for key in keys.iter().filter(|k| !k.ends_with(":shape")) {
            let _: () = redis::cmd("HSET")
                .arg(key)
                .arg("demand")
                .arg(1u64 << 40)
                .query(&mut redis_conn())
                .unwrap();
        }
    }
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut redis_conn())
        .unwrap();
    for _ in 0..5000 {
        tasks[0].pull_quota(1).unwrap().unwrap();
    }
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis_conn())
        .unwrap();
    info.lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| {
            l.split("usec_per_call=")
                .nth(1)?
                .split(',')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(f64::NAN)
}

/// Bytes the store holds per host per slice: `MEMORY USAGE` of one slice key
/// with `hosts` census records, divided by them, and the key's size alone.
fn census_bytes(dir: &std::path::Path, hosts: usize) -> (u64, u64) {
    let name = "census";
    let mut conn = redis_conn();
    let config = TaskConfig::new().global_rate(1e6).slice_ms(60_000);
    let mut sizes = Vec::new();
    for h in 0..hosts {
        let t = table(dir, &format!("census-{h}"), Some(url()));
        t.task(name, &config)
            .unwrap()
            .pull_quota(100)
            .unwrap()
            .unwrap();
        if h == 0 || h + 1 == hosts {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("flowctrl:{{{name}}}:*"))
                .query(&mut conn)
                .unwrap();
            let key = keys.iter().find(|k| !k.ends_with(":shape")).unwrap();
            let bytes: u64 = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(key)
                .query(&mut conn)
                .unwrap();
            sizes.push(bytes);
        }
    }
    (sizes[0], (sizes[1] - sizes[0]) / (hosts as u64 - 1))
}

/// Admitted per second by one thread calling `acquire` as fast as it can.
fn admitted_per_sec(task: &flowctrl::Task) -> (f64, u64) {
    let began = Instant::now();
    let mut admitted = 0u64;
    while began.elapsed() < RUN {
        for _ in 0..1000 {
            if let Decision::Admitted(p) = task.acquire(1).unwrap() {
                admitted += 1;
                drop(p);
            }
        }
    }
    (admitted as f64 / began.elapsed().as_secs_f64(), admitted)
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let dir = std::env::temp_dir().join(format!("flowctrl-bench-quota-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rows = Vec::new();

    // Baseline: one round trip per request (INCR, and EXPIRE on a new key).
    let mut conn = redis_conn();
    let began = Instant::now();
    let mut n = 0u64;
    while began.elapsed() < RUN {
        let v: i64 = redis::cmd("INCR")
            .arg("bench:incr")
            .query(&mut conn)
            .unwrap();
        if v == 1 {
            let _: () = redis::cmd("EXPIRE")
                .arg("bench:incr")
                .arg(2)
                .query(&mut conn)
                .unwrap();
        }
        n += 1;
    }
    let incr = n as f64 / began.elapsed().as_secs_f64();
    rows.push(("one INCR round trip per request (baseline)", incr));

    // Local-only: a local rate far above the loop's pace.
    let local = table(&dir, "local", None)
        .task("api", &TaskConfig::new().local_rate(1e9).burst(1000))
        .unwrap();
    let (local_rate, _) = admitted_per_sec(&local);
    rows.push(("flowctrl local-only (local_rate 1e9/s)", local_rate));

    // Global mode, not exhausted: the cost of spending pulled quota.
    let t = table(&dir, "global", Some(url()));
    let global = t.task("open", &TaskConfig::new().global_rate(1e9)).unwrap();
    let before = round_trips();
    let (global_rate, admitted) = admitted_per_sec(&global);
    let open_trips = round_trips() - before;
    rows.push((
        "flowctrl global mode, Redis (global_rate 1e9/s)",
        global_rate,
    ));

    // Saturating demand: global_rate 100k/s, demand far above it.
    let sat = t
        .task("saturated", &TaskConfig::new().global_rate(100_000.0))
        .unwrap();
    let before = round_trips();
    let (sat_rate, sat_admitted) = admitted_per_sec(&sat);
    let sat_trips = round_trips() - before;

    // Latency of each acquire in global mode, pulls included.
    let lat = t
        .task("latency", &TaskConfig::new().global_rate(1e9))
        .unwrap();
    let mut ns: Vec<u64> = Vec::with_capacity(2_000_000);
    let began = Instant::now();
    while began.elapsed() < RUN {
        let t0 = Instant::now();
        let d = lat.acquire(1).unwrap();
        ns.push(t0.elapsed().as_nanos() as u64);
        drop(d);
    }
    ns.sort_unstable();
    let quota = lat.quota_stats();

    // Two hosts, uneven demand (1500/s and 300/s paced), global_rate 2000.
    let hosts = [(1500.0, "a"), (300.0, "b")];
    let handles: Vec<_> = hosts
        .iter()
        .map(|&(demand, name)| {
            let task = table(&dir, name, Some(url()))
                .task("uneven", &TaskConfig::new().global_rate(2000.0))
                .unwrap();
            std::thread::spawn(move || {
                let gap = Duration::from_secs_f64(1.0 / demand);
                let began = Instant::now();
                let mut next = began;
                let mut admitted = 0u64;
                while began.elapsed() < Duration::from_secs(6) {
                    next += gap;
                    if let Some(wait) = next.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    if let Decision::Admitted(_) = task.acquire(1).unwrap() {
                        admitted += 1;
                    }
                }
                (admitted, task.quota_stats())
            })
        })
        .collect();
    let uneven: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();

    println!("| case | admitted/s | vs baseline | vs local-only |");
    println!("|---|---:|---:|---:|");
    for (name, rate) in &rows {
        println!(
            "| {name} | {rate:.0} | {:.1}× | {:.2}× |",
            rate / incr,
            rate / local_rate
        );
    }
    println!();
    println!("Round trips per admitted request:");
    println!();
    println!("| run | admitted | round trips | per admitted | budget |");
    println!("|---|---:|---:|---:|---|");
    println!(
        "| global_rate 1e9/s (never exhausted) | {admitted} | {open_trips} | {:.5} | ≤ 0.01 |",
        open_trips as f64 / admitted as f64
    );
    println!(
        "| global_rate 100k/s, saturating demand ({sat_rate:.0} admitted/s) | {sat_admitted} | {sat_trips} | {:.5} | ≤ 0.01 |",
        sat_trips as f64 / sat_admitted as f64
    );
    println!();
    println!(
        "Latency of one `acquire` in global mode over {} calls (pulls included: {} pulls, longest {:.2} ms):",
        ns.len(),
        quota.pulls,
        quota.pull_ns_max as f64 / 1e6
    );
    println!();
    println!("| p50 | p99 | p99.9 | max |");
    println!("|---:|---:|---:|---:|");
    println!(
        "| {} ns | {} ns | {} ns | {:.2} ms |",
        percentile(&ns, 0.5),
        percentile(&ns, 0.99),
        percentile(&ns, 0.999),
        *ns.last().unwrap() as f64 / 1e6
    );
    println!();
    println!("Two hosts, uneven demand (1500/s and 300/s), global_rate 2000, 6 s:");
    println!();
    println!("| host | demand/s | admitted | pulls | granted | stranded | stranded per slice |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for ((demand, name), (admitted, q)) in hosts.iter().zip(&uneven) {
        println!(
            "| {name} | {demand} | {admitted} | {} | {} | {} | {:.1} |",
            q.pulls,
            q.granted,
            q.stranded,
            q.stranded as f64 / 6.0
        );
    }
    let (one_host, per_host) = census_bytes(&dir, 50);
    let (one, twenty, fair) = (
        script_usec_per_call(&dir, 1, false),
        script_usec_per_call(&dir, 20, false),
        script_usec_per_call(&dir, 20, true),
    );
    println!();
    println!(
        "The pull script in Redis (record version, slicing, grant, deduction, census \
         record and fair tails in one call):"
    );
    println!();
    println!(
        "| server time per pull, 1 host in the key | with 20 hosts | 20 hosts, demands over the slice | slice key with 1 host | each further host |"
    );
    println!("|---:|---:|---:|---:|---:|");
    println!("| {one:.2} µs | {twenty:.2} µs | {fair:.2} µs | {one_host} B | {per_host} B |");
    let _ = std::fs::remove_dir_all(&dir);
}
