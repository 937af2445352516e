//! The keeper thread: gives back the quota of a table handle's idle tasks.
//!
//! Pulls run on the callers' threads, but a host that has gone quiet makes
//! no call, and what it holds of the slice would stay stranded until the
//! slice ends (see `give_back`). So a table handle whose store is Redis starts,
//! with its first task, one thread that looks at its tasks with a global
//! limit every [`EVERY`] and gives back what one holds when no admission
//! spent any of it, and none was refused, for a twentieth of a slice (the
//! same look notes the host's busy spells: see `spell`). Every process's
//! keeper looks; the pull lock and the host word's compare-and-swap let
//! only one give back, and only what nobody spent meanwhile.
//!
//! It holds weak references: it ends when the table handle and every task
//! handle from it are dropped. After a `fork` the child has no thread; its
//! next task registration starts one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{Quota, TaskRef};
use crate::shm::{ForkLocked, Shm, fork_generation};

/// How often the keeper looks.
pub(crate) const EVERY: Duration = Duration::from_millis(10);

/// How long a task's quota must go unspent before it is given back: a
/// twentieth of its slice (50 ms of a 1 s slice), at least two looks.
pub(crate) fn idle_after(slice_ms: u32) -> Duration {
    (Duration::from_millis(slice_ms as u64) / 20).max(2 * EVERY)
}

/// The tasks a table handle registered, what its keeper saw of their host
/// words, and its thread (a field of the handle's [`Quota`], which its task
/// handles share).
#[derive(Default)]
pub(crate) struct Keeper {
    /// Under a lock a fork cannot leave held: the thread may hold it when
    /// another thread forks, and the child then registers its tasks.
    inner: ForkLocked<Inner>,
    /// The fork generation the thread runs in, plus one; 0: none started.
    started: AtomicU64,
}

/// What a keeper looks after besides idle quota: a keyed task's keys (see
/// `keyed::record`), tended while some task handle holds them.
pub(crate) trait Tend: Send + Sync {
    fn tend(&self, shm: &Shm, quota: &Quota, task: &str);
}

#[derive(Default)]
struct Inner {
    /// (task index, name).
    tasks: Vec<(u32, String)>,
    /// (task index, name, what to tend).
    tended: Vec<(u32, String, Weak<dyn Tend>)>,
    /// (task index, its host and refused words, the table clock when
    /// either last changed).
    seen: Vec<(u32, [u64; 2], u64)>,
}

impl Keeper {
    /// Whether `words` are what task `index`'s host and refused words have
    /// held for `idle_ticks` (as seen by this handle's earlier looks).
    pub(super) fn unmoved(&self, index: u32, words: [u64; 2], now: u64, idle_ticks: u64) -> bool {
        self.inner
            .with(|inner| match inner.seen.iter_mut().find(|s| s.0 == index) {
                Some(s) if s.1 == words => now.saturating_sub(s.2) >= idle_ticks,
                Some(s) => {
                    (s.1, s.2) = (words, now);
                    false
                }
                None => {
                    inner.seen.push((index, words, now));
                    false
                }
            })
    }

    /// Has `quota`'s keeper tend `what` of task `index` (one per task: a
    /// later handle's replaces one dropped).
    pub(crate) fn tend(quota: &Quota, index: u32, name: &str, what: Weak<dyn Tend>) {
        quota.keeper.inner.with(|inner| {
            inner.tended.retain(|t| t.2.strong_count() > 0);
            if !inner.tended.iter().any(|t| t.0 == index) {
                inner.tended.push((index, name.to_string(), what));
            }
        });
    }

    /// Adds task `index` to those `quota`'s keeper looks at, and starts the
    /// thread if this process has none (only for a store with other hosts:
    /// the embedded store has nobody to give to).
    pub(crate) fn watch(shm: &Arc<Shm>, quota: &Arc<Quota>, index: u32, name: &str) {
        if !quota.store.keeper() {
            return;
        }
        let me = &quota.keeper;
        me.inner.with(|inner| {
            if !inner.tasks.iter().any(|t| t.0 == index) {
                inner.tasks.push((index, name.to_string()));
            }
        });
        let generation = fork_generation() + 1;
        let seen = me.started.load(Ordering::Acquire);
        if seen == generation
            || me
                .started
                .compare_exchange(seen, generation, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let (shm, weak) = (Arc::downgrade(shm), Arc::downgrade(quota));
        let spawned = std::thread::Builder::new()
            .name("flowctrl-keep".into())
            .spawn(move || run(&shm, &weak, generation));
        if spawned.is_err() {
            // No thread to be had: idle quota stays until the slice ends,
            // as it did before keepers; the next registration tries again.
            me.started.store(0, Ordering::Release);
        }
    }
}

fn run(shm: &Weak<Shm>, quota: &Weak<Quota>, generation: u64) {
    loop {
        std::thread::sleep(EVERY);
        let (Some(shm), Some(quota)) = (shm.upgrade(), quota.upgrade()) else {
            return;
        };
        if quota.keeper.started.load(Ordering::Acquire) != generation {
            return;
        }
        let tasks = quota.keeper.inner.with(|inner| inner.tasks.clone());
        for (index, name) in &tasks {
            let slot = shm.task_slot(*index);
            if let Some(g) = slot.global() {
                let t = TaskRef {
                    shm: &shm,
                    index: *index,
                    slot,
                    task: name,
                    g,
                };
                quota.return_idle(t, idle_after(g.slice_ms));
            }
        }
        let tended = quota.keeper.inner.with(|inner| inner.tended.clone());
        for (_, name, what) in &tended {
            if let Some(what) = what.upgrade() {
                what.tend(&shm, &quota, name);
            }
        }
    }
}
