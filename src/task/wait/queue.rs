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
//! flag. One of the two sees the other (the loom model in `queue_loom.rs`
//! checks every interleaving). A dead attachment's head is cleared by the reaper (which
//! then wakes the next head), and until then the scan skips attachments
//! marked dead; sleeps are bounded, so a wake that went to a process killed
//! a moment later costs the others at most one sleep.

use std::sync::atomic::{AtomicU32, Ordering, fence};
use std::time::Duration;

use crate::format::{ATTACH_LIVE, TaskSlot};
use crate::limit::ledger::Word;
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

/// A new ticket (never 0). The counter wraps only in a damaged table (2^64
/// tickets): it is then skipped past 0, not a panic.
pub(crate) fn take_ticket(slot: &TaskSlot) -> u64 {
    loop {
        let ticket = slot
            .adaptive
            .tickets
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1);
        if ticket != 0 {
            return ticket;
        }
    }
}

/// The words of one task's queue, as the protocol sees them: the real
/// table's ([`InTable`]) or the loom model's.
pub(crate) trait Words {
    type W: Word;
    /// The task's `queued` flag.
    fn flag(&self) -> &Self::W;
    /// How many attachments there are.
    fn attachments(&self) -> u32;
    /// Attachment `i`'s published head (0 = none).
    fn head_of(&self, i: u32) -> &Self::W;
    /// Whether attachment `i` is marked live.
    fn live(&self, i: u32) -> bool;
    /// Wakes attachment `i`'s waiter thread.
    fn wake(&self, i: u32);
    /// A sequentially consistent fence.
    fn fence(&self);
}

/// The queue's head: (attachment, ticket) of the best published ticket of a
/// live attachment.
pub(crate) fn head_in<Q: Words>(q: &Q, order: WaitOrder) -> Option<(u32, u64)> {
    let mut best: Option<(u32, u64)> = None;
    for attach in 0..q.attachments() {
        let ticket = q.head_of(attach).load(Ordering::SeqCst);
        if ticket == 0 || best.is_some_and(|(_, b)| !before(order, ticket, b)) {
            continue;
        }
        if q.live(attach) {
            best = Some((attach, ticket));
        }
    }
    best
}

/// Publishes `attach`'s best ticket (0 = none waits); the caller then tries
/// for the head. Fenced on both sides of raising the flag: against a
/// concurrent lowering (see [`lower_in`]), and against a release (see the
/// module's doc).
pub(crate) fn publish_in<Q: Words>(q: &Q, attach: u32, ticket: u64, order: WaitOrder) {
    let mine = q.head_of(attach);
    let was = mine.load(Ordering::Relaxed);
    mine.store(ticket, Ordering::SeqCst);
    if ticket != 0 {
        q.fence();
        let _ = q
            .flag()
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst);
        q.fence();
    } else if was != 0 {
        lower_in(q, order);
    }
}

/// Lowers the flag if no attachment publishes a head. A waiter publishing
/// meanwhile is seen by the second scan, or sees the lowering and raises
/// the flag itself (the fences order the two). A release may have found
/// the flag down in between and woken nobody, so raising it back also
/// wakes the head.
pub(crate) fn lower_in<Q: Words>(q: &Q, order: WaitOrder) {
    if any_published(q) {
        return;
    }
    if q.flag()
        .compare_exchange(1, 0, Ordering::SeqCst, Ordering::Relaxed)
        .is_ok()
    {
        q.fence();
        if any_published(q) {
            q.flag().store(1, Ordering::SeqCst);
            wake_head_in(q, order);
        }
    }
}

fn any_published<Q: Words>(q: &Q) -> bool {
    (0..q.attachments()).any(|a| q.head_of(a).load(Ordering::SeqCst) != 0)
}

/// After a permit may have been freed and a fence: wakes the head's
/// attachment, if anyone waits.
#[inline]
pub(crate) fn freed_in<Q: Words>(q: &Q, order: impl FnOnce() -> WaitOrder) {
    if q.flag().load(Ordering::Relaxed) != 0 {
        wake_head_in(q, order());
    }
}

