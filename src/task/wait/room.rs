//! This handle's waiters: who waits for which task, in ticket order, and the
//! answer each is given.
//!
//! Process memory, never the file. The lock is fork-safe (a holder from
//! before a `fork` does not exist in the child, and its waiters do not
//! either: a room from another generation starts empty).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::Waker;
use std::time::Instant;

use super::queue;
use crate::error::Result;
use crate::format::WAIT_BUCKETS;
use crate::quota::health;
use crate::shm::{ForkLocked, Shm, fork_generation};
use crate::task::{RawPermit, Task};
use crate::words::{Limited, WaitOrder};

/// What a waiter is finally given.
pub(crate) type Answer = Result<std::result::Result<RawPermit, Limited>>;

/// One waiting acquire: a thread (which sleeps on `word`) or a future
/// (whose waker is called).
pub(crate) struct Entry {
    pub ticket: u64,
    pub n: u32,
    pub deadline: Instant,
    /// When it joined the queue: its wait is counted when it leaves
    /// ([`waited`]).
    since: Instant,
    /// A waiting thread, which takes its own turn when it is its handle's
    /// first waiter (one wake-up per hand-over); else a future, whose turn
    /// the waiter thread takes.
    pub thread: bool,
    /// Bumped when the answer is set: a waiting thread's futex (private).
    pub word: AtomicU32,
    state: parking_lot::Mutex<EntryState>,
}

struct EntryState {
    answer: Option<Answer>,
    waker: Option<Waker>,
    /// The limit that refused it last: what it is told if time runs out.
    last: Limited,
}

impl Entry {
    /// The answer, if one was given (taken: given once).
    pub fn take(&self) -> Option<Answer> {
        self.state.lock().answer.take()
    }

