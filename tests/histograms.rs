//! The latency histograms: every task's releases fill the round-trip
//! sketch (a task without a global rate too, and `ignored` never), the
//! acquires that waited in a task's queue are counted when they leave it,
//! and `flowctrl_metrics` exports both as Prometheus histograms: cumulative
//! `_bucket` series whose `+Inf` is `_count`, and `_sum`.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::{Options, Scratch, options};
use flowctrl::{Decision, Limited, Outcome, Table, TableOptions, TaskConfig, View};

/// The `_bucket`, `_sum` and `_count` samples of `family` for `task`: the
/// buckets by their bound (`+Inf` as infinity), in the exposition's order.
fn exported(text: &str, family: &str, task: &str) -> (Vec<(f64, u64)>, f64, u64) {
    let label = format!("task=\"{task}\"");
    let (mut buckets, mut sum, mut count) = (Vec::new(), None, None);
    for line in text.lines().filter(|l| l.contains(&label)) {
        let (series, value) = line.rsplit_once(' ').unwrap();
        if let Some(rest) = series.strip_prefix(&format!("{family}_bucket{{")) {
            let le = rest
                .split("le=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            buckets.push((le, value.parse().unwrap()));
        } else if series.starts_with(&format!("{family}_sum{{")) {
            sum = Some(value.parse().unwrap());
        } else if series.starts_with(&format!("{family}_count{{")) {
            count = Some(value.parse().unwrap());
        }
    }
    (buckets, sum.expect("a _sum"), count.expect("a _count"))
}

/// Cumulative buckets, ending in `+Inf` equal to `_count`.
fn assert_cumulative(buckets: &[(f64, u64)], count: u64) {
    assert!(buckets.len() > 2, "{buckets:?}");
    for pair in buckets.windows(2) {
        assert!(
            pair[0].0 < pair[1].0 && pair[0].1 <= pair[1].1,
            "{buckets:?}"
        );
    }
    assert_eq!(*buckets.last().unwrap(), (f64::INFINITY, count));
}

#[test]
fn every_release_fills_its_bucket_and_the_exposition_adds_them_up() {
    let scratch = Scratch::new("histograms-rtt");
    let path = scratch.path("table");
    let table = Table::open(&path, &TableOptions::default()).unwrap();
    // No global rate: it never pulls, and its releases are counted all the same.
    let task = table.task("plain", &TaskConfig::new()).unwrap();
    let ms = Duration::from_millis;
    let rtts = [
        (Duration::from_micros(500), 3),
        (ms(3), 2),
        (ms(100), 1),
        (Duration::from_secs(10), 1),
    ];
    for (rtt, n) in rtts {
        for _ in 0..n {
            let permit = task.acquire(1).unwrap().permit().unwrap();
            permit.release_rtt(Outcome::Success, rtt).unwrap();
        }
    }
    let permit = task.acquire(1).unwrap().permit().unwrap();
    permit.release_rtt(Outcome::Dropped, ms(40)).unwrap();
    let permit = task.acquire(1).unwrap().permit().unwrap();
    permit.release_rtt(Outcome::Ignored, ms(40)).unwrap();
    let samples: Vec<f64> = rtts
        .iter()
        .flat_map(|(rtt, n)| std::iter::repeat_n(rtt.as_secs_f64(), *n))
        .chain([0.040])
        .collect();

    let view = View::open(&path).unwrap();
    let snapshot = view.task("plain").unwrap();
    assert_eq!(snapshot.rtt.count(), 8, "{:?}", snapshot.rtt);
    assert_eq!(snapshot.rtt.buckets.len(), 20);
    assert_eq!(snapshot.stats.rtt_samples, 8);
    assert_eq!(snapshot.rtt.sum_ns, snapshot.stats.rtt_sum_ns);

    let text = flowctrl::metrics::render(&view).unwrap();
    eprintln!("{text}");
    assert!(text.contains("# TYPE flowctrl_permit_rtt_seconds histogram\n"));
    let (buckets, sum, count) = exported(&text, "flowctrl_permit_rtt_seconds", "plain");
    assert_eq!(count, 8);
    assert_cumulative(&buckets, count);
    // Each bucket counts the samples below its bound: exact, not estimated.
    for (le, n) in &buckets {
        let below = samples.iter().filter(|s| **s < *le).count() as u64;
        assert_eq!(*n, below, "le {le}: {buckets:?}");
    }
    let want: f64 = samples.iter().sum();
    assert!((sum - want).abs() < 1e-6, "{sum} {want}");
    // The mean's counter stays, beside the histogram.
    assert!(text.contains("flowctrl_permit_rtt_samples_total{task=\"plain\"} 8\n"));
}

#[test]
fn a_wait_is_counted_when_it_ends_with_a_permit_or_at_its_deadline() {
    let scratch = Scratch::new("histograms-wait");
    let path = scratch.path("table");
    let table = Table::open(&path, &TableOptions::default()).unwrap();
    let task = table
        .task("capped", &TaskConfig::new().max_concurrency(1))
        .unwrap();
    let held = task.acquire_owned(1).unwrap().unwrap();
    // Refused without waiting: not a wait.
    assert!(matches!(
        task.acquire(1).unwrap(),
        Decision::Limited(Limited::Concurrency)
    ));
    // Waits its whole timeout.
    let timeout = Duration::from_millis(40);
    assert!(matches!(
        task.acquire_wait(1, Some(timeout)).unwrap(),
        Decision::Limited(Limited::Concurrency)
    ));
    // Waits until another thread releases, 60 ms on.
    let admitted = std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(60));
            held.release(Outcome::Success).unwrap();
        });
        task.acquire_owned_wait(1, Some(Duration::from_secs(20)))
            .unwrap()
            .unwrap()
    });
    admitted.release(Outcome::Success).unwrap();

    let view = View::open(&path).unwrap();
    let waited = view.task("capped").unwrap().waited;
    assert_eq!(waited.count(), 2, "{waited:?}");
    let sum = waited.sum_ns as f64 / 1e9;
    assert!((0.099..20.0).contains(&sum), "{sum}");
    // Neither wait was shorter than 40 ms: nothing below the octave of 40.
    let below: u64 = waited
        .buckets
        .iter()
        .filter(|(le, _)| *le <= 0.040)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(below, 0, "{waited:?}");

    let text = flowctrl::metrics::render(&view).unwrap();
    assert!(text.contains("# TYPE flowctrl_permit_wait_seconds histogram\n"));
    let (buckets, exported_sum, count) = exported(&text, "flowctrl_permit_wait_seconds", "capped");
    assert_eq!(count, 2);
    assert_cumulative(&buckets, 2);
    assert_eq!(buckets.len(), 11);
    assert!((exported_sum - sum).abs() < 1e-6);
    let by_bound: BTreeMap<String, u64> =
        buckets.iter().map(|(le, n)| (le.to_string(), *n)).collect();
    // Octaves of the round-trip sketch's bounds, from ~1 ms.
    assert_eq!(by_bound["0.001048576"], 0, "{by_bound:?}");
}

