//! Keys' global rates on a real Redis (standalone, restarted inside a
//! slice; a Sentinel failover; hosts whose clocks are 420 ms ahead and
//! 260 ms behind; and a 3-master Cluster): 3 hosts × 2 processes, 10,000
//! keys. Five
//! hot keys, each asked far past its limit on every host, stay within their
//! limit in every slice; cold keys (each asked about once in five slices)
//! are admitted whatever they ask, on each host alone.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use common::options::host_options;
use common::redis::{Cluster, Redis, RedisServer};
use common::*;
use flowctrl::{KeyConfig, KeyGlobal, KeyLimits, KeyRate, Outcome, Table, TaskConfig};

const HOSTS: usize = 3;
const PROCESSES: usize = 2;
const HOT: usize = 5;
const COLD: usize = 10_000;
/// Each key's limit per 1-s slice, fleet-wide.
const LIMIT: u64 = 20;
const SECS: u64 = 7;
/// The hosts' clock skews in the skewed run: ahead, behind, on time.
const SKEWS_MS: [i64; HOSTS] = [420, -260, 0];

/// (slice, key) → (asked, admitted).
type Counts = HashMap<(u64, String), (u64, u64)>;

fn wall_ms() -> u64 {
    (wall_us() / 1000) as u64
}

/// Whether a request asked at `before` and decided by `after` (wall ms)
/// was decided in the slice of a second it was asked in, away from its
/// edges (where the host's clock and the store's may name different
/// slices). A saturated key spends its slice in its first milliseconds:
/// a process stalled across the edge is admitted from the next slice's,
/// and counted by the time it asked, that slice would read as over.
fn in_one_slice(before: u64, after: u64) -> bool {
    before / 1000 == after / 1000 && before % 1000 >= 5 && after % 1000 < 995
}

/// One process of host `host`: from `start_ms` (wall) for SECS seconds,
/// 800 asks a second, five in eight for a hot key (in turn), the rest for
/// a cold key at random; none within 5 ms of a slice's edge, where the
/// host's clock and the store's may name different slices. Writes what it
/// saw to `out`.
fn worker(
    url: &str,
    table: &Path,
    (host, skew_ms): (usize, i64),
    seed: u64,
    start_ms: u64,
    out: &Path,
) -> i32 {
    let options = host_options(url, &*format!("h{host}")).clock_skew_ms(skew_ms);
    let table = Table::open(table, &options).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    let limits = KeyLimits::new().global(KeyGlobal::new(KeyRate::per_second(LIMIT as f64)));
    task.set_keys(&KeyConfig::new(limits).capacity(16_384))
        .unwrap();
    let mut counts = Counts::new();
    let mut rng = seed;
    let mut next = start_ms as f64;
    let (mut i, end) = (0u64, start_ms + SECS * 1000);
    loop {
        let now = wall_ms();
        if now >= end {
            break;
        }
        if (now as f64) < next {
            std::thread::sleep(Duration::from_micros(((next - now as f64) * 1000.0) as u64));
            continue;
        }
        next += 1000.0 / 800.0;
        let edge = now % 1000;
        if !(5..995).contains(&edge) {
            continue;
        }
        i += 1;
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let key = if i % 8 < 5 {
            format!("hot{}", i % HOT as u64)
        } else {
            format!("cold{}", (rng >> 33) % COLD as u64)
        };
        let decided = task.acquire_key_raw(key.as_bytes(), 1).unwrap();
        // Counted only when decided in the slice it was asked in (a
        // process stalled across the edge spends the next slice's).
        if in_one_slice(now, wall_ms()) {
            let entry = counts.entry((now / 1000, key.clone())).or_default();
            entry.0 += 1;
            entry.1 += u64::from(decided.is_ok());
        }
        if let Ok(mut permit) = decided {
            task.release_raw(&mut permit, Outcome::Success).unwrap();
        }
    }
    let text: String = counts
        .iter()
        .map(|((s, k), (a, d))| format!("{s} {k} {a} {d}\n"))
        .collect();
    std::fs::write(out, text).unwrap();
    0
}

