//! `auto` on the fake service of `testing`: where it holds, how it gets
//! there, and the failure modes of the reference limiters it must not have.

use super::super::{initial, testing::*, update};
use super::*;

fn spec() -> Spec {
    Spec::parse("auto").unwrap()
}

fn within(what: &str, v: f64, lo: f64, hi: f64) {
    assert!((lo..=hi).contains(&v), "{what}: {v} not in [{lo}, {hi}]");
}

#[test]
fn holds_at_tolerance_times_the_pipe_and_does_not_drift() {
    // 8 slots × 50 ms: the pipe is 8, the target 1.25 × 8 = 10.
    let (s, mean) = run(&spec(), initial(&spec()), 0, 10_000, 8.0, 50.0);
    within("mean limit", mean, 9.0, 11.0);
    within("baseline", s.baseline_ns, 49e6, 51e6);
    let (s, later) = run(&spec(), s, 10_000, 60_000, 8.0, 50.0);
    within("a minute later", later, 9.0, 11.0);
    within("baseline", s.baseline_ns, 49e6, 51e6);
}

#[test]
fn wide_slow_and_small_fast_services() {
    // 32 × 200 ms: pipe 32, target 40.
    let (_, mean) = run(&spec(), initial(&spec()), 0, 20_000, 32.0, 200.0);
    within("32 × 200 ms", mean, 36.0, 44.0);
    // 4 × 20 ms: pipe 4, target 5.
    let (_, mean) = run(&spec(), initial(&spec()), 0, 10_000, 4.0, 20.0);
    within("4 × 20 ms", mean, 4.5, 6.0);
}

#[test]
fn counts_the_callers_own_time_outside_the_server() {
    // 8 slots × 50 ms with 10 ms outside: pipe 9.6, target 12; the slot
    // count (8) would leave a sixth of the server idle.
    let service = (8.0, 50.0, 10.0);
    let (s, mean) = run_held(&spec(), initial(&spec()), 0, 10_000, service);
    within("mean limit", mean, 11.0, 13.5);
    within("baseline", s.baseline_ns, 59e6, 61e6);
}

