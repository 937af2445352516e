//! Attachments: which processes use the table, and giving back what dead ones
//! held.
//!
//! Each process claims an attachment slot recording its pid and start time.
//! Permits and statistics are counted against it, so when the process dies —
//! even by SIGKILL — the next process to look (the *reaper*: on attach, and
//! when a task's concurrency is exhausted, at most once per interval
//! host-wide) returns its permits to the pool and folds its counters into the
//! task's retired totals.
//!
//! A process that forks gets a fresh attachment in the child: a
//! `pthread_atfork` child handler bumps a process-local generation, and the
//! first use of the table in the child claims a new slot. Pre-fork servers
//! (gunicorn, uWSGI, a C++ master) thus reclaim each worker's permits when
//! that worker dies, not when the master does.

use std::sync::Once;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::TableInner;
use super::layout::*;
use crate::error::{Error, ErrorKind, Result};
use crate::limit::concurrency;

/// Bumped in the child after every fork.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(1);

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

fn install_fork_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering a handler that only touches an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

/// This process's attachment to one table.
pub(crate) struct Attachment {
    /// `table_id ^ (epoch << 32 | index)`: names the slot and the claim.
    tag: AtomicU64,
    /// The fork generation in which `tag` was claimed; 0 = none yet.
    generation: AtomicU64,
    pid: AtomicU32,
    /// Serialises re-attaching after a fork among the child's threads.
    reattach: parking_lot::Mutex<()>,
}

impl Attachment {
    pub fn new() -> Self {
        install_fork_handler();
        Self {
            tag: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            pid: AtomicU32::new(0),
            reattach: parking_lot::Mutex::new(()),
        }
    }
}

/// The start time of a live process (field 22 of `/proc/<pid>/stat`, in clock
/// ticks since boot); `None` if it is gone or a zombie.
pub(crate) fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: parse after
    // its last ')'. Then: state (3), ppid (4), ... starttime (22).
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

impl TableInner {
    pub(crate) fn attach_slot(&self, index: u32) -> &AttachSlot {
        assert!(index < self.geometry.attach_capacity);
        // SAFETY: in bounds of the validated mapping; AttachSlot is all atomics.
        unsafe {
            &*(self.base().add(self.geometry.attach_offset()) as *const AttachSlot)
                .add(index as usize)
        }
    }

    /// This process's owner tag, attaching first if this process has not yet
    /// (a fresh handle, or the child of a fork).
    #[inline]
    pub(crate) fn owner(&self) -> Result<u64> {
        let generation = FORK_GENERATION.load(Ordering::Relaxed);
        if self.attachment.generation.load(Ordering::Acquire) == generation {
            return Ok(self.attachment.tag.load(Ordering::Relaxed));
        }
        self.attach(generation)
    }

    /// The slot index a tag issued by this table names.
    #[inline]
    pub(crate) fn attach_index(&self, tag: u64) -> u32 {
        ((tag ^ self.table_id) & PID_MASK) as u32
    }

    #[cold]
    fn attach(&self, generation: u64) -> Result<u64> {
        let _guard = self.attachment.reattach.lock();
        if self.attachment.generation.load(Ordering::Acquire) == generation {
            return Ok(self.attachment.tag.load(Ordering::Relaxed));
        }
        let pid = std::process::id();
        let start_time = process_start_time(pid).ok_or_else(|| {
            Error::new(ErrorKind::Internal, format!("cannot read /proc/{pid}/stat"))
        })?;
        self.reap(true);
        let (index, epoch) = self.claim(pid, start_time)?;
        let tag = self.table_id ^ (epoch << 32 | index as u64);
        self.attachment.tag.store(tag, Ordering::Relaxed);
        self.attachment.pid.store(pid, Ordering::Relaxed);
        self.attachment
            .generation
            .store(generation, Ordering::Release);
        Ok(tag)
    }

    fn claim(&self, pid: u32, start_time: u64) -> Result<(u32, u64)> {
        for index in 0..self.geometry.attach_capacity {
            let slot = self.attach_slot(index);
            if slot.state.load(Ordering::Relaxed) != ATTACH_FREE {
                continue;
            }
            let claiming = ATTACH_CLAIMING | pid as u64;
            if slot
                .state
                .compare_exchange(ATTACH_FREE, claiming, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                slot.start_time.store(start_time, Ordering::Relaxed);
                let epoch = slot.epoch.fetch_add(1, Ordering::Relaxed).wrapping_add(1) & PID_MASK;
                slot.state
                    .store(ATTACH_LIVE | pid as u64, Ordering::Release);
                return Ok((index, epoch));
            }
        }
        Err(Error::new(
            ErrorKind::TooManyProcesses,
            format!(
                "all {} attachment slots of {} are held by live processes",
                self.geometry.attach_capacity,
                self.path.display()
            ),
        ))
    }

