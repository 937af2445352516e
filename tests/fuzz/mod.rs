//! The parts of the table fuzzer (`tests/fuzz_table.rs`): the tables it
//! damages and where their words are (`Geometry`, for both layouts), what
//! a case overwrites (`mutate`, `pool`), and the child that uses a damaged
//! table (`case`).

pub mod case;
pub mod mutate;
pub mod pool;

use crate::common::layout::*;
use crate::common::{self, Options};
use flowctrl::TableOptions;

pub const TASKS: usize = 4;
pub const PROCESSES: usize = 4;
pub const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];

/// Lane sets of the pooled table: fewer than its 16 pairs. The pristine
/// table's two dead processes hold all four (the second one's use of
/// `gamma` found the pool empty), and a case's own four tasks take them
/// all again once they are given back, so a second handle or a second
/// process finds the pool empty.
pub const POOL_LANES: u32 = 4;

/// The options of the fuzzed tables: `lanes` 0 (a set per pair, layout 3)
/// or [`POOL_LANES`] (layout 4). Only the creation reads them.
pub fn options(lanes: u32) -> TableOptions {
    common::options()
        .capacity(TASKS as u32)
        .processes(PROCESSES as u32)
        // No balancer regions: the geometry below is the tasks' alone; the
        // balancer fields of the header are still fuzzed (any change to
        // them must be refused).
        .balancers(0)
        .lanes(lanes)
}

/// One overwrite: `width` bytes at `offset`, little-endian.
#[derive(Clone, Debug)]
pub struct Mutation {
    pub offset: usize,
    pub width: usize,
    pub value: u64,
    pub what: String,
}

impl Mutation {
    pub fn new(offset: usize, width: usize, value: u64, what: impl Into<String>) -> Self {
        Self {
            offset,
            width,
            value,
            what: what.into(),
        }
    }

    pub fn apply(&self, bytes: &mut [u8]) {
        bytes[self.offset..self.offset + self.width]
            .copy_from_slice(&self.value.to_le_bytes()[..self.width]);
    }
}

/// Where things are in a fuzzed table, as `src/format/geometry.rs` lays
/// them out: header page, task slots, attachment slots, lane sets (each
/// `LANES` lanes), a baseline per set, and in a pooled table the pair map
/// (a u32 per pair, padded to 64 bytes), the fold record and a
/// `LaneTotals` per task.
pub struct Geometry {
    /// 0: a set per (task, attachment) pair at a fixed place.
    pub lane_sets: usize,
    pub attach_at: usize,
    pub lanes: usize,
    pub baselines: usize,
    pub pair_map: usize,
    pub fold: usize,
    pub totals: usize,
    /// The header's `total_size`: where the lanes' own sketches start.
    pub total: usize,
    /// The file's size: the lanes' own sketches end here.
    pub file: usize,
}

impl Geometry {
    pub fn new(lane_sets: usize) -> Self {
        let pairs = TASKS * PROCESSES;
        let sets = if lane_sets == 0 { pairs } else { lane_sets };
        let attach_at = HEADER_SIZE + TASKS * TASK_SLOT;
        let lanes = attach_at + PROCESSES * ATTACH_SLOT;
        let baselines = lanes + sets * LANES * LANE;
        let pair_map = baselines + sets * BASELINE;
        let (fold, totals, total) = if lane_sets == 0 {
            (pair_map, pair_map, pair_map)
        } else {
            let fold = pair_map + (pairs * 4).next_multiple_of(64);
            let totals = fold + FOLD_RECORD;
            (fold, totals, totals + TASKS * LANE_TOTALS)
        };
        if lane_sets == 0 {
            assert_eq!(total, tasks_size(TASKS, PROCESSES));
        }
        Self {
            lane_sets,
            attach_at,
            lanes,
            baselines,
            pair_map,
            fold,
            totals,
            total,
            file: total.next_multiple_of(128) + sets * LANES * LANE_SKETCH,
        }
    }

    pub fn pooled(&self) -> bool {
        self.lane_sets != 0
    }

    pub fn sets(&self) -> usize {
        if self.pooled() {
            self.lane_sets
        } else {
            TASKS * PROCESSES
        }
    }

    pub fn task(&self, t: usize) -> usize {
        HEADER_SIZE + t * TASK_SLOT
    }

    pub fn attach(&self, a: usize) -> usize {
        self.attach_at + a * ATTACH_SLOT
    }

    pub fn set_lane(&self, set: usize, lane: usize) -> usize {
        self.lanes + (set * LANES + lane) * LANE
    }

    pub fn set_baseline(&self, set: usize) -> usize {
        self.baselines + set * BASELINE
    }

    /// Pooled tables: the pair map's word of (task, attachment).
    pub fn pair(&self, t: usize, a: usize) -> usize {
        assert!(self.pooled());
        self.pair_map + (t * PROCESSES + a) * 4
    }

    /// The set (task, attachment) holds in `bytes`: its fixed one, or the
    /// one the pair map names (`None`: none, or one out of range).
    pub fn pair_set(&self, bytes: &[u8], t: usize, a: usize) -> Option<usize> {
        if !self.pooled() {
            return Some(t * PROCESSES + a);
        }
        (u32_at(bytes, self.pair(t, a)) as usize)
            .checked_sub(1)
            .filter(|s| *s < self.lane_sets)
    }

    /// Lane `id` (attachment × LANES + lane) of task `t` in `bytes`.
    pub fn lane(&self, bytes: &[u8], t: usize, id: usize) -> Option<usize> {
        let set = self.pair_set(bytes, t, id / LANES)?;
        Some(self.set_lane(set, id % LANES))
    }

    /// Pooled tables: task `t`'s `LaneTotals`.
    pub fn lane_totals(&self, t: usize) -> usize {
        assert!(self.pooled());
        self.totals + t * LANE_TOTALS
    }
}

pub fn word_at(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().unwrap())
}

pub fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap())
}
