//! `flowctrl manage`: one active instance by lease, the next slices' keys
//! written ahead so hosts never create one, a standby that takes over
//! within 2 × the lease's TTL when the active one is SIGKILLed, a paused
//! instance whose writes the store refuses once its successor wrote, and
//! bad configurations refused. Real `redis-server`, real `flowctrl manage`
//! processes, hosts as tables of their own.

#[path = "common/cli.rs"]
mod cli;
mod common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::redis::{RedisServer, free_port};
use common::*;
use flowctrl::manage::{Manager, ManagerConfig};
use flowctrl::{Decision, Table, TableOptions, Task, TaskConfig};

const LEASE_MS: u64 = 1000;
const SLICE_MS: u32 = 500;
const RATE: f64 = 400.0;

fn config_text(url: &str, lease_ms: u64) -> String {
    format!(
        "[table]\nstore = \"{url}\"\n\n[manager]\nlease_ms = {lease_ms}\n\n\
         [tasks.\"api\"]\nglobal_rate = {RATE}\nslice_ms = {SLICE_MS}\n"
    )
}

/// Managers killed (and reaped) however the test ends.
struct Managers(Vec<Child>);

impl Drop for Managers {
    fn drop(&mut self) {
        for m in &mut self.0 {
            let _ = m.kill();
            let _ = m.wait();
        }
    }
}

fn manage(config: &std::path::Path, log: &std::path::Path) -> Child {
    common::managed::spawn(config, log)
}

/// The lease's holder: "<id> <token>", or None.
fn holder(redis: &RedisServer) -> Option<String> {
    redis.command(&["GET", "flowctrl:{manager}:lease"])
}

