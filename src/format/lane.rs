//! Per-process regions: one attachment slot per process (or table handle),
//! and per (task, process) the ledger lanes and the statistics baseline.

use std::sync::atomic::{AtomicU32, AtomicU64};

/// Ledger lanes per (task, process): threads of one process take different
/// lanes, so they neither wait for each other nor share a cache line.
pub(crate) const LANES: u32 = 4;

/// Latency-sketch buckets each lane carries on its ledger line.
pub(crate) const SKETCH_PER_LANE: usize = 5;

/// Buckets of a task's latency sketch (see `quota::health`).
pub(crate) const SKETCH_BUCKETS: usize = LANES as usize * SKETCH_PER_LANE;

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

/// `Lane::reclaimed`: drain seq in the top 24 bits, a 40-bit wrapping total.
pub(crate) const RECLAIMED_BITS: u32 = 40;
pub(crate) const RECLAIMED_MASK: u64 = (1 << RECLAIMED_BITS) - 1;

pub(crate) fn reclaimed_total(word: u64) -> u64 {
    word & RECLAIMED_MASK
}

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
    /// Five buckets of the task's latency sketch in a table without
    /// [`LaneSketch`]es (made by 0.3.0): lane `k / 5` holds bucket `k` for
    /// every thread of the process. Monotonic for this release's writes (a
    /// pooled set is emptied when it is given back); a 0.3.0 process adds
    /// to them when its task pulls global quota and empties them at each
    /// slice. Nobody reads them in a table with lane sketches.
    pub sketch: [AtomicU64; SKETCH_PER_LANE],
    /// Indexed by [`Counter`]; monotonic for the table's life (never reset:
    /// a new owner of the slot records a [`Baseline`] instead).
    pub counters: [AtomicU64; COUNTERS],
}

/// A lane's own latency sketch: every bucket, written only by the threads
/// using the lane (up to four threads of a process each have a lane of
/// their own). Tables made since 0.3.0 carry one per lane after the region
/// 0.3.0 reads (`Header::lane_sketch_size`), the lanes of a set side by
/// side: two neighbours share a line only between the one's buckets 16–19
/// (round trips of 201 ms and more, which a thread ends at most five times
/// a second) and the next one's buckets 0–3. Monotonic like the counters.
#[repr(C)]
pub(crate) struct LaneSketch {
    pub buckets: [AtomicU64; SKETCH_BUCKETS],
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
    /// Pooled tables: the pair holding this set, `(task + 1) << 32 |
    /// attachment`; 0 = free (see `task::pool`). Unused otherwise.
    pub owner: AtomicU64,
    _pad: [AtomicU64; 4],
}

/// The counters a set carries, and the reclaimed total: what a task's
/// statistics add up (pooled tables keep them per task when a set goes).
pub(crate) const TOTALS: usize = COUNTERS + 1;

/// Pooled tables, per task: what the sets it gave back had counted, and
/// what its acquires counted while the pool had no set for their process.
#[repr(C, align(64))]
pub(crate) struct LaneTotals {
    /// Indexed by [`Counter`], then the reclaimed total. Written under the
    /// pool's lock only (see [`FoldRecord`]).
    pub retired: [AtomicU64; TOTALS],
    _pad0: [AtomicU64; 7],
    /// Decisions made without a set of the process's own, by [`Counter`]
    /// (shared by every such process: the degraded path).
    pub unlaned: [AtomicU64; COUNTERS],
    /// Acquires refused because their task has a cap and their process no
    /// set to count its permits in (also counted as limited by concurrency).
    pub unlaned_refused: AtomicU64,
    _pad1: [AtomicU64; 7],
}

/// Pooled tables: the one fold in progress, so that a reclaimer killed
/// half-way leaves work the next one finishes exactly (see `task::pool`).
#[repr(C, align(64))]
pub(crate) struct FoldRecord {
    /// The set being folded + 1; 0 = none.
    pub set: AtomicU64,
    pub task: AtomicU64,
    /// The task's `retired` before the fold, and the set's totals.
    pub before: [AtomicU64; TOTALS],
    pub delta: [AtomicU64; TOTALS],
    /// Bumped when a fold is recorded and when it is done: a reader that
    /// sees it unchanged across its reads saw no fold move.
    pub folds: AtomicU64,
    _pad: [AtomicU64; 3],
}

const _: () = {
    assert!(size_of::<AttachSlot>() == 64);
    assert!(size_of::<Lane>() == 128);
    assert!(std::mem::offset_of!(Lane, counters) == 64);
    assert!(size_of::<Baseline>() == 128);
    assert!(size_of::<LaneSketch>() == 160);
    assert!(size_of::<LaneTotals>() == 256);
    assert!(std::mem::offset_of!(LaneTotals, unlaned) == 128);
    assert!(size_of::<FoldRecord>() == 192);
};
