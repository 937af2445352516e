//! Idle quota against a real Redis: a host that stops admitting gives what
//! it holds of the slice back to the store (its table's keeper does), and
//! another host spends it; a busy host gives nothing back; and a give-back
//! cut by the mover's death is finished by the next pull, exactly.
//!
//! Every test keeps its run inside one slice, so the slice's key is the
//! oracle: what the hosts admitted in it adds up to its quota, no more (a
//! give-back counted twice) and no less (one lost).

mod common;

use std::time::Duration;

use common::redis::RedisServer;
use common::*;
use flowctrl::{Outcome, Table, Task, TaskConfig};

/// 4 s slices: the keeper gives back after a twentieth of one (200 ms).
const SLICE_MS: u64 = 4000;
const IDLE_AFTER: Duration = Duration::from_millis(SLICE_MS / 20);

/// A slice of `quota`, released whole at its start (no pacing to wait
/// for), pulled in chunks of `chunk`.
fn config(quota: u64, chunk: u32) -> TaskConfig {
    TaskConfig::new()
        .global_rate((quota * 1000 / SLICE_MS) as f64)
        .slice_ms(SLICE_MS as u32)
        .global_burst(quota as u32)
        .chunk(chunk)
}

fn slice_now() -> (u64, u64) {
    let ms = (wall_us() / 1000) as u64;
    (ms / SLICE_MS, ms % SLICE_MS)
}

/// A slice at most `into_ms` in (waiting for the next one's start if
/// this one is further along).
fn slice_within(into_ms: u64) -> u64 {
    loop {
        let (slice, into) = slice_now();
        if into <= into_ms {
            return slice;
        }
        std::thread::sleep(Duration::from_millis(SLICE_MS - into + 2));
    }
}

/// The census record of `host` in the key of `slice`: accounted (what the
/// key charges the host with) is field 0, given (what the store was told
/// the host gave back) field 11.
fn record(redis: &RedisServer, task: &str, slice: u64, host: &str) -> Vec<i64> {
    let rec: Option<String> =
        redis.command(&["HGET", &format!("flowctrl:{{{task}}}:{slice}"), host]);
    let rec = rec.unwrap_or_else(|| panic!("no record of {host} in slice {slice}"));
    rec.split(' ').map(|f| f.parse().unwrap()).collect()
}

/// What the key of `slice` has left to grant.
fn left(redis: &RedisServer, task: &str, slice: u64) -> i64 {
    let left: Option<String> =
        redis.command(&["HGET", &format!("flowctrl:{{{task}}}:{slice}"), "left"]);
    left.expect("the slice's key").parse().unwrap()
}

/// Admits one permit at a time until `n` are admitted or one is refused;
/// returns the admissions. With `n` far past the slice's quota: until
/// refused (a run that admits `n` shows in the exactness checks).
fn admit(task: &Task, n: u64) -> u64 {
    for admitted in 0..n {
        match task.acquire_raw(1).unwrap() {
            Ok(mut permit) => task.release_raw(&mut permit, Outcome::Success).unwrap(),
            Err(_) => return admitted,
        }
    }
    n
}

