//! A refusal says when to retry where that is known: the local rate's next
//! admission, the time the slice releases more (or ends) for the global
//! quota; nothing for a concurrency cap.

mod common;

use std::time::{Duration, Instant};

use common::*;
use flowctrl::{Decision, Limited, Table, TableOptions, TaskConfig};

fn refused(task: &flowctrl::Task) -> Limited {
    match task.acquire(1).unwrap() {
        Decision::Limited(why) => why,
        Decision::Admitted(_) => panic!("admitted"),
    }
}

#[test]
fn a_local_refusal_says_when_the_rate_admits_again() {
    let scratch = Scratch::new("retry-local");
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    let task = table
        .task("api", &TaskConfig::new().local_rate(10.0).burst(2))
        .unwrap();
    assert!(matches!(task.acquire(1).unwrap(), Decision::Admitted(_)));
    assert!(matches!(task.acquire(1).unwrap(), Decision::Admitted(_)));
    let began = Instant::now();
    assert_eq!(refused(&task), Limited::Local);
    let after = task.retry_after(Limited::Local, 1).unwrap();
    assert!(
        after > Duration::from_millis(80) && after <= Duration::from_millis(100),
        "{after:?}"
    );
    // Just before, still refused; at the time said, admitted.
    std::thread::sleep(
        after
            .saturating_sub(began.elapsed())
            .saturating_sub(Duration::from_millis(15)),
    );
    assert_eq!(refused(&task), Limited::Local);
    std::thread::sleep(task.retry_after(Limited::Local, 1).unwrap());
    assert!(matches!(task.acquire(1).unwrap(), Decision::Admitted(_)));
    // Two permits need the whole burst; three never fit.
    assert!(task.retry_after(Limited::Local, 2).is_some());
    assert_eq!(task.retry_after(Limited::Local, 3), None);
}

#[test]
fn a_global_refusal_says_when_the_slice_releases_more_or_ends() {
    let scratch = Scratch::new("retry-global");
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    // The embedded store: 20 per 1 s slice, all released at once.
    let task = table
        .task("api", &TaskConfig::new().global_rate(20.0).global_burst(20))
        .unwrap();
    while let Decision::Admitted(p) = task.acquire(1).unwrap() {
        p.release(flowctrl::Outcome::Success).unwrap();
    }
    let now_ms = (wall_us() / 1000) as u64;
    let after = task.retry_after(Limited::Global, 1).unwrap();
    let to_edge = Duration::from_millis(1000 - now_ms % 1000);
    assert!(
        after <= to_edge + Duration::from_millis(5) && after + Duration::from_millis(20) >= to_edge,
        "{after:?} vs the slice's end in {to_edge:?}"
    );
    std::thread::sleep(after + Duration::from_millis(5));
    assert!(matches!(task.acquire(1).unwrap(), Decision::Admitted(_)));
}

#[test]
fn a_concurrency_refusal_cannot_say() {
    let scratch = Scratch::new("retry-cap");
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    let task = table
        .task("api", &TaskConfig::new().max_concurrency(1))
        .unwrap();
    let _held = task.acquire(1).unwrap();
    assert_eq!(refused(&task), Limited::Concurrency);
    assert_eq!(task.retry_after(Limited::Concurrency, 1), None);
    assert_eq!(task.retry_after(Limited::Local, 1), None, "no local rate");
    assert_eq!(
        task.retry_after(Limited::Global, 1),
        None,
        "no global limit"
    );
}
