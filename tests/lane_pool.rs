//! Tables whose lanes come from a pool (`TableOptions::lanes`): what the
//! file costs, taking sets on first use, giving them back when a process
//! dies with every count kept, and deciding when the pool is empty.

mod common;

use std::time::Duration;

use common::*;
use flowctrl::{ErrorKind, Limited, Outcome, Table, TableOptions, TaskConfig};

const MIB: u64 = 1 << 20;

fn pooled(lanes: u32) -> TableOptions {
    TableOptions {
        capacity: 16,
        max_processes: 16,
        lanes,
        ..TableOptions::default()
    }
}

#[test]
fn a_pooled_table_grows_with_the_pairs_in_use_and_the_default_does_not_change() {
    let scratch = Scratch::new("pool-size");
    // The default table: a set per pair, the size (and layout) 0.3 made.
    let default = Table::open(scratch.path("default"), &TableOptions::default()).unwrap();
    assert_eq!(default.lane_pool(), None);
    let dense_pair = 4 * 128 + 128;
    assert!(default.size_bytes() > 256 * 64 * dense_pair);
    assert!(default.size_bytes() < 12 * MIB, "{}", default.size_bytes());
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
    let ready = Pipe::new();
    let child = fork(|| {
        let table = Table::open(&path, &pooled(4)).unwrap();
        let task = table.task("api", &TaskConfig::new()).unwrap();
        for _ in 0..10 {
            let mut p = task.acquire_raw(1).unwrap().unwrap();
            task.release_raw(&mut p, Outcome::Success).unwrap();
        }
        // Dies holding three.
        let held: Vec<_> = (0..3)
            .map(|_| task.acquire_raw(1).unwrap().unwrap())
            .collect();
        std::mem::forget(held);
        ready.send(1);
        std::thread::sleep(Duration::from_secs(60));
        0
    });
    assert_eq!(ready.recv(), 1);
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
    assert_eq!(view.tasks().len(), 1);
    // Undamaged again before the handles leave.
    raw.set_u32(raw.pair_map_entry(t, without[0]), 0);
    raw.set(raw.baseline(t, with[0]) + S_QUEUE_LEN, 0);
    assert_eq!(task.stats().waiting, 0);
}
