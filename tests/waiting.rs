//! Waiting acquires, host-wide and in order, across real processes: the
//! order policies, no barging, deadlines, and waiters that die in line.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use flowctrl::{Decision, Limited, Outcome, Table, TableOptions, Task, TaskConfig, WaitOrder};

fn open(path: &Path) -> Table {
    Table::open(path, &TableOptions::default()).unwrap()
}

fn capped(cap: u32) -> TaskConfig {
    TaskConfig::new().max_concurrency(cap)
}

/// Waits until `n` acquires wait for the task, host-wide.
fn until_waiting(task: &Task, n: u64) {
    let begin = Instant::now();
    while task.stats().waiting != n {
        assert!(
            begin.elapsed() < Duration::from_secs(10),
            "waiting stayed {} (want {n})",
            task.stats().waiting
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `count` processes join the queue one after another (each once the one
/// before waits); this process then frees the single permit. Each waiter
/// reports its number when admitted and holds the permit 5 ms: the numbers
/// arrive in admission order.
fn admission_order(order: WaitOrder, count: u8) -> Vec<u8> {
    let scratch = Scratch::new("waiting-order");
    let path = scratch.path("t");
    let config = capped(1).wait_order(order);
    let table = open(&path);
    let task = table.task("svc", &config).unwrap();
    let held = task.acquire(1).unwrap().permit().unwrap();
    let admitted = Pipe::new();
    let mut children = KillOnDrop(Vec::new());
    for id in 1..=count {
        let path = path.clone();
        children.add(fork(move || {
            let table = open(&path);
            let task = table.task("svc", &config).unwrap();
            let d = task.acquire_wait(1, Some(Duration::from_secs(30))).unwrap();
            let Some(p) = d.permit() else { return 1 };
            admitted.send(id);
            std::thread::sleep(Duration::from_millis(5));
            p.release(Outcome::Success).unwrap();
            0
        }));
        until_waiting(&task, id as u64);
    }
    held.release(Outcome::Success).unwrap();
    let got: Vec<u8> = (0..count).map(|_| admitted.recv()).collect();
    for pid in std::mem::take(&mut children.0) {
        assert_eq!(wait(pid), 0);
    }
    assert_eq!(task.stats().waiting, 0);
    assert_eq!(task.check().unwrap().drift(), 0);
    got
}

#[test]
fn waiters_of_many_processes_are_admitted_first_come_first_served() {
    assert_eq!(admission_order(WaitOrder::Fifo, 6), vec![1, 2, 3, 4, 5, 6]);
}

#[test]
fn lifo_admits_the_newest_waiter_first() {
    assert_eq!(admission_order(WaitOrder::Lifo, 6), vec![6, 5, 4, 3, 2, 1]);
}

/// Threads of two handles (two attachments, as two processes are) joining
/// alternately are admitted in the order they joined, across handles.
#[test]
fn threads_of_several_handles_keep_one_order() {
    let scratch = Scratch::new("waiting-handles");
    let path = scratch.path("t");
    let tables = [open(&path), open(&path)];
    let tasks: Vec<Task> = tables
        .iter()
        .map(|t| t.task("svc", &capped(1)).unwrap())
        .collect();
    let held = tasks[0].acquire(1).unwrap().permit().unwrap();
    let (sender, admitted) = std::sync::mpsc::channel();
    let threads: Vec<_> = (0..8u8)
        .map(|id| {
            let task = tasks[id as usize % 2].clone();
            let sender = sender.clone();
            let t = std::thread::spawn(move || {
                let permit = task
                    .acquire_owned_wait(1, Some(Duration::from_secs(30)))
                    .unwrap()
                    .unwrap();
                sender.send(id).unwrap();
                std::thread::sleep(Duration::from_millis(2));
                permit.release(Outcome::Success).unwrap();
            });
            until_waiting(&tasks[0], id as u64 + 1);
            t
        })
        .collect();
    held.release(Outcome::Success).unwrap();
    let got: Vec<u8> = (0..8).map(|_| admitted.recv().unwrap()).collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(got, (0..8).collect::<Vec<_>>());
}

/// While anyone waits, a non-waiting acquire does not take a free permit
/// ahead of it (it is refused as the cap refuses), unless the task allows
/// barging; once the queue is empty, it is admitted again.
#[test]
fn a_non_waiting_acquire_does_not_jump_the_queue_unless_barging_is_on() {
    let scratch = Scratch::new("waiting-barging");
    let path = scratch.path("t");
    let table = open(&path);
    for barging in [false, true] {
        let name = format!("svc-{barging}");
        let task = table.task(&name, &capped(2).barging(barging)).unwrap();
        assert_eq!(task.settings().local.barging, barging);
        let held = task.acquire(1).unwrap().permit().unwrap();
        // A waiter for 2 cannot be admitted while 1 is held: it waits, and
        // one permit stays free.
        let waiter = {
            let task = task.clone();
            std::thread::spawn(move || {
                task.acquire_owned_wait(2, Some(Duration::from_millis(300)))
                    .unwrap()
                    .map(drop)
            })
        };
        until_waiting(&task, 1);
        // (The refusal's counter is not compared: the waiter's own turns
        // count theirs too.)
        match task.acquire(1).unwrap() {
            Decision::Admitted(p) => {
                assert!(barging, "a free permit was taken past a waiter");
                p.release(Outcome::Ignored).unwrap();
            }
            Decision::Limited(why) => {
                assert!(!barging, "barging is on, yet the acquire was refused");
                assert_eq!(why, Limited::Concurrency, "refused as the cap refuses");
            }
        }
        assert_eq!(waiter.join().unwrap(), Err(Limited::Concurrency));
        assert_eq!(task.stats().waiting, 0);
        // Nobody waits: the free permit is anyone's.
        let p = task
            .acquire(1)
            .unwrap()
            .permit()
            .expect("the queue is empty");
        p.release(Outcome::Ignored).unwrap();
        held.release(Outcome::Ignored).unwrap();
    }
}

/// A waiter whose deadline passes leaves at once (it does not hold up the
/// ones behind it), and is told which limit refused it.
#[test]
fn a_waiter_whose_deadline_passes_leaves_the_queue_at_once() {
    let scratch = Scratch::new("waiting-deadline");
    let path = scratch.path("t");
    let table = open(&path);
    let task = table.task("svc", &capped(1)).unwrap();
    let held = task.acquire(1).unwrap().permit().unwrap();
    let short = {
        let task = task.clone();
        std::thread::spawn(move || {
            let begin = Instant::now();
            let d = task.acquire_owned_wait(1, Some(Duration::from_millis(100)));
            (d.unwrap().map(drop), begin.elapsed())
        })
    };
    until_waiting(&task, 1);
    let long = {
        let task = task.clone();
        std::thread::spawn(move || {
            task.acquire_owned_wait(1, Some(Duration::from_secs(30)))
                .unwrap()
                .map(|p| p.release(Outcome::Success).unwrap())
        })
    };
    until_waiting(&task, 2);
    let (answer, took) = short.join().unwrap();
    assert_eq!(answer, Err(Limited::Concurrency));
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_secs(2),
        "{took:?}"
    );
    until_waiting(&task, 1);
    held.release(Outcome::Success).unwrap();
    assert_eq!(long.join().unwrap(), Ok(()));
    assert_eq!(task.stats().in_flight, 0);
}

/// The head of the queue is a process SIGKILLed while it waits: the reaper
/// takes it out of line, and the waiter behind it gets the next permit.
#[test]
fn a_head_killed_in_line_does_not_block_the_queue() {
    let scratch = Scratch::new("waiting-killhead");
    let path = scratch.path("t");
    let table = open(&path);
    let task = table.task("svc", &capped(1)).unwrap();
    let held = task.acquire(1).unwrap().permit().unwrap();
    let head = {
        let path = path.clone();
        fork(move || {
            let table = open(&path);
            let task = table.task("svc", &capped(1)).unwrap();
            let _ = task.acquire_wait(1, Some(Duration::from_secs(30)));
            1
        })
    };
    until_waiting(&task, 1);
    let behind = {
        let task = task.clone();
        std::thread::spawn(move || {
            let begin = Instant::now();
            let p = task
                .acquire_owned_wait(1, Some(Duration::from_secs(20)))
                .unwrap()
                .expect("admitted after the head died");
            p.release(Outcome::Success).unwrap();
            begin.elapsed()
        })
    };
    until_waiting(&task, 2);
    kill(head, libc::SIGKILL);
    assert_eq!(wait(head), -libc::SIGKILL);
    held.release(Outcome::Success).unwrap();
    let took = behind.join().unwrap();
    assert!(took < Duration::from_secs(5), "{took:?}");
    table.reap();
    let s = task.stats();
    assert_eq!((s.in_flight, s.waiting), (0, 0), "{s:?}");
    assert_eq!(task.check().unwrap().drift(), 0);
}

/// The order policy and barging are registered configuration, compared like
/// every other field, and changed host-wide by an update.
#[test]
fn the_wait_policy_is_configuration() {
    let scratch = Scratch::new("waiting-config");
    let table = open(&scratch.path("t"));
    let task = table.task("svc", &capped(4)).unwrap();
    let s = task.settings().local;
    assert_eq!((s.wait_order, s.barging), (WaitOrder::Fifo, false));
    let err = table
        .task("svc", &capped(4).wait_order(WaitOrder::Lifo))
        .unwrap_err();
    assert!(
        err.message().contains("wait_order fifo (asked lifo)"),
        "{err}"
    );
    task.update(&TaskConfig::new().wait_order(WaitOrder::Lifo).barging(true))
        .unwrap();
    let s = table
        .task("svc", &TaskConfig::new())
        .unwrap()
        .settings()
        .local;
    assert_eq!((s.wait_order, s.barging), (WaitOrder::Lifo, true));
    assert!(WaitOrder::parse("random").is_err());
}

/// Two permits freed at once (one release of a permit for 2) while two
/// handles wait, one waiter each:
/// the head's handle takes one, and must pass the wake on, so the other
/// handle's waiter gets the second at once, not when its bounded sleep
/// (20 ms) runs out. Over 20 rounds the median delay of the second waiter
/// must be under 5 ms (a quarter of that sleep; a lost wake shows as a
/// median near 10 ms).
#[test]
fn permits_freed_together_reach_waiters_of_two_handles_at_once() {
    let scratch = Scratch::new("waiting-passon");
    let path = scratch.path("t");
    let tables = [open(&path), open(&path)];
    let tasks: Vec<Task> = tables
        .iter()
        .map(|t| t.task("svc", &capped(2)).unwrap())
        .collect();
    let mut delays = Vec::new();
    for _ in 0..20 {
        let held = tasks[0].acquire_owned(2).unwrap().unwrap();
        // Each keeps its permit until both were served: a release of the
        // first would wake the second and hide a lost wake.
        let both = Arc::new(std::sync::Barrier::new(2));
        let waiters: Vec<_> = (0..2)
            .map(|i| {
                let (task, both) = (tasks[i].clone(), both.clone());
                let t = std::thread::spawn(move || {
                    let p = task
                        .acquire_owned_wait(1, Some(Duration::from_secs(10)))
                        .unwrap()
                        .unwrap();
                    let at = Instant::now();
                    both.wait();
                    p.release(Outcome::Ignored).unwrap();
                    at
                });
                until_waiting(&tasks[0], i as u64 + 1);
                t
            })
            .collect();
        let released = Instant::now();
        held.release(Outcome::Ignored).unwrap();
        let served: Vec<Instant> = waiters.into_iter().map(|t| t.join().unwrap()).collect();
        delays.push(served.iter().max().unwrap().duration_since(released));
    }
    delays.sort();
    let median = delays[delays.len() / 2];
    assert!(
        median < Duration::from_millis(5),
        "the second waiter waited for a sleep to run out: median {median:?}, {delays:?}"
    );
}
