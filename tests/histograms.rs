//! The latency histograms: every task's releases fill the round-trip
//! sketch (a task without a global rate too, and `ignored` never), the
//! acquires that waited in a task's queue are counted when they leave it,
//! and `flowctrl_metrics` exports both as Prometheus histograms: cumulative
//! `_bucket` series whose `+Inf` is `_count`, and `_sum`.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::Scratch;
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
