//! The first page of a table.

use std::sync::atomic::{AtomicU32, AtomicU64};

pub(crate) const HEADER_SIZE: usize = 4096;

/// The first page. The creator writes every field before publishing the file
/// and nobody writes them afterwards except `last_reap` and the config
/// file's words. The sizes it
/// records are checked on open against this build's structs.
#[repr(C, align(64))]
pub(crate) struct Header {
    /// [`super::MAGIC`].
    pub magic: AtomicU64,
    pub layout_version: AtomicU32,
    pub header_size: AtomicU32,
    pub task_slot_size: AtomicU32,
    pub attach_slot_size: AtomicU32,
    pub lane_size: AtomicU32,
    pub baseline_size: AtomicU32,
    pub task_capacity: AtomicU32,
    pub attach_capacity: AtomicU32,
    /// [`crate::clock::ClockKind`] as u32.
    pub clock_kind: AtomicU32,
    _pad0: AtomicU32,
    pub ticks_per_sec: AtomicU64,
    /// Size of the whole file in bytes.
    pub total_size: AtomicU64,
    /// Random per table: tells two tables apart in reports and dumps
    /// (permits are told apart by their owner's slot, epoch and check).
    pub table_id: AtomicU64,
    /// Balancer geometry (0 balancers in a table made before balancers).
    pub balancer_capacity: AtomicU32,
    pub backend_capacity: AtomicU32,
    pub balancer_slot_size: AtomicU32,
    pub backend_slot_size: AtomicU32,
    /// [`super::Geometry::lane_sets`] (0 in a table with a set per pair).
    pub lane_sets: AtomicU32,
    /// The size of a [`super::LaneSketch`] when the file carries one per
    /// lane after `total_size` (0: none; 0.3.0 wrote 0 and reads no further
    /// than `total_size`, so it shares such a table).
    pub lane_sketch_size: AtomicU32,
    /// Where the next claim of a pooled lane set starts looking (a hint).
    pub lane_hint: AtomicU64,
    _pad1: [AtomicU64; 3],
    /// Clock ticks of the last reaper pass (rate-limits reaping host-wide).
    pub last_reap: AtomicU64,
    /// The version (FNV-1a of its bytes) of the config file last applied to
    /// the table, so one process applies each change (0: none; 0.3 wrote 0).
    pub config_applied: AtomicU64,
    /// The version of the config file last refused, and how many were.
    pub config_refused: AtomicU64,
    pub config_errors: AtomicU64,
    _pad2: [AtomicU64; 4],
}

const _: () = {
    assert!(size_of::<Header>() == 192);
    assert!(size_of::<Header>() <= HEADER_SIZE);
    assert!(std::mem::offset_of!(Header, balancer_capacity) == 72);
    assert!(std::mem::offset_of!(Header, last_reap) == 128);
};
