//! Tables whose lanes come from a pool (`TableOptions::lanes`): what the
//! file costs, taking sets on first use, giving them back when a process
//! dies with every count kept, and deciding when the pool is empty.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use flowctrl::{ErrorKind, Limited, Outcome, Table, TableOptions, Task, TaskConfig};

const MIB: u64 = 1 << 20;

fn pooled(lanes: u32) -> TableOptions {
    TableOptions {
        capacity: 16,
        max_processes: 16,
        lanes,
        ..TableOptions::default()
    }
}

/// A child process on the table at `path` that runs `work` on its task
/// "api", says it is ready, and then waits to be killed (what it holds, it
/// holds until then: a raw permit is released only by a release).
fn child_on_api(path: &Path, lanes: u32, work: impl FnOnce(&Task)) -> libc::pid_t {
    let ready = Pipe::new();
    let child = fork(|| {
        let table = Table::open(path, &pooled(lanes)).unwrap();
        work(&table.task("api", &TaskConfig::new()).unwrap());
        ready.send(1);
        std::thread::sleep(Duration::from_secs(60));
        0
    });
    assert_eq!(ready.recv(), 1);
    child
}

/// `n` acquires and releases as success.
fn churn(task: &Task, n: u32) {
    for _ in 0..n {
        let mut p = task.acquire_raw(1).unwrap().unwrap();
        task.release_raw(&mut p, Outcome::Success).unwrap();
    }
}

#[test]
fn a_pooled_table_grows_with_the_pairs_in_use_and_the_default_does_not_change() {
    let scratch = Scratch::new("pool-size");
    // The default table: a set per pair, the layout 0.3 made (and the
    // lanes' own latency sketches after it).
    let default = Table::open(scratch.path("default"), &TableOptions::default()).unwrap();
    assert_eq!(default.lane_pool(), None);
    let dense_pair = 4 * 128 + 128 + 4 * 160;
    assert!(default.size_bytes() > 256 * 64 * dense_pair);
    assert!(default.size_bytes() < 22 * MIB, "{}", default.size_bytes());
    let big = TableOptions {
        capacity: 4096,
        max_processes: 128,
        balancers: 0,
        ..TableOptions::default()
    };
    let pairs = 4096 * 128;
    // 5 % of the pairs in use at once.
    let table = Table::open(
        scratch.path("pooled"),
        &TableOptions {
            lanes: pairs / 20,
            ..big.clone()
        },
    )
    .unwrap();
    eprintln!(
        "4,096 tasks × 128 processes: {:.1} MiB pooled at 5 % of the pairs, {:.1} MiB with a \
         set per pair",
        table.size_bytes() as f64 / MIB as f64,
        (pairs as u64 * dense_pair) as f64 / MIB as f64
    );
    assert!(table.size_bytes() <= 64 * MIB, "{}", table.size_bytes());
    assert_eq!(table.lane_pool(), Some((0, pairs / 20)));
}

#[test]
fn lanes_beyond_every_pair_are_refused() {
    let scratch = Scratch::new("pool-bad");
    let err = Table::open(scratch.path("t"), &pooled(16 * 16 + 1)).expect_err("refused");
    assert!(err.to_string().contains("lanes"), "{err}");
    assert!(!scratch.path("t").exists());
}