/// The token of the lease's holder.
fn token(redis: &RedisServer) -> u64 {
    let holder = holder(redis).expect("a manager holds the lease");
    holder
        .split(' ')
        .nth(1)
        .and_then(|t| t.parse().ok())
        .expect("<id> <token>")
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let began = Instant::now();
    while !done() {
        assert!(began.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    began.elapsed()
}

fn host(url: &str, scratch: &Scratch, name: &str) -> (Table, Task) {
    skewed_host(url, scratch, name, 0)
}

/// A host whose clock is `skew_ms` off.
fn skewed_host(url: &str, scratch: &Scratch, name: &str, skew_ms: i64) -> (Table, Task) {
    let mut o = TableOptions::default();
    o.store.clock_skew_ms = skew_ms;
    o.store.url = Some(url.to_string());
    o.store.timeout = Duration::from_millis(500);
    o.store.host_id = Some(name.to_string());
    let table = Table::open(scratch.path(name), &o).unwrap();
    let mut c = TaskConfig::default();
    c.global.global_rate = Some(RATE);
    c.global.slice_ms = Some(SLICE_MS);
    let task = table.task("api", &c).unwrap();
    (table, task)
}

/// Saturating demand on `tasks` until `stop`: admissions per slice.
fn saturate(tasks: &[&Task], stop: &AtomicBool) -> BTreeMap<i64, u64> {
    std::thread::scope(|scope| {
        let workers: Vec<_> = tasks
            .iter()
            .flat_map(|t| [*t, *t])
            .map(|task| {
                scope.spawn(move || {
                    let mut counts: BTreeMap<i64, u64> = BTreeMap::new();
                    while !stop.load(Ordering::Relaxed) {
                        match task.acquire(1).unwrap() {
                            Decision::Admitted(p) => {
                                let slice = wall_us() / 1000 / SLICE_MS as i64;
                                *counts.entry(slice).or_default() += 1;
                                drop(p);
                            }
                            Decision::Limited(_) => std::thread::sleep(Duration::from_micros(300)),
                        }
                    }
                    counts
                })
            })
            .collect();
        let mut total = BTreeMap::new();
        for w in workers {
            for (s, n) in w.join().unwrap() {
                *total.entry(s).or_default() += n;
            }
        }
        total
    })
}

fn pid_of(holder: &str, children: &[Child]) -> u32 {
    let id = holder.split(' ').next().unwrap();
    children
        .iter()
        .map(Child::id)
        .find(|pid| id.ends_with(&format!("-{pid}")))
        .unwrap_or_else(|| panic!("holder {holder:?} is none of the managers"))
}

#[test]
fn a_standby_takes_over_a_killed_manager_and_no_slice_goes_unwritten() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("manager-failover");
    let file = scratch.path("fleet.toml");
    std::fs::write(&file, config_text(&redis.url(), LEASE_MS)).unwrap();
    let managers = Managers(vec![
        manage(&file, &scratch.path("a.log")),
        manage(&file, &scratch.path("b.log")),
    ]);
    wait_for("a manager active", Duration::from_secs(5), || {
        holder(&redis).is_some()
    });
    // The record and the slices ahead are written before any host pulls.
    wait_for("the record", Duration::from_secs(5), || {
        redis
            .command::<Option<String>>(&["HGET", "flowctrl:cfg:{api}", "global_rate"])
            .is_some()
    });
    std::thread::sleep(Duration::from_millis(200));
    let (_t1, a) = host(&redis.url(), &scratch, "host-a");
    let (_t2, b) = host(&redis.url(), &scratch, "host-b");
    let stop = AtomicBool::new(false);
    let mut takeover = Duration::ZERO;
    /// Stops the load however the scope ends (a failed wait included).
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let counts = std::thread::scope(|scope| {
        let load = scope.spawn(|| saturate(&[&a, &b], &stop));
        let _stop = Stop(&stop);
        std::thread::sleep(Duration::from_secs(2));
        let first = holder(&redis).unwrap();
        let pid = pid_of(&first, &managers.0);
        signal(pid as i32, libc::SIGKILL);
        takeover = wait_for(
            "the standby active",
            2 * Duration::from_millis(LEASE_MS),
            || holder(&redis).is_some_and(|h| h != first),
        );
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::Relaxed);
        load.join().unwrap()
    });
    let created: u64 = [&a, &b].iter().map(|t| t.quota_stats().keys_created).sum();
    eprintln!("takeover {takeover:?}; keys created by hosts {created}; per slice {counts:?}");
    assert_eq!(
        created, 0,
        "a host created a slice key: the managers left a slice unwritten"
    );
    assert!(
        takeover <= 2 * Duration::from_millis(LEASE_MS),
        "{takeover:?}"
    );
    // Every full slice spent exactly the manager's threshold, never more.
    let quota = (RATE * SLICE_MS as f64 / 1000.0) as u64;
    let slices: Vec<u64> = counts.values().copied().collect();
    for n in &slices[1..slices.len() - 1] {
        assert!(
            *n <= quota + quota / 100,
            "a slice admitted {n} > {quota}: {slices:?}"
        );
        assert!(
            *n * 100 >= quota * 98,
            "a slice admitted {n} < 0.98 × {quota}: {slices:?}"
        );
    }
}

/// A manager's counter from its metrics endpoint.
fn metric(port: u16, name: &str) -> u64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("{name} not in {body}")) as u64
}

