//! The README's C++ server recipes, run for real: `tests/c/recipe_server.cpp`
//! compiled against `include/flowctrl.h` and linked to the `libflowctrl.so`
//! of this build (as `tests/c_abi.rs` does), serving HTTP on a free loopback
//! port as a pre-fork server (the table opened before `fork`, single-threaded
//! workers accepting on the shared socket) and as a thread-pool server.
//!
//! Concurrent clients check the cap host-wide twice: by the table's counters
//! (exactly: admitted = the 200s, refused by the cap = the 503s) and from
//! the answers alone: each 200 carries the CLOCK_MONOTONIC ns just after its
//! acquire and just before its release, and no instant may be inside more
//! than the cap of those intervals, while some instant must be inside
//! exactly the cap (a test that never loaded the cap fails). A negative
//! control (a server whose cap is one more than the check's) must fail the
//! check. Then SIGKILLed holders give their permits back through the reaper,
//! and SIGTERM (by pid) stops a server with requests in flight, leaving no
//! permit held.

mod common;

use common::Scratch;
use flowctrl::{Table, TableOptions, Task, TaskConfig};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// The host-wide cap of every server here.
const CAP: u32 = 3;
/// Workers or threads: more than the cap, so only a shared cap holds it.
const WORKERS: u32 = 4;
const THREADS: u32 = 8;

/// The servers run one at a time: they share two CPUs with the clients.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `recipe_server`, compiled once per run into `target/<profile>/c-tests/`
/// and linked to the `libflowctrl.so` cargo built for this run (in
/// `target/<profile>/deps`, where this test runs from).
fn server_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let deps = exe.parent().unwrap();
        assert!(deps.ends_with("deps"), "{}", exe.display());
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = deps.parent().unwrap().join("c-tests");
        std::fs::create_dir_all(&out).unwrap();
        let binary = out.join("recipe_server");
        let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let mut words = compiler.split_whitespace();
        let mut command = Command::new(words.next().unwrap_or("c++"));
        command
            .args(words)
            .args([
                "-std=c++11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-pthread",
            ])
            .arg(format!("-I{}", manifest.join("include").display()))
            .arg(manifest.join("tests/c/recipe_server.cpp"))
            .arg("-o")
            .arg(&binary)
            .arg(format!("-L{}", deps.display()))
            .arg("-lflowctrl")
            .arg(format!("-Wl,-rpath,{}", deps.display()));
        let output = command
            .output()
            .unwrap_or_else(|e| panic!("cannot run {compiler} ({e}): install it or set $CXX"));
        assert!(
            output.status.success(),
            "{command:?}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        binary
    })
}

/// A running `recipe_server`; SIGKILLed and reaped when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(mode: &str, table: &Path, n: u32, cap: u32) -> Self {
        let mut child = Command::new(server_binary())
            // cargo's LD_LIBRARY_PATH could win over the rpath.
            .env_remove("LD_LIBRARY_PATH")
            .args([
                mode,
                table.to_str().unwrap(),
                &n.to_string(),
                &cap.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start recipe_server");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
        let mut server = Server { child, port: 0 };
        match line.trim().strip_prefix("ready ") {
            Some(port) => server.port = port.parse().unwrap(),
            None => panic!("recipe_server {mode} did not start: {line:?}"),
        }
        server
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// SIGTERM by pid; SIGKILL if it has not exited within 10 s. Its exit code.
    fn stop(&mut self) -> Option<i32> {
        common::signal(self.pid(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return self.child.wait().unwrap().code();
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request: (status, body).
fn get(port: u16, hold_ms: u64) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(40)))?;
    write!(
        stream,
        "GET /work?hold={hold_ms} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"
    )?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let status = text
        .strip_prefix("HTTP/1.0 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {text:?}")))?;
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    Ok((status, body))
}

/// What a 200 says: who served it and when it held its permit.
#[derive(Clone, Copy, Debug)]
struct Served {
    pid: u64,
    tid: u64,
    t0: u64,
    t1: u64,
    in_flight: u64,
}

fn parse(body: &str) -> Served {
    let n: Vec<u64> = body
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    assert_eq!(n.len(), 5, "{body:?}");
    Served {
        pid: n[0],
        tid: n[1],
        t0: n[2],
        t1: n[3],
        in_flight: n[4],
    }
}

/// The most intervals that contain one instant.
fn peak(served: &[Served]) -> usize {
    // At equal instants a release (-1) sorts before an acquire (+1).
    let mut events: Vec<(u64, i32)> = served
        .iter()
        .flat_map(|s| [(s.t0, 1), (s.t1, -1)])
        .collect();
    events.sort_unstable();
    let (mut inside, mut most) = (0i32, 0i32);
    for (_, step) in events {
        inside += step;
        most = most.max(inside);
    }
    most as usize
}

