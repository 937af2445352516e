//! Taking a turn for a handle's first waiter, and the waiter thread that
//! takes the turns of futures.
//!
//! A waiting thread that is its handle's first waiter for a task takes its
//! own turns ([`take_turn`] from `acquire_raw_wait`): a release wakes it
//! directly, one wake-up per hand-over. A future cannot, so the handle's
//! waiter thread takes its turns and expires futures whose deadline passed;
//! it runs only while futures wait.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::room::{Entry, Room};
use super::{MAX_SLEEP, queue};
use crate::shm::{Shm, fork_generation};
use crate::task::Task;
use crate::words::Limited;

/// The shortest sleep before trying again a waiter refused by a rate.
const MIN_RETRY: Duration = Duration::from_micros(100);

/// What a turn came to.
pub(super) enum Turn {
    /// The waiter was given its answer (a permit, or an error).
    Answered,
    /// Another handle's waiter heads the queue (and was woken).
    NotOurs,
    /// Refused: try again after at most this long, or when woken.
    Refused(Duration),
}

/// Takes `entry`'s turn: if it heads the host's queue, a permit for it
/// (handed to it, or released if it left meanwhile).
pub(super) fn take_turn(room: &Room, task: &Task, me: u32, entry: &Entry) -> Turn {
    let shm = &*task.shm;
    let order = queue::order(shm.task_slot(task.index));
    if let Some((attach, ticket)) = queue::head(shm, task.index, order)
        && attach != me
        && queue::before(order, ticket, entry.ticket)
    {
        // Whoever woke us may have meant the head: pass the wake on (a
        // head with nothing to take sleeps again).
        queue::wake_attachment(shm, attach);
        return Turn::NotOurs;
    }
    match task.decide_in_turn(entry.n) {
        Ok(Ok(permit)) => {
            let unclaimed = room.grant(task.index, me, entry, Ok(Ok(permit)));
            task.discard(unclaimed);
            // Several permits may have been freed at once (two releases
            // that woke only us): the next head takes the next one.
            if task.has_room() {
                queue::wake_head(shm, task.index);
            }
            Turn::Answered
        }
        // Past the limit in force (an adaptive limit below `n`): the queue
        // would wait on this head, and no admission would move the limit.
        Ok(Err(Limited::Concurrency))
            if super::super::limit(shm.task_slot(task.index)).is_some_and(|cap| entry.n > cap) =>
        {
            room.grant(task.index, me, entry, Ok(Err(Limited::Concurrency)));
            Turn::Answered
        }
        Ok(Err(why)) => {
            entry.note(why);
            Turn::Refused(match why {
                Limited::Concurrency => MAX_SLEEP,
                _ => task
                    .retry_after(why, entry.n)
                    .unwrap_or(Duration::from_millis(1))
                    .clamp(MIN_RETRY, MAX_SLEEP),
            })
        }
        Err(e) => {
            room.grant(task.index, me, entry, Err(e));
            Turn::Answered
        }
    }
}

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
        if room.retire(generation) {
            return;
        }
        let mut sleep = MAX_SLEEP;
        for task in room.futures_first() {
            sleep = sleep.min(serve(room, &task, me));
        }
        let now = Instant::now();
        if let Some(next) = room.expire(me, now) {
            sleep = sleep.min(next.saturating_duration_since(now));
        }
        if !sleep.is_zero() {
            queue::sleep_shared(word, seen, sleep);
        }
    }
}

/// Takes turns for the task's first future while it heads the queue.
fn serve(room: &Room, task: &Task, me: u32) -> Duration {
    loop {
        let Some(entry) = room.first(task.index).filter(|e| !e.thread) else {
            return MAX_SLEEP;
        };
        match take_turn(room, task, me, &entry) {
            Turn::Answered => continue,
            Turn::NotOurs => return MAX_SLEEP,
            Turn::Refused(after) => return after,
        }
    }
}