#[test]
fn a_paused_manager_lands_no_write_after_its_successor_and_steps_down() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("manager-pause");
    let file = scratch.path("fleet.toml");
    std::fs::write(&file, config_text(&redis.url(), LEASE_MS)).unwrap();
    let ports = [free_port(), free_port()];
    let managers: Vec<Child> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            Command::new(env!("CARGO_BIN_EXE_flowctrl"))
                .args(["manage", "--config"])
                .arg(&file)
                .args(["--metrics", &format!("127.0.0.1:{port}")])
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(scratch.path(&format!("{i}.log"))).unwrap())
                .spawn()
                .unwrap()
        })
        .collect();
    let managers = Managers(managers);
    wait_for("a manager active", Duration::from_secs(5), || {
        holder(&redis).is_some()
    });
    std::thread::sleep(Duration::from_millis(300));
    let first = holder(&redis).unwrap();
    let pid = pid_of(&first, &managers.0);
    let old = managers.0.iter().position(|m| m.id() == pid).unwrap();
    let writes_before = metric(ports[old], "flowctrl_manager_writes_total");
    signal(pid as i32, libc::SIGSTOP);
    wait_for(
        "the standby active",
        3 * Duration::from_millis(LEASE_MS),
        || holder(&redis).is_some_and(|h| h != first),
    );
    let successor = token(&redis);
    wait_for("the successor's write", Duration::from_secs(2), || {
        redis.command::<u64>(&["GET", "flowctrl:{api}:fence"]) == successor
    });
    std::thread::sleep(Duration::from_millis(300));
    signal(pid as i32, libc::SIGCONT);
    std::thread::sleep(Duration::from_secs(2));
    let writes_after = metric(ports[old], "flowctrl_manager_writes_total");
    let active = metric(ports[old], "flowctrl_manager_active");
    let step_downs = metric(ports[old], "flowctrl_manager_step_downs_total");
    let fence: u64 = redis.command(&["GET", "flowctrl:{api}:fence"]);
    eprintln!(
        "old manager: writes {writes_before} -> {writes_after}, active {active}, step downs \
         {step_downs}; task fence {successor} -> {fence}"
    );
    // A write sent before the stop may land before the successor and be
    // counted only once the manager runs again (its reply read after the
    // SIGCONT; once in a cold suite run: 2 -> 3, the fence the successor's):
    // one at most. A write after the successor would carry the old token,
    // which the fence below refuses.
    assert!(
        writes_after <= writes_before + 1,
        "the paused manager's writes landed: {writes_before} -> {writes_after}"
    );
    assert_eq!(active, 0, "the paused manager did not step down");
    assert_eq!(step_downs, 1);
    assert_eq!(fence, successor, "the successor's token fences the task");
}

#[test]
fn the_store_refuses_a_write_with_an_older_token() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("manager-fence");
    let file = scratch.path("fleet.toml");
    std::fs::write(&file, config_text(&redis.url(), 300)).unwrap();
    let config = ManagerConfig::load(&file).unwrap();
    let mut a = Manager::new(ManagerConfig {
        id: "a".into(),
        ..config.clone()
    })
    .unwrap();
    let mut b = Manager::new(ManagerConfig {
        id: "b".into(),
        ..config
    })
    .unwrap();
    assert!(a.step().unwrap(), "the first instance is active");
    assert!(!b.step().unwrap(), "the second waits");
    std::thread::sleep(Duration::from_millis(400));
    let first = a.report().lock().token;
    assert!(b.step().unwrap(), "the lease lapsed: the second takes it");
    let second = b.report().lock().token;
    assert!(second > first, "{second} > {first}");
    let fence: u64 = redis.command(&["GET", "flowctrl:{api}:fence"]);
    assert_eq!(fence, second);
    let writes = a.report().lock().writes;
    // The first, paused between its lease check and its write, writes now.
    assert!(
        a.write_with_token(first).unwrap(),
        "an older token is fenced out"
    );
    assert_eq!(a.report().lock().writes_fenced, 1);
    assert_eq!(a.report().lock().writes, writes);
    let fence: u64 = redis.command(&["GET", "flowctrl:{api}:fence"]);
    assert_eq!(fence, second, "the older token did not lower the fence");
    assert!(!a.step().unwrap(), "the first learns it lost the lease");
}

