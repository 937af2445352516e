//! Limits per caller: keyed tasks through the Rust API, in one process and
//! across real processes (forked workers, some SIGKILLed while they hold
//! per-key permits).

mod common;

use std::time::{Duration, Instant};

use common::*;
use flowctrl::{
    KeyConfig, KeyDecision, KeyLimits, KeyOverflow, KeyRate, KeyRefused, Limited, Outcome,
    RawPermit, Table, TableOptions, Task, TaskConfig,
};

fn table(scratch: &Scratch) -> Table {
    Table::open(scratch.path("t"), &TableOptions::default()).unwrap()
}

fn keyed(table: &Table, name: &str, config: TaskConfig, keys: KeyConfig) -> Task {
    let task = table.task(name, &config).unwrap();
    task.set_keys(&keys).unwrap();
    task
}

fn admitted(task: &Task, key: &str) -> bool {
    matches!(
        task.acquire_key(key.as_bytes(), 1).unwrap(),
        KeyDecision::Admitted(_)
    )
}

fn refusal(task: &Task, key: &str) -> flowctrl::KeyRefusal {
    match task.acquire_key(key.as_bytes(), 1).unwrap() {
        KeyDecision::Admitted(_) => panic!("{key} admitted"),
        KeyDecision::Limited(r) => r,
    }
}

#[test]
fn each_key_has_its_own_rate_and_the_refusal_says_when_to_retry() {
    let scratch = Scratch::new("keyed-rate");
    let t = table(&scratch);
    let limits = KeyLimits::new().rate(KeyRate::per_second(5.0));
    let task = keyed(&t, "api", TaskConfig::new(), KeyConfig::new(limits));
    for key in ["alice", "bob"] {
        for i in 0..5 {
            assert!(admitted(&task, key), "{key} #{i}");
        }
    }
    let r = refusal(&task, "alice");
    assert_eq!(r.by, KeyRefused::Rate(0));
    let wait = r.retry_after.unwrap();
    assert!(
        wait > Duration::from_millis(150) && wait <= Duration::from_millis(200),
        "{wait:?}"
    );
    let s = task.key_state(b"alice").unwrap();
    assert_eq!((s.limit, s.remaining), (5, 0));
    assert!(s.reset_after > Duration::from_millis(900), "{s:?}");
    let fresh = task.key_state(b"carol").unwrap();
    assert_eq!((fresh.limit, fresh.remaining, fresh.present), (5, 5, false));
    std::thread::sleep(wait + Duration::from_millis(5));
    assert!(
        admitted(&task, "alice"),
        "admitted once the wait it was told is over"
    );
    assert!(!admitted(&task, "alice"));
    assert!(
        task.acquire_key(&vec![b'k'; flowctrl::MAX_KEY_LEN + 1], 1)
            .is_err(),
        "a key past the longest is an error"
    );
}

#[test]
fn a_key_capacity_out_of_range_is_an_invalid_argument_key_file_or_not() {
    let scratch = Scratch::new("keyed-capacity");
    let t = table(&scratch);
    let task = t.task("api", &TaskConfig::new()).unwrap();
    let keys = |capacity| KeyConfig::new(KeyLimits::new()).capacity(capacity);
    for file in [false, true] {
        if file {
            task.set_keys(&keys(16)).unwrap();
        }
        for capacity in [0, flowctrl::MAX_KEY_CAPACITY + 1, u32::MAX - 6, u32::MAX] {
            let e = task.set_keys(&keys(capacity)).unwrap_err();
            assert_eq!(
                e.kind(),
                flowctrl::ErrorKind::InvalidArgument,
                "capacity {capacity}, key file {file}: {e}"
            );
        }
    }
    // In range but not the file's: a mismatch.
    let e = task.set_keys(&keys(32)).unwrap_err();
    assert_eq!(e.kind(), flowctrl::ErrorKind::ConfigMismatch, "{e}");
}