#[test]
fn a_set_is_taken_on_first_use_and_comes_back_with_its_counts_when_the_process_dies() {
    let scratch = Scratch::new("pool-fold");
    let path = scratch.path("t");
    let table = Table::open(&path, &pooled(4)).unwrap();
    let task = table
        .task("api", &TaskConfig::new().max_concurrency(8))
        .unwrap();
    assert_eq!(table.lane_pool(), Some((0, 4)), "registering takes no set");
    let child = child_on_api(&path, 4, |task| {
        churn(task, 10);
        // Dies holding three.
        for _ in 0..3 {
            task.acquire_raw(1).unwrap().unwrap();
        }
    });
    assert_eq!(table.lane_pool(), Some((1, 4)));
    let before = task.stats();
    assert_eq!((before.admitted, before.in_flight), (13, 3));
    kill(child, libc::SIGKILL);
    assert_eq!(wait(child), -libc::SIGKILL);
    table.reap();
    assert_eq!(
        table.lane_pool(),
        Some((0, 4)),
        "the dead process's set is free"
    );
    let after = task.stats();
    assert_eq!(after.admitted, 13, "counts survive the set going back");
    assert_eq!(after.released_success, 10);
    assert_eq!(after.reclaimed, 3);
    assert_eq!((after.in_flight, after.held), (0, 0));
    assert_eq!(after.unlaned, 0);
    // The set is taken again, by this process, for its own counting.
    let mut p = task.acquire_raw(1).unwrap().unwrap();
    assert_eq!(table.lane_pool(), Some((1, 4)));
    task.release_raw(&mut p, Outcome::Dropped).unwrap();
    let mine = task.stats();
    assert_eq!((mine.admitted, mine.released_dropped), (14, 1));
    let rows = task.stats_by_process();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].stats.admitted, 1,
        "this process's own share since it attached"
    );
    assert_eq!(task.check().unwrap().drift(), 0);
}

/// A set given back takes its round-trip buckets with it, on the lanes'
/// lines and in their own sketches alike: the next owner of the set counts
/// from zero.
#[test]
fn a_set_given_back_is_taken_again_with_an_empty_sketch() {
    let scratch = Scratch::new("pool-sketch");
    let path = scratch.path("t");
    let table = Table::open(&path, &pooled(1)).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    let rtt = |task: &Task, ms: u64, n: u32| {
        for _ in 0..n {
            let mut p = task.acquire_raw(1).unwrap().unwrap();
            task.release_raw_rtt(&mut p, Outcome::Success, Some(Duration::from_millis(ms)))
                .unwrap();
        }
    };
    let counted = || {
        flowctrl::View::open(&path)
            .unwrap()
            .task("api")
            .unwrap()
            .rtt
            .count()
    };
    // Buckets 2 and 11 of the lane's own sketch.
    let child = child_on_api(&path, 1, |task| {
        rtt(task, 2, 5);
        rtt(task, 40, 5);
    });
    assert_eq!(counted(), 10);
    kill(child, libc::SIGKILL);
    assert_eq!(wait(child), -libc::SIGKILL);
    table.reap();
    assert_eq!(table.lane_pool(), Some((0, 1)));
    assert_eq!(counted(), 0);
    rtt(&task, 2, 1);
    rtt(&task, 40, 1);
    assert_eq!(table.lane_pool(), Some((1, 1)));
    assert_eq!(counted(), 2);
}

