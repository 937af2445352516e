//! Keys' global rates owned by the store: `flowctrl manage` writes a keyed
//! task's record from its file, every host adopts it over its own numbers
//! (the overrides' included), a change reaches them within seconds, and a
//! record a host cannot trust is refused while the host keeps its own.

#[path = "common/cli.rs"]
mod cli;
mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use common::options::host_options;
use common::redis::RedisServer;
use common::*;
use flowctrl::{
    KeyConfig, KeyGlobal, KeyLimits, KeyRate, KeyRecord, Outcome, Store, Table, TaskConfig,
};

const HOSTS: usize = 2;
const SECS: u64 = 9;
/// More keys, each asked past its limit: 17 hot keys in all.
const OTHERS: [&str; 15] = [
    "o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8", "o9", "o10", "o11", "o12", "o13", "o14",
];
/// When (s into the run) the manager's file changes `k`'s rate to 10/s.
const CHANGE_AT: u64 = 4;

fn wall_ms() -> u64 {
    (wall_us() / 1000) as u64
}

/// [`keys_manager_file`] with an override: key `vip` at 60/s.
fn manager_file(url: &str, k_rate: u32) -> String {
    format!(
        "{}\n[tasks.api.key_overrides]\n\"vip\" = {{ key_global = \"60/s\" }}\n",
        keys_manager_file(url, k_rate)
    )
}

/// The host's own numbers: far looser than the record's.
fn own_limits() -> (KeyLimits, KeyLimits) {
    let loose = |n| KeyLimits::new().global(KeyGlobal::new(KeyRate::per_second(n)));
    (loose(1000.0), loose(2000.0))
}

/// One host (a process of its own): its own limits, then 600 asks a second
/// (150 of `k`, 150 of `vip`, 300 of the others) from `start_ms` for SECS
/// seconds, counted per
/// wall second (none within 5 ms of a second's edge, where the host's
/// clock and the store's may name different slices).
fn host(url: &str, table: &Path, host: usize, start_ms: u64, out: &Path) -> i32 {
    let table = Table::open(table, &host_options(url, &*format!("h{host}"))).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    let (default, vip) = own_limits();
    task.set_keys(&KeyConfig::new(default)).unwrap();
    task.set_key_override(b"vip", Some(&vip)).unwrap();
    let mut counts: HashMap<(u64, &str), u64> = HashMap::new();
    let mut next = start_ms as f64;
    let mut i = 0u64;
    while wall_ms() < start_ms + SECS * 1000 {
        let now = wall_ms();
        if (now as f64) < next {
            std::thread::sleep(Duration::from_micros(((next - now as f64) * 1000.0) as u64));
            continue;
        }
        next += 1000.0 / 600.0;
        if !(5..995).contains(&(now % 1000)) {
            continue;
        }
        i += 1;
        // k and vip 150 a second each; 15 more keys 20 a second each.
        let key = match i % 4 {
            0 => "k",
            1 => "vip",
            _ => OTHERS[(i / 4 % 15) as usize],
        };
        if let Ok(mut permit) = task.acquire_key_raw(key.as_bytes(), 1).unwrap() {
            *counts.entry((now / 1000, key)).or_default() += 1;
            task.release_raw(&mut permit, Outcome::Success).unwrap();
        }
    }
    // The record's numbers are in force, over the host's own.
    let rate = |key: &[u8]| {
        task.key_limits(key)
            .unwrap()
            .0
            .global
            .map(|g| g.rate.rate())
    };
    assert_eq!(rate(b"k"), Some(10.0), "k's rate is the changed record's");
    assert_eq!(rate(b"vip"), Some(60.0), "vip's rate is the record's");
    let text: String = counts
        .iter()
        .map(|((s, k), n)| format!("{s} {k} {n}\n"))
        .collect();
    std::fs::write(out, text).unwrap();
    0
}

