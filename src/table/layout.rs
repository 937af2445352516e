//! The bytes of a table file. Everything here is `#[repr(C)]`, fixed size,
//! made of atomics and plain integers — no pointers: each process maps the
//! file at its own address, and processes of different languages and releases
//! read it. Anything that changes these structs bumps [`LAYOUT_VERSION`].
//!
//! ```text
//! [ Header | TaskSlot × tasks | AttachSlot × attachments | StatCell × tasks × attachments × STRIPES ]
//! ```
//!
//! Statistic cells are grouped by task, so the cells of one task are
//! contiguous (a stats read touches a few pages) while each process writes
//! only its own cell, on its own cache lines.

use std::sync::atomic::{AtomicU32, AtomicU64};

/// "FLOWCTRL" — the first eight bytes of every table.
pub const MAGIC: u64 = u64::from_le_bytes(*b"FLOWCTRL");
/// Bumped on any change to the structs of this module.
pub const LAYOUT_VERSION: u32 = 1;
/// The longest task name in bytes (the slot stores 64 with a length).
pub const NAME_MAX: usize = 63;
pub const NAME_WORDS: usize = 8;

/// Limits on geometry read from a file, so a hostile header cannot make us
/// map or index absurd sizes.
pub const MAX_TASK_CAPACITY: u32 = 1 << 16;
pub const MAX_ATTACH_CAPACITY: u32 = 1 << 12;

/// The first page of the file. Plain fields are written once by the creator
/// before the table is published and only read (and copied out) afterwards.
#[repr(C, align(64))]
pub struct Header {
    /// [`MAGIC`]; written last, so a reader that sees it sees a whole table.
    pub magic: AtomicU64,
    pub layout_version: u32,
    pub header_size: u32,
    pub task_slot_size: u32,
    pub attach_slot_size: u32,
    pub stat_cell_size: u32,
    pub task_capacity: u32,
    pub attach_capacity: u32,
    /// [`crate::clock::ClockKind`] as u32.
    pub clock_kind: u32,
    pub ticks_per_sec: u64,
    /// Size of the whole file in bytes.
    pub total_size: u64,
    /// Random per table; mixed into permits so a permit cannot be spent on a
    /// table other than the one that issued it.
    pub table_id: u64,
    /// Clock ticks of the last reaper run (rate-limits reaping host-wide).
    pub last_reap: AtomicU64,
    _pad1: [u64; 7],
}

/// Task slot states (in `TaskSlot::state`).
pub const TASK_EMPTY: u64 = 0;
/// Being initialised; the low 32 bits hold the claimer's pid.
pub const TASK_CLAIMING: u64 = 1 << 32;
pub const TASK_READY: u64 = 2 << 32;

/// One task: identity and configuration on the first lines, then each hot
/// word on a cache line of its own, then room reserved for the global quota
/// and the adaptive limit (zero until those features use it).
#[repr(C, align(64))]
pub struct TaskSlot {
    pub state: AtomicU64,
    pub name_len: AtomicU32,
    pub burst: AtomicU32,
    pub max_concurrency: AtomicU32,
    _pad0: u32,
    /// GCRA emission interval in clock ticks; 0 = no local rate limit.
    pub interval: AtomicU64,
    /// The configured rate (f64 bits), kept for reporting.
    pub rate_bits: AtomicU64,
    _pad1: [u64; 3],
    /// The name, zero-padded, as little-endian words.
    pub name: [AtomicU64; NAME_WORDS],
    /// GCRA theoretical arrival time, in clock ticks.
    pub tat: AtomicU64,
    _pad2: [u64; 7],
    /// Permits in flight counted against `max_concurrency`.
    pub in_flight: AtomicU64,
    _pad3: [u64; 7],
    /// Counters folded in from attachments that have gone away.
    pub retired: StatCell,
    /// Reserved for the global quota state machine (issue: global limits).
    pub quota_reserved: [AtomicU64; 48],
    /// Reserved for the host-wide adaptive concurrency limit.
    pub adaptive_reserved: [AtomicU64; 32],
}