#[test]
fn a_refused_request_spends_none_of_the_limits() {
    let scratch = Scratch::new("keyed-all-or-none");
    let t = table(&scratch);
    // 10/s, and 4 per 10 s: the second refuses the fifth request.
    let limits = KeyLimits::parse_rates("10/s;4/10s").unwrap();
    let task = keyed(&t, "two", TaskConfig::new(), KeyConfig::new(limits));
    for _ in 0..4 {
        assert!(admitted(&task, "k"));
    }
    assert_eq!(refusal(&task, "k").by, KeyRefused::Rate(1));
    // The 10/s rate was not spent by the refusals: another key's test.
    let task2 = keyed(
        &t,
        "task-first",
        TaskConfig::new().local_rate(1.0).burst(1),
        KeyConfig::new(KeyLimits::new().rate(KeyRate::per_second(2.0))),
    );
    assert!(admitted(&task2, "a"));
    // The task's own rate refuses now: the key's second permit is not spent.
    assert_eq!(
        refusal(&task2, "a").by,
        KeyRefused::Task(Limited::Local),
        "the task's own limit applies on top"
    );
    assert_eq!(task2.key_state(b"a").unwrap().remaining, 1);
}

#[test]
fn a_key_cap_holds_permits_in_flight_and_releases_give_them_back() {
    let scratch = Scratch::new("keyed-cap");
    let t = table(&scratch);
    let task = keyed(
        &t,
        "cap",
        TaskConfig::new(),
        KeyConfig::new(KeyLimits::new().max_concurrency(2)),
    );
    let a = task.acquire_key(b"tenant", 1).unwrap().permit().unwrap();
    let b = task.acquire_key(b"tenant", 1).unwrap().permit().unwrap();
    assert_eq!(refusal(&task, "tenant").by, KeyRefused::Concurrency);
    assert!(admitted(&task, "other"));
    assert_eq!(task.key_state(b"tenant").unwrap().in_flight, 2);
    a.release(Outcome::Success).unwrap();
    let c = task.acquire_key(b"tenant", 1).unwrap().permit().unwrap();
    drop((b, c));
    assert_eq!(task.key_state(b"tenant").unwrap().in_flight, 0);
    assert!(task.key_drift().unwrap().is_empty());
    // A raw permit released twice is refused the second time.
    let mut raw: RawPermit = task.acquire_key_raw(b"tenant", 1).unwrap().unwrap();
    let copy = raw;
    task.release_raw(&mut raw, Outcome::Success).unwrap();
    let mut copy = copy;
    assert!(task.release_raw(&mut copy, Outcome::Success).is_err());
    assert_eq!(task.key_state(b"tenant").unwrap().in_flight, 0);
}

#[test]
fn overrides_give_a_key_its_own_limits_live() {
    let scratch = Scratch::new("keyed-overrides");
    let t = table(&scratch);
    let task = keyed(
        &t,
        "ov",
        TaskConfig::new(),
        KeyConfig::new(KeyLimits::new().rate(KeyRate::per_second(1.0))),
    );
    let premium = KeyLimits::new().rate(KeyRate::per_second(100.0));
    task.set_key_override(b"vip", Some(&premium)).unwrap();
    task.set_key_override(b"internal", Some(&KeyLimits::unlimited()))
        .unwrap();
    task.set_key_override(b"abuser", Some(&KeyLimits::blocked()))
        .unwrap();
    assert_eq!((0..100).filter(|_| admitted(&task, "vip")).count(), 100);
    assert_eq!(
        (0..1000).filter(|_| admitted(&task, "internal")).count(),
        1000
    );
    let r = refusal(&task, "abuser");
    assert_eq!((r.by, r.retry_after), (KeyRefused::Blocked, None));
    assert_eq!((0..5).filter(|_| admitted(&task, "plain")).count(), 1);
    assert!(task.key_limits(b"vip").unwrap().1);
    // Taken away: the default applies to its next request.
    task.set_key_override(b"abuser", None).unwrap();
    assert!(admitted(&task, "abuser"));
    assert!(!task.key_limits(b"abuser").unwrap().1);
    // Another process's handle sees the same overrides.
    let other = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    let seen = other.task("ov", &TaskConfig::new()).unwrap();
    assert!(seen.key_limits(b"vip").unwrap().1);
}