/// `clients` threads asking in a loop for `seconds` (a refused one backs
/// off 10 ms): the answers, and the errors.
fn load(
    port: u16,
    clients: usize,
    seconds: f64,
    hold_ms: u64,
) -> (Vec<(u16, String)>, Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let handles: Vec<_> = (0..clients)
        .map(|_| {
            thread::spawn(move || {
                let (mut answers, mut errors) = (Vec::new(), Vec::new());
                while Instant::now() < deadline {
                    match get(port, hold_ms) {
                        Ok(answer) => {
                            if answer.0 != 200 {
                                thread::sleep(Duration::from_millis(10));
                            }
                            answers.push(answer);
                        }
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                (answers, errors)
            })
        })
        .collect();
    let (mut answers, mut errors) = (Vec::new(), Vec::new());
    for h in handles {
        let (a, e) = h.join().unwrap();
        answers.extend(a);
        errors.extend(e);
    }
    (answers, errors)
}

/// Requests that each hold a permit for `hold_ms`, in threads: each
/// answers its status, or 0 if the connection was cut.
fn holders(port: u16, n: usize, hold_ms: u64) -> Vec<thread::JoinHandle<u16>> {
    (0..n)
        .map(|_| thread::spawn(move || get(port, hold_ms).map(|a| a.0).unwrap_or(0)))
        .collect()
}

fn joined(handles: Vec<thread::JoinHandle<u16>>) -> Vec<u16> {
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        thread::sleep(Duration::from_micros(500));
    }
    start.elapsed()
}

/// Loads the server with 8 clients for 1.2 s and checks the cap: `Err`
/// with what is wrong. `by_thread`: the servers to count are threads.
fn check_load(server: &Server, api: &Task, cap: u32, by_thread: bool) -> Result<String, String> {
    let before = api.stats();
    let started = Instant::now();
    let (answers, errors) = load(server.port, 8, 1.2, 100);
    let took = started.elapsed();
    let served: Vec<Served> = answers
        .iter()
        .filter(|a| a.0 == 200)
        .map(|a| parse(&a.1))
        .collect();
    let busy = answers.iter().filter(|a| a.0 == 503).count();
    let servers: BTreeSet<u64> = served
        .iter()
        .map(|s| if by_thread { s.tid } else { s.pid })
        .collect();
    let high = peak(&served);
    let seen = served.iter().map(|s| s.in_flight).max().unwrap_or(0);
    let stats = api.stats();
    let admitted = stats.admitted - before.admitted;
    let refused = stats.limited_concurrency - before.limited_concurrency;
    let report = format!(
        "{} requests in {took:.2?}: {} served by {} {}, {busy} busy; peak {high} in flight \
         (the table's in_flight seen: {seen}), cap {cap}",
        answers.len(),
        served.len(),
        servers.len(),
        if by_thread { "threads" } else { "workers" }
    );
    let mut wrong = Vec::new();
    if !errors.is_empty() {
        wrong.push(format!("errors: {:?}", &errors[..errors.len().min(3)]));
    }
    if served.len() + busy != answers.len() {
        wrong.push("answers other than 200 and 503".into());
    }
    if high != cap as usize {
        wrong.push(format!("peak {high} in flight, not the cap {cap}"));
    }
    if seen > cap as u64 {
        wrong.push(format!("the table counted {seen} in flight"));
    }
    if busy == 0 || servers.len() < 2 {
        wrong.push("no refusal, or fewer than 2 servers: not a test of a shared cap".into());
    }
    if admitted != served.len() as u64 || refused != busy as u64 {
        wrong.push(format!(
            "the table admitted {admitted} and refused {refused}"
        ));
    }
    if stats.in_flight != 0 || stats.released_success - before.released_success != admitted {
        wrong.push(format!("left in flight or unreleased: {stats:?}"));
    }
    if wrong.is_empty() {
        Ok(report)
    } else {
        Err(format!("{report}: {}", wrong.join("; ")))
    }
}

/// SIGKILLs every server process holding permits while `n` are held; the
/// reaper must give them all back. Returns how long that took.
fn kill_holders(server: &Server, api: &Task, n: usize) -> Duration {
    let before = api.stats();
    let hold = holders(server.port, n, 30_000);
    wait_for("permits held", Duration::from_secs(10), || {
        api.stats().in_flight == n as u64
    });
    let victims: Vec<u32> = api
        .stats_by_process()
        .iter()
        .filter(|p| p.stats.in_flight > 0)
        .map(|p| p.pid)
        .collect();
    assert!(!victims.contains(&std::process::id()), "{victims:?}");
    for &victim in &victims {
        common::signal(victim as i32, libc::SIGKILL);
    }
    let took = wait_for("the reaper", Duration::from_secs(2), || {
        api.stats().in_flight == 0
    });
    let after = api.stats();
    assert_eq!(after.reclaimed - before.reclaimed, n as u64, "{after:?}");
    assert_eq!(api.check().unwrap().drift(), 0);
    assert_eq!(
        joined(hold),
        vec![0; n],
        "the holders' connections were cut"
    );
    println!(
        "SIGKILL of {} process(es) holding {n} permits: back in {took:.2?}",
        victims.len()
    );
    took
}

/// SIGTERM with `n` requests in flight: they finish, the server exits 0,
/// and nothing is left held or attached.
fn stop_with_requests_in_flight(server: &mut Server, api: &Task, n: usize) {
    let before = api.stats();
    let hold = holders(server.port, n, 300);
    wait_for("permits held", Duration::from_secs(10), || {
        api.stats().in_flight == n as u64
    });
    let started = Instant::now();
    assert_eq!(server.stop(), Some(0));
    let took = started.elapsed();
    assert_eq!(
        joined(hold),
        vec![200; n],
        "the requests in hand were finished"
    );
    let after = api.stats();
    assert_eq!(after.in_flight, 0);
    assert_eq!(after.released_success - before.released_success, n as u64);
    assert_eq!(after.reclaimed, before.reclaimed);
    wait_for("no attachment but ours", Duration::from_secs(3), || {
        api.stats_by_process()
            .iter()
            .all(|p| p.pid == std::process::id())
    });
    assert_eq!(api.check().unwrap().drift(), 0);
    println!("SIGTERM with {n} requests in flight: exit 0 in {took:.2?}, all released");
}

fn open(scratch: &Scratch) -> (Table, PathBuf) {
    let path = scratch.path("table");
    (Table::open(&path, &TableOptions::default()).unwrap(), path)
}

#[test]
fn a_pre_fork_cpp_server_holds_the_cap_across_its_workers() {
    let _turn = one_at_a_time();
    let scratch = Scratch::new("recipe-prefork");
    let (table, path) = open(&scratch);
    let api = table
        .task("api", &TaskConfig::new().max_concurrency(CAP))
        .unwrap();
    let mut server = Server::start("prefork", &path, WORKERS, CAP);
    let report = check_load(&server, &api, CAP, false).unwrap_or_else(|e| panic!("{e}"));
    println!("pre-fork, {WORKERS} workers: {report}");
    // The parent opened the table before fork and holds nothing.
    let rows = api.stats_by_process();
    assert!(
        rows.iter()
            .any(|p| p.pid == server.pid() as u32 && p.stats.in_flight == 0)
    );
    kill_holders(&server, &api, 2);
    // The parent replaced the killed workers: the cap is whole again.
    let hold = holders(server.port, CAP as usize, 300);
    wait_for("the cap whole again", Duration::from_secs(10), || {
        api.stats().in_flight == CAP as u64
    });
    assert_eq!(joined(hold), vec![200; CAP as usize]);
    stop_with_requests_in_flight(&mut server, &api, CAP as usize);
}

#[test]
fn a_thread_pool_cpp_server_holds_the_cap_across_its_threads() {
    let _turn = one_at_a_time();
    let scratch = Scratch::new("recipe-threads");
    let (table, path) = open(&scratch);
    let api = table
        .task("api", &TaskConfig::new().max_concurrency(CAP))
        .unwrap();
    let mut server = Server::start("threads", &path, THREADS, CAP);
    let report = check_load(&server, &api, CAP, true).unwrap_or_else(|e| panic!("{e}"));
    println!("thread pool, {THREADS} threads: {report}");
    stop_with_requests_in_flight(&mut server, &api, CAP as usize);
    // Started again and SIGKILLed whole while it holds permits.
    let server = Server::start("threads", &path, THREADS, CAP);
    kill_holders(&server, &api, CAP as usize);
}

/// The check is not vacuous: a server that admits one more than the cap
/// the check expects fails it.
#[test]
fn the_check_fails_a_server_whose_cap_is_larger() {
    let _turn = one_at_a_time();
    let scratch = Scratch::new("recipe-control");
    let path = scratch.path("table");
    let mut server = Server::start("prefork", &path, WORKERS, CAP + 1);
    let table = Table::open(&path, &TableOptions::default()).unwrap();
    let api = table.task("api", &TaskConfig::new()).unwrap();
    let wrong = check_load(&server, &api, CAP, false).expect_err("the check must fail");
    println!("negative control: {wrong}");
    assert!(
        wrong.contains(&format!("peak {} in flight, not the cap {CAP}", CAP + 1)),
        "{wrong}"
    );
    assert_eq!(server.stop(), Some(0));
}
