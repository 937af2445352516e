//! The pick rules end to end on a real table, with a fake clock (`*_at`).

use std::time::Duration;

use super::*;
use crate::{Table, TableOptions};

fn table(tag: &str) -> (Table, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("flowctrl-balance-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let options = TableOptions {
        capacity: 4,
        max_processes: 4,
        balancers: 2,
        backends_per_balancer: 4,
        ..TableOptions::default()
    };
    (Table::open(&path, &options).unwrap(), path)
}

fn counts(b: &Balancer, picks: usize, now: u64, exclude: &[u32]) -> [usize; 4] {
    let mut seen = [0; 4];
    for _ in 0..picks {
        let mut p = b.pick_at(&PickOptions { exclude }, now).unwrap();
        seen[p.backend as usize] += 1;
        b.done_at(&mut p, Outcome::Ignored, None, None, now)
            .unwrap();
    }
    seen
}

#[test]
fn a_failure_steers_picks_away_at_once_and_ejects_a_failing_backend() {
    let (t, path) = table("penalty");
    let b = t.balancer("api", &BalancerConfig::new()).unwrap();
    b.set_backends(&[("a:1", 1), ("b:1", 1), ("c:1", 1)])
        .unwrap();
    let now = 1_000_000;
    // Equal backends share the picks.
    let even = counts(&b, 3_000, now, &[]);
    assert!(even[..3].iter().all(|&c| c > 800), "{even:?}");
    // One fast failure of backend 1: it is not chosen again while the two
    // others are healthy (P2C always has one of them to prefer).
    let mut p = b.pick_at(&PickOptions { exclude: &[0, 2] }, now).unwrap();
    b.done_at(
        &mut p,
        Outcome::Dropped,
        Some(Duration::from_micros(300)),
        None,
        now,
    )
    .unwrap();
    let after = counts(&b, 2_000, now + 10, &[]);
    assert_eq!(after[1], 0, "{after:?}");
    // Five failures in the window eject it; with one of three out, no panic.
    for _ in 0..5 {
        let mut p = b
            .pick_at(&PickOptions { exclude: &[0, 2] }, now + 20)
            .unwrap();
        b.done_at(&mut p, Outcome::Dropped, None, None, now + 20)
            .unwrap();
    }
    let s = b.stats_at(now + 20);
    assert!(
        s.backends[1].ejected_for >= Duration::from_millis(2_500),
        "{s:?}"
    );
    assert_eq!(s.backends[1].ejections, 1);
    // Ejected and the others excluded: the pool is the ejected one alone
    // (panic mode), rather than no backend at all.
    assert_eq!(counts(&b, 10, now + 30, &[0, 2])[1], 10);
    drop(t);
    let _ = std::fs::remove_file(path);
}