#[test]
fn a_managed_key_rate_reaches_every_host_and_a_change_within_seconds() {
    let scratch = Scratch::in_memory("keyed-record");
    let redis = RedisServer::start();
    let url = redis.url();
    let file = scratch.path("manager.toml");
    std::fs::write(&file, manager_file(&url, 20)).unwrap();
    let port = common::redis::free_port();
    let _manager = Child(
        std::process::Command::new(env!("CARGO_BIN_EXE_flowctrl"))
            .args([
                "manage",
                "--metrics",
                &format!("127.0.0.1:{port}"),
                "--config",
            ])
            .arg(&file)
            .stderr(std::fs::File::create(scratch.path("manager.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let start_ms = (wall_ms() / 1000 + 2) * 1000;
    let pids: Vec<_> = (0..HOSTS)
        .map(|h| {
            let (url, table, out) = (
                url.clone(),
                scratch.path(&format!("h{h}")),
                scratch.path(&format!("h{h}.txt")),
            );
            fork_guarded(move || host(&url, &table, h, start_ms, &out))
        })
        .collect();
    // Late in the second before the change (the store's slice in progress).
    std::thread::sleep(Duration::from_millis(
        (start_ms + CHANGE_AT * 1000 - 150).saturating_sub(wall_ms()),
    ));
    // The fleet's hot keys, as the store, the CLI and the manager show them.
    let hot = store(&url).hot_keys("api", 1000, 10).unwrap();
    assert_eq!(
        hot.keys, 17,
        "every key asked past its limit pulled: {hot:?}"
    );
    assert_eq!(hot.top.len(), 10);
    assert!(hot.top.windows(2).all(|w| w[0].given >= w[1].given));
    assert_eq!(hot.top[0].name.as_deref(), Some(&b"vip"[..]), "{hot:?}");
    let fleet = cli::flowctrl(&scratch.path("h0"), &["fleet", "api", "--store", &url]);
    assert!(
        fleet.stdout.contains("17 key(s) pulled") && fleet.stdout.contains("vip"),
        "{}",
        fleet.stdout
    );
    let (status, metrics) = cli::http(port, "GET", "/metrics").unwrap();
    assert_eq!(status, 200);
    let given: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("flowctrl_fleet_hot_key_given{"))
        .collect();
    assert_eq!(given.len(), 10, "ten keys at most: {given:?}");
    assert!(given.iter().any(|l| l.contains("key=\"vip\"")), "{given:?}");
    assert!(
        metrics.contains("flowctrl_fleet_pulled_keys{task=\"api\"} 17"),
        "{metrics}"
    );
    std::thread::sleep(Duration::from_millis(
        (start_ms + CHANGE_AT * 1000).saturating_sub(wall_ms()),
    ));
    // The file changes under the running manager: it rewrites the record.
    std::fs::write(&file, manager_file(&url, 10)).unwrap();
    for pid in pids {
        assert_eq!(wait(pid), 0, "a host failed");
    }
    let mut counts: HashMap<(u64, String), u64> = HashMap::new();
    for h in 0..HOSTS {
        let text = std::fs::read_to_string(scratch.path(&format!("h{h}.txt"))).unwrap();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            *counts
                .entry((f[0].parse::<u64>().unwrap() - start_ms / 1000, f[1].into()))
                .or_default() += f[2].parse::<u64>().unwrap();
        }
    }
    let got = |s: u64, key: &str| counts.get(&(s, key.to_string())).copied().unwrap_or(0);
    for s in 0..SECS {
        eprintln!("second {s}: k {}, vip {}", got(s, "k"), got(s, "vip"));
    }
    // Each host asks 300/s of each key: the record's rates decide, not the
    // hosts' own 1,000 and 2,000 (adopted before the load began), and k's
    // new rate from the second after the change's. The first second is
    // the hosts' allowance (each key cold everywhere), as without a record.
    for s in 1..SECS {
        let limit = if s <= CHANGE_AT + 1 { 20 } else { 10 };
        let (k, v) = (got(s, "k"), got(s, "vip"));
        assert!(
            k <= 20,
            "second {s}: k admitted {k} (the record says at most 20)"
        );
        assert!(v <= 60, "second {s}: vip admitted {v} of 60");
        if !(CHANGE_AT..=CHANGE_AT + 1).contains(&s) {
            assert!(k <= limit, "second {s}: k admitted {k} of {limit}");
            assert!(
                k as f64 >= 0.9 * limit as f64,
                "second {s}: k only {k} of {limit}"
            );
            assert!(v >= 54, "second {s}: vip only {v} of 60");
        }
    }
}

#[test]
fn the_manager_owns_the_key_rates_of_every_keyed_task_its_file_names() {
    let text = "[table]\nstore = \"redis://127.0.0.1:1\"\n\
        [tasks.api]\nkey_global = \"20/s\"\n\
        [tasks.api.key_overrides]\n\"vip\" = { key_global = \"60/s\" }\n\
        \"same\" = { key_rate = \"5/s\", key_global = \"20/s\" }\n\
        \"free\" = \"unlimited\"\n\
        [tasks.both]\nglobal_rate = 100\nkey_global = \"1/s\"\n\
        [tasks.mine]\nkey_global = \"1/s\"\nmanaged = false\n\
        [tasks.plain]\nkey_rate = \"1/s\"\n";
    let config = flowctrl::manage::ManagerConfig::parse(Path::new("m.toml"), text).unwrap();
    let per_second = |n| Some(KeyGlobal::new(KeyRate::per_second(n)));
    assert_eq!(
        config.keys.keys().collect::<Vec<_>>(),
        ["api", "both"],
        "keyed tasks with a key_global, unless managed = false"
    );
    assert_eq!(
        config.keys["api"],
        KeyRecord {
            default: per_second(20.0),
            // "same" has the default's rate: not named.
            overrides: vec![("free".into(), None), ("vip".into(), per_second(60.0))],
        }
    );
    assert_eq!(config.tasks.keys().collect::<Vec<_>>(), ["both"]);
}

/// One host of its own numbers (a process): `k` at `rate`/s fleet-wide,
/// asked 400 a second for SECS seconds from `start_ms`; its admissions
/// per wall second to `out`.
fn disagreeing_host(
    url: &str,
    table: &Path,
    host: usize,
    rate: f64,
    start_ms: u64,
    out: &Path,
) -> i32 {
    let table = Table::open(table, &host_options(url, &*format!("h{host}"))).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    let limits = KeyLimits::new().global(KeyGlobal::new(KeyRate::per_second(rate)));
    task.set_keys(&KeyConfig::new(limits)).unwrap();
    let mut counts: HashMap<u64, u64> = HashMap::new();
    let mut next = start_ms as f64;
    while wall_ms() < start_ms + 5000 {
        let now = wall_ms();
        if (now as f64) < next {
            std::thread::sleep(Duration::from_micros(((next - now as f64) * 1000.0) as u64));
            continue;
        }
        next += 2.5;
        if !(5..995).contains(&(now % 1000)) {
            continue;
        }
        if let Ok(mut permit) = task.acquire_key_raw(b"k", 1).unwrap() {
            *counts.entry(now / 1000).or_default() += 1;
            task.release_raw(&mut permit, Outcome::Success).unwrap();
        }
    }
    let text: String = counts.iter().map(|(s, n)| format!("{s} {n}\n")).collect();
    std::fs::write(out, text).unwrap();
    0
}

/// Without a record, hosts that disagree on a key's rate each ask the
/// store by their own: a slice never admits more than the loosest rate,
/// and the stricter host never more than its own.
#[test]
fn hosts_that_disagree_on_a_key_rate_never_pass_the_loosest() {
    let scratch = Scratch::in_memory("keyed-record-mixed");
    let redis = RedisServer::start();
    let url = redis.url();
    let start_ms = (wall_ms() / 1000 + 2) * 1000;
    let rates = [10.0, 30.0];
    let pids: Vec<_> = (0..2)
        .map(|h| {
            let (url, table, out) = (
                url.clone(),
                scratch.path(&format!("h{h}")),
                scratch.path(&format!("h{h}.txt")),
            );
            fork_guarded(move || disagreeing_host(&url, &table, h, rates[h], start_ms, &out))
        })
        .collect();
    for pid in pids {
        assert_eq!(wait(pid), 0, "a host failed");
    }
    let per_host: Vec<HashMap<u64, u64>> = (0..2)
        .map(|h| {
            std::fs::read_to_string(scratch.path(&format!("h{h}.txt")))
                .unwrap()
                .lines()
                .map(|l| {
                    let (s, n) = l.split_once(' ').unwrap();
                    (
                        s.parse::<u64>().unwrap() - start_ms / 1000,
                        n.parse().unwrap(),
                    )
                })
                .collect()
        })
        .collect();
    for s in 1..5 {
        let (a, b) = (
            per_host[0].get(&s).copied().unwrap_or(0),
            per_host[1].get(&s).copied().unwrap_or(0),
        );
        eprintln!("second {s}: {a} + {b}");
        assert!(a <= 10, "second {s}: the 10/s host admitted {a}");
        assert!(
            a + b <= 30,
            "second {s}: {a} + {b} past the loosest rate, 30"
        );
    }
}

/// A child process killed and reaped however the test ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn store(url: &str) -> Store {
    common::options::admin_store(url)
}

/// Waits until `cond` holds, at most 5 s (a record reaches a host within
/// about a second).
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let until = monotonic() + Duration::from_secs(5);
    while !cond() {
        assert!(monotonic() < until, "not within 5 s: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A host of a store of its own (table `t` in the scratch folder), its
/// task `api` keyed with its own default limits.
fn own_host(name: &str) -> (Scratch, RedisServer, flowctrl::Task) {
    let scratch = Scratch::new(name);
    let redis = RedisServer::start();
    let table = Table::open(scratch.path("t"), &host_options(&redis.url(), "h0")).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    let (default, _) = own_limits();
    task.set_keys(&KeyConfig::new(default)).unwrap();
    (scratch, redis, task)
}

#[test]
fn a_record_a_host_cannot_trust_is_refused_and_the_host_keeps_its_own() {
    let (scratch, redis, task) = own_host("keyed-record-hostile");
    let url = redis.url();
    let rate = || {
        task.key_limits(b"k")
            .unwrap()
            .0
            .global
            .map(|g| g.rate.rate())
    };
    let store = store(&url);
    let stats = || task.key_stats().unwrap().unwrap();
    // Hostile records, written by hand: each refused, the host's own kept.
    for (version, (field, value)) in (7u64..).zip([
        ("key_global", "10/s 1s 99 share"),
        ("key_global", "10/s"),
        ("key_global", "1e400/s 1s 1 share"),
        ("key_global", "10/s 1s 1 share share"),
        ("override:", "10/s 1s 1 share"),
        ("override:vip", "1/h 1s 1 share"),
    ]) {
        redis.command::<()>(&["DEL", "flowctrl:{api}:k-cfg"]);
        let v = version.to_string();
        let mut fields = vec!["HSET", "flowctrl:{api}:k-cfg", "version", &v, field, value];
        if field != "key_global" {
            fields.extend(["key_global", "none"]);
        }
        redis.command::<()>(&fields);
        assert!(store.key_record("api").is_err(), "{field} = {value}");
        eventually("the record refused", || stats().record_refused == version);
        assert_eq!(
            rate(),
            Some(1000.0),
            "{field} = {value}: the host keeps its own"
        );
        assert_eq!(stats().record, 0);
    }
    let keys = cli::flowctrl(&scratch.path("t"), &["keys", "api"]);
    assert!(
        keys.stdout.contains("record version 12 was refused"),
        "{}",
        keys.stdout
    );
    // A good record is adopted; a key it names gets an override.
    let record = KeyRecord {
        default: Some(KeyGlobal::new(KeyRate::per_second(10.0))),
        overrides: vec![(
            "vip".into(),
            Some(KeyGlobal::new(KeyRate::per_second(50.0))),
        )],
    };
    let version = store.set_key_record("api", &record).unwrap();
    assert_eq!(store.key_record("api").unwrap(), Some((version, record)));
    eventually("the record adopted", || rate() == Some(10.0));
    assert_eq!(stats().record, version);
    let keys = cli::flowctrl(&scratch.path("t"), &["keys", "api"]);
    assert!(
        keys.stdout
            .contains(&format!("from the store's record, version {version}"))
            && !keys.stdout.contains("was refused"),
        "{}",
        keys.stdout
    );
    // flowctrl set leaves the record's rates alone, dry run or not; the
    // rest of the key limits stay the host's to change.
    for args in [
        &["set", "api", "key_global=5/s"][..],
        &["set", "--dry-run", "api", "key_global_local=2"][..],
    ] {
        let run = cli::flowctrl(&scratch.path("t"), args);
        assert!(
            run.code != 0 && run.stderr.contains("come from the store's record"),
            "{args:?}: {} {}",
            run.code,
            run.stderr
        );
    }
    assert_eq!(rate(), Some(10.0));
    let run = cli::flowctrl(&scratch.path("t"), &["set", "api", "key_rate=100/s"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    eventually("the record adopted again", || stats().record == version);
    assert_eq!(rate(), Some(10.0));
    let (vip, overridden) = task.key_limits(b"vip").unwrap();
    assert!(overridden);
    assert_eq!(vip.global.map(|g| g.rate.rate()), Some(50.0));
    // The host's own limits written again: the record is adopted again.
    task.set_key_global(None, Some(&KeyGlobal::new(KeyRate::per_second(999.0))))
        .unwrap();
    assert_eq!((rate(), stats().record), (Some(999.0), 0));
    eventually("the record adopted again", || rate() == Some(10.0));
    assert_eq!(stats().record, version);
    // Removed: the host keeps the record's numbers until its own are
    // written again, and then keeps its own.
    assert!(store.remove_key_record("api").unwrap());
    eventually("the removal seen", || stats().record == 0);
    assert_eq!(rate(), Some(10.0));
    task.set_key_global(None, Some(&KeyGlobal::new(KeyRate::per_second(999.0))))
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(rate(), Some(999.0));
}

/// A record's rates leave a key the host blocked or made unlimited as it
/// is (they take no global rate); a record the host's limits cannot take
/// (its keys and the host's overrides too many) is refused, not fetched
/// again and again.
#[test]
fn a_record_leaves_blocked_and_unlimited_keys_alone() {
    let (_scratch, redis, task) = own_host("keyed-record-blocked");
    let url = redis.url();
    task.set_key_override(b"abuser", Some(&KeyLimits::blocked()))
        .unwrap();
    task.set_key_override(b"free", Some(&KeyLimits::unlimited()))
        .unwrap();
    let store = store(&url);
    let stats = || task.key_stats().unwrap().unwrap();
    let limits = |key: &[u8]| task.key_limits(key).unwrap().0;
    let record = KeyRecord {
        default: Some(KeyGlobal::new(KeyRate::per_second(10.0))),
        overrides: vec![(
            "free".into(),
            Some(KeyGlobal::new(KeyRate::per_second(50.0))),
        )],
    };
    let version = store.set_key_record("api", &record).unwrap();
    eventually("the record adopted", || stats().record == version);
    assert_eq!(limits(b"k").global.map(|g| g.rate.rate()), Some(10.0));
    assert!(limits(b"abuser").is_blocked());
    assert!(limits(b"free").is_unlimited());
    assert_eq!(stats().record_refused, 0);
    // 64 keys named and the host's 2 overrides: more than a task holds.
    let many = KeyRecord {
        default: None,
        overrides: (0..64)
            .map(|i| {
                (
                    format!("n{i}"),
                    Some(KeyGlobal::new(KeyRate::per_second(1.0))),
                )
            })
            .collect(),
    };
    let version = store.set_key_record("api", &many).unwrap();
    eventually("the record refused", || stats().record_refused == version);
    assert!(limits(b"abuser").is_blocked());
    assert_eq!(limits(b"k").global.map(|g| g.rate.rate()), Some(10.0));
}

/// A keyed task none of whose keys has a global rate costs the store one
/// call per process start (a record written meanwhile reaches a handle
/// opened later), not one a second.
#[test]
fn a_keyed_task_without_global_rates_calls_the_store_once_per_start() {
    let scratch = Scratch::new("keyed-record-quiet");
    let redis = RedisServer::start();
    let url = redis.url();
    let table = Table::open(scratch.path("t"), &host_options(&url, "h0")).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    let local = KeyLimits::parse_rates("100/s").unwrap();
    task.set_keys(&KeyConfig::new(local)).unwrap();
    std::thread::sleep(Duration::from_millis(3500));
    let calls = redis.pull_round_trips();
    // One call: EVALSHA, the script's load on NOSCRIPT, EVALSHA again.
    assert!(calls <= 3, "{calls} round trips in 3.5 s");
    let record = KeyRecord {
        default: Some(KeyGlobal::new(KeyRate::per_second(10.0))),
        overrides: Vec::new(),
    };
    store(&url).set_key_record("api", &record).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let rate = |task: &flowctrl::Task| {
        task.key_limits(b"k")
            .unwrap()
            .0
            .global
            .map(|g| g.rate.rate())
    };
    assert_eq!(rate(&task), None, "not looked for again by this handle");
    drop(task);
    let task = table.task("api", &TaskConfig::new()).unwrap();
    eventually("a new handle adopts the record", || {
        rate(&task) == Some(10.0)
    });
}

/// The store's key counts written by hand: only fields that are a key's id
/// and a count are read as hot keys; the answer is bounded as asked.
#[test]
fn hot_keys_read_only_what_hosts_could_have_written() {
    let redis = RedisServer::start();
    let now = wall_ms() / 1000;
    for slice in [now, now + 1] {
        let counts = format!("flowctrl:{{api}}:k:{slice}");
        let names = format!("flowctrl:{{api}}:k:n:{slice}");
        redis.command::<()>(&[
            "HSET",
            &counts,
            "00000000000000ab",
            "8589934597", // 5 given, 2 asks
            "00000000000000cd",
            "3",
            "not-a-key-id!!!!",
            "99",
            "00000000000000ef",
            "-4",
            "00000000000000ff",
            "1e300",
        ]);
        redis.command::<()>(&["HSET", &names, "00000000000000ab", "acme"]);
    }
    let store = store(&redis.url());
    let hot = store.hot_keys("api", 1000, 10).unwrap();
    assert_eq!(hot.keys, 5, "every field is counted as a key: {hot:?}");
    let top: Vec<(u64, u64, u64)> = hot.top.iter().map(|k| (k.id, k.given, k.asks)).collect();
    assert_eq!(top, [(0xab, 5, 2), (0xcd, 3, 0)]);
    assert_eq!(hot.top[0].name.as_deref(), Some(&b"acme"[..]));
    assert_eq!(store.hot_keys("api", 1000, 1).unwrap().top.len(), 1);
    for (slice_ms, top) in [(5, 10), (1000, 101)] {
        let err = store.hot_keys("api", slice_ms, top).unwrap_err();
        assert_eq!(err.kind(), flowctrl::ErrorKind::InvalidArgument, "{err}");
    }
}

/// The library's lines about task "planted" (target, its `task` field,
/// text), collected by this binary's logger. Other tests' lines are
/// dropped without the lock: a child another test forks never finds it
/// held.
type Line = (String, Option<String>, String);
static PLANTED: std::sync::Mutex<Vec<Line>> = std::sync::Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let message = record.args().to_string();
        if message.starts_with("task \"planted\"") {
            let task = record
                .key_values()
                .get("task".into())
                .map(|v| v.to_string());
            let target = record.target().to_string();
            PLANTED.lock().unwrap().push((target, task, message));
        }
    }

    fn flush(&self) {}
}

/// A record the host refuses is logged once, however many of the host's
/// calls learn its version again (one a second), and a newer refused
/// version once more. Watched for longer than the lines' rate limit (one
/// per kind and task per 10 s in a process): a refusal repeated at the
/// host's calls would show past it.
#[test]
fn a_refused_record_is_logged_once_per_version() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        log::set_logger(&Capture).unwrap();
        log::set_max_level(log::LevelFilter::Info);
    });
    let scratch = Scratch::new("keyed-record-logged");
    let redis = RedisServer::start();
    let table = Table::open(scratch.path("t"), &host_options(&redis.url(), "h0")).unwrap();
    let task = table.task("planted", &TaskConfig::new()).unwrap();
    let (default, _) = own_limits();
    task.set_keys(&KeyConfig::new(default)).unwrap();
    let stats = || task.key_stats().unwrap().unwrap();
    let refusals = || -> Vec<Line> {
        PLANTED
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.2.contains("is refused"))
            .cloned()
            .collect()
    };
    // Each a local allowance past 31: refused.
    for (n, (version, local, watch_ms)) in [(41u64, "97", 10_500), (42, "98", 1200)]
        .into_iter()
        .enumerate()
    {
        let (v, value) = (version.to_string(), format!("10/s 1s {local} share"));
        redis.command::<()>(&[
            "HSET",
            "flowctrl:{planted}:k-cfg",
            "version",
            &v,
            "key_global",
            &value,
        ]);
        eventually("the record refused", || stats().record_refused == version);
        // The host's calls learn the version again every second.
        std::thread::sleep(Duration::from_millis(watch_ms));
        assert_eq!(stats().record_refused, version);
        assert_eq!(stats().record, 0, "nothing adopted");
        let rate = task
            .key_limits(b"k")
            .unwrap()
            .0
            .global
            .map(|g| g.rate.rate());
        assert_eq!(rate, Some(1000.0), "the host keeps its own");
        let lines = refusals();
        assert_eq!(
            lines.len(),
            n + 1,
            "version {version}: one line per version refused: {lines:#?}"
        );
        let (target, field, text) = &lines[n];
        assert!(
            text.contains(&format!("(version {version})")) && text.contains(&value),
            "{text}"
        );
        assert_eq!(
            (target.as_str(), field.as_deref()),
            ("flowctrl::store", Some("planted")),
            "a store record's line: {text}"
        );
    }
    // A good record after them: adopted, and said so on the same target.
    redis.command::<()>(&[
        "HSET",
        "flowctrl:{planted}:k-cfg",
        "version",
        "43",
        "key_global",
        "10/s 1s 1 share",
    ]);
    eventually("the record adopted", || stats().record == 43);
    let adopted: Vec<Line> = PLANTED
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.2.contains("(version 43)"))
        .cloned()
        .collect();
    assert_eq!(adopted.len(), 1, "{adopted:#?}");
    assert_eq!(
        (adopted[0].0.as_str(), adopted[0].1.as_deref()),
        ("flowctrl::store", Some("planted")),
        "{adopted:#?}"
    );
}