#[test]
fn shadow_mode_counts_what_it_would_refuse_and_admits() {
    let scratch = Scratch::new("keyed-shadow");
    let t = table(&scratch);
    let limits = KeyLimits::new()
        .rate(KeyRate::per_second(2.0))
        .max_concurrency(1)
        .shadow(true);
    let task = keyed(&t, "sh", TaskConfig::new(), KeyConfig::new(limits));
    let held: Vec<_> = (0..5)
        .map(|_| task.acquire_key(b"k", 1).unwrap().permit().unwrap())
        .collect();
    let stats = task.key_stats().unwrap().unwrap();
    // Rate: 3 of 5 past the burst of 2; cap: 4 of 5 past 1.
    assert_eq!(stats.shadow_refused, 7, "{stats:?}");
    drop(held);
    assert_eq!(task.key_state(b"k").unwrap().in_flight, 0);
}

#[test]
fn a_full_key_file_shares_one_state_and_never_refuses_every_new_caller() {
    let scratch = Scratch::new("keyed-overflow");
    let t = table(&scratch);
    // 16 keys (two buckets: every key's two buckets are these two).
    let limits = KeyLimits::new().rate(KeyRate::new(1.0, Duration::from_secs(60)));
    let task = keyed(
        &t,
        "small",
        TaskConfig::new(),
        KeyConfig::new(limits).capacity(16),
    );
    for i in 0..16 {
        assert!(admitted(&task, &format!("live{i}")));
    }
    let stats = task.key_stats().unwrap().unwrap();
    assert_eq!((stats.keys, stats.live, stats.inserted), (16, 16, 16));
    // Every entry holds a limited key: the next keys share the overflow
    // state (one key's limits): the first is admitted, later ones share it.
    assert!(admitted(&task, "new0"));
    assert_eq!(refusal(&task, "new1").by, KeyRefused::Rate(0));
    // A live key is never forgotten: still limited.
    assert_eq!(refusal(&task, "live3").by, KeyRefused::Rate(0));
    assert!(task.key_stats().unwrap().unwrap().overflowed >= 2);
    // With `Admit`, overflowing keys pass the key limits instead.
    let admit = keyed(
        &t,
        "admit",
        TaskConfig::new(),
        KeyConfig::new(limits)
            .capacity(16)
            .overflow(KeyOverflow::Admit),
    );
    for i in 0..16 {
        assert!(admitted(&admit, &format!("live{i}")));
    }
    assert!((0..10).all(|i| admitted(&admit, &format!("new{i}"))));
}

#[test]
fn keys_on_the_overflow_state_share_one_global_slice() {
    use flowctrl::KeyGlobal;
    let scratch = Scratch::new("keyed-overflow-global");
    let t = table(&scratch);
    // 16 entries, each held by a live key (a permit out); a global rate of
    // 5 a slice on the embedded store.
    let global = KeyGlobal::new(KeyRate::per_second(5.0))
        .slice(Duration::from_secs(1))
        .local(1);
    let limits = KeyLimits::new().max_concurrency(100).global(global);
    let task = keyed(
        &t,
        "full",
        TaskConfig::new(),
        KeyConfig::new(limits).capacity(16),
    );
    early_in_a_slice(1000);
    let held: Vec<_> = (0..16)
        .map(
            |i| match task.acquire_key(format!("live{i}").as_bytes(), 1).unwrap() {
                KeyDecision::Admitted(p) => p,
                KeyDecision::Limited(r) => panic!("live{i}: {r:?}"),
            },
        )
        .collect();
    // Callers past the file share the overflow state as one key: its
    // slice, not one each.
    let overflowed = (0..20)
        .filter(|i| admitted(&task, &format!("new{i}")))
        .count();
    assert!(task.key_stats().unwrap().unwrap().overflowed >= 20);
    assert!(overflowed <= 5, "{overflowed} admitted of a slice of 5");
    drop(held);
}

