//! Acquires that wait for a permit, across processes, without spinning:
//! a waiter sleeps on a futex on the task's wake word, and a release that
//! frees concurrency (or a window that raises the limit) wakes it.
//!
//! There is no waiter count, which a waiter killed while waiting would leak.
//! A waiter sets bit 0 of the word before its last try; a release that
//! sees the bit bumps the word (clearing the bit) and wakes everyone, who
//! try again and set the bit again if they still wait. A dead waiter leaves
//! at most the bit, costing the next release one wake of nobody. Sleeps are
//! bounded (`MAX_SLEEP`), so a missed wake — a limit raised by a change of
//! configuration in a process that died, say — costs latency, not a hang.
//!
//! Fairness: every waiter is woken and retries, the kernel schedules them
//! in turn, so no process is starved (tested with four processes). A
//! waiter does not queue: one that arrives as a permit frees may take it.

use std::sync::atomic::{AtomicU32, Ordering, fence};
use std::time::{Duration, Instant};

use super::{Decision, Limited, OwnedPermit, Permit, RawPermit, Task};
use crate::error::Result;
use crate::format::WAITERS;

/// The longest single sleep: a wake that never comes costs at most this.
const MAX_SLEEP: Duration = Duration::from_millis(20);
/// How long a waiter refused by the rate sleeps before trying again.
const RATE_SLEEP: Duration = Duration::from_millis(1);

impl Task {
    /// [`Task::acquire`] that waits up to `timeout` for a permit (`None` =
    /// do not wait). Sleeps in the kernel while it waits.
    pub fn acquire_wait(&self, n: u32, timeout: Option<Duration>) -> Result<Decision<'_>> {
        Ok(match self.acquire_raw_wait(n, timeout)? {
            Ok(raw) => Decision::Admitted(Permit::new(self, raw)),
            Err(limited) => Decision::Limited(limited),
        })
    }

    /// [`Task::acquire_owned`] that waits up to `timeout` (`None` = do not
    /// wait).
    pub fn acquire_owned_wait(
        &self,
        n: u32,
        timeout: Option<Duration>,
    ) -> Result<std::result::Result<OwnedPermit, Limited>> {
        Ok(self
            .acquire_raw_wait(n, timeout)?
            .map(|raw| OwnedPermit::new(self.clone(), raw)))
    }

    /// [`Task::acquire_raw`] that waits up to `timeout`.
    pub fn acquire_raw_wait(
        &self,
        n: u32,
        timeout: Option<Duration>,
    ) -> Result<std::result::Result<RawPermit, Limited>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let word = &self.shm.task_slot(self.index).adaptive.wake;
        loop {
            let seen = word.load(Ordering::Relaxed) | WAITERS;
            if deadline.is_some() {
                word.fetch_or(WAITERS, Ordering::SeqCst);
                fence(Ordering::SeqCst);
            }
            let limited = match self.acquire_raw(n)? {
                Ok(permit) => return Ok(Ok(permit)),
                Err(limited) => limited,
            };
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::ZERO,
            };
            if left.is_zero() {
                return Ok(Err(limited));
            }
            match limited {
                Limited::Concurrency => futex_wait(word, seen, left.min(MAX_SLEEP)),
                _ => std::thread::sleep(left.min(RATE_SLEEP)),
            }
        }
    }
}

/// Sleeps while `*word == expected`, for at most `timeout`. A shared (not
/// process-private) futex: the word is in a file mapped by many processes.
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned u32 in our mapping; the kernel only
    // reads it. EAGAIN (changed), EINTR and ETIMEDOUT all mean "try again".
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes every waiter on `word`.
pub(crate) fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: as above; FUTEX_WAKE does not touch memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}