#[test]
fn with_the_pool_empty_a_process_still_decides_and_says_so() {
    let scratch = Scratch::new("pool-empty");
    let path = scratch.path("t");
    let table = Table::open(&path, &pooled(1)).unwrap();
    let capped = table
        .task("capped", &TaskConfig::new().max_concurrency(4))
        .unwrap();
    let rated = table
        .task("rated", &TaskConfig::new().local_rate(1_000.0).burst(5))
        .unwrap();
    // The one set goes to this process's first use.
    let mut held = capped.acquire_raw(1).unwrap().unwrap();
    assert_eq!(table.lane_pool(), Some((1, 1)));
    // Another task needs another set: there is none.
    let mut admitted = 0;
    let mut limited = 0;
    for _ in 0..20 {
        match rated.acquire_raw(1).unwrap() {
            Ok(mut p) => {
                admitted += 1;
                rated.release_raw(&mut p, Outcome::Success).unwrap();
            }
            Err(Limited::Local) => limited += 1,
            Err(other) => panic!("refused as {other:?}"),
        }
    }
    assert!(
        (5..=7).contains(&admitted),
        "the burst of 5, not more: {admitted}"
    );
    let s = rated.stats();
    assert_eq!((s.admitted, s.limited_local), (admitted, limited));
    assert_eq!(s.released_success, admitted);
    assert_eq!(s.unlaned, 20);
    assert_eq!(s.unlaned_refused, 0);
    // A capped task's acquire in another process without a set is refused
    // as the cap refuses, and a wait does not queue it.
    let out = Pipe::new();
    let child = fork(|| {
        let table = Table::open(&path, &pooled(1)).unwrap();
        let capped = table.task("capped", &TaskConfig::new()).unwrap();
        let first = capped.acquire_raw(1).unwrap().err();
        let waited = capped
            .acquire_raw_wait(1, Some(Duration::from_millis(200)))
            .unwrap()
            .err();
        let ok = first == Some(Limited::Concurrency) && waited == Some(Limited::Concurrency);
        out.send(ok as u8);
        0
    });
    assert_eq!(out.recv(), 1, "refused as concurrency, at once");
    assert_eq!(wait(child), 0);
    let s = capped.stats();
    assert_eq!(s.unlaned_refused, 2);
    assert_eq!(s.limited_concurrency, 2);
    assert_eq!(s.in_flight, 1, "only this process's permit counts");
    capped.release_raw(&mut held, Outcome::Success).unwrap();
    assert_eq!(capped.check().unwrap().drift(), 0);
}

#[test]
fn threads_racing_for_a_first_use_share_one_set() {
    let scratch = Scratch::new("pool-race");
    let table = Table::open(scratch.path("t"), &pooled(8)).unwrap();
    let task = table
        .task("api", &TaskConfig::new().max_concurrency(64))
        .unwrap();
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..200 {
                    let mut p = task.acquire_raw(1).unwrap().unwrap();
                    task.release_raw(&mut p, Outcome::Success).unwrap();
                }
            });
        }
    });
    assert_eq!(table.lane_pool(), Some((1, 8)), "one pair, one set");
    let s = task.stats();
    assert_eq!((s.admitted, s.released_success, s.unlaned), (1600, 1600, 0));
    assert_eq!(task.check().unwrap().drift(), 0);
}

/// Short-lived processes take sets, count on them and go (half by exiting,
/// half SIGKILLed), so their sets are folded back over and over, while this
/// process reads the task's statistics without pause: no read may ever see a
/// count go back or run ahead of what was done, and at the end every count
/// is there once.
#[test]
fn counts_never_go_back_or_double_while_sets_are_folded() {
    const ROUNDS: u32 = 200;
    const OPS: u32 = 200;
    let scratch = Scratch::new("pool-churn");
    let path = scratch.path("t");
    let table = Table::open(&path, &pooled(3)).unwrap();
    let task = table
        .task("api", &TaskConfig::new().max_concurrency(1000))
        .unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let reads = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut last = task.stats();
            let mut reads = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let now = task.stats();
                assert!(
                    now.admitted >= last.admitted && now.released_success >= last.released_success,
                    "went back: {last:?} then {now:?}"
                );
                assert!(
                    now.admitted <= ROUNDS as u64 * OPS as u64,
                    "ran ahead: {now:?}"
                );
                last = now;
                reads += 1;
            }
            reads
        });
        for round in 0..ROUNDS {
            let ready = Pipe::new();
            let child = fork(|| {
                let table = Table::open(&path, &pooled(3)).unwrap();
                churn(&table.task("api", &TaskConfig::new()).unwrap(), OPS);
                ready.send(1);
                if round % 2 == 0 {
                    std::thread::sleep(Duration::from_secs(60));
                }
                0
            });
            assert_eq!(ready.recv(), 1);
            if round % 2 == 0 {
                kill(child, libc::SIGKILL);
            }
            wait(child);
            table.reap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        reader.join().unwrap()
    });
    let s = task.stats();
    eprintln!("{reads} reads while {ROUNDS} sets were folded back");
    assert_eq!(s.admitted, ROUNDS as u64 * OPS as u64);
    assert_eq!(s.released_success, ROUNDS as u64 * OPS as u64);
    assert_eq!((s.unlaned, s.in_flight, s.reclaimed), (0, 0, 0));
    assert_eq!(table.lane_pool(), Some((0, 3)));
}