/// Runs the fleet against `url`; `during` runs in the parent while the
/// workers ask (from their start, in ms). Returns the merged counts and
/// the first slice.
fn fleet(
    url: &str,
    scratch: &Scratch,
    skews_ms: [i64; HOSTS],
    during: impl FnOnce(u64),
) -> (Counts, u64) {
    let start_ms = (wall_ms() / 1000 + 2) * 1000;
    let mut pids = Vec::new();
    for (h, skew_ms) in skews_ms.into_iter().enumerate() {
        for p in 0..PROCESSES {
            let table = scratch.path(&format!("h{h}"));
            let out = scratch.path(&format!("h{h}p{p}.txt"));
            let url = url.to_string();
            let seed = (h * PROCESSES + p) as u64 + 1;
            pids.push(fork_guarded(move || {
                worker(&url, &table, (h, skew_ms), seed, start_ms, &out)
            }));
        }
    }
    during(start_ms);
    for pid in pids {
        assert_eq!(wait(pid), 0, "a worker failed");
    }
    let mut counts = Counts::new();
    for h in 0..HOSTS {
        for p in 0..PROCESSES {
            let text = std::fs::read_to_string(scratch.path(&format!("h{h}p{p}.txt"))).unwrap();
            for line in text.lines() {
                let f: Vec<&str> = line.split(' ').collect();
                let e = counts
                    .entry((f[0].parse().unwrap(), f[1].to_string()))
                    .or_default();
                e.0 += f[2].parse::<u64>().unwrap();
                e.1 += f[3].parse::<u64>().unwrap();
            }
        }
    }
    (counts, start_ms / 1000)
}

/// The bounds: every hot key within its limit in every slice from the
/// second (the first is each host's allowance: cold everywhere), and at
/// least 0.9 of it in the slices `whole`; cold keys admitted ≥ 0.99 of
/// what they asked.
fn check(counts: &Counts, first: u64, whole: impl Fn(u64) -> bool) {
    let (mut cold_asked, mut cold_admitted) = (0, 0);
    for slice in first + 1..first + SECS {
        for k in 0..HOT {
            let (asked, admitted) = counts
                .get(&(slice, format!("hot{k}")))
                .copied()
                .unwrap_or_default();
            eprintln!("slice {} hot{k}: {admitted} of {asked}", slice - first);
            assert!(
                admitted <= LIMIT,
                "slice {}: hot{k} admitted {admitted} of a limit of {LIMIT}",
                slice - first
            );
            if whole(slice - first) {
                assert!(
                    admitted as f64 >= 0.9 * LIMIT as f64,
                    "slice {}: hot{k} admitted only {admitted} of {LIMIT}",
                    slice - first
                );
            }
        }
    }
    for ((_, key), (asked, admitted)) in counts {
        if key.starts_with("cold") {
            cold_asked += asked;
            cold_admitted += admitted;
        }
    }
    let ratio = cold_admitted as f64 / cold_asked as f64;
    eprintln!("cold keys: {cold_admitted} of {cold_asked} ({ratio:.4})");
    assert!(
        ratio >= 0.99,
        "cold keys admitted {ratio:.4} of what they asked"
    );
}

#[test]
fn keys_keep_their_global_rate_through_a_restart_inside_a_slice() {
    let scratch = Scratch::in_memory("keyed-global");
    let mut redis = RedisServer::start();
    let url = redis.url();
    let (counts, first) = fleet(&url, &scratch, [0; HOSTS], |start_ms| {
        // Killed 3.4 s in, started again (empty) at once.
        std::thread::sleep(Duration::from_millis(
            (start_ms + 3400).saturating_sub(wall_ms()),
        ));
        redis.kill();
        redis.restart();
    });
    // The restart's slice (3) keeps only what was granted before it; the
    // slice after it may be asked ahead of the empty store late.
    check(&counts, first, |s| s >= 2 && s != 3 && s != 4);
    let fields: i64 = redis.command(&["DBSIZE"]);
    assert!(fields > 0, "the store holds the hot keys' slices");
}