#[test]
fn panic_mode_picks_among_all_when_most_are_out() {
    let (t, path) = table("panic");
    let b = t.balancer("api", &BalancerConfig::new()).unwrap();
    b.set_backends(&[("a:1", 1), ("b:1", 1), ("c:1", 1)])
        .unwrap();
    let now = 1_000_000;
    for victim in [0, 1] {
        for _ in 0..5 {
            let others: Vec<u32> = (0..3).filter(|&i| i != victim).collect();
            let mut p = b.pick_at(&PickOptions { exclude: &others }, now).unwrap();
            b.done_at(&mut p, Outcome::Dropped, None, None, now)
                .unwrap();
        }
    }
    // Two of three ejected: all three are candidates again, and the healthy
    // one wins on cost whenever it is drawn — but not every pick.
    let seen = counts(&b, 3_000, now + 1, &[]);
    assert!(seen[2] > 1_800 && seen[2] < 3_000, "{seen:?}");
    drop(t);
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_new_backend_ramps_up_and_the_initial_set_does_not() {
    let (t, path) = table("slow");
    let config = BalancerConfig::new().slow_start(Duration::from_secs(30));
    let b = t.balancer("api", &config).unwrap();
    b.set_backends(&[("a:1", 1), ("b:1", 1)]).unwrap();
    let s = b.stats();
    assert!(s.backends.iter().all(|b| b.ramp == 1.0), "{s:?}");
    b.set_backends(&[("a:1", 1), ("b:1", 1), ("new:1", 1)])
        .unwrap();
    let s = b.stats();
    let new = s.backends.iter().find(|b| b.address == "new:1").unwrap();
    assert!(new.ramp < 0.2, "{new:?}");
    // The statistics of the backends that stayed were kept.
    assert_eq!(s.backends[0].address, "a:1");
    drop(t);
    let _ = std::fs::remove_file(path);
}

#[test]
fn membership_keeps_picks_in_flight_and_refuses_bad_input() {
    let (t, path) = table("members");
    let b = t.balancer("api", &BalancerConfig::new()).unwrap();
    let err = |r: Result<()>| r.unwrap_err().kind();
    use crate::ErrorKind::*;
    assert_eq!(err(b.set_backends(&[])), InvalidArgument);
    assert_eq!(err(b.set_backends(&[("a", 1), ("a", 2)])), InvalidArgument);
    assert_eq!(err(b.set_backends(&[("a", 0)])), InvalidArgument);
    assert_eq!(err(b.set_backends(&[(&"x".repeat(64), 1)])), InvalidName);
    assert_eq!(err(b.set_backends(&[("a b", 1)])), InvalidName);
    let five: Vec<(String, u32)> = (0..5).map(|i| (format!("h{i}"), 1)).collect();
    let five: Vec<(&str, u32)> = five.iter().map(|(a, w)| (a.as_str(), *w)).collect();
    assert_eq!(err(b.set_backends(&five)), TableFull);
    assert!(b.pick(&PickOptions::default()).is_err(), "no backends yet");
    b.set_backends(&[("a:1", 1), ("b:1", 1)]).unwrap();
    assert_eq!(
        b.pick(&PickOptions { exclude: &[0, 1] })
            .unwrap_err()
            .kind(),
        InvalidArgument
    );
    let held = b.pick(&PickOptions { exclude: &[1] }).unwrap();
    assert_eq!(held.backend(), "a:1");
    // a:1 leaves while a pick on it is in flight.
    b.set_backends(&[("b:1", 1), ("c:1", 1)]).unwrap();
    for _ in 0..100 {
        assert_ne!(b.pick(&PickOptions::default()).unwrap().backend(), "a:1");
    }
    let s = b.stats();
    let a = s.backends.iter().find(|x| x.address == "a:1").unwrap();
    assert!(!a.active);
    assert_eq!(a.in_flight, 1);
    // Its slot is not reused while the pick is in flight...
    b.set_backends(&[("b:1", 1), ("c:1", 1), ("d:1", 1)])
        .unwrap();
    assert!(b.stats().backends.iter().any(|x| x.address == "a:1"));
    // ...and the pick still ends normally.
    let mut raw = *held.raw();
    std::mem::forget(held);
    b.done_raw(&mut raw, Outcome::Success, None, None).unwrap();
    assert!(b.done_raw(&mut raw, Outcome::Success, None, None).is_err());
    let mut copy = raw;
    copy.flags = 0;
    assert!(
        b.done_raw(&mut copy, Outcome::Success, None, None).is_err(),
        "copy of a done pick"
    );
    let mut forged = raw;
    forged.flags = 0;
    forged.backend = 99;
    assert!(
        b.done_raw(&mut forged, Outcome::Success, None, None)
            .is_err()
    );
    assert_eq!(b.index_of("b:1"), Some(1));
    assert_eq!(b.index_of("a:1"), None);
    // a:1's slot, free now, goes to e:1; a copy of a:1's done pick, done
    // while a pick on e:1 is in flight, is refused and takes nothing of it.
    b.set_backends(&[("b:1", 1), ("c:1", 1), ("d:1", 1), ("e:1", 1)])
        .unwrap();
    assert_eq!(b.index_of("e:1"), Some(raw.backend));
    let on_e = b
        .pick(&PickOptions {
            exclude: &[1, 2, 3],
        })
        .unwrap();
    assert_eq!(on_e.backend(), "e:1");
    let mut stale = copy;
    stale.flags = 0;
    assert!(
        b.done_raw(&mut stale, Outcome::Success, None, None)
            .is_err(),
        "a done pick of the slot's last backend"
    );
    let mut on_e_raw = *on_e.raw();
    std::mem::forget(on_e);
    b.done_raw(&mut on_e_raw, Outcome::Success, None, None)
        .unwrap();
    drop(t);
    let _ = std::fs::remove_file(path);
}

/// Two threads finishing copies of one pick at once (as C callers of
/// `fc_pick_done` may: it copies the pick in): one is done, the other
/// refused, and the process's ledger never goes below what it holds. The
/// threads meet by spinning before each round's done, so they start it
/// together.
#[test]
fn copies_of_one_pick_done_at_once_give_it_back_once() {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU32};
    const ROUNDS: u32 = 10_000;
    let (t, path) = table("twice");
    let b = t.balancer("api", &BalancerConfig::new()).unwrap();
    b.set_backends(&[("a:1", 1)]).unwrap();
    let arrived = AtomicU32::new(0);
    // Both threads at `meeting` (1, 2, ...): each arrives, then waits for
    // the other.
    let meet = |meeting: u32| {
        arrived.fetch_add(1, Ordering::AcqRel);
        let mut spins = 0u32;
        while arrived.load(Ordering::Acquire) < 2 * meeting {
            spins += 1;
            if spins.is_multiple_of(1 << 12) {
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
    };
    let shared = Mutex::new(None::<RawPick>);
    let done = [AtomicBool::new(false), AtomicBool::new(false)];
    let run = |me: usize| {
        let mut wrong = Vec::new();
        for r in 0..ROUNDS {
            if me == 0 {
                *shared.lock().unwrap() = Some(b.pick_raw(&PickOptions::default()).unwrap());
            }
            meet(2 * r + 1);
            let mut copy = shared.lock().unwrap().expect("published");
            let ok = b.done_raw(&mut copy, Outcome::Success, None, None).is_ok();
            done[me].store(ok, Ordering::Release);
            meet(2 * r + 2);
            let n = done.iter().filter(|d| d.load(Ordering::Acquire)).count();
            if me == 0 && n != 1 {
                wrong.push((r, n));
            }
        }
        wrong
    };
    let wrong = std::thread::scope(|s| {
        let other = s.spawn(|| run(1));
        let wrong = run(0);
        other.join().unwrap();
        wrong
    });
    assert!(
        wrong.is_empty(),
        "{} of {ROUNDS} rounds had not one copy done; the first (round, done): {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(6)]
    );
    assert_eq!(b.stats().backends[0].in_flight, 0);
    let attach = b.shm.owner().unwrap().index().unwrap_or(0);
    let lane = b.shm.pick_ledger(b.index, attach, 0).unwrap();
    assert_eq!(
        crate::limit::ledger::ledger_held(lane.ledger.load(Ordering::Acquire)),
        0
    );
    drop(t);
    let _ = std::fs::remove_file(path);
}

/// An ignored outcome is no sample (docs/guide/load-balancing.md): the
/// RTT and the load passed with it are dropped; a success's load is kept.
#[test]
fn an_ignored_outcome_stores_no_sample() {
    let (t, path) = table("ignored");
    let b = t.balancer("api", &BalancerConfig::new()).unwrap();
    b.set_backends(&[("a:1", 1)]).unwrap();
    let now = 1_000_000;
    let before = b.stats_at(now).backends[0].clone();
    assert_eq!(before.load, None);
    let mut p = b.pick_at(&PickOptions::default(), now).unwrap();
    let slow = Some(Duration::from_secs(3));
    b.done_at(&mut p, Outcome::Ignored, slow, Some(0.9), now)
        .unwrap();
    let after = b.stats_at(now).backends[0].clone();
    assert_eq!(after.load, None, "an ignored outcome's load: {after:?}");
    assert_eq!(after.rtt, before.rtt, "an ignored outcome's RTT");
    assert_eq!(after.successes + after.failures, 0);
    // A success with the same report is a sample of both.
    let mut p = b.pick_at(&PickOptions::default(), now).unwrap();
    b.done_at(&mut p, Outcome::Success, slow, Some(0.9), now)
        .unwrap();
    let sampled = b.stats_at(now).backends[0].clone();
    assert!((sampled.load.unwrap() - 0.9).abs() < 1e-6, "{sampled:?}");
    assert_eq!(sampled.successes, 1);
    drop(t);
    let _ = std::fs::remove_file(path);
}

/// docs/guide/load-balancing.md's "about N s later": when a backend that
/// failed once is picked again against an idle 20 ms peer, measured with
/// the default configuration on a fake clock, and derived from it (the
/// penalty decayed to the peer's RTT: `decay × ln(penalty / 20 ms)`).
#[test]
fn a_failed_backend_returns_when_the_guide_says() {
    let (t, path) = table("return");
    let config = BalancerConfig::new();
    let b = t.balancer("api", &config).unwrap();
    b.set_backends(&[("peer:1", 1), ("failed:1", 1)]).unwrap();
    let peer_rtt = Duration::from_millis(20);
    // One call at a time every 100 ms, each done at once (nothing stays in
    // flight), 20 ms each: both estimates settle at 20 ms.
    let step = 100;
    let mut now = b.now_ms() + 1_000;
    let call = |now: u64, exclude: &[u32]| {
        let mut p = b.pick_at(&PickOptions { exclude }, now).unwrap();
        let chosen = p.backend;
        b.done_at(&mut p, Outcome::Success, Some(peer_rtt), None, now)
            .unwrap();
        chosen
    };
    for _ in 0..1_000 {
        call(now, &[1]);
        call(now, &[0]);
        now += step;
    }
    let rtt = |i: usize| b.stats_at(now).backends[i].rtt.as_secs_f64();
    assert!((rtt(0) - 0.020).abs() < 0.001, "{}", rtt(0));
    // One fast failure: the 5 s penalty.
    let mut p = b.pick_at(&PickOptions { exclude: &[0] }, now).unwrap();
    let fast = Some(Duration::from_micros(300));
    b.done_at(&mut p, Outcome::Dropped, fast, None, now)
        .unwrap();
    let failed_at = now;
    while call(now, &[]) == 0 {
        now += step;
        assert!(now - failed_at < 300_000, "never picked again");
    }
    let measured = (now - failed_at) as f64 / 1000.0;
    let derived = config.decay.as_secs_f64()
        * (config.failure_penalty.as_secs_f64() / peer_rtt.as_secs_f64()).ln();
    assert!((measured - derived).abs() < 1.0, "{measured} {derived}");
    drop(t);
    let _ = std::fs::remove_file(path);
    // The guide is the repository's, not the packaged crate's.
    let Ok(guide) = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/guide/load-balancing.md"
    )) else {
        eprintln!("no docs/guide here: the measurement alone is checked");
        return;
    };
    let guide = guide.split_whitespace().collect::<Vec<_>>().join(" ");
    let said: f64 = guide
        .split("about ")
        .find_map(|rest| rest.split_once(" s later "))
        .and_then(|(n, _)| n.parse().ok())
        .expect("the guide's \"about N s later\"");
    assert!(
        (said - measured).abs() <= 1.0 && (said - derived).abs() <= 1.0,
        "the guide says {said} s; measured {measured} s, derived {derived:.1} s"
    );
}