/// Takes (or drops) the pool's lock byte on `file` as another process would.
fn pool_lock(file: &std::fs::File, take: bool) {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed flock is valid; fcntl on our own descriptor.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = if take { libc::F_WRLCK } else { libc::F_UNLCK } as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = (1 << 40) - 1;
    fl.l_len = 1;
    assert_eq!(
        unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) },
        0
    );
}

/// SIGKILLs `child` and reaps while holding the pool's lock as another
/// process would: the child's permits come back, its set cannot be folded.
/// The lock stays held until `pool_lock(&file, false)`.
fn kill_with_the_pool_locked(table: &Table, path: &Path, child: libc::pid_t) -> std::fs::File {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    pool_lock(&file, true);
    kill(child, libc::SIGKILL);
    assert_eq!(wait(child), -libc::SIGKILL);
    table.reap();
    file
}

/// While another process keeps the pool's lock (stopped in a fold, say), a
/// dead process's set cannot be folded: its slot stays marked, and the first
/// sweep after the lock is free gives the set back with its counts.
#[test]
fn a_set_whose_fold_must_wait_comes_back_at_a_later_sweep() {
    let scratch = Scratch::new("pool-wait");
    let path = scratch.path("t");
    let table = Table::open(&path, &pooled(2)).unwrap();
    let task = table
        .task("api", &TaskConfig::new().max_concurrency(4))
        .unwrap();
    let child = child_on_api(&path, 2, |task| {
        task.acquire_raw(2).unwrap().unwrap();
    });
    let other = kill_with_the_pool_locked(&table, &path, child);
    let s = task.stats();
    assert_eq!(
        (s.in_flight, s.reclaimed),
        (0, 2),
        "the permits are back at once"
    );
    assert_eq!(
        table.lane_pool(),
        Some((1, 2)),
        "the set waits for the lock"
    );
    assert_eq!(
        task.stats_by_process().len(),
        2,
        "its slot stays marked meanwhile"
    );
    pool_lock(&other, false);
    table.reap();
    assert_eq!(table.lane_pool(), Some((0, 2)));
    assert_eq!(task.stats_by_process().len(), 1);
    let s = task.stats();
    assert_eq!((s.admitted, s.reclaimed, s.in_flight), (2, 2, 0));
}

