//! Per-process regions: one attachment slot per process (or table handle),
//! and per (task, process) the ledger lanes and the statistics baseline.

use std::sync::atomic::{AtomicU32, AtomicU64};

/// Ledger lanes per (task, process): threads of one process take different
/// lanes, so they neither wait for each other nor share a cache line.
pub(crate) const LANES: u32 = 4;

/// Latency-sketch buckets each lane carries on its ledger line.
pub(crate) const SKETCH_PER_LANE: usize = 5;

/// Attachment slot state: bit 0 set = live, the claim's epoch above. The
/// epoch survives the slot being freed, so every claim has a new one.
pub(crate) const ATTACH_LIVE: u64 = 1;

/// One attached process (or one handle of it: each open table is its own
/// attachment). Liveness is not in here: it is the kernel lock the owner holds
/// on this slot's byte of the file (see `shm::attach`).
#[repr(C, align(64))]
pub(crate) struct AttachSlot {
    pub state: AtomicU64,
    /// The owner's pid as it saw itself, for reports only.
    pub pid: AtomicU64,
    /// Futex word of the attachment's waiter thread (see `task::wait`):
    /// whoever may have freed a permit for the head of a task's queue bumps
    /// it and wakes that one thread, not every waiter.
    pub wake: AtomicU32,
    _pad_wake: AtomicU32,
    _pad: [AtomicU64; 5],
}

/// The statistics each lane counts, in permits unless named otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Counter {
    Admitted,
    LimitedLocal,
    LimitedGlobal,
    LimitedConcurrency,
    ReleasedSuccess,
    ReleasedDropped,
    ReleasedIgnored,
    /// Acquire→release times of permits released as success or dropped,
    /// summed per permit, in nanoseconds.
    RttSumNs,
}

pub(crate) const COUNTERS: usize = 8;

/// Per-(task, process, lane) state. Line 0 is the lane's ledger (other
/// processes read it when they help or reap); line 1 its counters, written
/// only by the threads using the lane.
#[repr(C, align(64))]
pub(crate) struct Lane {
    /// held | seq | BUSY (see `limit::ledger`).
    pub ledger: AtomicU64,
    /// seq | delta of the op in progress.
    pub intent: AtomicU64,
    /// Permits reclaimed from dead owners of this lane: seq of the last drain
    /// (24 bits) | total (40 bits, wrapping), so a repeated drain counts once.
    pub reclaimed: AtomicU64,
    /// Five buckets of the task's latency sketch (see `quota::health`):
    /// lane `k / 5` holds bucket `k`, so the sketch needs no space of its
    /// own. Zero in a table made by 0.3.0, which never writes them.
    pub sketch: [AtomicU64; SKETCH_PER_LANE],
    /// Indexed by [`Counter`]; monotonic for the table's life (never reset:
    /// a new owner of the slot records a [`Baseline`] instead).
    pub counters: [AtomicU64; COUNTERS],
}

/// What the lanes of a (task, process slot) had counted when the current
/// owner claimed the slot: per-process statistics are the lanes minus this.
#[repr(C, align(64))]
pub(crate) struct Baseline {
    pub counters: [AtomicU64; COUNTERS],
    pub reclaimed: AtomicU64,
    /// The ticket of the first of this attachment's waiters for the task
    /// (the newest under `lifo`); 0 = none waits. The host-wide queue's head
    /// is the best ticket over the live attachments (see `task::wait`).
    pub queue_head: AtomicU64,
    /// How many of this attachment's threads wait for the task (reported).
    pub queue_len: AtomicU64,
    _pad: [AtomicU64; 5],
}

const _: () = {
    assert!(size_of::<AttachSlot>() == 64);
    assert!(size_of::<Lane>() == 128);
    assert!(std::mem::offset_of!(Lane, counters) == 64);
    assert!(size_of::<Baseline>() == 128);
};