#[test]
fn bad_manager_configurations_are_refused_with_their_reason() {
    let dir = Scratch::new("manager-bad");
    let url = "redis://127.0.0.1:1";
    let task = "[tasks.\"api\"]\nglobal_rate = 100\n";
    for (text, says) in [
        (format!("[manager]\n{task}"), "Redis URL"),
        (
            format!(
                "[table]\nstore = \"{url}\"\n{task}managed = false\n[tasks.\"api\".policy]\nmin_rate = 1\nmax_rate = 200\ndropped_ratio = 0.1\n"
            ),
            "managed = false",
        ),
        (
            format!(
                "[table]\nstore = \"{url}\"\n[tasks.\"api\"]\nlocal_rate = 5\nmanaged = true\n"
            ),
            "no global_rate",
        ),
        (
            format!(
                "[table]\nstore = \"{url}\"\n[tasks.\"api\"]\nkey_global = \"10/s\"\n[tasks.\"api\".policy]\nmin_rate = 1\nmax_rate = 200\ndropped_ratio = 0.1\n"
            ),
            "no global_rate for it to move",
        ),
        (
            format!(
                "[table]\nstore = \"{url}\"\n{task}[tasks.\"api\".policy]\nmin_rate = 300\nmax_rate = 200\ndropped_ratio = 0.1\n"
            ),
            "inverted",
        ),
        (
            format!(
                "[table]\nstore = \"{url}\"\n{task}[tasks.\"api\".policy]\nmin_rate = 10\nmax_rate = 200\n"
            ),
            "needs a target",
        ),
        (
            format!(
                "[table]\nstore = \"{url}\"\n{task}[tasks.\"api\".policy]\nmin_rate = 10\nmax_rate = 50\np99_ms = 20\n"
            ),
            "outside",
        ),
        (
            format!("[table]\nstore = \"{url}\"\n[manager]\nlease_ms = 5\n{task}"),
            "lease_ms",
        ),
        (
            format!("[table]\nstore = \"{url}\"\n[manager]\nbogus = 1\n{task}"),
            "bogus",
        ),
        (format!("[table]\nstore = \"{url}\"\n"), "no task"),
    ] {
        let path = dir.path("m.toml");
        std::fs::write(&path, &text).unwrap();
        let err = ManagerConfig::load(&path).unwrap_err().to_string();
        assert!(err.contains(says), "{text}\n-> {err}");
        let run = Command::new(env!("CARGO_BIN_EXE_flowctrl"))
            .args(["manage", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(run.status.code(), Some(1), "{text}");
        assert!(String::from_utf8_lossy(&run.stderr).contains(says));
    }
    // A store the manager cannot write: nothing listens there.
    let path = dir.path("m.toml");
    std::fs::write(&path, format!("[table]\nstore = \"{url}\"\n{task}")).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_flowctrl"))
        .args(["manage", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot write to its store"), "{err}");
    // A replica refuses writes: so is the manager refused.
    let redis = RedisServer::start();
    let _: () = redis.command(&["REPLICAOF", "127.0.0.1", "1"]);
    std::fs::write(
        &path,
        format!("[table]\nstore = \"{}\"\n{task}", redis.url()),
    )
    .unwrap();
    let err = ManagerConfig::load(&path)
        .and_then(Manager::new)
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("cannot write to its store"),
        "{err}"
    );
}

#[test]
fn an_edited_file_is_applied_and_a_bad_edit_keeps_the_running_configuration() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("manager-reload");
    let file = scratch.path("fleet.toml");
    let log = scratch.path("manager.log");
    std::fs::write(&file, config_text(&redis.url(), LEASE_MS)).unwrap();
    let mut managers = Managers(vec![manage(&file, &log)]);
    let manager = &mut managers.0[0];
    let rate =
        || -> Option<String> { redis.command(&["HGET", "flowctrl:cfg:{api}", "global_rate"]) };
    wait_for("the record", Duration::from_secs(5), || {
        rate().as_deref() == Some("400")
    });
    // An edit: applied at the manager's next step.
    let text =
        config_text(&redis.url(), LEASE_MS).replace("global_rate = 400", "global_rate = 300");
    std::fs::write(&file, &text).unwrap();
    let took = wait_for("the edit", Duration::from_secs(5), || {
        rate().as_deref() == Some("300")
    });
    eprintln!("an edit reached the store in {took:?}");
    // A bad edit: logged, and the running configuration kept.
    std::fs::write(&file, text.replace("slice_ms = 500", "slice_ms = 5")).unwrap();
    wait_for("the refusal", Duration::from_secs(5), || {
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("keeping the running configuration")
    });
    assert_eq!(rate().as_deref(), Some("300"));
    let slices: Option<String> = redis.command(&["HGET", "flowctrl:cfg:{api}", "slice_ms"]);
    assert_eq!(slices.as_deref(), Some("500"));
    // SIGHUP re-reads the file too (here: fixed again, another rate).
    std::fs::write(
        &file,
        text.replace("global_rate = 300", "global_rate = 250"),
    )
    .unwrap();
    signal(manager.id() as i32, libc::SIGHUP);
    wait_for("the reload", Duration::from_secs(5), || {
        rate().as_deref() == Some("250")
    });
    // SIGTERM gives the lease up at once.
    signal(manager.id() as i32, libc::SIGTERM);
    assert!(manager.wait().unwrap().success());
    assert_eq!(holder(&redis), None, "the lease was given up");
}

#[test]
fn a_skewed_clock_and_a_silent_host_raise_alarms() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("manager-alarms");
    let file = scratch.path("fleet.toml");
    let log = scratch.path("manager.log");
    let text = config_text(&redis.url(), LEASE_MS).replace(
        "[manager]\n",
        "[manager]\nskew_alarm_ms = 50\nsilent_alarm_ms = 1000\n",
    );
    std::fs::write(&file, text).unwrap();
    let _managers = Managers(vec![manage(&file, &log)]);
    wait_for("a manager active", Duration::from_secs(5), || {
        holder(&redis).is_some()
    });
    let (_t1, calm) = host(&redis.url(), &scratch, "calm");
    // A host whose clock is 200 ms behind: it still spends by the store's
    // slices, and says how far off it is.
    let (_t2, skewed) = skewed_host(&redis.url(), &scratch, "skewed", -200);
    let (stop, stop_skewed) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|scope| {
        let a = scope.spawn(|| saturate(&[&calm], &stop));
        let _b = scope.spawn(|| saturate(&[&skewed], &stop_skewed));
        struct Stop<'a>(&'a AtomicBool, &'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
                self.1.store(true, Ordering::Relaxed);
            }
        }
        let _stop = Stop(&stop, &stop_skewed);
        std::thread::sleep(Duration::from_secs(2));
        // The calm host goes quiet.
        stop.store(true, Ordering::Relaxed);
        a.join().unwrap();
        let said = |what: &str| std::fs::read_to_string(&log).unwrap().contains(what);
        wait_for("the skew alarm", Duration::from_secs(3), || {
            said("host \"skewed\"'s clock is")
        });
        wait_for("the silence alarm", Duration::from_secs(4), || {
            said("host \"calm\" has not pulled for")
        });
        assert!(
            !said("host \"calm\"'s clock"),
            "{}",
            std::fs::read_to_string(&log).unwrap()
        );
    });
}