#[test]
fn keys_keep_their_global_rate_through_a_sentinel_failover() {
    let scratch = Scratch::in_memory("keyed-global-sentinel");
    let mut ha = Redis::new().sentinels(1000);
    let old_master = ha.master.port;
    let mut promoted = 0;
    let (counts, first) = fleet(&ha.url(), &scratch, [0; HOSTS], |start_ms| {
        // The master SIGKILLed 2.4 s in; the sentinels promote its replica.
        std::thread::sleep(Duration::from_millis(
            (start_ms + 2400).saturating_sub(wall_ms()),
        ));
        let pid = ha.master.pid().unwrap();
        // SAFETY: SIGKILL to our own child, by its pid.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        while ha.named_master() == Some(old_master) {
            assert!(wall_ms() < start_ms + 22_000, "no failover: {}", ha.state());
            std::thread::sleep(Duration::from_millis(10));
        }
        promoted = (wall_ms() - start_ms) / 1000;
    });
    ha.master.kill();
    eprintln!("promoted in second {promoted}");
    // Every slice within the limit; whole from the second, but for those
    // from the kill's to the one after the promotion (keys on fallback).
    check(&counts, first, |s| {
        s >= 2 && !(2..=promoted + 1).contains(&s)
    });
}

#[test]
fn keys_keep_their_global_rate_on_hosts_with_skewed_clocks() {
    let scratch = Scratch::in_memory("keyed-global-skew");
    let redis = RedisServer::start();
    let (counts, first) = fleet(&redis.url(), &scratch, SKEWS_MS, |_| {});
    check(&counts, first, |s| s >= 2);
}

#[test]
fn keys_keep_their_global_rate_on_a_cluster() {
    let scratch = Scratch::in_memory("keyed-global-cluster");
    let cluster = Redis::new().cluster(5000, 0);
    let (counts, first) = fleet(&cluster.url(), &scratch, [0; HOSTS], |_| {});
    check(&counts, first, |s| s >= 2);
}

/// The fleet's hot keys read from a 3-master Cluster: two hosts ask three
/// keys past their limit, 3:2:1; the store counts the three keys that
/// pulled, with what it gave each, and names the hosts' two most asked.
#[test]
fn the_fleets_hot_keys_are_named_on_a_cluster() {
    const ASKED: [&str; 6] = ["alice", "alice", "alice", "bob", "bob", "carol"];
    let scratch = Scratch::in_memory("keyed-global-hot-cluster");
    let cluster = Redis::new().cluster(5000, 0);
    let url = cluster.url();
    let start_ms = (wall_ms() / 1000 + 1) * 1000;
    let pids: Vec<_> = (0..2)
        .map(|h| {
            let (url, table) = (url.clone(), scratch.path(&format!("h{h}")));
            fork_guarded(move || {
                let table = Table::open(&table, &host_options(&url, &*format!("h{h}"))).unwrap();
                let task = table.task("api", &TaskConfig::new()).unwrap();
                let global = KeyGlobal::new(KeyRate::per_second(LIMIT as f64));
                task.set_keys(&KeyConfig::new(KeyLimits::new().global(global)))
                    .unwrap();
                // 600 asks a second from start_ms for 3 s.
                let mut i = 0;
                while wall_ms() < start_ms + 3000 {
                    let due = start_ms + i * 10 / 6;
                    let now = wall_ms();
                    if now < due {
                        std::thread::sleep(Duration::from_millis(due - now));
                        continue;
                    }
                    let key = ASKED[i as usize % ASKED.len()];
                    if let Ok(mut permit) = task.acquire_key_raw(key.as_bytes(), 1).unwrap() {
                        task.release_raw(&mut permit, Outcome::Success).unwrap();
                    }
                    i += 1;
                }
                0
            })
        })
        .collect();
    // Mid-slice, two slices after each key turned hot.
    std::thread::sleep(Duration::from_millis(
        (start_ms + 2500).saturating_sub(wall_ms()),
    ));
    let store = common::options::admin_store(&url);
    let hot = store.hot_keys("api", 1000, 10).unwrap();
    for pid in pids {
        assert_eq!(wait(pid), 0, "a host failed");
    }
    eprintln!("{hot:?}");
    assert_eq!(hot.slice, (start_ms + 2500) / 1000, "the current slice");
    assert_eq!(hot.keys, 3, "the three keys pulled: {hot:?}");
    assert_eq!(hot.top.len(), 3, "{hot:?}");
    assert!(
        hot.top
            .iter()
            .all(|k| (1..=LIMIT).contains(&k.given) && k.asks > 0),
        "each given some of its slice, never more: {hot:?}"
    );
    let names: Vec<&[u8]> = hot.top.iter().filter_map(|k| k.name.as_deref()).collect();
    for key in ["alice", "bob"] {
        assert!(names.contains(&key.as_bytes()), "{key} not named: {hot:?}");
    }
    assert!(
        !names.contains(&&b"carol"[..]) && names.len() == 2,
        "a call names its two most asked keys only: {hot:?}"
    );
}