/// A manager's file with task `api`'s key rate `k_rate`/s, no overrides.
fn keys_manager_file(url: &str, k_rate: u32) -> String {
    format!(
        "[table]\nstore = \"{url}\"\n\n[manager]\nlease_ms = 1000\n\n\
         [tasks.api]\nkey_global = \"{k_rate}/s\"\n"
    )
}

/// Two `flowctrl manage` processes: the active one writes the keys'
/// record under its token; SIGKILLed, the standby takes the lease, fences
/// the record with its own token, writes it back when the store lost it
/// and writes the file's change; the killed one's token is refused.
#[test]
fn a_standby_that_takes_over_keeps_writing_the_keys_record_under_its_token() {
    let scratch = Scratch::new("keyed-record-failover");
    let redis = RedisServer::start();
    let url = redis.url();
    let file = scratch.path("manager.toml");
    std::fs::write(&file, keys_manager_file(&url, 20)).unwrap();
    let managers = [
        Child(common::managed::spawn(&file, &scratch.path("a.log"))),
        Child(common::managed::spawn(&file, &scratch.path("b.log"))),
    ];
    // A host of its own numbers, far looser than the record's.
    let table = Table::open(scratch.path("t"), &host_options(&url, "h0")).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    task.set_keys(&KeyConfig::new(own_limits().0)).unwrap();
    let host = || {
        let rate = task
            .key_limits(b"k")
            .unwrap()
            .0
            .global
            .map(|g| g.rate.rate());
        (task.key_stats().unwrap().unwrap().record, rate)
    };
    let store = store(&url);
    let record = || store.key_record("api").unwrap();
    let holder = || redis.command::<Option<String>>(&["GET", "flowctrl:{manager}:lease"]);
    let token_of = |h: &str| -> u64 { h.split(' ').nth(1).unwrap().parse().unwrap() };
    let fence = || redis.command::<Option<u64>>(&["GET", "flowctrl:{api}:fence"]);
    let of = |n| KeyRecord {
        default: Some(KeyGlobal::new(KeyRate::per_second(n))),
        overrides: Vec::new(),
    };
    eventually("the active manager's record", || {
        holder().is_some() && record().is_some()
    });
    let first = holder().unwrap();
    let (v1, written) = record().unwrap();
    assert_eq!(written, of(20.0));
    assert_eq!(fence(), Some(token_of(&first)), "written under its token");
    eventually("the host adopts it", || host() == (v1, Some(20.0)));
    let killed = managers
        .iter()
        .find(|m| {
            first
                .split(' ')
                .next()
                .unwrap()
                .ends_with(&format!("-{}", m.0.id()))
        })
        .unwrap_or_else(|| panic!("{first:?} is neither manager"));
    kill(killed.0.id() as i32, libc::SIGKILL);
    eventually("the standby active", || {
        holder().is_some_and(|h| h != first)
    });
    let token = token_of(&holder().unwrap());
    assert!(token > token_of(&first));
    eventually("the standby's token on the record", || {
        fence() == Some(token)
    });
    assert_eq!(record(), Some((v1, of(20.0))), "unchanged: not rewritten");
    // The store lost the record: the standby writes it back.
    redis.command::<()>(&["DEL", "flowctrl:{api}:k-cfg"]);
    eventually("the record back", || record().is_some());
    let (v2, written) = record().unwrap();
    assert_eq!(written, of(20.0));
    assert!(v2 > v1, "{v2} > {v1}");
    // The file changes under both managers: the active one writes it.
    std::fs::write(&file, keys_manager_file(&url, 10)).unwrap();
    eventually("the changed record", || {
        record().is_some_and(|(_, r)| r == of(10.0))
    });
    let (v3, _) = record().unwrap();
    assert!(v3 > v2, "{v3} > {v2}");
    assert_eq!(fence(), Some(token));
    eventually("the host adopts the change", || host() == (v3, Some(10.0)));
    // The killed manager's token, with its configuration: refused.
    let old = scratch.path("old.toml");
    std::fs::write(&old, keys_manager_file(&url, 20)).unwrap();
    let config = flowctrl::manage::ManagerConfig::load(&old).unwrap();
    let mut late = flowctrl::manage::Manager::new(flowctrl::manage::ManagerConfig {
        id: "killed".into(),
        ..config
    })
    .unwrap();
    assert!(
        late.write_with_token(token_of(&first)).unwrap(),
        "the killed manager's token is fenced out"
    );
    assert_eq!(
        record(),
        Some((v3, of(10.0))),
        "the record is the standby's"
    );
    assert_eq!(fence(), Some(token), "the fence stays the standby's");
}