    #[cfg_attr(not(feature = "async"), allow(dead_code))]
    pub fn set_waker(&self, waker: &Waker) {
        let mut s = self.state.lock();
        if !s.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            s.waker = Some(waker.clone());
        }
    }

    pub fn note(&self, why: Limited) {
        self.state.lock().last = why;
    }

    pub fn last(&self) -> Limited {
        self.state.lock().last
    }

    /// Sets the answer; the caller then calls [`Entry::notify`] (outside
    /// the room's lock: a waker may run anything).
    fn set(&self, answer: Answer) -> Option<Waker> {
        let mut s = self.state.lock();
        s.answer = Some(answer);
        s.waker.take()
    }

    /// Tells a waiter that it became its handle's first: a thread starts
    /// taking its turns; a future's are taken by the waiter thread.
    fn your_turn(&self, shm: &Shm, attach: u32) {
        if self.thread {
            self.word.fetch_add(1, Ordering::Release);
            queue::wake_private(&self.word);
        } else {
            queue::wake_attachment(shm, attach);
        }
    }

    fn notify(&self, waker: Option<Waker>) {
        self.word.fetch_add(1, Ordering::Release);
        queue::wake_private(&self.word);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The waiters of one task on this handle, by ticket.
struct Queue {
    task: Task,
    entries: BTreeMap<u64, Arc<Entry>>,
}

impl Queue {
    fn best(&self, order: WaitOrder) -> Option<&Arc<Entry>> {
        match order {
            WaitOrder::Fifo => self.entries.values().next(),
            WaitOrder::Lifo => self.entries.values().next_back(),
        }
    }
}

#[derive(Default)]
struct Inner {
    /// The fork generation the contents belong to.
    generation: u64,
    queues: BTreeMap<u32, Queue>,
    /// A waiter thread runs for this generation.
    helper: bool,
}

/// The waiters of one table handle.
#[derive(Default)]
pub(crate) struct Room {
    inner: ForkLocked<Inner>,
}

impl Room {
    fn with<T>(&self, body: impl FnOnce(&mut Inner) -> T) -> T {
        self.inner.with(|inner| {
            let generation = fork_generation();
            if inner.generation != generation {
                // A room copied by fork: its waiters are the parent's threads.
                *inner = Inner {
                    generation,
                    ..Inner::default()
                };
            }
            body(inner)
        })
    }

    /// Queues a waiter for `n` of `task` and publishes this handle's head;
    /// also says whether the caller must start the handle's waiter thread.
    pub fn enqueue(
        &self,
        task: &Task,
        attach: u32,
        n: u32,
        deadline: Instant,
        last: Limited,
        thread: bool,
    ) -> (Arc<Entry>, bool) {
        let shm = &*task.shm;
        let slot = shm.task_slot(task.index);
        self.with(|inner| {
            let entry = Arc::new(Entry {
                ticket: queue::take_ticket(slot),
                n,
                deadline,
                since: Instant::now(),
                thread,
                word: AtomicU32::new(0),
                state: parking_lot::Mutex::new(EntryState {
                    answer: None,
                    waker: None,
                    last,
                }),
            });
            let q = inner.queues.entry(task.index).or_insert_with(|| Queue {
                task: task.clone(),
                entries: BTreeMap::new(),
            });
            q.entries.insert(entry.ticket, entry.clone());
            publish(shm, task.index, attach, q);
            let start_helper = !thread && !inner.helper;
            inner.helper |= !thread;
            (entry, start_helper)
        })
    }

    /// Takes `entry` out of the queue: its answer if it has one, else `None`
    /// (and the head is woken if it was this handle's first waiter, since a
    /// wake may have been meant for it).
    pub fn leave(&self, shm: &Shm, task: u32, attach: u32, entry: &Entry) -> Option<Answer> {
        let left = self.with(|inner| {
            if let Some(answer) = entry.take() {
                return Err(answer);
            }
            Ok(remove(inner, task, attach, entry.ticket))
        });
        match left {
            Err(answer) => Some(answer),
            Ok((was_first, next)) => {
                if was_first {
                    // A wake may have been meant for it: pass it on.
                    queue::wake_head(shm, task);
                }
                if let Some(next) = next {
                    next.your_turn(shm, attach);
                }
                None
            }
        }
    }

    /// Gives `answer` to `entry` if it still waits; else hands the answer
    /// back (its waiter left: a permit in it must be released). The answer
    /// is set under the room's lock, so a waiter leaving at that moment
    /// either finds it or is gone before it is given.
    pub fn grant(&self, task: u32, attach: u32, entry: &Entry, answer: Answer) -> Option<Answer> {
        let given = self.with(|inner| {
            let Some(q) = inner.queues.get(&task) else {
                return Err(answer);
            };
            if !q.entries.contains_key(&entry.ticket) {
                return Err(answer);
            }
            let shm = q.task.shm.clone();
            let (_, next) = remove(inner, task, attach, entry.ticket);
            Ok((entry.set(answer), next, shm))
        });
        let (waker, next, shm) = match given {
            Ok(given) => given,
            Err(answer) => return Some(answer),
        };
        entry.notify(waker);
        if let Some(next) = next {
            next.your_turn(&shm, attach);
        }
        None
    }

    /// The task's first waiter on this handle.
    pub fn first(&self, task: u32) -> Option<Arc<Entry>> {
        self.with(|inner| {
            let q = inner.queues.get(&task)?;
            q.best(queue::order(q.task.shm.task_slot(task))).cloned()
        })
    }

    /// Whether `entry` is the task's first waiter on this handle.
    pub fn is_first(&self, task: u32, entry: &Entry) -> bool {
        self.first(task).is_some_and(|e| e.ticket == entry.ticket)
    }

    /// The tasks whose first waiter on this handle is a future (the waiter
    /// thread takes their turns; a thread takes its own).
    pub fn futures_first(&self) -> Vec<Task> {
        self.with(|inner| {
            inner
                .queues
                .values()
                .filter(|q| {
                    let order = queue::order(q.task.shm.task_slot(q.task.index));
                    q.best(order).is_some_and(|e| !e.thread)
                })
                .map(|q| q.task.clone())
                .collect()
        })
    }

    /// Tells the waiters whose deadline passed by `now` that time ran out
    /// (with the limit that refused them last) and takes them out of their
    /// queues; returns the next deadline.
    pub fn expire(&self, attach: u32, now: Instant) -> Option<Instant> {
        let (expired, next, firsts) = self.with(|inner| {
            let mut expired = Vec::new();
            let mut next: Option<Instant> = None;
            let mut firsts = Vec::new();
            for (&task, q) in inner.queues.iter_mut() {
                let order = queue::order(q.task.shm.task_slot(task));
                let first = q.best(order).map(|e| e.ticket);
                let before = expired.len();
                q.entries.retain(|_, e| {
                    if e.deadline <= now {
                        waited(&q.task.shm, task, e.since, now);
                        expired.push(e.clone());
                        false
                    } else {
                        next = Some(next.map_or(e.deadline, |n| n.min(e.deadline)));
                        true
                    }
                });
                if expired.len() != before {
                    publish(&q.task.shm, task, attach, q);
                    if let Some(e) = q.best(order).filter(|e| Some(e.ticket) != first) {
                        firsts.push((e.clone(), q.task.shm.clone()));
                    }
                }
            }
            inner.queues.retain(|_, q| !q.entries.is_empty());
            let expired: Vec<_> = expired
                .into_iter()
                .map(|e| {
                    let waker = e.set(Ok(Err(e.last())));
                    (e, waker)
                })
                .collect();
            (expired, next, firsts)
        });
        for (entry, waker) in expired {
            entry.notify(waker);
        }
        for (entry, shm) in firsts {
            entry.your_turn(&shm, attach);
        }
        next
    }

    /// Called by the waiter thread before each round: it stops (true) when
    /// no future waits, unless one came meanwhile.
    pub fn retire(&self, generation: u64) -> bool {
        self.with(|inner| {
            let futures = inner
                .queues
                .values()
                .any(|q| q.entries.values().any(|e| !e.thread));
            if inner.generation != generation || !futures {
                inner.helper = false;
                true
            } else {
                false
            }
        })
    }

    /// Tells every waiter of this generation to give up (the waiter thread
    /// could not run): each gets `error`.
    pub fn fail_all(&self, attach: u32, error: impl Fn() -> crate::error::Error) {
        let entries: Vec<_> = self.with(|inner| {
            inner.helper = false;
            let queues = std::mem::take(&mut inner.queues);
            queues
                .into_iter()
                .flat_map(|(task, q)| {
                    queue::publish(&q.task.shm, task, attach, 0, 0);
                    let now = Instant::now();
                    for e in q.entries.values() {
                        waited(&q.task.shm, task, e.since, now);
                    }
                    q.entries.into_values()
                })
                .map(|e| {
                    let waker = e.set(Err(error()));
                    (e, waker)
                })
                .collect()
        });
        for (entry, waker) in entries {
            entry.notify(waker);
        }
    }
}

/// Takes ticket `ticket` out of the task's queue and publishes the new head.
/// Returns whether it was the first waiter, and then the new first.
fn remove(inner: &mut Inner, task: u32, attach: u32, ticket: u64) -> (bool, Option<Arc<Entry>>) {
    let Some(q) = inner.queues.get_mut(&task) else {
        return (false, None);
    };
    let order = queue::order(q.task.shm.task_slot(task));
    let was_first = q.best(order).is_some_and(|e| e.ticket == ticket);
    let Some(entry) = q.entries.remove(&ticket) else {
        return (false, None);
    };
    waited(&q.task.shm, task, entry.since, Instant::now());
    publish(&q.task.shm, task, attach, q);
    let next = q.best(order).cloned().filter(|_| was_first);
    if q.entries.is_empty() {
        inner.queues.remove(&task);
    }
    (was_first, next)
}

/// Counts a wait that ended (a permit, the deadline, an error or the
/// waiter gone) in the task's waiting-time histogram: two adds to words of
/// the line the waiter wrote its ticket to (see `TaskSlot::wait_word`).
fn waited(shm: &Shm, task: u32, since: Instant, now: Instant) {
    let ns = now.saturating_duration_since(since).as_nanos();
    let ns = ns.min(u64::MAX as u128) as u64;
    let slot = shm.task_slot(task);
    let sum = slot.wait_word(WAIT_BUCKETS);
    slot.wait_word(health::octave(ns))
        .fetch_add(1, Ordering::Relaxed);
    sum.fetch_add(ns, Ordering::Relaxed);
}

/// Publishes the queue's best ticket as this handle's head.
fn publish(shm: &Shm, task: u32, attach: u32, q: &Queue) {
    let order = queue::order(shm.task_slot(task));
    let best = q.best(order).map_or(0, |e| e.ticket);
    queue::publish(shm, task, attach, best, q.entries.len());
}
