//! Where each region of a table starts, from its capacities.

use super::{
    AttachSlot, BackendSlot, BalancerSlot, Baseline, FoldRecord, HEADER_SIZE, LANES, Lane,
    LaneSketch, LaneTotals, PickLedger, TaskSlot,
};

/// Bounds on geometry read from a file or asked for, so a hostile header
/// cannot make us map or index absurd sizes.
pub(crate) const MAX_TASK_CAPACITY: u32 = 1 << 16;
pub(crate) const MAX_ATTACH_CAPACITY: u32 = 1 << 12;
pub(crate) const MAX_BALANCER_CAPACITY: u32 = 1 << 10;
pub(crate) const MAX_BACKEND_CAPACITY: u32 = 256;

/// The capacities of a table; every region's offset follows from them.
/// Lanes are grouped by task, so the lanes of one task are contiguous (a
/// stats read or a reap touches few pages) while each thread writes its own
/// lane; pick ledgers are grouped by (balancer, attachment), so one
/// process's words share its own lines only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub task_capacity: u32,
    pub attach_capacity: u32,
    pub balancer_capacity: u32,
    pub backend_capacity: u32,
    /// Lane sets of a pooled table, taken by a (task, process) pair on its
    /// first use (see `task::pool`); 0: one set per pair at a fixed place,
    /// the layout 0.3 reads.
    pub lane_sets: u32,
}

impl Geometry {
    /// Whether every capacity is within the bounds above (a balancer-less
    /// table has 0 backends per balancer).
    pub(crate) fn within_bounds(&self) -> bool {
        (1..=MAX_TASK_CAPACITY).contains(&self.task_capacity)
            && (1..=MAX_ATTACH_CAPACITY).contains(&self.attach_capacity)
            && match self.balancer_capacity {
                0 => self.backend_capacity == 0,
                n => {
                    n <= MAX_BALANCER_CAPACITY
                        && (1..=MAX_BACKEND_CAPACITY).contains(&self.backend_capacity)
                }
            }
            && self.lane_sets as usize <= self.pairs()
    }

    /// Whether lane sets come from a pool rather than one per pair.
    pub(crate) fn pooled(&self) -> bool {
        self.lane_sets != 0
    }

    /// The layout version a table of this geometry carries: a pooled one
    /// is refused by releases that expect lanes at fixed places.
    pub(crate) fn layout_version(&self) -> u32 {
        if self.pooled() {
            super::POOLED_LAYOUT_VERSION
        } else {
            super::LAYOUT_VERSION
        }
    }

    /// Lane sets (each `LANES` lanes and a [`Baseline`]).
    pub(crate) fn sets(&self) -> usize {
        if self.pooled() {
            self.lane_sets as usize
        } else {
            self.pairs()
        }
    }

    pub(crate) fn tasks_offset(&self) -> usize {
        HEADER_SIZE
    }

    pub(crate) fn attach_offset(&self) -> usize {
        self.tasks_offset() + self.task_capacity as usize * size_of::<TaskSlot>()
    }

    pub(crate) fn lanes_offset(&self) -> usize {
        self.attach_offset() + self.attach_capacity as usize * size_of::<AttachSlot>()
    }

    pub(crate) fn pairs(&self) -> usize {
        self.task_capacity as usize * self.attach_capacity as usize
    }

    pub(crate) fn baselines_offset(&self) -> usize {
        self.lanes_offset() + self.sets() * LANES as usize * size_of::<Lane>()
    }

    /// Pooled only: a `u32` per (task, process) pair, the set it took + 1.
    pub(crate) fn pair_map_offset(&self) -> usize {
        self.baselines_offset() + self.sets() * size_of::<Baseline>()
    }

    /// Pooled only: the one [`FoldRecord`], then a [`LaneTotals`] per task.
    pub(crate) fn fold_offset(&self) -> usize {
        let map = if self.pooled() {
            (self.pairs() * 4).next_multiple_of(64)
        } else {
            0
        };
        self.pair_map_offset() + map
    }

    pub(crate) fn lane_totals_offset(&self) -> usize {
        self.fold_offset()
            + if self.pooled() {
                size_of::<FoldRecord>()
            } else {
                0
            }
    }

    pub(crate) fn balancers_offset(&self) -> usize {
        self.lane_totals_offset()
            + if self.pooled() {
                self.task_capacity as usize * size_of::<LaneTotals>()
            } else {
                0
            }
    }

    fn backend_count(&self) -> usize {
        self.balancer_capacity as usize * self.backend_capacity as usize
    }

    pub(crate) fn backends_offset(&self) -> usize {
        self.balancers_offset() + self.balancer_capacity as usize * size_of::<BalancerSlot>()
    }

    pub(crate) fn pick_ledgers_offset(&self) -> usize {
        self.backends_offset() + self.backend_count() * size_of::<BackendSlot>()
    }

    /// The bytes 0.3.0 reads: the header's `total_size`.
    pub fn total_size(&self) -> usize {
        self.pick_ledgers_offset()
            + self.backend_count() * self.attach_capacity as usize * size_of::<PickLedger>()
    }

    /// Where the lanes' own sketches start (in a table whose header says
    /// it has them), a [`LaneSketch`] per lane in set order: after
    /// `total_size`, on a 128-byte boundary (a set's sketches are 640
    /// bytes: every set starts on one too).
    pub(crate) fn lane_sketches_offset(&self) -> usize {
        self.total_size().next_multiple_of(128)
    }

    pub(crate) fn lane_sketches_size(&self) -> usize {
        self.sets() * LANES as usize * size_of::<LaneSketch>()
    }

    /// The bytes a table made by this release maps: all of the above.
    pub(crate) fn size_with_sketches(&self) -> usize {
        self.lane_sketches_offset() + self.lane_sketches_size()
    }
}