/// A key of 2 a slice asked 3 times a slice on each of 4 hosts (past
/// their allowance of 1: they pull, for this slice and ahead, so the store
/// sees at least twice as many asks as the key has permits) and once on
/// each of 4 more (within it): the busy hosts are refused once the slice is
/// spent, the store lists the key, and every host learns it at a slice-end
/// call, so the other four lose their allowance too. Without the list each
/// of them passed its one a slice: 4 of 2 on the allowances alone.
#[test]
fn a_key_thin_on_most_hosts_is_listed_and_kept_to_its_limit() {
    let redis = RedisServer::start();
    let (admitted, _) = thin_key(&redis.url(), 6, |_| {});
    // Listed in the first slice once the busy hosts' calls were refused;
    // a thin host whose call came before that learns it in the second
    // slice (the answer lists the last slice's too): from the third on, at
    // most the limit.
    assert!(
        admitted[2..].iter().all(|&n| n <= THIN_LIMIT),
        "admitted per slice: {admitted:?} (limit {THIN_LIMIT})"
    );
    assert!(admitted[2..].iter().sum::<u64>() > 0, "{admitted:?}");
}

/// The thin key above, listed, through a Sentinel failover: the master
/// SIGKILLed 50 ms into the fourth slice, its replica promoted a few
/// seconds later. No slice passes the limit, the failover's included (the
/// hosts keep the list they learnt; the promoted replica holds what was
/// replicated of it, and the busy hosts' refusals list the key again), and
/// the key is admitted again once the new master answers.
#[test]
fn a_listed_thin_key_stays_within_its_limit_through_a_sentinel_failover() {
    let mut ha = Redis::new().sentinels(1000);
    let old_master = ha.master.port;
    let pid = ha.master.pid().unwrap();
    thin_key_through_failover(&ha.url(), pid, || {
        ha.named_master().is_some_and(|port| port != old_master)
    });
    ha.master.kill();
}

/// The same on a 3-master Cluster with a replica each: the master of the
/// task's slot (its keys' hash tag) SIGKILLed, its replica elected.
#[test]
fn a_listed_thin_key_stays_within_its_limit_through_a_cluster_failover() {
    let mut cluster = Cluster::start(1000);
    let victim = cluster.master_of("{api}").unwrap();
    let pid = cluster.nodes[victim].pid().unwrap();
    thin_key_through_failover(&cluster.url(), pid, || {
        cluster.master_of("{api}").is_some_and(|m| m != victim)
    });
    cluster.nodes[victim].kill();
}

/// The listed thin key through a store outage longer than the slices a
/// key stays hot (`HOT_SLICES`, 8): Redis SIGKILLed 50 ms into the fourth
/// slice, started again (empty) at the fifteenth. The hosts keep to the
/// last list they had while the store fails: no slice past the limit (4
/// of 2 from about the tenth second when the list's age was judged as
/// with the store answering), and the key admitted again after.
#[test]
fn a_listed_thin_key_stays_within_its_limit_through_a_long_outage() {
    const SLICES: u64 = 18;
    let mut redis = RedisServer::start();
    let url = redis.url();
    let (admitted, _) = thin_key(&url, SLICES, |slice| match slice {
        3 => {
            std::thread::sleep(Duration::from_millis(50));
            redis.kill();
        }
        14 => redis.restart(),
        _ => {}
    });
    eprintln!("admitted per slice: {admitted:?}; down in slices 3-14");
    assert!(
        admitted[2..].iter().all(|&n| n <= THIN_LIMIT),
        "admitted per slice: {admitted:?} (limit {THIN_LIMIT}), down in slices 3-14"
    );
    assert!(
        admitted[15..].iter().sum::<u64>() > 0,
        "nothing admitted after the restart: {admitted:?}"
    );
}

