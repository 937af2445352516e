//! The host-wide queue's words in the table, and waking its head.
//!
//! - Each waiter takes a **ticket** from the task's counter
//!   (`AdaptiveSlot::tickets`): tickets order the queue.
//! - Each attachment (a process's table handle) publishes the best ticket
//!   of its own waiters in its `Baseline::queue_head` for the task (the
//!   lowest under `fifo`, the highest under `lifo`); only that handle writes
//!   it, under its room's lock.
//! - The **head** of the queue is the best published ticket of a live
//!   attachment. Only the head's attachment may take a permit for a waiter;
//!   whoever may have freed one (a release, a raised limit, a head that
//!   left) wakes the head's attachment, one futex word (`AttachSlot::wake`)
//!   on which that attachment's waiter thread sleeps.
//! - `AdaptiveSlot::queued` is nonzero while any attachment may publish a
//!   head: non-waiting acquires check it (on a line they read anyway) and
//!   do not jump the queue.
//!
//! No lost wake: a waiter publishes its head and the flag, then fences, then
//! its attachment tries; a release moves the count, fences, then reads the
//! flag. One of the two sees the other (`wait_loom.rs` checks every
//! interleaving). A dead attachment's head is cleared by the reaper (which
//! then wakes the next head), and until then the scan skips attachments
//! marked dead; sleeps are bounded, so a wake that went to a process killed
//! a moment later costs the others at most one sleep.

use std::sync::atomic::{AtomicU32, Ordering, fence};
use std::time::Duration;

use crate::format::{ATTACH_LIVE, TaskSlot};
use crate::shm::Shm;
use crate::words::WaitOrder;

/// Whether ticket `a` goes before ticket `b` under `order`.
#[inline]
pub(crate) fn before(order: WaitOrder, a: u64, b: u64) -> bool {
    match order {
        WaitOrder::Fifo => a < b,
        WaitOrder::Lifo => a > b,
    }
}

/// The order a task's waiters are admitted in, from its policy word.
pub(crate) fn order(slot: &TaskSlot) -> WaitOrder {
    if slot.adaptive.wait_policy.load(Ordering::Relaxed) & crate::format::WAIT_LIFO != 0 {
        WaitOrder::Lifo
    } else {
        WaitOrder::Fifo
    }
}

/// A new ticket (never 0).
pub(crate) fn take_ticket(slot: &TaskSlot) -> u64 {
    slot.adaptive.tickets.fetch_add(1, Ordering::Relaxed) + 1
}

/// The queue's head: (attachment, ticket) of the best published ticket of a
/// live attachment.
pub(crate) fn head(shm: &Shm, task: u32, order: WaitOrder) -> Option<(u32, u64)> {
    let mut best: Option<(u32, u64)> = None;
    for attach in 0..shm.geometry.attach_capacity {
        let ticket = shm.baseline(task, attach).queue_head.load(Ordering::SeqCst);
        if ticket == 0 || best.is_some_and(|(_, b)| !before(order, ticket, b)) {
            continue;
        }
        if shm.attach_slot(attach).state.load(Ordering::Acquire) & ATTACH_LIVE != 0 {
            best = Some((attach, ticket));
        }
    }
    best
}

/// Publishes `attach`'s best ticket for `task` (0 = none waits) and how
/// many of its threads wait. Called by the attachment itself, in order.
pub(crate) fn publish(shm: &Shm, task: u32, attach: u32, ticket: u64, waiting: usize) {
    let base = shm.baseline(task, attach);
    let was = base.queue_head.swap(ticket, Ordering::SeqCst);
    base.queue_len.store(waiting as u64, Ordering::Relaxed);
    let slot = shm.task_slot(task);
    if ticket != 0 {
        if slot.adaptive.queued.load(Ordering::Relaxed) == 0 {
            slot.adaptive.queued.store(1, Ordering::SeqCst);
        }
        // Pairs with the fence of a release: see the module's doc.
        fence(Ordering::SeqCst);
    } else if was != 0 {
        clear_flag(shm, task);
    }
}

/// Lowers the task's `queued` flag if no attachment publishes a head. A
/// waiter publishing meanwhile raises it again: the second scan follows the
/// lowering, so either it sees that waiter or that waiter's raise follows.
pub(crate) fn clear_flag(shm: &Shm, task: u32) {
    let flag = &shm.task_slot(task).adaptive.queued;
    if any_published(shm, task) {
        return;
    }
    if flag
        .compare_exchange(1, 0, Ordering::SeqCst, Ordering::Relaxed)
        .is_ok()
    {
        fence(Ordering::SeqCst);
        if any_published(shm, task) {
            flag.store(1, Ordering::SeqCst);
        }
    }
}

fn any_published(shm: &Shm, task: u32) -> bool {
    (0..shm.geometry.attach_capacity)
        .any(|a| shm.baseline(task, a).queue_head.load(Ordering::SeqCst) != 0)
}

/// After a permit may have been freed (the caller fenced after freeing
/// it): wakes the head's attachment, if anyone waits.
#[inline]
pub(crate) fn freed(shm: &Shm, task: u32) {
    if shm.task_slot(task).adaptive.queued.load(Ordering::Relaxed) != 0 {
        wake_head(shm, task);
    }
}

/// Wakes the attachment at the head of the task's queue.
#[cold]
pub(crate) fn wake_head(shm: &Shm, task: u32) {
    let order = order(shm.task_slot(task));
    if let Some((attach, _)) = head(shm, task, order) {
        wake_attachment(shm, attach);
    }
}

/// Bumps an attachment's wake word and wakes its waiter thread.
pub(crate) fn wake_attachment(shm: &Shm, attach: u32) {
    let word = &shm.attach_slot(attach).wake;
    word.fetch_add(1, Ordering::SeqCst);
    futex(word, libc::FUTEX_WAKE, i32::MAX as u32, None);
}

/// Sleeps while `*word == seen`, at most `timeout`: a futex shared between
/// processes (the word is in the file).
pub(crate) fn sleep_shared(word: &AtomicU32, seen: u32, timeout: Duration) {
    futex(word, libc::FUTEX_WAIT, seen, Some(timeout));
}

/// Sleeps while `*word == seen`, at most `timeout`: a futex of this process.
pub(crate) fn sleep_private(word: &AtomicU32, seen: u32, timeout: Duration) {
    futex(
        word,
        libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
        seen,
        Some(timeout),
    );
}

/// Wakes the threads of this process sleeping on `word`.
pub(crate) fn wake_private(word: &AtomicU32) {
    futex(
        word,
        libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
        i32::MAX as u32,
        None,
    );
}

fn futex(word: &AtomicU32, op: i32, value: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned u32 (in our mapping or our memory);
    // the kernel only reads it. EAGAIN, EINTR and ETIMEDOUT all mean "look
    // again", which every caller does.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), op, value, ts_ptr);
    }
}
