//! This handle's waiters: who waits for which task, in ticket order, and the
//! answer each is given.
//!
//! Process memory, never the file. The lock is fork-safe (a holder from
//! before a `fork` does not exist in the child, and its waiters do not
//! either: a room from another generation starts empty).

use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::Waker;
use std::time::Instant;

use super::queue;
use crate::error::Result;
use crate::shm::{ForkSafeLock, Shm, fork_generation};
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
pub(crate) struct Room {
    lock: ForkSafeLock,
    inner: UnsafeCell<Inner>,
}

// SAFETY: `inner` is only reached through `with`, under `lock`.
unsafe impl Sync for Room {}
unsafe impl Send for Room {}

impl Default for Room {
    fn default() -> Self {
        Self {
            lock: ForkSafeLock::new(),
            inner: UnsafeCell::new(Inner::default()),
        }
    }
}

/// What a change of a task's waiters asks of the caller once unlocked.
pub(crate) struct Moved {
    /// The host-wide head may have changed: wake it.
    pub wake_head: bool,
    /// A waiter thread must be started for this handle.
    pub start_helper: bool,
}

impl Room {
    fn with<T>(&self, body: impl FnOnce(&mut Inner) -> T) -> T {
        let _guard = self.lock.lock();
        // SAFETY: the lock is held; no reference into `inner` outlives `body`.
        let inner = unsafe { &mut *self.inner.get() };
        let generation = fork_generation();
        if inner.generation != generation {
            // A room copied by fork: its waiters are the parent's threads.
            *inner = Inner {
                generation,
                ..Inner::default()
            };
        }
        body(inner)
    }

    /// Queues a waiter for `n` of `task` and publishes this handle's head.
    pub fn enqueue(
        &self,
        task: &Task,
        attach: u32,
        n: u32,
        deadline: Instant,
        last: Limited,
    ) -> (Arc<Entry>, Moved) {
        let shm = &*task.shm;
        let slot = shm.task_slot(task.index);
        self.with(|inner| {
            let entry = Arc::new(Entry {
                ticket: queue::take_ticket(slot),
                n,
                deadline,
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
            let start_helper = !inner.helper;
            inner.helper = true;
            (
                entry,
                Moved {
                    wake_head: true,
                    start_helper,
                },
            )
        })
    }

    /// Takes `entry` out of the queue: its answer if it has one, else `None`
    /// (and the head is woken if it was this handle's first waiter, since a
    /// wake may have been meant for it).
    pub fn leave(&self, shm: &Shm, task: u32, attach: u32, entry: &Entry) -> Option<Answer> {
        let was_first = self.with(|inner| {
            if let Some(answer) = entry.take() {
                return Err(answer);
            }
            let Some(q) = inner.queues.get_mut(&task) else {
                return Ok(false);
            };
            let order = queue::order(shm.task_slot(task));
            let first = q.best(order).is_some_and(|e| e.ticket == entry.ticket);
            q.entries.remove(&entry.ticket);
            publish(shm, task, attach, q);
            if q.entries.is_empty() {
                inner.queues.remove(&task);
            }
            Ok(first)
        });
        match was_first {
            Err(answer) => Some(answer),
            Ok(first) => {
                if first {
                    queue::wake_head(shm, task);
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
            let Some(q) = inner.queues.get_mut(&task) else {
                return Err(answer);
            };
            if q.entries.remove(&entry.ticket).is_none() {
                return Err(answer);
            }
            publish(&q.task.shm, task, attach, q);
            if q.entries.is_empty() {
                inner.queues.remove(&task);
            }
            Ok(entry.set(answer))
        });
        match given {
            Ok(waker) => {
                entry.notify(waker);
                None
            }
            Err(answer) => Some(answer),
        }
    }

    /// The task's first waiter on this handle.
    pub fn first(&self, task: u32) -> Option<Arc<Entry>> {
        self.with(|inner| {
            let q = inner.queues.get(&task)?;
            q.best(queue::order(q.task.shm.task_slot(task))).cloned()
        })
    }

    /// Each task's first waiter on this handle, with the task.
    pub fn firsts(&self) -> Vec<(Task, Arc<Entry>)> {
        self.with(|inner| {
            inner
                .queues
                .values()
                .filter_map(|q| {
                    let order = queue::order(q.task.shm.task_slot(q.task.index));
                    Some((q.task.clone(), q.best(order)?.clone()))
                })
                .collect()
        })
    }

    /// Tells the waiters whose deadline passed by `now` that time ran out
    /// (with the limit that refused them last) and takes them out of their
    /// queues; returns the next deadline.
    pub fn expire(&self, attach: u32, now: Instant) -> Option<Instant> {
        let (expired, next) = self.with(|inner| {
            let mut expired = Vec::new();
            let mut next: Option<Instant> = None;
            for (&task, q) in inner.queues.iter_mut() {
                let before = expired.len();
                q.entries.retain(|_, e| {
                    if e.deadline <= now {
                        expired.push(e.clone());
                        false
                    } else {
                        next = Some(next.map_or(e.deadline, |n| n.min(e.deadline)));
                        true
                    }
                });
                if expired.len() != before {
                    publish(&q.task.shm, task, attach, q);
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
            (expired, next)
        });
        for (entry, waker) in expired {
            entry.notify(waker);
        }
        next
    }

    /// Called by the waiter thread when it finds nobody waiting: it stops
    /// (true) unless a waiter came meanwhile.
    pub fn retire(&self, generation: u64) -> bool {
        self.with(|inner| {
            if inner.generation != generation || inner.queues.is_empty() {
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

/// Publishes the queue's best ticket as this handle's head.
fn publish(shm: &Shm, task: u32, attach: u32, q: &Queue) {
    let order = queue::order(shm.task_slot(task));
    let best = q.best(order).map_or(0, |e| e.ticket);
    queue::publish(shm, task, attach, best, q.entries.len());
}