/// The thin key's fleet on `url` for 13 slices, the store's process `pid`
/// SIGKILLed 50 ms into the fourth; `promoted` says when another took its
/// place. Every slice from the third within the limit, and some admitted
/// after the promotion.
fn thin_key_through_failover(url: &str, pid: u32, promoted: impl Fn() -> bool + Sync) {
    const SLICES: u64 = 13;
    let at = std::sync::Mutex::new(None);
    let (admitted, first) = std::thread::scope(|scope| {
        thin_key(url, SLICES, |slice| {
            if slice != 3 {
                return;
            }
            let (promoted, at) = (&promoted, &at);
            scope.spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                // SAFETY: SIGKILL to our own child, by its pid.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                let killed = wall_ms();
                while !promoted() {
                    assert!(wall_ms() < killed + 20_000, "no failover");
                    std::thread::sleep(Duration::from_millis(10));
                }
                *at.lock().unwrap() = Some(wall_ms() / 1000);
            });
        })
    });
    let promoted = at.into_inner().unwrap().expect("a promotion") - first;
    eprintln!("admitted per slice: {admitted:?}; promoted in slice {promoted}");
    assert!(
        promoted + 2 < SLICES,
        "promoted in slice {promoted}: too late to judge the slices after it"
    );
    assert!(
        admitted[2..].iter().all(|&n| n <= THIN_LIMIT),
        "admitted per slice: {admitted:?} (limit {THIN_LIMIT}), promoted in slice {promoted}"
    );
    assert!(
        admitted[promoted as usize + 1..].iter().sum::<u64>() > 0,
        "nothing admitted after the promotion in slice {promoted}: {admitted:?}"
    );
}

/// The thin key's limit per 1-s slice.
const THIN_LIMIT: u64 = 2;

/// The thin key's fleet on `url` for `slices` slices: 8 hosts (tables of
/// this process), the first 4 asking the key at 100, 300 and 500 ms into
/// each slice, the others once each between 150 and 450 ms. `at_start`
/// runs at each slice's start (its index). Returns the key's admissions
/// per slice and the first slice.
fn thin_key(url: &str, slices: u64, mut at_start: impl FnMut(u64)) -> (Vec<u64>, u64) {
    const HOSTS: usize = 8;
    const BUSY: usize = 4;
    let scratch = Scratch::in_memory("keyed-global-listed");
    let limits = KeyLimits::new().global(KeyGlobal::new(KeyRate::per_second(THIN_LIMIT as f64)));
    let tasks: Vec<_> = (0..HOSTS)
        .map(|h| {
            let table = Table::open(
                scratch.path(&format!("h{h}")),
                &host_options(url, &*format!("h{h}")),
            )
            .unwrap();
            let task = table.task("api", &TaskConfig::new()).unwrap();
            task.set_keys(&KeyConfig::new(limits).capacity(64)).unwrap();
            (table, task)
        })
        .collect();
    let mut plan: Vec<(u64, usize)> = Vec::new();
    for h in 0..BUSY {
        plan.extend([100, 300, 500].map(|ms| (ms, h)));
    }
    for h in BUSY..HOSTS {
        plan.push((150 + 100 * (h - BUSY) as u64, h));
    }
    plan.sort();
    let first = wall_ms() / 1000 + 1;
    let mut admitted = vec![0u64; slices as usize];
    for slice in 0..slices {
        let begins = (first + slice) * 1000;
        std::thread::sleep(Duration::from_millis(begins.saturating_sub(wall_ms())));
        at_start(slice);
        for &(ms, h) in &plan {
            let at = begins + ms;
            std::thread::sleep(Duration::from_millis(at.saturating_sub(wall_ms())));
            assert_eq!(
                wall_ms() / 1000,
                first + slice,
                "the machine stalled past a slice"
            );
            if let Ok(mut permit) = tasks[h].1.acquire_key_raw(b"shared", 1).unwrap() {
                admitted[slice as usize] += 1;
                tasks[h]
                    .1
                    .release_raw(&mut permit, Outcome::Success)
                    .unwrap();
            }
        }
    }
    (admitted, first)
}