#[test]
fn after_a_store_restart_the_manager_writes_everything_again() {
    let mut redis = RedisServer::start();
    let scratch = Scratch::new("manager-restart");
    let file = scratch.path("fleet.toml");
    std::fs::write(&file, config_text(&redis.url(), LEASE_MS)).unwrap();
    let _managers = Managers(vec![manage(&file, &scratch.path("m.log"))]);
    let written = |redis: &RedisServer| {
        let now_ms = wall_us() as u64 / 1000;
        let slice = now_ms / SLICE_MS as u64;
        let record: Option<String> = redis.command(&["HGET", "flowctrl:cfg:{api}", "global_rate"]);
        record.is_some()
            && (1..=2).all(|k| {
                let key = format!("flowctrl:{{api}}:{}", (slice + k) as u32);
                redis
                    .command::<Option<String>>(&["HGET", &key, "quota"])
                    .as_deref()
                    == Some("200")
            })
    };
    wait_for("the first writes", Duration::from_secs(5), || {
        written(&redis)
    });
    let before = token(&redis);
    redis.kill();
    redis.restart();
    let took = wait_for("the writes again", Duration::from_secs(5), || {
        written(&redis)
    });
    // The lease went with the store: the manager takes it again at its
    // next renewal, with a larger token.
    wait_for("the lease again", Duration::from_secs(2), || {
        holder(&redis).is_some()
    });
    let after = token(&redis);
    eprintln!("rewritten {took:?} after the restart; token {before} -> {after}");
    assert!(
        after > before,
        "tokens keep growing across the store's loss"
    );
}