#[test]
fn idle_keys_give_their_entries_to_new_keys() {
    let scratch = Scratch::new("keyed-reuse");
    let t = table(&scratch);
    let limits = KeyLimits::new().rate(KeyRate::per_second(1000.0).burst(1));
    let task = keyed(
        &t,
        "reuse",
        TaskConfig::new(),
        KeyConfig::new(limits).capacity(16),
    );
    for i in 0..1000 {
        assert!(admitted(&task, &format!("k{i}")), "k{i}");
        // 1 ms a key: each is whole again before the next needs its entry.
        std::thread::sleep(Duration::from_micros(1100));
    }
    let s = task.key_stats().unwrap().unwrap();
    assert_eq!(s.overflowed, 0, "{s:?}");
    assert!(s.reused >= 1000 - 16, "{s:?}");
}

/// Eight threads ask for one key at the same instant, round after round,
/// on a key file of 16 entries that 40 keys share: each round's key is
/// new or idle, so its entry is made or reused under the racing threads.
/// Its burst is one, so a round admits exactly one of the eight (more
/// only if the round outlasted the key's 10 ms interval): a key moved in
/// twice, or a spend landing on an entry reused under it, would admit two.
#[test]
fn threads_racing_to_place_one_key_admit_it_exactly_once() {
    let scratch = Scratch::new("keyed-threads");
    let t = table(&scratch);
    let period = Duration::from_millis(10);
    let limits = KeyLimits::new().rate(KeyRate::per_second(100.0).burst(1));
    let task = keyed(
        &t,
        "race",
        TaskConfig::new(),
        KeyConfig::new(limits).capacity(16),
    );
    const THREADS: usize = 8;
    const ROUNDS: usize = 800;
    let barrier = std::sync::Barrier::new(THREADS);
    let runs: Vec<Vec<(bool, Duration, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (task, barrier) = (&task, &barrier);
                s.spawn(move || {
                    (0..ROUNDS)
                        .map(|r| {
                            let key = format!("key{}", r % 40);
                            barrier.wait();
                            let began = Instant::now();
                            let got = admitted(task, &key);
                            barrier.wait();
                            let took = began.elapsed();
                            let overflowed = task.key_stats().unwrap().unwrap().overflowed;
                            // Ten keys live at most (idle 10 ms after their
                            // request), back 40 rounds later: idle by then.
                            std::thread::sleep(Duration::from_millis(1));
                            (got, took, overflowed)
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let s = task.key_stats().unwrap().unwrap();
    let mut overflow_rounds = 0;
    for r in 0..ROUNDS {
        // A mover preempted past the wait sends its key's racers to the
        // shared overflow state: such a round proves nothing of entries.
        let before = if r == 0 { 0 } else { runs[0][r - 1].2 };
        if runs.iter().map(|t| t[r].2).max().unwrap() > before {
            overflow_rounds += 1;
            continue;
        }
        let n = runs.iter().filter(|t| t[r].0).count() as u128;
        let took = runs.iter().map(|t| t[r].1).max().unwrap();
        let most = 1 + took.as_micros() / period.as_micros();
        assert!(
            (1..=most).contains(&n),
            "round {r} admitted {n} of key{} in {took:?}: {s:?}",
            r % 40
        );
    }
    assert!(
        overflow_rounds < ROUNDS / 50,
        "{overflow_rounds} rounds overflowed: {s:?}"
    );
    assert!(
        s.reused > 500,
        "entries were reused under the threads: {s:?}"
    );
}

/// A decision that found its key just before the key's entry was given to
/// a new key must not spend the new key's state: the mover sets each time
/// to a value no decision read before (`map`), and a decision checks its
/// key's identity after spending. Threads decide a few keys that are idle
/// between their requests while other threads flood new keys into the
/// same two buckets, taking those idle entries: a new key's first request
/// must pass its burst of one (34 of 16,000 were refused with times reset
/// to 0). A decision that reads the key's time after the move and spends
/// it before checking the identity shows the new key a spend for a few
/// instructions, until it gives it back: that may refuse a request, never
/// admit one (2 of 16,000 in one suite run): at most 0.1 %.
#[test]
fn a_spend_on_an_entry_reused_under_it_goes_back() {
    let scratch = Scratch::new("keyed-stale");
    let t = table(&scratch);
    let limits = KeyLimits::new().rate(KeyRate::per_second(2000.0).burst(1));
    let task = keyed(
        &t,
        "stale",
        TaskConfig::new(),
        KeyConfig::new(limits)
            .capacity(16)
            .overflow(KeyOverflow::Admit),
    );
    let stop = std::sync::atomic::AtomicBool::new(false);
    let refused_new = std::thread::scope(|s| {
        for th in 0..2u64 {
            let (task, stop) = (&task, &stop);
            s.spawn(move || {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // Each key asked every 1.2 ms, idle 0.5 ms after.
                    let _ = task.acquire_key(format!("old{}", th * 2 + i % 2).as_bytes(), 1);
                    i += 1;
                    std::thread::sleep(Duration::from_micros(600));
                }
            });
        }
        let flooders: Vec<_> = (0..2u64)
            .map(|th| {
                let task = &task;
                s.spawn(move || {
                    let mut refused = Vec::new();
                    for i in 0..8_000u64 {
                        let key = format!("new{th}-{i}");
                        if let KeyDecision::Limited(r) =
                            task.acquire_key(key.as_bytes(), 1).unwrap()
                        {
                            refused.push((key, r));
                        }
                        // A few new keys live at once: their entries are
                        // taken from idle keys, not the overflow state.
                        let paced = Instant::now();
                        while paced.elapsed() < Duration::from_micros(150) {
                            std::hint::spin_loop();
                        }
                    }
                    refused
                })
            })
            .collect();
        let refused: Vec<_> = flooders
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        refused
    });
    let s = task.key_stats().unwrap().unwrap();
    assert!(s.reused > 12_000, "{s:?}");
    assert!(refused_new.len() <= 16, "{refused_new:?}: {s:?}");
}

/// Workers (real processes) hold per-key permits and are SIGKILLed at
/// random moments: after the reaper, every key's count is what the live
/// hold (none), and nothing drifted.
#[test]
fn per_key_permits_come_back_exactly_when_their_process_is_killed() {
    let scratch = Scratch::new("keyed-storm");
    let path = scratch.path("t");
    let opts = TableOptions {
        max_processes: 16,
        ..TableOptions::default()
    };
    let t = Table::open(&path, &opts).unwrap();
    let limits = KeyLimits::new().max_concurrency(3);
    let task = keyed(
        &t,
        "storm",
        TaskConfig::new().max_concurrency(50),
        KeyConfig::new(limits).capacity(64),
    );
    let kills = env_number("FLOWCTRL_KEYED_STORM_KILLS", 60);
    let mut rng = Rng::new(seed_from_env("FLOWCTRL_KEYED_STORM_SEED"));
    let mut live = KillOnDrop::default();
    for _ in 0..4 {
        live.add(spawn_worker(&path, &opts, rng.next_u64()));
    }
    for _ in 0..kills {
        std::thread::sleep(Duration::from_micros(2_000 + rng.below(8_000)));
        let victim = live.0[rng.below(live.0.len() as u64) as usize];
        kill(victim, libc::SIGKILL);
        wait(victim);
        live.forget(victim);
        live.add(spawn_worker(&path, &opts, rng.next_u64()));
        // At no moment does any key pass its cap.
        for k in 0..20 {
            let s = task.key_state(format!("k{k}").as_bytes()).unwrap();
            assert!(s.in_flight <= 3, "k{k}: {s:?}");
        }
    }
    for pid in live.0.clone() {
        kill(pid, libc::SIGKILL);
        wait(pid);
        live.forget(pid);
    }
    t.reap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let held: u32 = (0..20)
            .map(|k| {
                task.key_state(format!("k{k}").as_bytes())
                    .unwrap()
                    .in_flight
            })
            .sum();
        if held == 0 || Instant::now() > deadline {
            assert_eq!(held, 0, "per-key permits of dead processes came back");
            break;
        }
        t.reap();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(task.key_drift().unwrap(), vec![], "no drift");
    assert_eq!(task.stats().in_flight, 0, "the task's own permits too");
}

fn spawn_worker(path: &std::path::Path, opts: &TableOptions, seed: u64) -> libc::pid_t {
    let (path, opts) = (path.to_path_buf(), opts.clone());
    fork_guarded(move || {
        let t = Table::open(&path, &opts).unwrap();
        let task = t
            .task("storm", &TaskConfig::new().max_concurrency(50))
            .unwrap();
        let mut rng = Rng::new(seed);
        let mut held = Vec::new();
        loop {
            let k = rng.below(20);
            if let Ok(KeyDecision::Admitted(p)) = task.acquire_key(format!("k{k}").as_bytes(), 1) {
                held.push(p);
            }
            if (held.len() > 4 || rng.one_in(3)) && !held.is_empty() {
                let i = rng.below(held.len() as u64) as usize;
                held.swap_remove(i).release(Outcome::Success).unwrap();
            }
        }
    })
}

/// Shadow mode for a task's own limits: what they would refuse is counted
/// (by its limit, and as shadow refused) and admitted; a keyed task's own
/// limits too. Set by the config file and by `flowctrl set` as well (tests
/// there); off again, the limits refuse.
#[test]
fn a_tasks_shadow_mode_counts_its_refusals_and_admits() {
    let scratch = Scratch::new("task-shadow");
    let t = table(&scratch);
    let task = t
        .task(
            "rolled-out",
            &TaskConfig::new().local_rate(1.0).burst(2).shadow(true),
        )
        .unwrap();
    let permits: Vec<_> = (0..10)
        .map(|_| {
            task.acquire(1)
                .unwrap()
                .permit()
                .expect("admitted in shadow mode")
        })
        .collect();
    drop(permits);
    let s = task.stats();
    assert_eq!((s.admitted, s.limited_local, s.shadow_refused), (10, 8, 8));
    assert_eq!(s.in_flight, 0);
    task.set_keys(&KeyConfig::new(
        KeyLimits::new().rate(KeyRate::per_second(1000.0)),
    ))
    .unwrap();
    assert!(
        admitted(&task, "k"),
        "the task's refusal of a keyed request is shadowed too"
    );
    assert_eq!(task.stats().shadow_refused, 9);
    task.update(&TaskConfig::new().shadow(false)).unwrap();
    assert!(
        task.acquire(1).unwrap().permit().is_none(),
        "refused once shadow is off"
    );
}

/// Sleeps, if needed, until a slice of `slice_ms` on the wall clock (the
/// embedded store's) has most of it left.
fn early_in_a_slice(slice_ms: u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let into = now % slice_ms;
    if into > slice_ms / 2 {
        std::thread::sleep(Duration::from_millis(slice_ms - into + 5));
    }
}

#[test]
fn a_keys_global_rate_is_exact_per_slice_on_a_table_without_a_store() {
    use flowctrl::{Fallback, KeyGlobal};
    let scratch = Scratch::new("keyed-global");
    let table = table(&scratch);
    // 5 a second, in slices of 1 s, 1 a slice on the host's own.
    let global = KeyGlobal::new(KeyRate::per_second(5.0))
        .slice(Duration::from_secs(1))
        .local(1);
    let task = keyed(
        &table,
        "api",
        TaskConfig::new(),
        KeyConfig::new(KeyLimits::parse_rates("1000/s").unwrap().global(global)),
    );
    // The embedded store: the host is the whole fleet, its slice exact.
    early_in_a_slice(1000);
    assert_eq!((0..5).filter(|_| admitted(&task, "alice")).count(), 5);
    let r = refusal(&task, "alice");
    assert_eq!(r.by, KeyRefused::Global);
    assert!(
        r.retry_after
            .is_some_and(|d| d > Duration::ZERO && d <= Duration::from_secs(1)),
        "{r:?}"
    );
    assert!(admitted(&task, "bob"), "each key has its own slice");
    // More at once than a slice holds could never be admitted: an error,
    // as past a burst, and nothing taken.
    let Err(err) = task.acquire_key(b"carol", 6) else {
        panic!("6 at once of a slice of 5 was decided");
    };
    assert_eq!(err.kind(), flowctrl::ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("global rate"), "{err}");
    assert_eq!((0..5).filter(|_| admitted(&task, "carol")).count(), 5);
    // Other writes keep the default's global rate and an override's.
    task.set_key_override(b"vip", Some(&KeyLimits::parse_rates("100/s").unwrap()))
        .unwrap();
    let vip = KeyGlobal::new(KeyRate::new(60.0, Duration::from_secs(60)))
        .slice(Duration::from_secs(1))
        .fallback(Fallback::Deny);
    task.set_key_global(Some(b"vip"), Some(&vip)).unwrap();
    task.set_key_override(b"other", Some(&KeyLimits::unlimited()))
        .unwrap();
    task.set_key_override(b"other", None).unwrap();
    let config = task.key_config().unwrap().unwrap();
    let kept = config.limits.global.expect("the default's kept");
    assert_eq!(
        (kept.permits(), kept.slice_in_force(), kept.local),
        (5, Duration::from_secs(1), 1)
    );
    let (limits, overridden) = task.key_limits(b"vip").unwrap();
    assert!(overridden);
    assert_eq!(limits.rates().count(), 1, "the override's rate kept");
    let got = limits.global.unwrap();
    assert_eq!((got.permits(), got.fallback), (1, Fallback::Deny));
    assert_eq!(got.slice_in_force(), Duration::from_secs(1));
    // The default's global rate changed alone, then taken away.
    let ten = KeyGlobal::new(KeyRate::per_second(10.0)).local(3);
    task.set_key_global(None, Some(&ten)).unwrap();
    let config = task.key_config().unwrap().unwrap();
    assert_eq!(config.limits.global, Some(ten));
    assert_eq!(config.limits.rates().count(), 1, "the rates kept");
    task.set_key_global(None, None).unwrap();
    assert_eq!(task.key_config().unwrap().unwrap().limits.global, None);
    // Refused: a key without an override, a blocked one, bad values.
    let err = task
        .set_key_global(Some(b"nobody"), Some(&ten))
        .unwrap_err();
    assert!(err.to_string().contains("no override"), "{err}");
    task.set_key_override(b"bad", Some(&KeyLimits::blocked()))
        .unwrap();
    assert!(task.set_key_global(Some(b"bad"), Some(&ten)).is_err());
    for bad in [
        ten.local(32),
        ten.fallback(Fallback::Rate(5.0)),
        ten.slice(Duration::from_millis(1)),
    ] {
        assert!(task.set_key_global(None, Some(&bad)).is_err(), "{bad:?}");
    }
    assert_eq!(task.key_config().unwrap().unwrap().limits.global, None);
}

/// Setting every key limit but the global rate keeps the global rate in
/// force, read under the key file's lock: a change of it racing the write
/// is never lost (the faces' "keep the global rate" calls).
#[test]
fn limits_set_around_the_global_rate_never_lose_a_change_of_it() {
    let scratch = Scratch::new("keyed-keep-global");
    let table = table(&scratch);
    let per = |n: f64| flowctrl::KeyGlobal::new(KeyRate::per_second(n));
    let task = keyed(
        &table,
        "api",
        TaskConfig::new(),
        KeyConfig::new(KeyLimits::new()),
    );
    task.set_key_override(b"vip", Some(&KeyLimits::new().global(per(7.0))))
        .unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..300 {
                let rates = KeyLimits::parse_rates(&format!("{}/s", 100 + i)).unwrap();
                task.set_keys_keeping_global(&KeyConfig::new(rates))
                    .unwrap();
                task.set_key_override_keeping_global(b"vip", Some(&rates))
                    .unwrap();
            }
        });
        for i in 1..=300 {
            task.set_key_global(None, Some(&per(i as f64))).unwrap();
        }
    });
    let rate = |key: &[u8]| {
        task.key_limits(key)
            .unwrap()
            .0
            .global
            .map(|g| g.rate.rate())
    };
    assert_eq!(rate(b"any"), Some(300.0), "the last global rate set stays");
    assert_eq!(rate(b"vip"), Some(7.0), "the override's own stays");
    assert_eq!(task.key_limits(b"any").unwrap().0.rates().count(), 1);
    // A new override has no global rate; one made unlimited has none.
    task.set_key_override_keeping_global(b"new", Some(&KeyLimits::new()))
        .unwrap();
    assert_eq!(rate(b"new"), None);
    task.set_key_override_keeping_global(b"vip", Some(&KeyLimits::unlimited()))
        .unwrap();
    assert_eq!(rate(b"vip"), None);
}
