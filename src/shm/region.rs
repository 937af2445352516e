//! A validated table and typed access to its regions: what every reader
//! needs, and nothing that attaches. An attached handle ([`super::Shm`])
//! derefs to one over its shared mapping; a view's read pass
//! ([`super::ReadOnly::copy`]) builds one over a private copy of the file.
//! Readers that take a `&Region` therefore work on both, and cannot claim a
//! slot, take a lock or write a word of the file by mistake through the
//! attachment: they have none.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::MmapRaw;

use super::copy::Copied;
use super::file::Checked;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::format::*;

/// What holds a region's bytes.
pub(crate) enum Backing {
    /// The table file, mapped shared: an attached handle's.
    Map(MmapRaw),
    /// A copy read with `pread` from `file`: a view's, which a truncation
    /// of the file cannot take away.
    Copy { copy: Copied, file: Arc<File> },
}

pub(crate) struct Region {
    /// The first byte of `backing`'s bytes, which never move.
    base: *const u8,
    backing: Backing,
    pub geometry: Geometry,
    pub clock: Clock,
    pub path: PathBuf,
    /// Where the lanes start, and the lanes each task has: computed once
    /// from `geometry`, as [`Region::lane`] is on every acquire and release.
    lanes_at: usize,
    lane_ids: u32,
    /// `geometry.pooled()`: lanes are found through the pair map, which
    /// starts here.
    pooled: bool,
    pair_map_at: usize,
    /// Where the lanes' own sketches start, in a table that has them.
    lane_sketches_at: Option<usize>,
}

