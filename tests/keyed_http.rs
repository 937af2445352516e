//! A real HTTP server limiting per client header under wrk: a pre-fork
//! server (three worker processes on one listening socket, a thread per
//! connection) answers each request by its `X-Api-Key` through a keyed
//! task: 200, or 429 with `Retry-After` and the `RateLimit-*` numbers. A
//! worker is SIGKILLed every half second and replaced. Every key's rate
//! holds over every second, and nothing the dead held is leaked.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use flowctrl::{
    KeyConfig, KeyDecision, KeyLimits, KeyRate, Outcome, Table, TableOptions, TaskConfig,
};

const RATE: f64 = 100.0;
const BURST: u32 = 10;
const CAP: u32 = 4;
const KEYS: u32 = 20;

fn limits() -> KeyConfig {
    KeyConfig::new(
        KeyLimits::new()
            .rate(KeyRate::per_second(RATE).burst(BURST))
            .max_concurrency(CAP),
    )
    .capacity(1024)
}

/// One connection: requests until the client closes.
fn serve(task: &flowctrl::Task, stream: TcpStream, log: &std::fs::File) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut key = None;
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.strip_prefix("X-Api-Key: ") {
                key = Some(v.trim().to_string());
            }
        }
        let key = key.unwrap_or_default();
        let response = match task.acquire_key(key.as_bytes(), 1).unwrap() {
            KeyDecision::Admitted(permit) => {
                let at = monotonic().as_micros();
                // One write a request, appended: what a kill cuts short is
                // an admission not counted, never one counted twice.
                let _ = (&*log).write_all(format!("{key} {at}\n").as_bytes());
                std::thread::sleep(Duration::from_micros(300));
                permit.release(Outcome::Success).unwrap();
                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_string()
            }
            KeyDecision::Limited(refusal) => {
                let s = task.key_state(key.as_bytes()).unwrap();
                let retry = refusal
                    .retry_after
                    .map_or(1, |d| d.as_secs_f64().ceil().max(1.0) as u64);
                format!(
                    "HTTP/1.1 429 Too Many Requests\r\nRetry-After: {retry}\r\n\
                     RateLimit-Limit: {}\r\nRateLimit-Remaining: {}\r\nRateLimit-Reset: {}\r\n\
                     Content-Length: 0\r\n\r\n",
                    s.limit,
                    s.remaining,
                    s.reset_after.as_secs_f64().ceil() as u64
                )
            }
        };
        if out.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

fn worker(table: &Path, listener: &TcpListener, log: PathBuf) -> i32 {
    let t = Table::open(table, &TableOptions::default()).unwrap();
    let task = t.task("api", &TaskConfig::new()).unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    std::thread::scope(|s| {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (task, log) = (&task, &log);
            s.spawn(move || serve(task, stream, log));
        }
    });
    0
}

#[test]
fn a_pre_fork_http_server_holds_every_keys_rate_under_wrk_and_kills() {
    let scratch = Scratch::new("keyed-http");
    let table_path = scratch.path("t");
    let table = Table::open(&table_path, &TableOptions::default()).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    task.set_keys(&limits()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut workers = KillOnDrop::default();
    let mut spawned = 0;
    let mut spawn = |workers: &mut KillOnDrop| {
        let log = scratch.path(&format!("log-{spawned}"));
        spawned += 1;
        let (path, listener) = (table_path.clone(), listener.try_clone().unwrap());
        workers.add(fork_guarded(move || worker(&path, &listener, log)));
    };
    for _ in 0..3 {
        spawn(&mut workers);
    }
    let script = scratch.path("keys.lua");
    std::fs::write(
        &script,
        format!(
            "request = function()\n  return wrk.format(\"GET\", \"/\", \
             {{[\"X-Api-Key\"] = \"k\" .. math.random(1, {KEYS})}})\nend\n"
        ),
    )
    .unwrap();
    let wrk = Command::new("wrk")
        .args(["-t2", "-c16", "-d4s", "--timeout", "2s", "-s"])
        .arg(&script)
        .arg(format!("http://127.0.0.1:{port}/"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("wrk runs (scripts/setup.sh installs it)");
    let started = Instant::now();
    let mut kills = 0;
    let mut rng = Rng::new(seed_from_env("FLOWCTRL_KEYED_HTTP_SEED"));
    while started.elapsed() < Duration::from_millis(3500) {
        std::thread::sleep(Duration::from_millis(500));
        let victim = workers.0[rng.below(workers.0.len() as u64) as usize];
        kill(victim, libc::SIGKILL);
        wait(victim);
        workers.forget(victim);
        kills += 1;
        spawn(&mut workers);
    }
    let out = wrk.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).to_string();
    for pid in workers.0.clone() {
        kill(pid, libc::SIGKILL);
        wait(pid);
        workers.forget(pid);
    }
    // The dead held per-key permits: the reaper gives them back.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        table.reap();
        let held: u32 = (1..=KEYS)
            .map(|k| {
                task.key_state(format!("k{k}").as_bytes())
                    .unwrap()
                    .in_flight
            })
            .sum();
        if held == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{held} per-key permits leaked");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(task.key_drift().unwrap(), vec![]);
    // Every key's admissions, over every second: within the rate.
    let mut times: std::collections::HashMap<String, Vec<u128>> = Default::default();
    for i in 0..spawned {
        let text = std::fs::read_to_string(scratch.path(&format!("log-{i}"))).unwrap_or_default();
        for line in text.lines() {
            if let Some((k, t)) = line.split_once(' ')
                && let Ok(t) = t.parse()
            {
                times.entry(k.to_string()).or_default().push(t);
            }
        }
    }
    let total: usize = times.values().map(Vec::len).sum();
    eprintln!(
        "{kills} workers killed; {total} admitted over {} keys; wrk:\n{report}",
        times.len()
    );
    assert!(
        report.contains("Non-2xx"),
        "some requests were refused: {report}"
    );
    assert_eq!(times.len() as u32, KEYS, "every key was served");
    let most = (BURST as f64 + RATE) as usize + 1;
    for (key, t) in &mut times {
        t.sort();
        for (i, start) in t.iter().enumerate() {
            let within = t[i..]
                .iter()
                .take_while(|&&x| x < start + 1_000_000)
                .count();
            assert!(
                within <= most,
                "{key}: {within} admitted in one second from {start} µs"
            );
        }
        // And it was served near its rate: the test is not idle.
        assert!(t.len() as f64 >= RATE * 2.0, "{key}: {} admitted", t.len());
    }
}
