//! `Task::acquire_async` (feature `async`): a future in the same queue as
//! the threads, woken by the hand-over (not polled), and one that can be
//! dropped at any point without leaving a permit taken.

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::*;
use flowctrl::{Limited, Outcome, Table, TableOptions, Task, TaskConfig};

/// A waker that unparks the thread that polls and counts its wakes.
struct Unpark(std::thread::Thread, AtomicU32);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.1.fetch_add(1, Ordering::Relaxed);
        self.0.unpark();
    }
}

/// Runs `future` to its end on this thread; returns its output and how
/// many times it was polled.
fn block_on<F: Future>(future: F) -> (F::Output, u32) {
    let unpark = Arc::new(Unpark(std::thread::current(), AtomicU32::new(0)));
    let waker = Waker::from(unpark.clone());
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    let mut polls = 0;
    loop {
        polls += 1;
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return (out, polls);
        }
        std::thread::park_timeout(Duration::from_secs(30));
    }
}

fn setup(tag: &str) -> (Scratch, Table, Task) {
    let scratch = Scratch::new(tag);
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    let task = table
        .task("svc", &TaskConfig::new().max_concurrency(1))
        .unwrap();
    (scratch, table, task)
}

fn until(what: &str, mut done: impl FnMut() -> bool) {
    let begin = Instant::now();
    while !done() {
        assert!(begin.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_future_waits_its_turn_and_is_woken_by_the_hand_over() {
    let (_scratch, _table, task) = setup("async-order");
    let held = task.acquire(1).unwrap().permit().unwrap();
    let first = {
        let task = task.clone();
        std::thread::spawn(move || {
            let p = task
                .acquire_owned_wait(1, Some(Duration::from_secs(30)))
                .unwrap()
                .unwrap();
            std::thread::sleep(Duration::from_millis(20));
            // Read before the release: the hand-over may run the future
            // before this thread is scheduled again.
            let releasing = Instant::now();
            p.release(Outcome::Success).unwrap();
            releasing
        })
    };
    until("the thread waits", || task.stats().waiting == 1);
    let second = {
        let task = task.clone();
        std::thread::spawn(move || {
            let (answer, polls) = block_on(task.acquire_async(1, Some(Duration::from_secs(30))));
            let admitted = Instant::now();
            answer.unwrap().unwrap().release(Outcome::Success).unwrap();
            (admitted, polls)
        })
    };
    until("the future waits", || task.stats().waiting == 2);
    held.release(Outcome::Success).unwrap();
    let released = first.join().unwrap();
    let (admitted, polls) = second.join().unwrap();
    assert!(admitted >= released, "the future went ahead of the thread");
    // Polled when started and when handed its permit (a spurious wake at
    // most): never polled in a loop.
    assert!(polls <= 3, "{polls} polls");
    assert_eq!(task.stats().in_flight, 0);
}

#[test]
fn a_future_whose_deadline_passes_is_told_so_without_polling() {
    let (_scratch, _table, task) = setup("async-deadline");
    let held = task.acquire(1).unwrap().permit().unwrap();
    let begin = Instant::now();
    let (answer, polls) = block_on(task.acquire_async(1, Some(Duration::from_millis(150))));
    assert_eq!(answer.unwrap().err(), Some(Limited::Concurrency));
    assert!(begin.elapsed() >= Duration::from_millis(150));
    assert!(polls <= 3, "{polls} polls");
    assert_eq!(task.stats().waiting, 0);
    held.release(Outcome::Ignored).unwrap();
}

#[test]
fn a_dropped_future_leaves_the_queue_and_never_keeps_a_permit() {
    let (_scratch, _table, task) = setup("async-drop");
    let held = task.acquire(1).unwrap().permit().unwrap();
    let noop = Waker::noop();
    // Dropped while it waits: it leaves the line.
    {
        let mut future = Box::pin(task.acquire_async(1, Some(Duration::from_secs(30))));
        assert!(
            future
                .as_mut()
                .poll(&mut Context::from_waker(noop))
                .is_pending()
        );
        assert_eq!(task.stats().waiting, 1);
    }
    assert_eq!(task.stats().waiting, 0);
    // Handed a permit, then dropped before it was polled again: the permit
    // goes back.
    let mut future = Box::pin(task.acquire_async(1, Some(Duration::from_secs(30))));
    assert!(
        future
            .as_mut()
            .poll(&mut Context::from_waker(noop))
            .is_pending()
    );
    held.release(Outcome::Success).unwrap();
    until("the permit is handed over", || {
        let s = task.stats();
        s.waiting == 0 && s.in_flight == 1
    });
    drop(future);
    let s = task.stats();
    assert_eq!((s.in_flight, s.held), (0, 0), "{s:?}");
    assert!(task.acquire(1).unwrap().permit().is_some());
}
