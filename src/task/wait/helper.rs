//! The waiter thread of a table handle: it takes permits for the handle's
//! waiters while one of them heads the host's queue, hands them over, and
//! expires waiters whose deadline passed. It sleeps on the handle's wake
//! word between turns and stops when nobody waits.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::room::Room;
use super::{MAX_SLEEP, queue};
use crate::shm::{Shm, fork_generation};
use crate::task::Task;
use crate::words::Limited;

/// The shortest sleep before trying again a waiter refused by a rate.
const MIN_RETRY: Duration = Duration::from_micros(100);

pub(super) fn start(room: Arc<Room>, shm: Weak<Shm>) -> std::io::Result<()> {
    let generation = fork_generation();
    std::thread::Builder::new()
        .name("flowctrl-wait".into())
        .spawn(move || run(&room, &shm, generation))
        .map(drop)
}

fn run(room: &Room, shm: &Weak<Shm>, generation: u64) {
    loop {
        let Some(shm) = shm.upgrade() else {
            room.retire(generation);
            return;
        };
        let me = match shm.owner().map(|o| o.index()) {
            Ok(Some(me)) => me,
            _ => {
                room.fail_all(0, || {
                    crate::error::Error::new(
                        crate::error::ErrorKind::Internal,
                        "the table handle lost its attachment",
                    )
                });
                return;
            }
        };
        let word = &shm.attach_slot(me).wake;
        let seen = word.load(std::sync::atomic::Ordering::SeqCst);
        // Orders what the wakes we have seen followed before our tries: a
        // release that found the flag down while another handle lowered
        // and raised it again is then seen by the try (`queue_loom.rs`).
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let firsts = room.firsts();
        if firsts.is_empty() && room.retire(generation) {
            return;
        }
        let mut sleep = MAX_SLEEP;
        for (task, _) in &firsts {
            sleep = sleep.min(serve(room, task, me));
        }
        drop(firsts);
        let now = Instant::now();
        if let Some(next) = room.expire(me, now) {
            sleep = sleep.min(next.saturating_duration_since(now));
        }
        if !sleep.is_zero() {
            queue::sleep_shared(word, seen, sleep);
        }
    }
}

/// Takes permits for the task's waiters on this handle while the first of
/// them heads the host's queue. Returns how long to sleep at most before
/// trying again (a rate refuses for a known time; a cap until a wake).
fn serve(room: &Room, task: &Task, me: u32) -> Duration {
    let shm = &*task.shm;
    loop {
        let Some(entry) = room.first(task.index) else {
            return MAX_SLEEP;
        };
        let order = queue::order(shm.task_slot(task.index));
        if let Some((attach, ticket)) = queue::head(shm, task.index, order)
            && attach != me
            && queue::before(order, ticket, entry.ticket)
        {
            // Not our turn. Whoever woke us may have meant the head: pass
            // the wake on (a head with nothing to take sleeps again).
            queue::wake_attachment(shm, attach);
            return MAX_SLEEP;
        }
        match task.decide(entry.n, true) {
            Ok(Ok(permit)) => {
                let unclaimed = room.grant(task.index, me, &entry, Ok(Ok(permit)));
                task.discard(unclaimed);
            }
            Ok(Err(why)) => {
                entry.note(why);
                return match why {
                    Limited::Concurrency => MAX_SLEEP,
                    _ => task
                        .retry_after(why, entry.n)
                        .unwrap_or(Duration::from_millis(1))
                        .clamp(MIN_RETRY, MAX_SLEEP),
                };
            }
            Err(e) => {
                room.grant(task.index, me, &entry, Err(e));
            }
        }
    }
}