/// Polls until `task` has given back something, at most `within`; returns
/// the permits given back and how long it took.
fn await_give_back(task: &Task, within: Duration) -> (u64, Duration) {
    let began = monotonic();
    loop {
        let returned = task.quota_stats().returned;
        if returned > 0 || monotonic() - began >= within {
            return (returned, monotonic() - began);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Hosts `a` and `b` (a table each) on one Redis, with task `task`. The
/// table handles are dropped: a task handle keeps its table's mapping and
/// its keeper thread (it stopped with the table handle once).
fn two_hosts(task: &str, config: &TaskConfig) -> (RedisServer, Scratch, Task, Task) {
    let redis = RedisServer::start();
    let scratch = Scratch::new(task);
    let host = |id: &str| {
        let table = Table::open(scratch.path(id), &host_options(&redis.url(), id)).unwrap();
        table.task(task, config).unwrap()
    };
    let (a, b) = (host("a"), host("b"));
    (redis, scratch, a, b)
}

/// Host A pulls a chunk, admits a few and goes quiet; its keeper gives the
/// rest back and host B, on another table, spends the whole rest of the
/// slice. Without the give-back B would be refused with A's chunk
/// stranded.
#[test]
fn an_idle_host_gives_back_and_another_spends_it() {
    const QUOTA: u64 = 4000;
    const CHUNK: u32 = 1000;
    let (redis, _scratch, a, b) = two_hosts("idle", &config(QUOTA, CHUNK));
    // At the slice's start, so the run fits in it.
    let slice = slice_within(30);
    assert!(matches!(a.pull_quota(CHUNK as u64), Ok(Ok(n)) if n == CHUNK as u64));
    let a_admitted = admit(&a, 10);
    assert_eq!(a_admitted, 10);
    let (returned, after) = await_give_back(&a, Duration::from_secs(1));
    let qa = a.quota_stats();
    assert_eq!(qa.granted, CHUNK as u64, "{qa:?}");
    assert_eq!(
        returned,
        qa.granted - a_admitted,
        "A did not give back what it held within 1 s: {qa:?}"
    );
    // Not before it was idle for the keeper's while.
    assert!(
        after >= IDLE_AFTER - Duration::from_millis(10),
        "given back after {after:?} of idleness"
    );
    // The give-back's own round trip told the store (within that round trip
    // of the host's count): the key charges A with what it admitted alone,
    // and has the rest to grant.
    settled(|| (record(&redis, "idle", slice, "a")[11], returned as i64));
    let rec = record(&redis, "idle", slice, "a");
    assert_eq!(rec[0], a_admitted as i64, "A's record {rec:?}");
    assert_eq!(rec[11], returned as i64, "A's record {rec:?}");
    assert_eq!(left(&redis, "idle", slice), (QUOTA - a_admitted) as i64);

    let b_admitted = admit(&b, 10 * QUOTA);
    assert_eq!(slice_now().0, slice, "the run outlived its slice");
    let into = slice_now().1;
    assert_eq!(
        a_admitted + b_admitted,
        QUOTA,
        "A {a_admitted} + B {b_admitted} admitted, by {into} ms: {:?}",
        b.quota_stats()
    );
    assert_eq!(left(&redis, "idle", slice), 0);
    assert_eq!(record(&redis, "idle", slice, "b")[0], b_admitted as i64);
    assert_eq!(record(&redis, "idle", slice, "a")[0], a_admitted as i64);
    assert_eq!(a.quota_stats().returned, returned, "A gave back twice");
}

/// A host admitting every millisecond gives nothing back; once it stops,
/// its keeper does (so the 0 is the keeper's judgement, not its absence).
#[test]
fn a_busy_host_gives_nothing_back() {
    const QUOTA: u64 = 40_000;
    const CHUNK: u32 = 20_000;
    let redis = RedisServer::start();
    let scratch = Scratch::new("idle-busy");
    let table = Table::open(scratch.path("t"), &host_options(&redis.url(), "busy")).unwrap();
    let task = table.task("busy", &config(QUOTA, CHUNK)).unwrap();
    // Busy for 1 s, idle for at most another: both in the slice (a new one
    // would leave the host holding nothing of it to give).
    let slice = slice_within(SLICE_MS - 2500);
    let until = monotonic() + Duration::from_secs(1);
    let mut admitted = 0;
    while monotonic() < until {
        admitted += admit(&task, 1);
        std::thread::sleep(Duration::from_millis(1));
    }
    let q = task.quota_stats();
    assert!(admitted > 300, "{admitted} admitted: {q:?}");
    assert_eq!(q.returned, 0, "a busy host gave back: {q:?}");
    assert_eq!(q.granted, CHUNK as u64, "{q:?}");

    let (returned, _) = await_give_back(&task, Duration::from_secs(1));
    assert_eq!(slice_now().0, slice, "the run outlived its slice");
    assert_eq!(
        returned,
        CHUNK as u64 - admitted,
        "{:?}",
        task.quota_stats()
    );
}

/// Children that die in the middle of a give-back (a test hook aborts them
/// between marking the host word and completing the move, where a SIGKILL
/// would leave it), each after admitting a few permits of the chunk the
/// host holds. The parent's next pull finishes the move and tells the
/// store; at the end, what the parent and the children admitted in the
/// slice is its quota exactly.
#[test]
fn a_give_back_cut_by_a_kill_is_finished_exactly() {
    const QUOTA: u64 = 4000;
    const CHUNK: u32 = 1000;
    const TASK: &str = "storm";
    const HOST: &str = "storm-host";
    const CHILDREN: usize = 15;
    let redis = RedisServer::start();
    let scratch = Scratch::new("idle-storm");
    let path = scratch.path("t");
    let opts = host_options(&redis.url(), HOST);
    let table = Table::open(&path, &opts).unwrap();
    let task = table.task(TASK, &config(QUOTA, CHUNK)).unwrap();
    let slice = slice_within(SLICE_MS - 3000);
    let pipe = Pipe::new();
    let mut pids = KillOnDrop::default();
    let mut parent = admit(&task, 20);
    let (mut children, mut died) = (0, 0);
    for child in 0..CHILDREN {
        let told = record(&redis, TASK, slice, HOST)[11];
        let (path, opts) = (path.clone(), opts.clone());
        let pid = fork_guarded(move || {
            arm_crash_point("FLOWCTRL_TEST_DIE_IN_GIVE_BACK");
            let table = Table::open(&path, &opts).unwrap();
            let task = table.task(TASK, &config(QUOTA, CHUNK)).unwrap();
            let admitted = admit(&task, 5);
            pipe.send(admitted as u8);
            // The first call looks; the second, the word unmoved, gives
            // back (and dies in the middle).
            task.return_idle_quota(Duration::from_millis(30));
            std::thread::sleep(Duration::from_millis(50));
            match task.return_idle_quota(Duration::from_millis(30)) {
                0 => 2,
                _ => 3,
            }
        });
        pids.add(pid);
        let exit = wait_timeout(pid, Duration::from_secs(10));
        pids.forget(pid);
        children += pipe
            .recv_timeout(Duration::from_secs(1))
            .unwrap_or_else(|| panic!("child {child} ({exit:?}) reported nothing"))
            as u64;
        let cut = exit.killed_by(libc::SIGKILL);
        if cut {
            died += 1;
            assert_eq!(
                record(&redis, TASK, slice, HOST)[11],
                told,
                "the store heard of a give-back whose mover died first"
            );
        }
        // The parent's first admission pulls: it finishes the move and
        // tells the store.
        parent += admit(&task, 20);
        if cut {
            let now = record(&redis, TASK, slice, HOST)[11];
            assert!(now > told, "child {child}'s give-back unfinished: {now}");
        }
    }
    parent += admit(&task, 10 * QUOTA);
    assert_eq!(slice_now().0, slice, "the storm outlived its slice");
    let q = task.quota_stats();
    let rec = record(&redis, TASK, slice, HOST);
    assert_eq!(
        parent + children,
        QUOTA,
        "parent {parent} + children {children} admitted, {died} died mid-move: {q:?}, record {rec:?}"
    );
    assert_eq!(left(&redis, TASK, slice), 0);
    // The key charges the host with what it admitted, and granted it that
    // plus everything the store was told it gave back.
    assert_eq!(rec[0], QUOTA as i64, "record {rec:?}");
    assert_eq!(q.granted, QUOTA + rec[11] as u64, "{q:?}, record {rec:?}");
    // Counted once, by whoever finished each move.
    assert_eq!(q.returned, rec[11] as u64, "{q:?}, record {rec:?}");
    // Last: a hook that never fired passes the checks above.
    assert!(
        died >= CHILDREN * 2 / 3,
        "{died} of {CHILDREN} died mid-move"
    );
}

/// Host B finds the key used up while host A still holds a chunk; A goes
/// quiet and gives it back late in the slice, and B, told to ask again
/// rather than to wait for the next slice, spends it. A's demand reported
/// from a tenth of the slice on holds no fair tail for it once it gave back.
#[test]
fn a_host_refused_before_a_give_back_is_served_after_it() {
    const QUOTA: u64 = 2000;
    const CHUNK: u32 = 1000;
    let (redis, _scratch, a, b) = two_hosts("late", &config(QUOTA, CHUNK));
    let slice = slice_within(30);
    std::thread::sleep(Duration::from_millis(600));
    assert!(matches!(a.pull_quota(CHUNK as u64), Ok(Ok(_))));
    let a_admitted = admit(&a, 10);
    let mut b_admitted = admit(&b, 10 * QUOTA);
    assert_eq!(b_admitted, QUOTA - CHUNK as u64, "{:?}", b.quota_stats());
    // B keeps being asked for more, as a service would be.
    let began = monotonic();
    while a_admitted + b_admitted < QUOTA && monotonic() - began < Duration::from_secs(2) {
        b_admitted += admit(&b, 10 * QUOTA);
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(slice_now().0, slice, "the run outlived its slice");
    let qa = a.quota_stats();
    assert_eq!(qa.returned, CHUNK as u64 - a_admitted, "{qa:?}");
    assert_eq!(
        a_admitted + b_admitted,
        QUOTA,
        "A {a_admitted} + B {b_admitted}: {qa:?}, {:?}",
        b.quota_stats()
    );
    assert_eq!(left(&redis, "late", slice), 0);
}

/// Less than an eighth of an equal share (the quota over the hosts the
/// store counted) is not given back: its round trip, and the others'
/// asking for it, cost more than it is worth. At the floor it is.
#[test]
fn a_host_holding_less_than_the_floor_keeps_it() {
    const QUOTA: u64 = 8000;
    const CHUNK: u32 = 1000;
    // Two hosts: the floor is 8000 / 2 / 8 = 500 (and the low water a
    // quarter chunk, 250: holding 499 pulls nothing ahead).
    const FLOOR: u64 = 500;
    let (redis, _scratch, a, b) = two_hosts("floor", &config(QUOTA, CHUNK));
    let slice = slice_within(30);
    assert!(matches!(b.pull_quota(1), Ok(Ok(_))));
    assert!(matches!(a.pull_quota(CHUNK as u64), Ok(Ok(_))));
    assert_eq!(a.quota_stats().hosts_seen, 2);
    assert_eq!(
        admit(&a, CHUNK as u64 - FLOOR + 1),
        CHUNK as u64 - FLOOR + 1
    );
    // Idle for twice the keeper's while: it looked and kept the rest.
    std::thread::sleep(2 * IDLE_AFTER + Duration::from_millis(50));
    assert_eq!(a.return_idle_quota(Duration::from_millis(1)), 0);
    assert_eq!(a.quota_stats().returned, 0, "{:?}", a.quota_stats());
    assert_eq!(record(&redis, "floor", slice, "a")[11], 0);
    // One more chunk: what it holds is past the floor, and goes back whole.
    assert!(matches!(a.pull_quota(CHUNK as u64), Ok(Ok(_))));
    let (returned, _) = await_give_back(&a, Duration::from_secs(1));
    assert_eq!(returned, CHUNK as u64 + FLOOR - 1, "{:?}", a.quota_stats());
    assert_eq!(slice_now().0, slice, "the run outlived its slice");
    // The host counts what it gave back before its round trip tells the
    // store: the record follows within that round trip.
    let (told, returned) = settled(|| (record(&redis, "floor", slice, "a")[11], returned as i64));
    assert_eq!(told, returned);
}

/// A task spread over shards pulled from several keys; which key a permit
/// came from is not kept, so it gives nothing back (and is charged what it
/// took, as before give-backs).
#[test]
fn a_task_spread_over_shards_gives_nothing_back() {
    const QUOTA: u64 = 4000;
    let redis = RedisServer::start();
    let scratch = Scratch::new("idle-shards");
    let table = Table::open(scratch.path("t"), &host_options(&redis.url(), "sharded")).unwrap();
    let task = table
        .task("sharded", &config(QUOTA, 1000).shards(3))
        .unwrap();
    let slice = slice_within(SLICE_MS - 2000);
    assert_eq!(admit(&task, 10), 10);
    let held = task.quota_stats().granted - 10;
    assert!(held >= 500, "{:?}", task.quota_stats());
    std::thread::sleep(2 * IDLE_AFTER + Duration::from_millis(50));
    assert_eq!(task.return_idle_quota(Duration::from_millis(1)), 0);
    assert_eq!(task.quota_stats().returned, 0, "{:?}", task.quota_stats());
    // Still held: the host spends it (down to its low water, a quarter
    // chunk) without another pull.
    let pulls = task.quota_stats().pulls;
    assert_eq!(admit(&task, held - 250), held - 250);
    assert_eq!(task.quota_stats().pulls, pulls);
    assert_eq!(slice_now().0, slice, "the run outlived its slice");
}

/// Redis restarts empty right after a give-back. The key created anew
/// deducts what the host kept (its claim less what it gave back), so the
/// two hosts together admit the slice's quota exactly: deducting the whole
/// claim would strand the give-back, deducting nothing would hand out what
/// the host spent twice.
#[test]
fn a_restart_after_a_give_back_deducts_what_the_host_kept() {
    const QUOTA: u64 = 4000;
    const CHUNK: u32 = 1000;
    let mut redis = RedisServer::start();
    let scratch = Scratch::new("idle-restart");
    let host = |id: &str| {
        let o = host_options(&redis.url(), id).probe(Duration::from_millis(100));
        let table = Table::open(scratch.path(id), &o).unwrap();
        table.task("restart", &config(QUOTA, CHUNK)).unwrap()
    };
    let (a, b) = (host("a"), host("b"));
    let slice = slice_within(30);
    assert!(matches!(a.pull_quota(CHUNK as u64), Ok(Ok(_))));
    let mut a_admitted = admit(&a, 10);
    let (returned, _) = await_give_back(&a, Duration::from_secs(1));
    assert_eq!(returned, CHUNK as u64 - 10);
    let (told, returned) = settled(|| (record(&redis, "restart", slice, "a")[11], returned as i64));
    assert_eq!(told, returned);
    redis.kill();
    redis.restart();
    // Both hosts ask until the new key is used up; a host that finds the
    // store gone falls back to its share meanwhile (the key deducts that
    // too), and probes every 100 ms.
    let mut b_admitted = 0;
    let began = monotonic();
    while monotonic() - began < Duration::from_millis(1500) {
        a_admitted += admit(&a, 50);
        b_admitted += admit(&b, 10 * QUOTA);
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(slice_now().0, slice, "the run outlived its slice");
    let (qa, qb) = (a.quota_stats(), b.quota_stats());
    assert_eq!(
        a_admitted + b_admitted,
        QUOTA,
        "A {a_admitted} + B {b_admitted}: {qa:?}, {qb:?}"
    );
    assert_eq!(left(&redis, "restart", slice), 0);
    assert_eq!(record(&redis, "restart", slice, "a")[0], a_admitted as i64);
}

/// A host whose demand comes in bursts learns them: once its keeper has
/// seen it quiet before and after a burst, the next burst like it pulls
/// the burst's need in one chunk, does not pull ahead, and leaves nothing
/// to give back (sized by its pace, that chunk was 2,000 and half went
/// back); a longer burst pulls again when the host runs dry, and every
/// request of it is admitted.
#[test]
fn a_bursty_host_pulls_its_burst_whole_and_gives_nothing_back() {
    const QUOTA: u64 = 8000;
    const BURST: u64 = 1000;
    // Chunks sized by the host (no `chunk`).
    let config = TaskConfig::new()
        .global_rate((QUOTA * 1000 / SLICE_MS) as f64)
        .slice_ms(SLICE_MS as u32)
        .global_burst(QUOTA as u32);
    let (_redis, _scratch, a, b) = two_hosts("spell", &config);
    let slice = slice_within(30);
    // Two hosts: the give-back floor is 500, under a burst.
    assert!(matches!(b.pull_quota(1), Ok(Ok(_))));
    let quiet = || std::thread::sleep(2 * IDLE_AFTER + Duration::from_millis(50));
    for _ in 0..2 {
        assert_eq!(admit(&a, BURST), BURST, "{:?}", a.quota_stats());
        quiet();
    }
    let before = a.quota_stats();
    assert_eq!(admit(&a, BURST), BURST, "{:?}", a.quota_stats());
    let during = a.quota_stats();
    quiet();
    let after = a.quota_stats();
    assert_eq!(during.pulls - before.pulls, 1, "{before:?} {during:?}");
    assert_eq!(during.granted - before.granted, BURST, "{during:?}");
    assert_eq!(after.returned, before.returned, "{after:?}");
    // Half as long again: the host runs dry, pulls, and admits it all.
    assert_eq!(
        admit(&a, BURST * 3 / 2),
        BURST * 3 / 2,
        "{:?}",
        a.quota_stats()
    );
    assert_eq!(a.quota_stats().pulls - after.pulls, 2);
    assert_eq!(slice_now().0, slice, "the run outlived its slice");
}
