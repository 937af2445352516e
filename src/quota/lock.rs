//! The per-task pull lock: one word, the holder's compact owner and the
//! table clock in ms when it was taken.
//!
//! Whoever finds it held checks the holder: a dead one (the kernel dropped
//! its attachment lock) or one holding it past its bound (`stale_after`)
//! is broken at once. The reaper also clears the locks of the processes it
//! reaps.
//!
//! **A process killed during a pull** may have died after the store
//! granted a chunk and before the chunk reached the table: the key charged
//! the host with a grant it never received. Whoever takes the lock from a
//! dead holder (or the reaper that clears it) marks the task `redeem`; the
//! next pull asks the store to hand back that difference (the key's charge
//! minus the host's claim) without taking it from the slice again. A
//! holder only stuck, not dead, may still deposit its grant: its lock is
//! broken without redeeming.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::Result;
use crate::events;
use crate::format::{QuotaSlot, TaskSlot};
use crate::shm::Shm;

/// Proof of holding a task's pull lock; releases it when dropped, and then
/// (its field dropped after) writes the lines logged meanwhile: a logger
/// that calls back into flowctrl finds the lock free.
pub(super) struct PullLock<'a> {
    word: &'a AtomicU64,
    held: u64,
    _defer: events::Defer,
}

impl Drop for PullLock<'_> {
    fn drop(&mut self) {
        // Only our own claim: a lock broken as stale stays with its breaker.
        let _ = self
            .word
            .compare_exchange(self.held, 0, Ordering::Release, Ordering::Relaxed);
    }
}

fn now_ms(shm: &Shm) -> u32 {
    (shm.clock.ticks_to_ns(shm.clock.now()) / 1_000_000) as u32
}

/// Takes the task's pull lock if it is free, or held by a dead holder or
/// one past `stale_after`; `None` while a live holder is within its bound.
pub(super) fn try_lock<'a>(
    shm: &Shm,
    q: &'a QuotaSlot,
    stale_after: Duration,
) -> Result<Option<PullLock<'a>>> {
    let me = shm.owner()?.compact() as u64;
    let now = now_ms(shm);
    let current = q.pull_lock.load(Ordering::Acquire);
    if current != 0 {
        let age = now.wrapping_sub((current >> 32) as u32);
        let stuck = age as u64 > stale_after.as_millis() as u64;
        let holder = current as u32;
        let alive = holder as u64 == me || shm.compact_owner_alive(holder);
        if !stuck && alive {
            return Ok(None);
        }
        if !alive {
            // Only a dead holder's grant is surely lost: a stuck one may
            // still deposit it.
            q.redeem.store(1, Ordering::Release);
        }
    }
    let held = me | (now as u64) << 32;
    Ok(q.pull_lock
        .compare_exchange(current, held, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
        .then(|| PullLock {
            word: &q.pull_lock,
            held,
            _defer: events::defer(),
        }))
}

/// The reaper's part: clears the pull lock of a dead attachment slot.
pub(crate) fn reclaim_pull_lock(slot: &TaskSlot, attach: u32) {
    let word = slot.quota.pull_lock.load(Ordering::Acquire);
    if word != 0 && (word & 0xffff) as u32 == attach + 1 {
        slot.quota.redeem.store(1, Ordering::Release);
        let _ = slot
            .quota
            .pull_lock
            .compare_exchange(word, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}