#[test]
fn a_key_that_pulled_holds_at_most_200_bytes_of_the_store() {
    let scratch = Scratch::in_memory("keyed-global-memory");
    let redis = RedisServer::start();
    let table = Table::open(scratch.path("h"), &host_options(&redis.url(), "h0")).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    let limits = KeyLimits::new().global(KeyGlobal::new(KeyRate::per_second(LIMIT as f64)));
    task.set_keys(&KeyConfig::new(limits).capacity(16_384))
        .unwrap();
    // 4,000 keys asked past their allowance in every slice for 3 s: each
    // pulls in every slice.
    let end = wall_ms() + 3000;
    while wall_ms() < end {
        for k in 0..4000 {
            let key = format!("user-{k}");
            if let Ok(mut permit) = task.acquire_key_raw(key.as_bytes(), 1).unwrap() {
                task.release_raw(&mut permit, Outcome::Success).unwrap();
            }
        }
    }
    let stats = |key: &str| -> (i64, i64) {
        let bytes: i64 = redis.command(&["MEMORY", "USAGE", key, "SAMPLES", "0"]);
        let fields: i64 = redis.command(&["HLEN", key]);
        (bytes, fields)
    };
    // The slices' counts (`…:k:<slice>`), the hot keys' names
    // (`…:k:n:<slice>`, a few a call) and the spread keys listed
    // (`…:k:h:<slice>`, at most 64): the names and lists count in the bytes.
    let keys: Vec<String> = redis.command(&["KEYS", "*:k:*"]);
    let counts = |k: &&String| !k.contains(":k:n:") && !k.contains(":k:h:") && !k.contains(":born");
    let (mut bytes, mut pulled_last) = (0i64, 0i64);
    let last = keys
        .iter()
        .filter(counts)
        .filter_map(|k| k.rsplit(':').next()?.parse::<u64>().ok())
        .max()
        .unwrap();
    for key in keys.iter().filter(|k| !k.contains(":born")) {
        if key.contains(":k:h:") {
            let b: i64 = redis.command(&["MEMORY", "USAGE", key, "SAMPLES", "0"]);
            bytes += b;
            continue;
        }
        let (b, fields) = stats(key);
        bytes += b;
        // The newest hash is the next slice's, asked ahead: the keys that
        // pulled in the last slice are the ones asked ahead.
        if counts(&key) && key.ends_with(&format!(":{last}")) {
            pulled_last = fields;
        }
    }
    let census_key: Vec<String> = redis.command(&["KEYS", "*:k-hosts"]);
    let census: i64 = redis.command(&["MEMORY", "USAGE", &census_key[0]]);
    eprintln!("{bytes} bytes of slices (+{census} of census) for {pulled_last} keys");
    assert!(pulled_last >= 3900, "{pulled_last} keys pulled");
    assert!(
        bytes <= 200 * pulled_last,
        "{bytes} bytes for {pulled_last} keys that pulled"
    );
}

/// Per (slice from the start, hot key): admissions, in a file every process
/// maps (so a killed process's count stays).
struct Shared(memmap2::MmapRaw);

impl Shared {
    fn new(path: &Path) -> Self {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .unwrap();
        file.set_len(8 * 64 * HOT as u64).unwrap();
        Self(memmap2::MmapOptions::new().map_raw(&file).unwrap())
    }

    fn at(&self, slice: usize, key: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(slice < 64 && key < HOT);
        // SAFETY: in range of the mapping, 8-aligned, only atomics use it.
        unsafe { &*(self.0.as_ptr().add(8 * (slice * HOT + key)) as *const _) }
    }
}