#[test]
fn the_manager_endpoint_answers_healthz_and_slow_clients_do_not_starve_it() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("manager-http");
    let file = scratch.path("fleet.toml");
    std::fs::write(&file, config_text(&redis.url(), LEASE_MS)).unwrap();
    let port = free_port();
    let _manager = Managers(vec![
        Command::new(env!("CARGO_BIN_EXE_flowctrl"))
            .args(["manage", "--config"])
            .arg(&file)
            .args(["--metrics", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(scratch.path("log")).unwrap())
            .spawn()
            .unwrap(),
    ]);
    wait_for("the endpoint", Duration::from_secs(5), || {
        cli::http(port, "GET", "/healthz").is_ok()
    });
    assert_eq!(
        cli::http(port, "GET", "/healthz"),
        Ok((200, "ok\n".to_string()))
    );
    // Slow clients hold connections (the old endpoint answered 8 at a
    // time, each for up to 5 s): every request is still answered at once.
    let hogs = cli::Hogs::default()
        .slow(port, 8, Duration::from_secs(3))
        .half(port, 50);
    std::thread::sleep(Duration::from_millis(300));
    let mut slowest = Duration::ZERO;
    for path in ["/healthz", "/metrics"].repeat(10) {
        let began = Instant::now();
        let (status, body) = cli::http(port, "GET", path).expect("an answer");
        slowest = slowest.max(began.elapsed());
        assert_eq!(status, 200, "{path}: {body}");
        if path == "/metrics" {
            assert!(body.contains("flowctrl_manager_active"), "{body}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    hogs.stop();
    eprintln!("the manager's endpoint under slow clients: slowest answer {slowest:.1?}");
    assert!(slowest < Duration::from_secs(3), "slowest {slowest:?}");
    assert_eq!(cli::http(port, "POST", "/metrics").map(|a| a.0), Ok(405));
}

/// A Redis, a scratch directory, and the file `text(url)` in it.
fn fleet_file(
    tag: &str,
    text: impl FnOnce(&str) -> String,
) -> (RedisServer, Scratch, std::path::PathBuf) {
    let redis = RedisServer::start();
    let scratch = Scratch::new(tag);
    let file = scratch.path("fleet.toml");
    std::fs::write(&file, text(&redis.url())).unwrap();
    (redis, scratch, file)
}

#[test]
fn a_reload_that_moves_the_store_is_refused_and_the_running_one_kept() {
    let (redis, _scratch, file) =
        fleet_file("manager-reload-store", |url| config_text(url, LEASE_MS));
    let config = ManagerConfig::load(&file).unwrap();
    let mut m = Manager::new(config.clone()).unwrap();
    assert!(m.step().unwrap());
    let text = config_text(&redis.url(), LEASE_MS)
        .replace("[table]\n", "[table]\nkey_prefix = \"moved:\"\n")
        .replace("global_rate = 400", "global_rate = 300");
    std::fs::write(&file, text).unwrap();
    let moved = ManagerConfig::load(&file).unwrap();
    // Debug-printed: what reconfigure answers, whatever its type.
    let refused = format!("{:?}", m.reconfigure(moved));
    assert!(refused.contains("at a restart only"), "{refused}");
    assert_eq!(m.config(), &config, "the running configuration is kept");
    assert!(m.step().unwrap());
    let old: Option<String> = redis.command(&["HGET", "flowctrl:cfg:{api}", "global_rate"]);
    assert_eq!(old.as_deref(), Some("400"));
    let keys: Vec<String> = redis.command(&["KEYS", "moved:*"]);
    assert!(keys.is_empty(), "{keys:?}");
    // Another rate on the same store is applied.
    let same = ManagerConfig {
        tasks: ManagerConfig::parse(
            &file,
            &config_text(&redis.url(), LEASE_MS).replace("global_rate = 400", "global_rate = 300"),
        )
        .unwrap()
        .tasks,
        ..config
    };
    assert!(format!("{:?}", m.reconfigure(same)).starts_with("Ok"));
    assert!(m.step().unwrap());
    let new: Option<String> = redis.command(&["HGET", "flowctrl:cfg:{api}", "global_rate"]);
    assert_eq!(new.as_deref(), Some("300"));
}

/// Two tasks, "api" and "web", each 400/s in 500 ms slices with a policy.
fn dynamic_text(url: &str) -> String {
    let task = |name: &str| {
        format!(
            "[tasks.\"{name}\"]\nglobal_rate = {RATE}\nslice_ms = {SLICE_MS}\n\n\
             [tasks.\"{name}\".policy]\nmin_rate = 50\nmax_rate = 1000\ndropped_ratio = 0.1\n\n"
        )
    };
    format!(
        "[table]\nstore = \"{url}\"\n\n[manager]\nlease_ms = {LEASE_MS}\n\n{}{}",
        task("api"),
        task("web")
    )
}

/// The store's current slice of `SLICE_MS`.
fn store_slice(redis: &RedisServer) -> u64 {
    let (s, us): (u64, u64) = redis.command(&["TIME"]);
    (s * 1000 + us / 1000) / SLICE_MS as u64
}

/// Waits for the first 100 ms of a slice: steps and reads after it stay in
/// that slice.
fn early_in_slice(redis: &RedisServer) {
    wait_for("a slice's start", Duration::from_secs(2), || {
        let (_, us): (u64, u64) = redis.command(&["TIME"]);
        us / 1000 % SLICE_MS as u64 <= 100
    });
}

/// The quota of `task`'s key of `slice`, if written.
fn quota_of(redis: &RedisServer, task: &str, slice: u64) -> Option<u64> {
    let key = format!("flowctrl:{{{task}}}:{}", slice as u32);
    redis.command(&["HGET", &key, "quota"])
}

#[test]
fn a_takeover_writes_nothing_until_it_read_the_last_decisions() {
    let (redis, _scratch, file) = fleet_file("manager-resume", dynamic_text);
    // The decisions cannot be read (another type), and web's threshold is
    // no number.
    let _: () = redis.command(&["SET", "flowctrl:{api}:manager", "a string"]);
    let _: () = redis.command(&["HSET", "flowctrl:{web}:manager", "threshold", "abc"]);
    let mut m = Manager::new(ManagerConfig::load(&file).unwrap()).unwrap();
    assert!(m.step().unwrap(), "active");
    let records: u64 = redis.command(&["EXISTS", "flowctrl:cfg:{api}", "flowctrl:cfg:{web}"]);
    assert_eq!(records, 0, "written before the last decisions were read");
    assert!(m.report().lock().store_errors > 0);
    // Readable again: api resumes from its predecessor's cut to 150/s; web's
    // threshold, no number, is as absent: its global_rate.
    let _: () = redis.command(&["DEL", "flowctrl:{api}:manager"]);
    let _: () = redis.command(&["HSET", "flowctrl:{api}:manager", "threshold", "150"]);
    assert!(m.step().unwrap());
    let next = store_slice(&redis) + 1;
    assert_eq!(quota_of(&redis, "api", next), Some(75));
    assert_eq!(quota_of(&redis, "web", next), Some(200));
}

#[test]
fn only_the_active_manager_removes_the_record_of_a_task_no_longer_managed() {
    let (redis, _scratch, file) = fleet_file("manager-unmanaged", |url| {
        dynamic_text(url).replace("lease_ms = 1000", "lease_ms = 300")
    });
    let config = ManagerConfig::load(&file).unwrap();
    let named = |id: &str| ManagerConfig {
        id: id.into(),
        ..config.clone()
    };
    let (mut a, mut b) = (
        Manager::new(named("a")).unwrap(),
        Manager::new(named("b")).unwrap(),
    );
    assert!(a.step().unwrap() && !b.step().unwrap());
    let web = || -> u64 { redis.command(&["EXISTS", "flowctrl:cfg:{web}"]) };
    assert_eq!(web(), 1);
    // The standby's file no longer has web; the active one still manages it.
    let mut without = named("b");
    without.tasks.remove("web");
    assert!(format!("{:?}", b.reconfigure(without)).starts_with("Ok"));
    assert!(!b.step().unwrap());
    assert_eq!(
        web(),
        1,
        "a standby removed a record the active manager writes"
    );
    // The standby takes over: its file is the one in force now.
    std::thread::sleep(Duration::from_millis(400));
    assert!(b.step().unwrap());
    assert_eq!(web(), 0);
    let api: u64 = redis.command(&["EXISTS", "flowctrl:cfg:{api}"]);
    assert_eq!(api, 1);
    // The old active one, paused, cannot write it again.
    let token = a.report().lock().token;
    assert!(a.write_with_token(token).unwrap());
}

#[test]
fn another_spread_leaves_the_current_slice_to_the_old_one() {
    let (redis, _scratch, file) = fleet_file("manager-spread", |url| config_text(url, LEASE_MS));
    let config = ManagerConfig::load(&file).unwrap();
    let mut m = Manager::new(config.clone()).unwrap();
    early_in_slice(&redis);
    assert!(m.step().unwrap());
    let current = store_slice(&redis);
    assert_eq!(quota_of(&redis, "api", current), Some(200));
    let mut spread = config.clone();
    spread.tasks.get_mut("api").unwrap().global.shards = 3;
    assert!(format!("{:?}", m.reconfigure(spread)).starts_with("Ok"));
    assert!(m.step().unwrap());
    let keys = |slice: u64| -> Vec<String> {
        redis.command(&["KEYS", &format!("flowctrl:*:shard*:{}", slice as u32)])
    };
    assert_eq!(store_slice(&redis), current, "the test ran past its slice");
    assert_eq!(
        keys(current),
        Vec::<String>::new(),
        "the new shards' keys add to the current slice's"
    );
    assert_eq!(keys(current + 1).len(), 2);
    assert_eq!(quota_of(&redis, "api", current), Some(200));
}

#[test]
fn a_takeover_does_not_judge_the_slice_its_predecessors_cut_drains_in() {
    let (redis, _scratch, file) = fleet_file("manager-resume-drain", dynamic_text);
    let mut m = Manager::new(ManagerConfig::load(&file).unwrap()).unwrap();
    // The predecessor cut api to 150/s (75 a slice); the last slice ran it
    // and dropped most of what it admitted: its backlog draining.
    let _: () = redis.command(&["HSET", "flowctrl:{api}:manager", "threshold", "150"]);
    early_in_slice(&redis);
    let last = format!("flowctrl:{{api}}:{}", (store_slice(&redis) - 1) as u32);
    let host = "1 100 75 75 0 100 10 65 1000 2000";
    let _: () = redis.command(&["HSET", &last, "quota", "75", "h1", host]);
    assert!(m.step().unwrap());
    let report = m.report();
    let api = &report.lock().tasks["api"];
    assert_eq!(
        api.slice + 1,
        store_slice(&redis),
        "the last slice was read"
    );
    assert_eq!(api.threshold, 150.0, "cut again on the drain slice");
}