/// Wakes the attachment at the head of the queue.
#[cold]
pub(crate) fn wake_head_in<Q: Words>(q: &Q, order: WaitOrder) {
    if let Some((attach, _)) = head_in(q, order) {
        q.wake(attach);
    }
}

/// A task's queue in a mapped table.
pub(crate) struct InTable<'a> {
    pub shm: &'a Shm,
    pub task: u32,
}

impl Words for InTable<'_> {
    type W = std::sync::atomic::AtomicU64;
    fn flag(&self) -> &Self::W {
        &self.shm.task_slot(self.task).adaptive.queued
    }
    fn attachments(&self) -> u32 {
        self.shm.geometry.attach_capacity
    }
    fn head_of(&self, i: u32) -> &Self::W {
        // A pooled pair without a set has no waiter: its process queues
        // only once it holds one (see `Task::enqueue`).
        static NONE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        self.shm
            .baseline(self.task, i)
            .map_or(&NONE, |base| &base.queue_head)
    }
    fn live(&self, i: u32) -> bool {
        self.shm.attach_slot(i).state.load(Ordering::Acquire) & ATTACH_LIVE != 0
    }
    fn wake(&self, i: u32) {
        wake_attachment(self.shm, i);
    }
    fn fence(&self) {
        fence(Ordering::SeqCst);
    }
}

/// The queue's head in the table.
pub(crate) fn head(shm: &Shm, task: u32, order: WaitOrder) -> Option<(u32, u64)> {
    head_in(&InTable { shm, task }, order)
}

/// Publishes `attach`'s best ticket for `task` (0 = none waits) and how
/// many of its threads wait. Called by the attachment itself, in order.
pub(crate) fn publish(shm: &Shm, task: u32, attach: u32, ticket: u64, waiting: usize) {
    let Some(base) = shm.baseline(task, attach) else {
        return; // never: a waiter's pair holds a set
    };
    base.queue_len.store(waiting as u64, Ordering::Relaxed);
    publish_in(
        &InTable { shm, task },
        attach,
        ticket,
        order(shm.task_slot(task)),
    );
}

/// Lowers the task's `queued` flag if nobody publishes a head.
pub(crate) fn clear_flag(shm: &Shm, task: u32) {
    lower_in(&InTable { shm, task }, order(shm.task_slot(task)));
}

/// After a permit may have been freed (the caller fenced after freeing
/// it): wakes the head's attachment, if anyone waits.
#[inline]
pub(crate) fn freed(shm: &Shm, task: u32) {
    freed_in(&InTable { shm, task }, || order(shm.task_slot(task)));
}

/// Wakes the attachment at the head of the task's queue.
#[cold]
pub(crate) fn wake_head(shm: &Shm, task: u32) {
    wake_head_in(&InTable { shm, task }, order(shm.task_slot(task)));
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
        // time_t, by inference: on musl libc names the alias deprecated.
        tv_sec: t.as_secs().min(i32::MAX as u64) as _,
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

#[cfg(all(test, feature = "loom"))]
#[path = "queue_loom.rs"]
mod loom_model;

#[cfg(test)]
mod tests {
    use super::*;

    /// A damaged table's ticket counter at its last value: the next ticket
    /// skips 0, and nothing overflows.
    #[test]
    fn a_ticket_counter_at_its_end_wraps_past_zero() {
        // SAFETY: a task slot is atomics only; all-zero is a new file's.
        let slot: Box<TaskSlot> = unsafe { Box::new_zeroed().assume_init() };
        slot.adaptive.tickets.store(u64::MAX - 1, Ordering::Relaxed);
        assert_eq!(take_ticket(&slot), u64::MAX);
        assert_eq!(take_ticket(&slot), 1);
        assert_eq!(take_ticket(&slot), 2);
    }
}