/// SIGKILLed at any instruction every 20–120 ms, a process of the fleet
/// leaves no key past its slice: what it held or was being granted is lost
/// to the slice, never given twice.
#[test]
fn killed_processes_leave_no_key_past_its_slice() {
    use std::sync::atomic::Ordering::Relaxed;
    let scratch = Scratch::in_memory("keyed-global-storm");
    let redis = RedisServer::start();
    let url = redis.url();
    let shared = Shared::new(&scratch.path("counts"));
    let start_ms = (wall_ms() / 1000 + 1) * 1000;
    let storm = |host: usize, seed: u64| {
        let url = url.clone();
        let table = scratch.path(&format!("h{host}"));
        let shared = &shared;
        fork_guarded(move || {
            let t = Table::open(&table, &host_options(&url, &*format!("h{host}"))).unwrap();
            let task = t.task("api", &TaskConfig::new()).unwrap();
            let limits = KeyLimits::new().global(KeyGlobal::new(KeyRate::per_second(LIMIT as f64)));
            task.set_keys(&KeyConfig::new(limits).capacity(1024))
                .unwrap();
            let mut i = seed;
            loop {
                let now = wall_ms();
                if !(5..995).contains(&(now % 1000)) || now < start_ms {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                i += 1;
                let k = (i % HOT as u64) as usize;
                let key = format!("hot{k}");
                if let Ok(mut permit) = task.acquire_key_raw(key.as_bytes(), 1).unwrap() {
                    if in_one_slice(now, wall_ms()) {
                        let slice = ((now - start_ms) / 1000) as usize;
                        shared.at(slice.min(63), k).fetch_add(1, Relaxed);
                    }
                    task.release_raw(&mut permit, Outcome::Success).unwrap();
                }
                std::thread::sleep(Duration::from_micros(300));
            }
        })
    };
    let mut pids: Vec<(usize, i32)> = (0..HOSTS * PROCESSES)
        .map(|i| (i % HOSTS, storm(i % HOSTS, i as u64)))
        .collect();
    let mut kills = 0;
    let mut rng = 7u64;
    while wall_ms() < start_ms + SECS * 1000 {
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
        std::thread::sleep(Duration::from_millis(20 + (rng >> 33) % 100));
        let victim = ((rng >> 40) % pids.len() as u64) as usize;
        let (host, pid) = pids[victim];
        kill(pid, libc::SIGKILL);
        wait(pid);
        kills += 1;
        pids[victim] = (host, storm(host, rng));
    }
    for (_, pid) in &pids {
        kill(*pid, libc::SIGKILL);
        wait(*pid);
    }
    let mut total = 0;
    for slice in 1..SECS as usize {
        for k in 0..HOT {
            let n = shared.at(slice, k).load(Relaxed);
            eprintln!("slice {slice} hot{k}: {n}");
            assert!(n <= LIMIT, "slice {slice}: hot{k} admitted {n} of {LIMIT}");
            total += n;
        }
    }
    let possible = LIMIT * (SECS - 1) * HOT as u64;
    eprintln!("{kills} kills; {total} of {possible} admitted");
    assert!(kills >= 40, "{kills} kills");
    assert!(
        total as f64 >= 0.7 * possible as f64,
        "{total} of {possible}: kills lost more than a few grants"
    );
}

/// Without a store (the embedded one) the host is the fleet: a key's slice
/// is exact on it, and `top_keys` shows the key hot, spent and refused.
#[test]
fn the_embedded_store_keeps_a_keys_slice_on_the_host_alone() {
    let scratch = Scratch::in_memory("keyed-global-embedded");
    let table = Table::open(scratch.path("t"), &flowctrl::TableOptions::default()).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    let global = KeyGlobal::new(KeyRate::new(5.0, Duration::from_secs(60)));
    task.set_keys(&KeyConfig::new(KeyLimits::new().global(global)))
        .unwrap();
    // Within one minute slice (a test at a minute's edge waits it out).
    if wall_ms() % 60_000 > 55_000 {
        std::thread::sleep(Duration::from_millis(60_000 - wall_ms() % 60_000 + 10));
    }
    let mut admitted = 0;
    for _ in 0..8 {
        match task.acquire_key_raw(b"alice", 1).unwrap() {
            Ok(mut permit) => {
                admitted += 1;
                task.release_raw(&mut permit, Outcome::Success).unwrap();
            }
            Err(refusal) => {
                assert_eq!(refusal.by, flowctrl::KeyRefused::Global);
                let wait = refusal.retry_after.unwrap();
                assert!(wait <= Duration::from_secs(60) && wait > Duration::ZERO);
            }
        }
    }
    assert_eq!(admitted, 5, "a slice of 5 on a host alone");
    // The host alone keeps a key's slice in one word: at most 65,535.
    let big = KeyGlobal::new(KeyRate::per_second(100_000.0));
    let err = task.set_key_global(None, Some(&big)).unwrap_err();
    assert!(err.to_string().contains("at most 65535"), "{err}");
    let stats = task.key_stats().unwrap().unwrap();
    assert_eq!(stats.refused_global, 3, "{stats:?}");
    assert_eq!(stats.refused_rate + stats.refused_concurrency, 0);
    let top = task.top_keys(1, false).unwrap();
    let g = top[0].global.expect("alice has a global rate");
    assert!(g.hot && g.spent && g.held == 0, "{g:?}");
    assert_eq!(g.asked, 8);
}