#[test]
fn the_tolerance_trades_queue_for_throughput() {
    let at = |text: &str| {
        let spec = Spec::parse(text).unwrap();
        run(&spec, initial(&spec), 0, 10_000, 16.0, 50.0).1
    };
    within("tolerance 1.1", at("auto tolerance=1.1"), 16.0, 18.5);
    within("tolerance 1.5", at("auto tolerance=1.5"), 22.0, 25.0);
    for bad in ["auto tolerance=1", "auto tolerance=5", "auto tolerance=nan"] {
        assert!(Spec::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn comes_down_from_a_high_start() {
    // Its first baseline is caught under a queue of 32: stale high. The
    // drains find the permits still queued and chain down.
    let spec = spec().with_bounds(1, 1000, 40);
    let (_, mean) = run(&spec, initial(&spec), 0, 10_000, 8.0, 50.0);
    within("mean limit", mean, 9.0, 11.0);
}

#[test]
fn relearns_the_baseline_within_two_seconds_when_the_service_slows() {
    let (s, _) = run(&spec(), initial(&spec()), 0, 10_000, 8.0, 50.0);
    // The published failure: a baseline that cannot expire sinks the
    // limit to its floor when the no-load RTT doubles.
    let (s, mean) = run(&spec(), s, 10_000, 2_000, 8.0, 100.0);
    within("baseline", s.baseline_ns, 99e6, 101e6);
    within("mean limit", mean, 9.0, 11.0);
    // And back, when it speeds up again.
    let (s, mean) = run(&spec(), s, 12_000, 2_000, 8.0, 50.0);
    within("baseline", s.baseline_ns, 49e6, 51e6);
    within("mean limit", mean, 9.0, 11.0);
}

#[test]
fn grows_off_its_floor_when_capacity_appears() {
    let mut s = initial(&spec());
    s.limit = 1.0;
    let (s, _) = run(&spec(), s, 0, 3_000, 32.0, 50.0);
    assert!(s.limit >= 36.0, "stuck at {}", s.limit);
}

#[test]
fn follows_slots_that_halve_and_double() {
    let (s, _) = run(&spec(), initial(&spec()), 0, 10_000, 16.0, 50.0);
    let (s, mean) = run(&spec(), s, 10_000, 4_000, 8.0, 50.0);
    within("halved", mean, 9.0, 11.0);
    let (_, mean) = run(&spec(), s, 14_000, 4_000, 16.0, 50.0);
    within("doubled", mean, 18.0, 22.0);
}

#[test]
fn drops_lower_the_limit() {
    let spec = spec().with_bounds(1, 1000, 20);
    let mut s = initial(&spec);
    let w = Window {
        dropped: 3,
        ..overloaded(0, 20.0, 20.0, 50.0)
    };
    update(&spec, &mut s, &w);
    assert_eq!(s.limit, 18.0);
    let mut small = State { limit: 3.0, ..s };
    update(&spec, &mut small, &w);
    assert_eq!(small.limit, 2.0, "at least one permit less");
}

#[test]
fn a_window_the_demand_bounded_abandons_a_drain() {
    let spec = spec().with_bounds(1, 1000, 20);
    let mut s = initial(&spec);
    s.baseline_ns = 50e6;
    s.aux[LAST_DRAIN] = 100_000.0;
    update(&spec, &mut s, &overloaded(106_000, 20.0, 16.0, 50.0));
    assert_eq!(s.aux[PHASE], SETTLE, "a drain was due");
    assert!(s.limit < 20.0);
    let idle = Window {
        rejected: 0,
        in_flight: 1,
        ..overloaded(106_100, s.limit, 16.0, 50.0)
    };
    update(&spec, &mut s, &idle);
    assert_eq!((s.aux[PHASE], s.limit), (HOLD, 20.0));
}

#[test]
fn a_capacity_fall_during_a_drain_is_measured_again_not_chased_down() {
    let spec = spec().with_bounds(1, 1000, 12);
    let mut s = initial(&spec);
    s.baseline_ns = 50e6;
    s.aux[LAST_DRAIN] = 100_000.0;
    s.aux[FOUND] = 1.0;
    // Due: drain from 12 (8 slots × 50 ms: pipe 8, to 0.9 × 8 = 7).
    update(&spec, &mut s, &overloaded(106_000, 12.0, 8.0, 50.0));
    assert_eq!((s.aux[PHASE], s.limit), (SETTLE, 7.0));
    update(&spec, &mut s, &overloaded(106_100, 7.0, 8.0, 50.0));
    // The service slows to 200 ms meanwhile: the RTT rose, not fell.
    update(&spec, &mut s, &overloaded(106_200, 7.0, 8.0, 200.0));
    assert_eq!((s.aux[PHASE], s.limit), (MEASURE, 7.0), "measured again");
    // Steady now: 200 ms is the no-load RTT, and the limit grows again.
    update(&spec, &mut s, &overloaded(106_400, 7.0, 8.0, 200.0));
    within("baseline", s.baseline_ns, 199e6, 201e6);
    let (_, mean) = run(&spec, s, 6_500, 6_000, 8.0, 200.0);
    within("mean limit", mean, 9.0, 11.0);
}

/// Runs `spec` from `s` for `ms` against `service(t)`, the fake service's
/// `(slots, service_ms, outside_ms)` at `t` ms from the start (on `run`'s
/// clock); returns the state and the drains begun.
fn drive(
    spec: &Spec,
    mut s: State,
    start_ms: u64,
    ms: u64,
    service: impl Fn(u64) -> (f64, f64, f64),
) -> (State, usize) {
    let start = start_ms + 100_000;
    let (mut now, mut drains) = (start, 0);
    while now < start + ms {
        let (slots, service_ms, outside_ms) = service(now - start);
        let before = s.aux[PHASE];
        let w = held(now, s.limit, slots, service_ms, outside_ms);
        let next = update(spec, &mut s, &w);
        if s.aux[PHASE] == SETTLE && before != SETTLE {
            drains += 1;
        }
        now += (next / 1_000_000).max(1);
    }
    (s, drains)
}

#[test]
fn a_due_drain_waits_while_nothing_moved() {
    let (s, _) = run(&spec(), initial(&spec()), 0, 10_000, 8.0, 50.0);
    // The limit, the throughput and the RTT hold where the last drain left
    // them: a drain would measure the same 50 ms (it costs two windows
    // below the pipe). Without the skip: one every 5 s.
    let steady = |_| (8.0, 50.0, 0.0);
    let (s, n) = drive(&spec(), s, 10_000, 19_000, steady);
    assert!(n <= 1, "{n} drains in 19 s");
    within("limit", s.limit, 10.0, 10.0);
    // But never more than four intervals apart.
    let (_, n) = drive(&spec(), s, 29_000, 21_000, steady);
    assert!(n >= 1, "no drain in 21 s");
}

#[test]
fn a_faster_service_is_re_measured_though_the_rtt_is_back_in_its_band() {
    let (mut s, _) = run(&spec(), initial(&spec()), 0, 10_000, 8.0, 50.0);
    // Just after a drain (none is due), 50 → 44 ms: the RTT at 10 (55 ms)
    // leaves the band, the law takes the limit to 11, and the RTT (60.5 ms)
    // is back in it. The baseline (50) is stale, but the limit moved from
    // the one the last drain started from (10): the drain runs when due.
    s.aux[LAST_DRAIN] = 110_000.0;
    let (s, n) = drive(&spec(), s, 10_000, 6_000, |_| (8.0, 44.0, 0.0));
    assert!(n >= 1, "{n} drains");
    within("baseline", s.baseline_ns, 43.5e6, 44.5e6);
    within("limit", s.limit, 9.0, 11.0);
    // And a slow drift, 44 → 34 ms over 10 s: the limit moves in steps
    // of a permit (drains when one passes the band), and four intervals
    // after the last drain at the latest.
    let drift = |t: u64| (8.0, 44.0 - (t as f64 / 1000.0).min(10.0), 0.0);
    let (s, _) = drive(&spec(), s, 16_000, 21_000, drift);
    within("baseline", s.baseline_ns, 33.5e6, 35.5e6);
    within("limit", s.limit, 9.0, 11.0);
}

#[test]
fn a_baseline_is_re_measured_after_four_intervals_though_nothing_moved() {
    let (s, _) = run(&spec(), initial(&spec()), 0, 10_000, 8.0, 50.0);
    // 10 slots × 62.5 ms: the same capacity, and at a limit of 10 the same
    // RTT (62.5 ms) and throughput. Only the no-load RTT changed.
    let (s, _) = drive(&spec(), s, 10_000, 21_000, |_| (10.0, 62.5, 0.0));
    within("baseline", s.baseline_ns, 62e6, 63e6);
    let (_, mean) = run(&spec(), s, 31_000, 6_000, 10.0, 62.5);
    within("mean limit", mean, 12.0, 13.5);
}

#[test]
fn slots_lost_while_the_queue_rises_are_not_read_as_a_slower_service() {
    // 32 × 200 ms at 40; the slots halve. The window that starts the drain
    // caught the queue half risen (400 ms, 160/s still released); the
    // settling window's RTTs, admitted under 40, hold the whole queue.
    let spec = spec().with_bounds(1, 1000, 40);
    let mut s = initial(&spec);
    s.baseline_ns = 200e6;
    (s.aux[LAST_DRAIN], s.aux[FOUND]) = (100_000.0, 1.0);
    let rising = Window {
        rtt_ns: 400e6,
        samples: 16,
        ..overloaded(102_000, 40.0, 32.0, 200.0)
    };
    update(&spec, &mut s, &rising);
    assert_eq!((s.aux[PHASE], s.limit), (SETTLE, 20.0));
    update(&spec, &mut s, &overloaded(102_400, 40.0, 16.0, 200.0));
    // At 20 the RTT is 250 ms: a queue of 4, not a service of 250 ms
    // (which would put the limit at 1.25 × 160/s × 250 ms = 50).
    let (s, _) = run(&spec, s, 2_900, 3_000, 16.0, 200.0);
    within("baseline", s.baseline_ns, 199e6, 201e6);
    within("limit", s.limit, 19.0, 21.0);
}

#[test]
fn a_service_slowing_through_a_drain_is_measured_again() {
    // 8 × 50 ms at 11; the service slows to 100 ms. The drain starts from
    // a window half into it (100 ms); the settling window's RTT is 140 ms
    // and the measuring window's 150 ms: still rising, not a no-load RTT.
    let spec = spec().with_bounds(1, 1000, 11);
    let mut s = initial(&spec);
    s.baseline_ns = 50e6;
    (s.aux[LAST_DRAIN], s.aux[FOUND]) = (100_000.0, 1.0);
    let at = |now, limit, rtt_ms: f64| Window {
        rtt_ns: rtt_ms * 1e6,
        ..overloaded(now, limit, 8.0, 100.0)
    };
    update(&spec, &mut s, &at(102_000, 11.0, 100.0));
    assert_eq!((s.aux[PHASE], s.limit), (SETTLE, 5.0));
    update(&spec, &mut s, &at(102_100, 5.0, 140.0));
    update(&spec, &mut s, &at(102_240, 5.0, 150.0));
    assert_eq!((s.aux[PHASE], s.limit), (MEASURE, 5.0), "measured again");
    let (s, mean) = run(&spec, s, 2_390, 4_000, 8.0, 100.0);
    within("baseline", s.baseline_ns, 99e6, 101e6);
    within("mean limit", mean, 9.0, 11.0);
}

#[test]
fn the_skip_trusts_the_limit_the_last_drain_set() {
    // 32 × 200 ms, callers holding 5 ms: the start overshoots to 64, the
    // drains chain 64 → 32 → 25 and set 40. The last drain started from
    // 32, and the law holds 40: the limit that drain set, where nothing
    // moved since. Without the skip on it: a drain 5 s later.
    let service = |_| (32.0, 200.0, 5.0);
    let (s, n) = drive(&spec(), initial(&spec()), 0, 3_000, service);
    assert!(n >= 1, "no drain at the start");
    assert!(
        !near(s.limit, s.aux[HELD], 0.1),
        "{} {}",
        s.limit,
        s.aux[HELD]
    );
    let (s, n) = drive(&spec(), s, 3_000, 16_000, service);
    assert_eq!(n, 0, "drains while the law held the limit the drain set");
    within("limit", s.limit, 39.0, 42.0);
}

#[test]
fn a_window_whose_releases_stalled_cuts_at_most_half() {
    // 24 × 150 ms at 34; the service slows to 300 ms. In the window after
    // the change few requests end (3 in 100 ms: those begun at 300 ms have
    // not), so `X × target` is 6 permits: a cut to a quarter, 8, and from
    // below the pipe the limit regrows by `tolerance` steps.
    let spec = spec().with_bounds(1, 1000, 34);
    let mut s = initial(&spec);
    s.baseline_ns = 150e6;
    (s.aux[LAST_DRAIN], s.aux[FOUND]) = (101_000.0, 1.0);
    let stalled = Window {
        rtt_ns: 225e6,
        samples: 3,
        ..overloaded(102_000, 34.0, 24.0, 150.0)
    };
    update(&spec, &mut s, &stalled);
    assert_eq!(s.limit, 17.0, "half, not a quarter");
    // The drains measure 300 ms and the limit goes back to 1.25 × 24.
    let (_, mean) = run(&spec, s, 2_100, 4_000, 24.0, 300.0);
    within("mean limit", mean, 27.0, 32.0);
}

#[test]
fn the_law_reaches_the_target_from_below_inside_its_band() {
    // 16 × 50 ms: the target is 20. At 19 the RTT (59.4 ms) is 5 % under
    // it, inside the band: the law alone stays there, a permit short.
    let spec = spec().with_bounds(1, 1000, 19);
    let mut s = initial(&spec);
    s.baseline_ns = 50e6;
    (s.aux[LAST_DRAIN], s.aux[FOUND]) = (100_000.0, 1.0);
    (s.aux[HELD], s.aux[SET]) = (19.0, 19.0);
    let (s, n) = drive(&spec, s, 0, 15_000, |_| (16.0, 50.0, 0.0));
    assert_eq!(s.limit, 20.0);
    // The approach is not a change to re-measure: the skip follows it.
    assert_eq!(n, 0, "drains");
    // At the target it stays: one more would pass it.
    let (s, _) = drive(&spec, s, 15_000, 3_000, |_| (16.0, 50.0, 0.0));
    assert_eq!(s.limit, 20.0);
}