    /// Runs the reaper if none has run host-wide within the reap interval
    /// (one atomic load when it has: free on the hot path).
    #[inline]
    pub(crate) fn maybe_reap(&self, now: u64) -> bool {
        let last = self.header().last_reap.load(Ordering::Relaxed);
        if now.saturating_sub(last) < self.reap_interval
            || self
                .header()
                .last_reap
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        self.reap(false)
    }

    /// Reclaims every attachment whose process is gone. Returns whether any was.
    pub(crate) fn reap(&self, stamp: bool) -> bool {
        if stamp {
            let now = self.clock.now();
            self.header().last_reap.store(now, Ordering::Relaxed);
        }
        let me = std::process::id() as u64;
        let mut reclaimed = false;
        for index in 0..self.geometry.attach_capacity {
            let slot = self.attach_slot(index);
            let state = slot.state.load(Ordering::Acquire);
            let pid = (state & PID_MASK) as u32;
            let dead = match state & STATE_MASK {
                ATTACH_LIVE => {
                    process_start_time(pid) != Some(slot.start_time.load(Ordering::Relaxed))
                }
                // A claim or a reaping whose process died half-way.
                ATTACH_CLAIMING | ATTACH_REAPING => {
                    pid as u64 != me && process_start_time(pid).is_none()
                }
                _ => false,
            };
            if !dead {
                continue;
            }
            let claimed = slot
                .state
                .compare_exchange(
                    state,
                    ATTACH_REAPING | me,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok();
            if claimed {
                // A half-done claim never counted anything; reclaiming its
                // (zero) cells is harmless.
                self.release_attachment(index);
                reclaimed = true;
            }
        }
        reclaimed
    }

    /// Gives back the permits an attachment holds and folds its counters into
    /// each task's retired totals, then frees the slot. The caller owns the
    /// slot (state REAPING by this process).
    fn release_attachment(&self, index: u32) {
        for task in 0..self.geometry.task_capacity {
            let slot = self.task_slot(task);
            if slot.state.load(Ordering::Acquire) != TASK_READY {
                continue;
            }
            // The owner is gone (or is this process, detaching): nobody
            // writes these cells now, so taking their values is exact.
            let mut totals = [0u64; 8];
            for cell in self.cells(task, index) {
                let counters = [
                    &cell.admitted,
                    &cell.released_success,
                    &cell.released_dropped,
                    &cell.released_ignored,
                    &cell.limited_local,
                    &cell.limited_global,
                    &cell.limited_concurrency,
                    &cell.rtt_sum_ns,
                ];
                for (total, counter) in totals.iter_mut().zip(counters) {
                    *total += counter.swap(0, Ordering::Relaxed);
                }
            }
            let [
                admitted,
                success,
                dropped,
                ignored,
                local,
                global,
                conc,
                rtt,
            ] = totals;
            let held = admitted.saturating_sub(success + dropped + ignored);
            if held > 0 {
                concurrency::give_back(&slot.in_flight, held);
            }
            let r = &slot.retired;
            let add = |c: &AtomicU64, v: u64| {
                if v != 0 {
                    c.fetch_add(v, Ordering::Relaxed);
                }
            };
            add(&r.admitted, admitted);
            add(&r.released_success, success);
            add(&r.released_dropped, dropped);
            add(&r.released_ignored, ignored);
            add(&r.reclaimed, held);
            add(&r.limited_local, local);
            add(&r.limited_global, global);
            add(&r.limited_concurrency, conc);
            add(&r.rtt_sum_ns, rtt);
        }
        self.attach_slot(index)
            .state
            .store(ATTACH_FREE, Ordering::Release);
    }

    /// Detaches this process (the last handle of the table is dropped): what
    /// it still holds goes back to the pool, its counters into the totals.
    pub(crate) fn detach(&self) {
        let generation = FORK_GENERATION.load(Ordering::Relaxed);
        if self.attachment.generation.load(Ordering::Acquire) != generation {
            return; // never attached in this process (or attached in the parent)
        }
        let tag = self.attachment.tag.load(Ordering::Relaxed);
        let index = self.attach_index(tag);
        let pid = self.attachment.pid.load(Ordering::Relaxed) as u64;
        let slot = self.attach_slot(index);
        if slot
            .state
            .compare_exchange(
                ATTACH_LIVE | pid,
                ATTACH_REAPING | pid,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            self.release_attachment(index);
        }
    }

    /// Pids of the live attachments with their slot index.
    pub(crate) fn attachments(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        (0..self.geometry.attach_capacity).filter_map(|index| {
            let state = self.attach_slot(index).state.load(Ordering::Acquire);
            (state & STATE_MASK == ATTACH_LIVE).then_some((index, (state & PID_MASK) as u32))
        })
    }
}
