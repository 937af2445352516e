//! Acquires that wait for a permit: host-wide, in order, without polling.
//!
//! A waiter that is refused takes a ticket and joins its handle's queue for
//! the task ([`Room`], process memory); each handle publishes its best
//! ticket in the table, and the best published ticket of a live handle is
//! the head of the host's queue (`queue`). A handle's first waiter takes a
//! permit when it heads the queue: a thread itself, a future through the
//! handle's waiter thread (`helper`), which hands it over. A release wakes
//! only the head's handle. Non-waiting acquires do not jump the queue
//! unless the task allows `barging`.
//!
//! A permit taken for a waiter is taken through the ordinary acquire (the
//! handle's ledger counts it, so a kill at any instruction gives it back
//! through the reaper), and a future that left meanwhile (its deadline, a
//! drop) has it released by whoever finds it unclaimed.

#[cfg(feature = "async")]
mod future;
mod helper;
mod queue;
mod room;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[cfg(feature = "async")]
pub use future::Acquire;
use helper::Turn;
pub(crate) use queue::{clear_flag, freed, wake_head};
pub(crate) use room::Room;
use room::{Answer, Entry};

use super::{Decision, OwnedPermit, Permit, RawPermit, Task};
use crate::error::{Error, ErrorKind, Result};
use crate::format::{TaskSlot, WAIT_BARGING};
use crate::words::{Limited, Outcome};

/// `timeout` from now, saturated: a timeout longer than a century waits a
/// century (an `Instant` cannot hold every `Duration`).
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(100 * 365 * 86_400);
    let now = Instant::now();
    now.checked_add(timeout.min(FAR)).unwrap_or(now)
}

impl Task {
    /// [`Task::acquire`] that waits up to `timeout` for a permit (`None` =
    /// do not wait), in the task's order (`wait_order`), host-wide.
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

    /// [`Task::acquire_raw`] that waits up to `timeout`: the thread sleeps
    /// until it is handed a permit or its deadline passes.
    pub fn acquire_raw_wait(
        &self,
        n: u32,
        timeout: Option<Duration>,
    ) -> Result<std::result::Result<RawPermit, Limited>> {
        let why = match self.acquire_raw(n)? {
            Ok(permit) => return Ok(Ok(permit)),
            Err(why) => why,
        };
        let Some(timeout) = timeout.filter(|t| !t.is_zero()) else {
            return Ok(Err(why));
        };
        if !self.holds_lanes()? {
            // A pooled table with no set free: no place in line either.
            return Ok(Err(why));
        }
        let deadline = deadline_after(timeout);
        let entry = self.enqueue(n, deadline, why, true)?;
        let attach = self.attach_index()?;
        let word = &self.shm.attach_slot(attach).wake;
        loop {
            let mine = entry.word.load(Ordering::Acquire);
            if let Some(answer) = entry.take() {
                return answer;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return self.leave(&entry).unwrap_or(Ok(Err(entry.last())));
            }
            if !self.waits.is_first(self.index, &entry) {
                // Until it is this handle's first waiter (then woken).
                queue::sleep_private(&entry.word, mine, left);
                continue;
            }
            // Its own turn: woken by whoever may have freed a permit.
            let seen = word.load(Ordering::SeqCst);
            std::sync::atomic::fence(Ordering::SeqCst); // as `helper::run`'s
            match helper::take_turn(&self.waits, self, attach, &entry) {
                Turn::Answered => {}
                Turn::NotOurs => queue::sleep_shared(word, seen, left.min(MAX_SLEEP)),
                Turn::Refused(after) => queue::sleep_shared(word, seen, left.min(after)),
            }
        }
    }

    /// Joins the queue (a `thread`, or a future), starting the handle's
    /// waiter thread if a future needs it.
    fn enqueue(&self, n: u32, deadline: Instant, why: Limited, thread: bool) -> Result<Arc<Entry>> {
        let attach = self.attach_index()?;
        let (entry, start_helper) = self.waits.enqueue(self, attach, n, deadline, why, thread);
        if start_helper && let Err(e) = helper::start(self.waits.clone(), Arc::downgrade(&self.shm))
        {
            let why = format!("could not start the waiter thread: {e}");
            self.waits
                .fail_all(attach, || Error::new(ErrorKind::Internal, why.clone()));
        }
        // The head may have changed (always under lifo).
        wake_head(&self.shm, self.index);
        Ok(entry)
    }

    /// Leaves the queue: the answer if one came first.
    fn leave(&self, entry: &Entry) -> Option<Answer> {
        let attach = self.attach_index().ok()?;
        self.waits.leave(&self.shm, self.index, attach, entry)
    }

    fn attach_index(&self) -> Result<u32> {
        self.shm
            .owner()?
            .index()
            .ok_or_else(|| Error::new(ErrorKind::Internal, "no attachment slot"))
    }

    /// Whether the cap has a free permit now (for passing a wake on).
    fn has_room(&self) -> bool {
        let word = self
            .shm
            .task_slot(self.index)
            .in_flight
            .load(Ordering::Acquire);
        self.limit()
            .is_some_and(|cap| crate::limit::ledger::word_count(word) < cap as u64)
    }

    /// Gives back a permit nobody came for.
    fn discard(&self, answer: Option<Answer>) {
        if let Some(Ok(Ok(mut permit))) = answer {
            let _ = self.release_raw(&mut permit, Outcome::Ignored);
        }
    }
}

/// Why a non-waiting acquire is refused while others wait for the task, or
/// `None` when the task allows barging. The limit named is the one the
/// waiters wait for: the cap if there is one, else the rate.
#[cold]
pub(crate) fn queue_refusal(slot: &TaskSlot, cap: u32, interval: u64) -> Option<Limited> {
    if slot.adaptive.wait_policy.load(Ordering::Relaxed) & WAIT_BARGING != 0 {
        return None;
    }
    Some(if cap != 0 {
        Limited::Concurrency
    } else if interval != 0 {
        Limited::Local
    } else {
        Limited::Global
    })
}

/// The longest a waiter thread sleeps: a wake that never comes (one meant
/// for a process killed a moment later, a 0.3 process's release) costs at
/// most this.
const MAX_SLEEP: Duration = Duration::from_millis(20);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_past_what_an_instant_holds_saturates() {
        let far = deadline_after(Duration::MAX);
        assert!(far > Instant::now() + Duration::from_secs(50 * 365 * 86_400));
        assert!(deadline_after(Duration::from_secs(1)) < far);
    }
}