/// Attachment slot states (in `AttachSlot::state`), pid in the low 32 bits.
pub const ATTACH_FREE: u64 = 0;
pub const ATTACH_CLAIMING: u64 = 1 << 32;
pub const ATTACH_LIVE: u64 = 2 << 32;
/// Being reclaimed by the reaper whose pid is in the low 32 bits.
pub const ATTACH_REAPING: u64 = 3 << 32;
pub const STATE_MASK: u64 = 0xffff_ffff << 32;
pub const PID_MASK: u64 = 0xffff_ffff;

/// One attached process.
#[repr(C, align(64))]
pub struct AttachSlot {
    pub state: AtomicU64,
    /// Start time of the owner (field 22 of `/proc/<pid>/stat`), so a reused
    /// pid is not mistaken for the process that attached.
    pub start_time: AtomicU64,
    /// Counts claims of this slot; part of every permit's owner tag, so a
    /// permit of a previous owner of the slot is recognised.
    pub epoch: AtomicU64,
    _pad: [u64; 5],
}

/// Per-(task, attachment) counters, in permits unless named otherwise. Only
/// the owning process writes its cell, so counting never contends across
/// processes.
#[repr(C, align(64))]
pub struct StatCell {
    pub admitted: AtomicU64,
    pub limited_local: AtomicU64,
    pub limited_global: AtomicU64,
    pub limited_concurrency: AtomicU64,
    pub released_success: AtomicU64,
    pub released_dropped: AtomicU64,
    pub released_ignored: AtomicU64,
    /// Permits of a dead process returned by the reaper (retired cell only).
    pub reclaimed: AtomicU64,
    /// Acquire→release round-trip times of permits released as success or
    /// dropped, summed per permit, in nanoseconds; the adaptive limit learns
    /// from these. Its sample count is `released_success + released_dropped`.
    pub rtt_sum_ns: AtomicU64,
    _reserved: [u64; 7],
}

pub const HEADER_SIZE: usize = 4096;

/// Statistic cells per (task, attachment). Threads of one process count into
/// different stripes, so they do not fight over one cache line.
pub const STRIPES: u32 = 4;

const _: () = {
    assert!(size_of::<Header>() == 128);
    assert!(size_of::<Header>() <= HEADER_SIZE);
    assert!(size_of::<TaskSlot>() == 1024);
    assert!(std::mem::offset_of!(TaskSlot, tat) % 64 == 0);
    assert!(std::mem::offset_of!(TaskSlot, in_flight) % 64 == 0);
    assert!(std::mem::offset_of!(TaskSlot, retired) % 64 == 0);
    assert!(size_of::<AttachSlot>() == 64);
    assert!(size_of::<StatCell>() == 128);
    assert!(std::mem::offset_of!(Header, last_reap) == 64);
};

/// Byte offsets of the regions of a table with the given capacities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub task_capacity: u32,
    pub attach_capacity: u32,
}

impl Geometry {
    pub fn tasks_offset(&self) -> usize {
        HEADER_SIZE
    }

    pub fn attach_offset(&self) -> usize {
        self.tasks_offset() + self.task_capacity as usize * size_of::<TaskSlot>()
    }

    pub fn cells_offset(&self) -> usize {
        self.attach_offset() + self.attach_capacity as usize * size_of::<AttachSlot>()
    }

    pub fn total_size(&self) -> usize {
        self.cells_offset()
            + self.task_capacity as usize
                * self.attach_capacity as usize
                * STRIPES as usize
                * size_of::<StatCell>()
    }

    pub fn cell_offset(&self, task: u32, attach: u32, stripe: u32) -> usize {
        debug_assert!(
            task < self.task_capacity && attach < self.attach_capacity && stripe < STRIPES
        );
        let index = (task as usize * self.attach_capacity as usize + attach as usize)
            * STRIPES as usize
            + stripe as usize;
        self.cells_offset() + index * size_of::<StatCell>()
    }
}
