//! A waiting acquire as a future (feature `async`): the waiter thread's
//! hand-over wakes the task's waker, so nothing polls, and no runtime is
//! needed. Dropping the future leaves the queue; a permit handed to it in
//! the meantime is released (as `ignored`), never left taken.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::room::{Answer, Entry};
use crate::error::{Error, Result};
use crate::task::{OwnedPermit, Task};
use crate::words::Limited;

/// The future of [`Task::acquire_async`].
#[must_use = "a future does nothing unless polled"]
pub struct Acquire {
    task: Task,
    n: u32,
    timeout: Option<Duration>,
    entry: Option<Arc<Entry>>,
    done: bool,
}

impl Task {
    /// [`Task::acquire_owned_wait`] as a future: waits up to `timeout`
    /// (`None` = do not wait) in the task's order without blocking the
    /// thread. An acquire that may pull global quota from the store is left
    /// to the handle's waiter thread, so the caller's thread never waits on
    /// the store.
    pub fn acquire_async(&self, n: u32, timeout: Option<Duration>) -> Acquire {
        Acquire {
            task: self.clone(),
            n,
            timeout,
            entry: None,
            done: false,
        }
    }
}

impl Acquire {
    /// The first poll: a try where it cannot block, else a place in line.
    fn start(&mut self, cx: &Context<'_>) -> Result<Option<Answer>> {
        let (task, n) = (&self.task, self.n);
        let timeout = self.timeout.filter(|t| !t.is_zero());
        let why = if timeout.is_none() || !task.may_pull(n) {
            match task.acquire_raw(n)? {
                Ok(permit) => return Ok(Some(Ok(Ok(permit)))),
                Err(why) if timeout.is_none() => return Ok(Some(Ok(Err(why)))),
                Err(why) => why,
            }
        } else {
            Limited::Global
        };
        if !task.holds_lanes()? {
            // A pooled table with no set free: no place in line either.
            return Ok(Some(task.acquire_raw(n)));
        }
        let deadline = super::deadline_after(timeout.unwrap_or_default());
        let entry = task.enqueue(n, deadline, why, false)?;
        entry.set_waker(cx.waker());
        let answer = entry.take();
        if answer.is_none() {
            self.entry = Some(entry);
        }
        Ok(answer)
    }
}

impl Future for Acquire {
    type Output = Result<std::result::Result<OwnedPermit, Limited>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(Err(Error::invalid(
                "acquire_async polled after it completed",
            )));
        }
        let answer = match &this.entry {
            None => match this.start(cx) {
                Ok(answer) => answer,
                Err(e) => Some(Err(e)),
            },
            Some(entry) => {
                entry.set_waker(cx.waker());
                entry.take()
            }
        };
        match answer {
            None => Poll::Pending,
            Some(answer) => {
                this.entry = None;
                this.done = true;
                let task = this.task.clone();
                Poll::Ready(answer.map(|r| r.map(|raw| OwnedPermit::new(task, raw))))
            }
        }
    }
}

impl Drop for Acquire {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            let answer = self.task.leave(&entry);
            self.task.discard(answer);
        }
    }
}