/// `threads` threads at once each release `n` permits of each RTT.
fn release_from_threads(task: &flowctrl::Task, threads: usize, n: usize, rtts: &[Duration]) {
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for rtt in rtts {
                    for _ in 0..n {
                        let permit = task.acquire(1).unwrap().permit().unwrap();
                        permit.release_rtt(Outcome::Success, *rtt).unwrap();
                    }
                }
            });
        }
    });
}

/// Each lane counts its threads' round trips in a sketch of its own, after
/// the bytes 0.3.0 reads, so threads releasing at once share no word; a
/// table made by 0.3.0 (no lane sketches: its header says 0 and its file
/// ends at `total_size`) counts them in the process's shared words and
/// gives the same histogram; a file cut inside the sketches, or a header
/// naming another sketch size, is refused.
#[test]
fn threads_count_in_their_own_lanes_and_a_table_without_lane_sketches_still_counts() {
    use common::layout::*;
    let scratch = Scratch::new("histograms-lanes");
    let (tasks, processes) = (4, 4);
    let small = || {
        options()
            .capacity(tasks as u32)
            .processes(processes as u32)
            .balancers(0)
    };
    let lanes_at = HEADER_SIZE + tasks * TASK_SLOT + processes * ATTACH_SLOT;
    let lanes = tasks * processes * LANES;
    let total = total_size(tasks, processes, 0, 0);
    let word = |bytes: &[u8], at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    // Per lane: the five shared words on its line 0 (from its fourth word),
    // and its own sketch after `total_size`.
    let on_line = |bytes: &[u8], l: usize| -> u64 {
        (3..8)
            .map(|w| word(bytes, lanes_at + l * LANE + 8 * w))
            .sum()
    };
    let own = |bytes: &[u8], l: usize| -> u64 {
        (0..LANE_SKETCH / 8)
            .map(|w| word(bytes, total.next_multiple_of(128) + l * LANE_SKETCH + 8 * w))
            .sum()
    };
    // Buckets 2 and 11: on lanes 0 and 2 of a 0.3.0 table.
    let rtts = [Duration::from_millis(2), Duration::from_millis(40)];

    let new = scratch.path("new");
    let table = Table::open(&new, &small()).unwrap();
    let task = table.task("t", &TaskConfig::new()).unwrap();
    release_from_threads(&task, 4, 125, &rtts);
    let bytes = std::fs::read(&new).unwrap();
    assert_eq!(bytes.len(), file_size(tasks, processes, 0, 0));
    // Each thread's 250 went to its own lane's sketch, none to the shared
    // words.
    let per_lane: Vec<_> = (0..lanes)
        .map(|l| (own(&bytes, l), on_line(&bytes, l)))
        .filter(|c| *c != (0, 0))
        .collect();
    assert!(
        per_lane
            .iter()
            .all(|(n, shared)| n % 250 == 0 && *shared == 0),
        "{per_lane:?}"
    );
    assert_eq!(
        per_lane.iter().map(|c| c.0).sum::<u64>(),
        1000,
        "{per_lane:?}"
    );
    let made_new = View::open(&new).unwrap().task("t").unwrap().rtt;
    assert_eq!(made_new.count(), 1000, "{made_new:?}");
    drop((task, table));
    // A 0.3.0 process sharing the table adds to the shared words (and
    // empties them every slice) when its task pulls global quota: they are
    // not read where every lane has its own sketch.
    let mut scribbled = bytes.clone();
    for l in 0..lanes {
        for w in 3..8 {
            let at = lanes_at + l * LANE + 8 * w;
            scribbled[at..at + 8].copy_from_slice(&7u64.to_le_bytes());
        }
    }
    std::fs::write(&new, &scribbled).unwrap();
    assert_eq!(View::open(&new).unwrap().task("t").unwrap().rtt, made_new);
    std::fs::write(&new, &bytes).unwrap();

    // As 0.3.0 made it: no sketch size in the header, and no sketches.
    let old = scratch.path("old");
    let mut bytes = std::fs::read(&new).unwrap();
    bytes[H_LANE_SKETCH_SIZE..H_LANE_SKETCH_SIZE + 4].fill(0);
    bytes.truncate(total);
    // Its sum counter keeps the first thousand; its buckets start empty.
    std::fs::write(&old, &bytes).unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o600)).unwrap();
    let table = Table::open(&old, &small()).unwrap();
    assert_eq!(table.size_bytes() as usize, total);
    let task = table.task("t", &TaskConfig::new()).unwrap();
    release_from_threads(&task, 4, 125, &rtts);
    let bytes = std::fs::read(&old).unwrap();
    assert_eq!(bytes.len(), total);
    let on_lines: u64 = (0..lanes).map(|l| on_line(&bytes, l)).sum();
    assert_eq!(on_lines, 1000);
    let made_old = View::open(&old).unwrap().task("t").unwrap().rtt;
    assert_eq!(made_old.buckets, made_new.buckets);
    assert_eq!(made_old.sum_ns, 2 * made_new.sum_ns);
    drop((task, table));

    // Cut inside the sketches, or another sketch size: refused, by an
    // attaching handle and by a view alike.
    let cut = scratch.path("cut");
    let mut bytes = std::fs::read(&new).unwrap();
    bytes.truncate(total + LANE_SKETCH / 2);
    std::fs::write(&cut, &bytes).unwrap();
    std::fs::set_permissions(&cut, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = Table::open(&cut, &small()).err().unwrap();
    assert!(err.message().contains("truncated"), "{err}");
    assert!(View::open(&cut).is_err());
    let other = scratch.path("other");
    let mut bytes = std::fs::read(&new).unwrap();
    bytes[H_LANE_SKETCH_SIZE..H_LANE_SKETCH_SIZE + 4].copy_from_slice(&100u32.to_le_bytes());
    std::fs::write(&other, &bytes).unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = Table::open(&other, &small()).err().unwrap();
    assert_eq!(err.kind(), flowctrl::ErrorKind::Corrupt);
    assert!(err.message().contains("lane sketch size is 100"), "{err}");
}