/// A folder killed at any point of a fold leaves it recorded; the next one
/// finishes it from the record, so every count lands once. Here the record
/// is written as a folder killed just after writing it — and, in a second
/// round, after storing half of the totals — would have left it.
#[test]
fn a_fold_cut_short_is_finished_once_by_the_next_folder() {
    use common::layout::*;
    for stored in [0, 4] {
        let scratch = Scratch::new("pool-fold-cut");
        let path = scratch.path("t");
        let table = Table::open(&path, &pooled(2)).unwrap();
        let task = table
            .task("api", &TaskConfig::new().max_concurrency(4))
            .unwrap();
        let child = child_on_api(&path, 2, |task| {
            churn(task, 5);
            task.acquire_raw(1).unwrap().unwrap();
        });
        let raw = RawTable::open(&path);
        let t = raw.find_task("api").unwrap();
        let (slot, _) = raw.slot_of(child).unwrap();
        let set = raw.pair_set(t, slot as usize).unwrap();
        // Drained, not folded: the lock is held elsewhere.
        let other = kill_with_the_pool_locked(&table, &path, child);
        // The set's totals, as the folder read them.
        let mut delta = [0u64; 9];
        for lane in 0..LANES {
            let at = raw.set_lane(set, lane);
            for (i, d) in delta.iter_mut().take(8).enumerate() {
                *d += raw.get(at + L_COUNTERS + 8 * i);
            }
            delta[8] += raw.get(at + L_RECLAIMED) & ((1 << 40) - 1);
        }
        assert_eq!(
            (delta[0], delta[4], delta[8]),
            (6, 5, 1),
            "admitted, success, reclaimed"
        );
        let (record, totals) = (raw.fold_record(), raw.lane_totals(t));
        for (i, d) in delta.iter().enumerate() {
            let before = raw.get(totals + 8 * i);
            raw.set(record + 16 + 8 * i, before);
            raw.set(record + 16 + 72 + 8 * i, *d);
            if i < stored {
                raw.set(totals + 8 * i, before + d);
            }
        }
        raw.set(record + 8, t as u64);
        raw.set(record, set as u64 + 1);
        pool_lock(&other, false);
        table.reap();
        assert_eq!(raw.get(record), 0, "the fold is done");
        assert_eq!(table.lane_pool(), Some((0, 2)));
        let s = task.stats();
        assert_eq!(
            (s.admitted, s.released_success, s.reclaimed, s.in_flight),
            (6, 5, 1, 0),
            "every count once (stored {stored} of the totals before the cut)"
        );
    }
}

/// A forked child of a process holding a set is its own attachment: its
/// first use takes a set of its own (never the parent's), and its death
/// gives that one back and leaves the parent's counting on.
#[test]
fn a_forked_child_takes_its_own_set_and_gives_it_back() {
    let scratch = Scratch::new("pool-fork");
    let table = Table::open(scratch.path("t"), &pooled(2)).unwrap();
    let task = table
        .task("api", &TaskConfig::new().max_concurrency(4))
        .unwrap();
    let mut mine = task.acquire_raw(1).unwrap().unwrap();
    assert_eq!(table.lane_pool(), Some((1, 2)));
    let out = Pipe::new();
    let child = fork(|| {
        // The inherited handle: a new attachment in this process.
        let p = task.acquire_raw(2).unwrap();
        let pool = table.lane_pool();
        let rows = task.stats_by_process().len();
        out.send((p.is_ok() && pool == Some((2, 2)) && rows == 2) as u8);
        let full = task.acquire_raw(2).unwrap().err();
        out.send((full == Some(Limited::Concurrency)) as u8);
        std::thread::sleep(Duration::from_secs(60));
        0
    });
    assert_eq!(out.recv(), 1, "the child took the second set");
    assert_eq!(out.recv(), 1, "and shares the cap");
    assert_eq!(task.stats().in_flight, 3);
    kill(child, libc::SIGKILL);
    wait(child);
    table.reap();
    assert_eq!(table.lane_pool(), Some((1, 2)), "the child's set is back");
    let s = task.stats();
    assert_eq!((s.in_flight, s.reclaimed, s.admitted), (1, 2, 3));
    task.release_raw(&mut mine, Outcome::Success).unwrap();
    assert_eq!(task.check().unwrap().drift(), 0);
}