// SAFETY: the bytes behind `base` are only ever accessed through atomics,
// and live as long as `backing`.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    /// A mapping or a copy of a table whose header `file::validate_header`
    /// checked, which holds all of it.
    pub(super) fn new(backing: Backing, table: Checked, path: &Path) -> Self {
        let (base, len) = match &backing {
            Backing::Map(map) => (map.as_ptr(), map.len()),
            Backing::Copy { copy, .. } => (copy.as_ptr(), copy.len()),
        };
        assert!(len >= table.size());
        let geometry = table.geometry;
        Self {
            base,
            backing,
            lanes_at: geometry.lanes_offset(),
            lane_ids: geometry.attach_capacity * LANES,
            pooled: geometry.pooled(),
            pair_map_at: geometry.pair_map_offset(),
            lane_sketches_at: table.lane_sketches.then(|| geometry.lane_sketches_offset()),
            geometry,
            clock: table.clock,
            path: path.to_path_buf(),
        }
    }

    /// The table's bytes: what 0.3.0 reads, then any lane sketches.
    pub fn size(&self) -> usize {
        match self.lane_sketches_at {
            Some(_) => self.geometry.size_with_sketches(),
            None => self.geometry.total_size(),
        }
    }

    /// # Safety
    /// `offset + size_of::<T>()` lies within the validated mapping and `T` is
    /// one of the all-atomic structs of [`crate::format`].
    pub(crate) unsafe fn at<T>(&self, offset: usize) -> &T {
        debug_assert!(offset + size_of::<T>() <= self.size());
        // SAFETY: per the contract; the bytes live as long as `self`.
        unsafe { &*(self.base.add(offset) as *const T) }
    }

    /// A copy's bytes `offset..offset + len` read from its file again (a
    /// reader that needs some words at one instant: `task::consistency`);
    /// nothing to do on a mapping, which is always current. An error when
    /// the file no longer holds them.
    pub(crate) fn reread(&self, offset: usize, len: usize) -> Result<()> {
        let Backing::Copy { copy, file } = &self.backing else {
            return Ok(());
        };
        match copy.reread(file, offset, len) {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::corrupt(format!(
                "table {} shrank under the view",
                self.path.display()
            ))),
            Err(e) => Err(Error::io(
                format!("cannot read table {}", self.path.display()),
                e,
            )),
        }
    }

    /// Where `item` (a reference into this region) lies in it.
    pub(crate) fn offset_of<T>(&self, item: &T) -> usize {
        (item as *const T as usize).wrapping_sub(self.base as usize)
    }

    pub fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a validated header.
        unsafe { self.at(0) }
    }

    pub fn task_slot(&self, task: u32) -> &TaskSlot {
        assert!(task < self.geometry.task_capacity);
        let offset = self.geometry.tasks_offset() + task as usize * size_of::<TaskSlot>();
        // SAFETY: bounds checked above against the validated geometry.
        unsafe { self.at(offset) }
    }

    pub fn attach_slot(&self, attach: u32) -> &AttachSlot {
        assert!(attach < self.geometry.attach_capacity);
        let offset = self.geometry.attach_offset() + attach as usize * size_of::<AttachSlot>();
        // SAFETY: bounds checked above.
        unsafe { self.at(offset) }
    }

    /// The lane `id` (`attach * LANES + lane`) of a task, or `None` for an id
    /// no lane has (ids are read from the file: they are checked, not
    /// trusted), or for a pair that holds no set of a pooled table.
    #[inline]
    pub fn lane(&self, task: u32, id: u32) -> Option<&Lane> {
        if task >= self.geometry.task_capacity || id >= self.lane_ids {
            return None;
        }
        if !self.pooled {
            // Every acquire and release: the fixed place, as 0.3 had it.
            let index = task as usize * self.lane_ids as usize + id as usize;
            // SAFETY: both indices checked above.
            return Some(unsafe { self.at(self.lanes_at + index * size_of::<Lane>()) });
        }
        let set = self.set_of(task, id / LANES)?;
        Some(self.set_lane(set, id % LANES))
    }

    /// The lane set of a (task, attachment) pair: its fixed one, or in a
    /// pooled table the one the pair map names (checked: the map is read
    /// from the file). The caller checked both indices.
    #[inline(always)]
    fn set_of(&self, task: u32, attach: u32) -> Option<u32> {
        let pair = task * self.geometry.attach_capacity + attach;
        if !self.pooled {
            return Some(pair);
        }
        // Relaxed and a fence, as `format::load_acquire` says of readers.
        let set = self
            .pair_map(pair)
            .load(std::sync::atomic::Ordering::Relaxed);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        set.checked_sub(1).filter(|s| *s < self.geometry.lane_sets)
    }

    /// The set a (task, attachment) pair holds (`None` for indices outside
    /// the table, or a pooled pair without one).
    pub fn pair_set(&self, task: u32, attach: u32) -> Option<u32> {
        (task < self.geometry.task_capacity && attach < self.geometry.attach_capacity)
            .then(|| self.set_of(task, attach))
            .flatten()
    }

    /// Pooled tables: the word of pair `task * processes + attach` of the
    /// pair map (the set it holds + 1, or 0).
    #[inline(always)]
    pub fn pair_map(&self, pair: u32) -> &std::sync::atomic::AtomicU32 {
        debug_assert!(self.pooled && (pair as usize) < self.geometry.pairs());
        let offset = self.pair_map_at + pair as usize * 4;
        // SAFETY: pairs are checked by callers against the validated
        // geometry, whose pooled layout holds a u32 per pair here.
        unsafe { self.at(offset) }
    }

    /// Lane `lane` of set `set` (both below their counts).
    #[inline(always)]
    pub fn set_lane(&self, set: u32, lane: u32) -> &Lane {
        debug_assert!((set as usize) < self.geometry.sets() && lane < LANES);
        let offset =
            self.lanes_at + (set as usize * LANES as usize + lane as usize) * size_of::<Lane>();
        // SAFETY: the set and lane lie within the validated lanes region.
        unsafe { self.at(offset) }
    }

    /// Whether the table has a sketch per lane (made since 0.3.0).
    #[inline(always)]
    pub fn has_lane_sketches(&self) -> bool {
        self.lane_sketches_at.is_some()
    }

    /// The own sketch of `lane`, a lane of this region: the lane's place
    /// among the lanes is its sketch's among the sketches, so a caller that
    /// holds the lane finds its set no second time. `None` in a table
    /// without lane sketches (made by 0.3.0).
    #[inline]
    pub fn sketch_of(&self, lane: &Lane) -> Option<&LaneSketch> {
        let at = self.lane_sketches_at?;
        let index = self.offset_of(lane).checked_sub(self.lanes_at)? / size_of::<Lane>();
        if index >= self.geometry.sets() * LANES as usize {
            return None;
        }
        // SAFETY: the index is below the lane count, and the validated file
        // holds a sketch per lane from `at`.
        Some(unsafe { self.at(at + index * size_of::<LaneSketch>()) })
    }

    /// The own sketch of lane `id` (`attach * LANES + lane`) of a task, as
    /// [`Region::lane`] finds the lane.
    #[inline]
    pub fn lane_sketch(&self, task: u32, id: u32) -> Option<&LaneSketch> {
        self.sketch_of(self.lane(task, id)?)
    }

    /// The own sketches of set `set`'s lanes (below the set count), in a
    /// table that has them.
    pub fn set_lane_sketches(&self, set: u32) -> impl Iterator<Item = &LaneSketch> {
        assert!((set as usize) < self.geometry.sets());
        (0..LANES).filter_map(move |l| self.sketch_of(self.set_lane(set, l)))
    }

    /// The baseline of set `set` (below the set count).
    pub fn set_baseline(&self, set: u32) -> &Baseline {
        assert!((set as usize) < self.geometry.sets());
        let offset = self.geometry.baselines_offset() + set as usize * size_of::<Baseline>();
        // SAFETY: bounds checked above.
        unsafe { self.at(offset) }
    }

    /// Every lane of a task (indexed by lane id), in a table with a set per
    /// pair; `None` for a task outside the table or a pooled table. One
    /// bounds check for a caller that looks at several lanes (the ledger's
    /// helpers, a process's holding).
    #[inline]
    pub fn task_lanes(&self, task: u32) -> Option<&[Lane]> {
        if task >= self.geometry.task_capacity || self.pooled {
            return None;
        }
        let offset = self.lanes_at + task as usize * self.lane_ids as usize * size_of::<Lane>();
        // SAFETY: the task's lanes lie within the validated mapping; `Lane`
        // is all atomics, so a shared slice of them is sound.
        let first: &Lane = unsafe { self.at(offset) };
        Some(unsafe { std::slice::from_raw_parts(first, self.lane_ids as usize) })
    }

    /// The baseline of a (task, attachment) pair's set; `None` when the pair
    /// holds no set of a pooled table.
    pub fn baseline(&self, task: u32, attach: u32) -> Option<&Baseline> {
        assert!(task < self.geometry.task_capacity && attach < self.geometry.attach_capacity);
        Some(self.set_baseline(self.set_of(task, attach)?))
    }

    /// Pooled tables: the one fold record.
    pub fn fold_record(&self) -> &FoldRecord {
        assert!(self.pooled);
        // SAFETY: a pooled geometry holds the record here.
        unsafe { self.at(self.geometry.fold_offset()) }
    }

    /// Pooled tables: a task's totals beside its sets.
    pub fn lane_totals(&self, task: u32) -> Option<&LaneTotals> {
        if !self.pooled || task >= self.geometry.task_capacity {
            return None;
        }
        let offset = self.geometry.lane_totals_offset() + task as usize * size_of::<LaneTotals>();
        // SAFETY: index checked above against the pooled geometry.
        Some(unsafe { self.at(offset) })
    }

    pub fn balancer_slot(&self, balancer: u32) -> &BalancerSlot {
        assert!(balancer < self.geometry.balancer_capacity);
        let offset =
            self.geometry.balancers_offset() + balancer as usize * size_of::<BalancerSlot>();
        // SAFETY: index checked against the validated geometry.
        unsafe { self.at(offset) }
    }

    /// A backend slot, or `None` for an index outside the table (indices
    /// come from caller memory and the file: checked, not trusted).
    pub fn backend_slot(&self, balancer: u32, backend: u32) -> Option<&BackendSlot> {
        let g = &self.geometry;
        if balancer >= g.balancer_capacity || backend >= g.backend_capacity {
            return None;
        }
        let index = balancer as usize * g.backend_capacity as usize + backend as usize;
        let offset = g.backends_offset() + index * size_of::<BackendSlot>();
        // SAFETY: both indices checked above.
        Some(unsafe { self.at(offset) })
    }

    /// The ledger of `attach`'s picks on a backend, or `None` for indices
    /// outside the table.
    pub fn pick_ledger(&self, balancer: u32, attach: u32, backend: u32) -> Option<&PickLedger> {
        let g = &self.geometry;
        if balancer >= g.balancer_capacity
            || attach >= g.attach_capacity
            || backend >= g.backend_capacity
        {
            return None;
        }
        let index = (balancer as usize * g.attach_capacity as usize + attach as usize)
            * g.backend_capacity as usize
            + backend as usize;
        let offset = g.pick_ledgers_offset() + index * size_of::<PickLedger>();
        // SAFETY: every index checked above.
        Some(unsafe { self.at(offset) })
    }

    /// The attachments marked live: (slot index, pid as the owner saw
    /// itself). A slot whose owner died stays marked until it is reaped.
    pub fn attachments(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        (0..self.geometry.attach_capacity).filter_map(|index| {
            let slot = self.attach_slot(index);
            let live = load_acquire(&slot.state) & ATTACH_LIVE != 0;
            live.then(|| {
                (
                    index,
                    slot.pid.load(std::sync::atomic::Ordering::Relaxed) as u32,
                )
            })
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
