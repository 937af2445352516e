//! The one token behind permits and picks, through the public guards: an
//! owning permit or pick is `Send + 'static` (it crosses threads and
//! awaits, and outlives the handles it came from), and every guard finishes
//! its token exactly once.

mod common;

use common::Scratch;
use flowctrl::{
    BalancerConfig, ErrorKind, Finish, Outcome, OwnedPermit, OwnedPick, PickOptions, Table,
    TableOptions, TaskConfig,
};

fn send_static<T: Send + 'static>() {}

#[test]
fn owned_guards_are_send_and_static() {
    send_static::<OwnedPermit>();
    send_static::<OwnedPick>();
}

#[test]
fn an_owned_permit_is_released_on_another_thread_after_its_handles_are_gone() {
    let scratch = Scratch::new("owned-permit");
    let path = scratch.path("t");
    let observer = Table::open(&path, &TableOptions::default()).unwrap();
    let watched = observer
        .task("svc", &TaskConfig::new().max_concurrency(2))
        .unwrap();
    let permit = {
        let table = Table::open(&path, &TableOptions::default()).unwrap();
        let task = table.task("svc", &TaskConfig::new()).unwrap();
        task.acquire_owned(2).unwrap().unwrap()
        // `table` and `task` are dropped here; the permit keeps the task.
    };
    assert_eq!(watched.stats().in_flight, 2);
    assert_eq!(permit.n(), 2);
    std::thread::spawn(move || permit.release(Outcome::Success).unwrap())
        .join()
        .unwrap();
    let s = watched.stats();
    assert_eq!((s.in_flight, s.released_success), (0, 2));
}

#[test]
fn a_guard_finishes_once_and_a_dropped_one_as_ignored() {
    let scratch = Scratch::new("guard-once");
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    let task = table
        .task("svc", &TaskConfig::new().max_concurrency(1))
        .unwrap();
    let mut permit = task.acquire_owned(1).unwrap().unwrap();
    assert!(permit.finish_once(Outcome::Dropped.into()).unwrap());
    assert!(!permit.finish_once(Outcome::Success.into()).unwrap());
    assert!(permit.is_finished());
    drop(permit);
    let dropped = task.acquire_owned(1).unwrap().unwrap();
    drop(dropped);
    let s = task.stats();
    assert_eq!(
        (
            s.in_flight,
            s.released_dropped,
            s.released_success,
            s.released_ignored
        ),
        (0, 1, 0, 1)
    );
    // A raw copy of a finished permit is refused by the token's check.
    let mut p = task.acquire_owned(1).unwrap().unwrap();
    let mut copy = *p.raw();
    p.finish_once(Outcome::Success.into()).unwrap();
    copy.flags |= flowctrl::PERMIT_ALTERED;
    let err = task.release_raw(&mut copy, Outcome::Success).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("altered"), "{err}");
}

#[test]
fn an_owned_pick_outlives_its_balancer_handle_and_reports_its_load() {
    let scratch = Scratch::new("owned-pick");
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    let pick = {
        let lb = table.balancer("api", &BalancerConfig::default()).unwrap();
        lb.set_backends(&[("10.0.0.1:80", 1)]).unwrap();
        lb.pick_owned(&PickOptions::default()).unwrap()
    };
    assert_eq!(pick.backend(), "10.0.0.1:80");
    let lb = table.balancer("api", &BalancerConfig::default()).unwrap();
    assert_eq!(lb.stats().backends[0].in_flight, 1);
    std::thread::spawn(move || {
        pick.finish(Finish {
            outcome: Outcome::Success,
            rtt: Some(std::time::Duration::from_millis(3)),
            load: Some(0.5),
        })
        .unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(lb.stats().backends[0].in_flight, 0);
}