/// The header says which layout a table has: a pooled table carries layout
/// version 4 (which 0.3, speaking 3 only, refuses) and its pool size at
/// byte 88; a table with a set per pair version 3 and 0 there. A header
/// whose two words disagree is refused at open, by a handle and a view
/// alike, with an error that says so: read with the other layout, every
/// lane and total would be looked for in the wrong place.
#[test]
fn the_header_names_the_pooled_layout_and_a_version_that_disagrees_is_refused() {
    use common::layout::{H_LANE_SETS, H_VERSION};
    let scratch = Scratch::new("pool-header");
    let dense = scratch.path("dense");
    let pool = scratch.path("pool");
    drop(Table::open(&dense, &pooled(0)).unwrap()); // lanes 0: a set per pair
    drop(Table::open(&pool, &pooled(4)).unwrap());
    let raw = RawTable::open(&pool);
    assert_eq!((raw.u32_at(H_VERSION), raw.u32_at(H_LANE_SETS)), (4, 4));
    let raw = RawTable::open(&dense);
    assert_eq!((raw.u32_at(H_VERSION), raw.u32_at(H_LANE_SETS)), (3, 0));
    let damaged = [
        ("pooled, its pool size zeroed", &pool, 4, 0),
        ("pooled, called version 3", &pool, 3, 4),
        ("a set per pair, called version 4", &dense, 4, 0),
        ("a set per pair, given a pool size", &dense, 3, 4),
    ];
    for (i, (what, from, version, lane_sets)) in damaged.into_iter().enumerate() {
        let path = scratch.path(&format!("damaged{i}"));
        std::fs::copy(from, &path).unwrap();
        let raw = RawTable::open(&path);
        raw.set_u32(H_VERSION, version);
        raw.set_u32(H_LANE_SETS, lane_sets);
        drop(raw);
        let errors = [
            Table::open(&path, &pooled(4)).err(),
            flowctrl::View::open(&path).err(),
        ];
        for err in errors {
            let err = err.unwrap_or_else(|| panic!("{what}: opened"));
            assert!(
                matches!(err.kind(), ErrorKind::Corrupt | ErrorKind::Incompatible),
                "{what}: {:?} {err}",
                err.kind()
            );
            let text = err.to_string();
            assert!(
                text.contains(&format!("layout version {version}")) && text.contains("lane sets"),
                "{what}: {text}"
            );
        }
    }
}

/// Fuzzer finding (tests/fuzz_table.rs, a pooled table): the waiting count
/// of a task's stats summed the queue lengths of the live attachments' sets
/// with `sum`, which panics on overflow in a debug build. The lengths are
/// words of the file; here a damaged pair map makes two live pairs name one
/// set, whose queue length is 2^63, so they sum past u64::MAX. The sum now
/// saturates.
#[test]
fn queue_lengths_of_a_damaged_table_do_not_overflow_the_stats() {
    use common::layout::S_QUEUE_LEN;
    let scratch = Scratch::new("pool-queue-len");
    let path = scratch.path("t");
    let first = Table::open(&path, &pooled(4)).unwrap();
    let second = Table::open(&path, &pooled(4)).unwrap();
    let task = first
        .task("api", &TaskConfig::new().max_concurrency(8))
        .unwrap();
    let _other = second.task("api", &TaskConfig::new()).unwrap();
    let mut p = task.acquire_raw(1).unwrap().unwrap();
    task.release_raw(&mut p, Outcome::Success).unwrap();
    let raw = RawTable::open(&path);
    let t = raw.find_task("api").unwrap();
    let slots: Vec<usize> = raw
        .live_attachments()
        .iter()
        .map(|(slot, _, _)| *slot as usize)
        .collect();
    assert_eq!(slots.len(), 2);
    let (with, without): (Vec<usize>, Vec<usize>) =
        slots.iter().partition(|&&a| raw.pair_set(t, a).is_some());
    assert_eq!((with.len(), without.len()), (1, 1), "one handle took a set");
    let set = raw.pair_set(t, with[0]).unwrap();
    raw.set_u32(raw.pair_map_entry(t, without[0]), set as u32 + 1);
    raw.set(raw.baseline(t, with[0]) + S_QUEUE_LEN, 1 << 63);
    assert_eq!(task.stats().waiting, u64::MAX);
    let view = flowctrl::View::open(&path).unwrap();
    assert_eq!(view.tasks().unwrap().len(), 1);
    // Undamaged again before the handles leave.
    raw.set_u32(raw.pair_map_entry(t, without[0]), 0);
    raw.set(raw.baseline(t, with[0]) + S_QUEUE_LEN, 0);
    assert_eq!(task.stats().waiting, 0);
}
