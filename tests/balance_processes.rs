//! Balancers across real processes: picks in flight counted exactly
//! host-wide, a failure seen by one process steering every other at once,
//! and the picks of SIGKILLed processes given back exactly (a kill storm).
//!
//! `FLOWCTRL_BALANCE_KILLS` (default 40) sets the number of kills.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use flowctrl::{Balancer, BalancerConfig, Outcome, PickOptions, RawPick, Table};

const BACKENDS: [(&str, u32); 3] = [("10.0.0.1:80", 1), ("10.0.0.2:80", 1), ("10.0.0.3:80", 2)];

fn open(path: &Path) -> (Table, Balancer) {
    let table = Table::open(
        path,
        &options().capacity(4).processes(16).balancers(2).backends(4),
    )
    .unwrap();
    let lb = table.balancer("api", &BalancerConfig::new()).unwrap();
    lb.set_backends(&BACKENDS).unwrap();
    (table, lb)
}

fn in_flight(lb: &Balancer) -> Vec<u64> {
    lb.stats().backends.iter().map(|b| b.in_flight).collect()
}

/// Picks and finishes at random for `rounds`, holding up to 8 at a time;
/// returns the picks still held.
fn churn(lb: &Balancer, rng: &mut Rng, rounds: usize, keep: usize) -> Vec<RawPick> {
    let mut held: Vec<RawPick> = Vec::new();
    for _ in 0..rounds {
        if held.len() < 8 && (held.len() <= keep || rng.one_in(2)) {
            held.push(lb.pick_raw(&PickOptions::default()).unwrap());
        } else {
            let i = rng.below(held.len() as u64) as usize;
            let mut p = held.swap_remove(i);
            let outcome = if rng.one_in(50) {
                Outcome::Dropped
            } else {
                Outcome::Success
            };
            lb.done_raw(&mut p, outcome, None, None).unwrap();
        }
    }
    while held.len() > keep {
        let mut p = held.pop().unwrap();
        lb.done_raw(&mut p, Outcome::Ignored, None, None).unwrap();
    }
    held
}

#[test]
fn four_processes_picking_at_once_are_counted_exactly() {
    let scratch = Scratch::new("lb-exact");
    let path = scratch.path("table");
    let (table, lb) = open(&path);
    let ready = Pipe::new();
    let mut children = KillOnDrop::default();
    for child in 0..4u64 {
        let (path, out) = (path.clone(), scratch.path(&format!("held-{child}")));
        children.add(fork_guarded(move || {
            let (_t, lb) = open(&path);
            let mut rng = Rng::new(child + 1);
            let held = churn(&lb, &mut rng, 5_000, 3 + child as usize);
            let mut per = [0u64; 4];
            held.iter().for_each(|p| per[p.backend as usize] += 1);
            std::fs::write(&out, format!("{} {} {} {}", per[0], per[1], per[2], per[3])).unwrap();
            ready.send(1);
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }));
    }
    for _ in 0..4 {
        assert_eq!(ready.recv_timeout(Duration::from_secs(60)), Some(1));
    }
    let mut expected = vec![0u64; 3];
    for child in 0..4 {
        let text = std::fs::read_to_string(scratch.path(&format!("held-{child}"))).unwrap();
        for (i, n) in text.split(' ').take(3).enumerate() {
            expected[i] += n.parse::<u64>().unwrap();
        }
    }
    assert_eq!(expected.iter().sum::<u64>(), 3 + 4 + 5 + 6);
    assert_eq!(in_flight(&lb), expected);
    let picked: u64 = lb.stats().backends.iter().map(|b| b.picked).sum();
    assert!(picked >= 4 * 2_500, "{picked}");
    // SIGKILL them all: the reaper gives every pick back.
    for &pid in &children.0 {
        signal(pid, libc::SIGKILL);
        assert!(wait_timeout(pid, Duration::from_secs(5)).killed_by(libc::SIGKILL));
    }
    children.0.clear();
    table.reap();
    assert_eq!(in_flight(&lb), vec![0, 0, 0]);
}

#[test]
fn a_failure_recorded_by_one_process_steers_the_others_at_once() {
    let scratch = Scratch::new("lb-penalty");
    let path = scratch.path("table");
    let (_table, lb) = open(&path);
    let p = path.clone();
    let exit = run_in_child(Duration::from_secs(30), move || {
        let (_t, lb) = open(&p);
        let mut pick = lb.pick_raw(&PickOptions { exclude: &[0, 2] }).unwrap();
        assert_eq!(pick.address(), BACKENDS[1].0);
        // A fast failure: a 503 in a fraction of a millisecond.
        lb.done_raw(
            &mut pick,
            Outcome::Dropped,
            Some(Duration::from_micros(200)),
            None,
        )
        .unwrap();
        0
    });
    assert!(matches!(exit, Exit::Code(0)), "child failed");
    // This process has never seen backend 1 fail, yet never picks it.
    let mut seen = [0; 3];
    for _ in 0..2_000 {
        let pick = lb.pick(&PickOptions::default()).unwrap();
        seen[pick.index() as usize] += 1;
        pick.done(Outcome::Success).unwrap();
    }
    assert_eq!(seen[1], 0, "{seen:?}");
    assert!(seen[0] > 0 && seen[2] > 0, "{seen:?}");
}

#[test]
fn picks_of_killed_processes_come_back_exactly() {
    let kills = env_number("FLOWCTRL_BALANCE_KILLS", 40);
    let seed = seed_from_env("FLOWCTRL_BALANCE_SEED");
    eprintln!("balance kill storm: {kills} kills, FLOWCTRL_BALANCE_SEED={seed}");
    let mut rng = Rng::new(seed);
    let scratch = Scratch::new("lb-storm");
    let path = scratch.path("table");
    let (table, lb) = open(&path);
    // This process holds picks through the whole storm.
    let mine = churn(&lb, &mut rng, 100, 5);
    let mut per = vec![0u64; 3];
    mine.iter().for_each(|p| per[p.backend as usize] += 1);
    let mut workers = KillOnDrop::default();
    let spawn = |n: u64| {
        let path = path.clone();
        fork_guarded(move || {
            let (_t, lb) = open(&path);
            let mut rng = Rng::new(n);
            std::thread::scope(|s| {
                for t in 0..2u64 {
                    let lb = &lb;
                    s.spawn(move || {
                        let mut rng = Rng::new(n * 7 + t);
                        loop {
                            churn(lb, &mut rng, 1_000, 4);
                        }
                    });
                }
                loop {
                    churn(&lb, &mut rng, 1_000, 2);
                }
            })
        })
    };
    for n in 0..3 {
        workers.add(spawn(seed ^ n));
    }
    for k in 0..kills {
        std::thread::sleep(Duration::from_millis(5 + rng.below(30)));
        let victim = workers.0[rng.below(workers.0.len() as u64) as usize];
        signal(victim, libc::SIGKILL);
        assert!(wait_timeout(victim, Duration::from_secs(5)).killed_by(libc::SIGKILL));
        workers.forget(victim);
        workers.add(spawn(seed.wrapping_add(100 + k)));
    }
    for &pid in &workers.0 {
        signal(pid, libc::SIGKILL);
        assert!(wait_timeout(pid, Duration::from_secs(5)).killed_by(libc::SIGKILL));
    }
    workers.0.clear();
    table.reap();
    assert_eq!(in_flight(&lb), per, "seed {seed}");
    for mut p in mine {
        lb.done_raw(&mut p, Outcome::Success, None, None).unwrap();
    }
    assert_eq!(in_flight(&lb), vec![0, 0, 0]);
}
