//! The C++ server recipes of docs/guide/recipes.md, run for real: `tests/c/recipe_server.cpp`
//! compiled against `include/flowctrl.hpp` (C++17) and linked to the `libflowctrl.so`
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
                "-std=c++17",
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
            // The program records the library's SONAME, a name only the
            // link in this directory has (cargo leaves libflowctrl.so).
            .arg(format!(
                "-Wl,-rpath,{}",
                common::elf::soname_link_dir(deps, &out.join("lib")).display()
            ));
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
    /// The server, or the `unshare` that runs it in a "container".
    child: Child,
    /// The server's pid (here: unshare's child, in a container).
    pid: i32,
    port: u16,
}

impl Server {
    fn start(mode: &str, table: &Path, n: u32, cap: u32) -> Self {
        let mut command = Command::new(server_binary());
        command.args([
            mode,
            table.to_str().unwrap(),
            &n.to_string(),
            &cap.to_string(),
        ]);
        Self::spawn(command, false)
    }

    /// The server as in a container of a pod: its own pid namespace (it is
    /// pid 1 there) and mount namespace, where `pod_shm` (the pod's shared
    /// emptyDir) is mounted at /dev/shm; the table is the bare name
    /// `table`, so /dev/shm/table. SIGKILLed when `unshare` dies.
    fn start_in_container(pod_shm: &Path, mode: &str, table: &str, n: u32, cap: u32) -> Self {
        let mut command = Command::new("unshare");
        command
            .args([
                "--mount",
                "--pid",
                "--fork",
                "--kill-child",
                "--propagation",
                "private",
            ])
            .args(["sh", "-c", r#"mount --bind "$0" /dev/shm && exec "$@""#])
            .arg(pod_shm)
            .arg(server_binary())
            .args([mode, table, &n.to_string(), &cap.to_string()]);
        Self::spawn(command, true)
    }

    fn spawn(mut command: Command, contained: bool) -> Self {
        let mut child = command
            // cargo's LD_LIBRARY_PATH could win over the rpath.
            .env_remove("LD_LIBRARY_PATH")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                // util-linux's unshare says so when its child dies of SIGKILL.
                if !line.starts_with("unshare: sigprocmask unblock failed") {
                    eprintln!("{line}");
                }
            }
        });
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
        let id = child.id();
        let mut server = Server {
            child,
            pid: id as i32,
            port: 0,
        };
        match line.trim().strip_prefix("ready ") {
            Some(port) => server.port = port.parse().unwrap(),
            None => panic!("{command:?} did not start: {line:?}"),
        }
        if contained {
            // `sh` exec'd the server: it is unshare's one child.
            let children = std::fs::read_to_string(format!("/proc/{id}/task/{id}/children"))
                .unwrap_or_default();
            server.pid = children.trim().parse().expect("unshare's child");
        }
        server
    }

    fn pid(&self) -> i32 {
        self.pid
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

/// `clients` threads asking in a loop for `seconds`, client i of
/// `ports[i % ports.len()]` (a refused one backs off 10 ms): the answers
/// (port, status, body) and the errors.
type Answer = (u16, u16, String);
fn load(ports: &[u16], clients: usize, seconds: f64, hold_ms: u64) -> (Vec<Answer>, Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let handles: Vec<_> = (0..clients)
        .map(|i| {
            let port = ports[i % ports.len()];
            thread::spawn(move || {
                let (mut answers, mut errors) = (Vec::new(), Vec::new());
                while Instant::now() < deadline {
                    match get(port, hold_ms) {
                        Ok((status, body)) => {
                            if status != 200 {
                                thread::sleep(Duration::from_millis(10));
                            }
                            answers.push((port, status, body));
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

/// What serves the requests in parallel: counted to be sure the cap was
/// shared (at least 2 of them served).
#[derive(Clone, Copy, Debug)]
enum Servers {
    Processes,
    Threads,
    /// Containers: each server is pid 1 of its own pid namespace.
    Ports,
}

/// Loads the servers with 8 clients for 1.2 s and checks the cap: `Err`
/// with what is wrong.
fn check_load(ports: &[u16], api: &Task, cap: u32, by: Servers) -> Result<String, String> {
    let before = api.stats();
    let started = Instant::now();
    let (answers, errors) = load(ports, 8, 1.2, 100);
    let took = started.elapsed();
    let served: Vec<(u16, Served)> = answers
        .iter()
        .filter(|a| a.1 == 200)
        .map(|a| (a.0, parse(&a.2)))
        .collect();
    let busy = answers.iter().filter(|a| a.1 == 503).count();
    let servers: BTreeSet<u64> = served
        .iter()
        .map(|(port, s)| match by {
            Servers::Processes => s.pid,
            Servers::Threads => s.tid,
            Servers::Ports => u64::from(*port),
        })
        .collect();
    let served: Vec<Served> = served.into_iter().map(|(_, s)| s).collect();
    let high = peak(&served);
    let seen = served.iter().map(|s| s.in_flight).max().unwrap_or(0);
    let stats = api.stats();
    let admitted = stats.admitted - before.admitted;
    let refused = stats.limited_concurrency - before.limited_concurrency;
    let what = match by {
        Servers::Processes => "worker processes",
        Servers::Threads => "threads",
        Servers::Ports => "containers",
    };
    let report = format!(
        "{} requests in {took:.2?}: {} served by {} {what}, {busy} busy; peak {high} in flight \
         (the table's in_flight seen: {seen}), cap {cap}",
        answers.len(),
        served.len(),
        servers.len(),
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

/// While `n` permits are held through `server`, SIGKILLs what holds them:
/// `Victims::Workers`, each of its worker processes that holds permits
/// (their pids as the table shows them: same pid namespace); `Whole`, the
/// server process itself. The reaper must give every permit back. Returns
/// how long that took.
#[derive(Clone, Copy, PartialEq)]
enum Victims {
    Workers,
    Whole,
}

fn kill_holders(server: &Server, api: &Task, n: usize, victims: Victims) -> Duration {
    let before = api.stats();
    let hold = holders(server.port, n, 30_000);
    wait_for("permits held", Duration::from_secs(10), || {
        api.stats().in_flight == n as u64
    });
    let holding: Vec<u32> = api
        .stats_by_process()
        .iter()
        .filter(|p| p.stats.in_flight > 0)
        .map(|p| p.pid)
        .collect();
    let victims: Vec<i32> = match victims {
        Victims::Workers => holding.iter().map(|&pid| pid as i32).collect(),
        Victims::Whole => {
            assert_eq!(holding.len(), 1, "{holding:?}");
            vec![server.pid()]
        }
    };
    assert!(!holding.contains(&std::process::id()), "{holding:?}");
    for &victim in &victims {
        assert!(victim > 1, "never signal pid {victim}");
        common::signal(victim, libc::SIGKILL);
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
    let report =
        check_load(&[server.port], &api, CAP, Servers::Processes).unwrap_or_else(|e| panic!("{e}"));
    println!("pre-fork, {WORKERS} workers: {report}");
    // The parent opened the table before fork and holds nothing.
    let rows = api.stats_by_process();
    assert!(
        rows.iter()
            .any(|p| p.pid == server.pid() as u32 && p.stats.in_flight == 0)
    );
    kill_holders(&server, &api, 2, Victims::Workers);
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
    let report =
        check_load(&[server.port], &api, CAP, Servers::Threads).unwrap_or_else(|e| panic!("{e}"));
    println!("thread pool, {THREADS} threads: {report}");
    stop_with_requests_in_flight(&mut server, &api, CAP as usize);
    // Started again and SIGKILLed whole while it holds permits.
    let server = Server::start("threads", &path, THREADS, CAP);
    kill_holders(&server, &api, CAP as usize, Victims::Whole);
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
    let wrong =
        check_load(&[server.port], &api, CAP, Servers::Processes).expect_err("the check must fail");
    println!("negative control: {wrong}");
    assert!(
        wrong.contains(&format!("peak {} in flight, not the cap {CAP}", CAP + 1)),
        "{wrong}"
    );
    assert_eq!(server.stop(), Some(0));
}

/// Two containers of a pod, each its own pid namespace (both servers are
/// pid 1) with the pod's shared emptyDir mounted at /dev/shm: one table, one
/// cap for both. A container SIGKILLed while it holds permits gives them
/// back to the other; the other stops by SIGTERM with nothing left held.
#[test]
fn two_containers_sharing_a_dev_shm_share_one_cap() {
    let _turn = one_at_a_time();
    let pod = Scratch::new("recipe-pod");
    let empty_dir = pod.path("shm");
    std::fs::create_dir(&empty_dir).unwrap();
    // 2 threads each: neither can hold the cap of 3 alone, so the peak of
    // 3 the check requires is reached only by both together.
    let mut a = Server::start_in_container(&empty_dir, "threads", "pod-table", 2, CAP);
    let b = Server::start_in_container(&empty_dir, "threads", "pod-table", 2, CAP);
    let table = Table::open(empty_dir.join("pod-table"), &TableOptions::default()).unwrap();
    let api = table.task("api", &TaskConfig::new()).unwrap();
    let namespaced: Vec<u32> = api
        .stats_by_process()
        .iter()
        .map(|p| p.pid)
        .filter(|&pid| pid != std::process::id())
        .collect();
    assert_eq!(
        namespaced,
        vec![1, 1],
        "both servers are pid 1 of their namespaces"
    );
    let report =
        check_load(&[a.port, b.port], &api, CAP, Servers::Ports).unwrap_or_else(|e| panic!("{e}"));
    println!("2 containers, one /dev/shm: {report}");
    kill_holders(&b, &api, 2, Victims::Whole);
    drop(b);
    stop_with_requests_in_flight(&mut a, &api, 2);
}