#[test]
fn the_retry_budget_is_a_share_of_picks_plus_a_minimum() {
    let (t, path) = table("retry");
    let b = t
        .balancer("api", &BalancerConfig::new().retry_budget(0.1, 1.0))
        .unwrap();
    b.set_backends(&[("a:1", 1)]).unwrap();
    let now = 5_000_000;
    // 1/s over 10 s: 10 retries with no traffic.
    assert_eq!((0..20).filter(|_| b.retry_allowed_at(now)).count(), 10);
    counts(&b, 100, now, &[]);
    assert_eq!((0..20).filter(|_| b.retry_allowed_at(now)).count(), 10);
    // Ten seconds later the window is empty again.
    assert_eq!(
        (0..20).filter(|_| b.retry_allowed_at(now + 10_000)).count(),
        10
    );
    // A registration with another configuration is refused.
    assert_eq!(
        t.balancer("api", &BalancerConfig::new())
            .unwrap_err()
            .kind(),
        crate::ErrorKind::ConfigMismatch
    );
    drop(t);
    let _ = std::fs::remove_file(path);
}

#[test]
fn heavier_and_faster_backends_get_more() {
    let (t, path) = table("weights");
    let b = t.balancer("api", &BalancerConfig::new()).unwrap();
    b.set_backends(&[("a:1", 1), ("b:1", 3)]).unwrap();
    let now = 1_000_000;
    // Hold picks so the in-flight counts matter: weight 3 takes ~3×.
    let mut held = Vec::new();
    for _ in 0..400 {
        held.push(b.pick_at(&PickOptions::default(), now).unwrap());
    }
    let s = b.stats_at(now);
    let (a, heavy) = (
        s.backends[0].in_flight as f64,
        s.backends[1].in_flight as f64,
    );
    assert!((2.5..3.5).contains(&(heavy / a)), "{a} {heavy}");
    for mut p in held {
        b.done_at(&mut p, Outcome::Ignored, None, None, now)
            .unwrap();
    }
    drop(t);
    let _ = std::fs::remove_file(path);
}
