//! The bytes of a table file. Every struct here is `#[repr(C)]`, fixed size and
//! made of atomics only — padding included — with no pointers: each process
//! maps the file at its own address, processes of different languages and
//! releases read it, and a hostile writer can change any byte at any time.
//! Anything that changes these structs bumps [`LAYOUT_VERSION`].
//!
//! ```text
//! [ Header | TaskSlot × tasks | AttachSlot × processes
//!   | Lane × tasks × processes × LANES | Baseline × tasks × processes
//!   | BalancerSlot × balancers | BackendSlot × balancers × backends
//!   | PickLedger × balancers × processes × backends ]
//! ```
//!
//! The balancer regions are `crate::balance`'s (see `balance::layout`); this
//! module only places them.
//!
//! Lanes are grouped by task, so the lanes of one task are contiguous (a stats
//! read or a reap touches few pages) while each thread writes its own lane.

use std::sync::atomic::{AtomicU32, AtomicU64};

/// "FLOWCTRL" — the first eight bytes of every table.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"FLOWCTRL");
/// Bumped on any change to the structs of this module.
pub(crate) const LAYOUT_VERSION: u32 = 3;
/// The longest task name in bytes (the slot stores 64 with a length).
pub(crate) const NAME_MAX: usize = 63;
pub(crate) const NAME_WORDS: usize = 8;

/// Bounds on geometry read from a file, so a hostile header cannot make us
/// map or index absurd sizes.
pub(crate) const MAX_TASK_CAPACITY: u32 = 1 << 16;
pub(crate) const MAX_ATTACH_CAPACITY: u32 = 1 << 12;

/// Ledger lanes per (task, process): threads of one process take different
/// lanes, so they neither wait for each other nor share a cache line.
pub(crate) const LANES: u32 = 4;

pub(crate) const HEADER_SIZE: usize = 4096;

/// The first page. The creator writes every field before publishing the file
/// and nobody writes them afterwards except `last_reap`.
#[repr(C, align(64))]
pub(crate) struct Header {
    /// [`MAGIC`].
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
    _pad1: [AtomicU64; 5],
    /// Clock ticks of the last reaper pass (rate-limits reaping host-wide).
    pub last_reap: AtomicU64,
    _pad2: [AtomicU64; 7],
}

/// Task slot states (`TaskSlot::state`), in the top two bits; a claim carries
/// its claimer's [`Owner`] below.
pub(crate) const TASK_EMPTY: u64 = 0;
pub(crate) const TASK_CLAIMING: u64 = 1 << 62;
pub(crate) const TASK_READY: u64 = 2 << 62;
pub(crate) const TASK_KIND: u64 = 3 << 62;

/// One copy of a task's configuration (see [`TaskSlot::config`]).
#[repr(C)]
pub(crate) struct ConfigCopy {
    /// GCRA emission interval in clock ticks; 0 = no local rate limit.
    pub interval: AtomicU64,
    /// The configured rate (f64 bits), kept for reporting.
    pub rate_bits: AtomicU64,
    /// burst (low 32 bits) | max_concurrency (high 32 bits).
    pub limits: AtomicU64,
}

/// One task: identity and the configuration on the first lines, then each hot
/// word on a cache line of its own, then room reserved for the global quota,
/// then the adaptive limit (which needs 1280 bytes in all: double-buffered
/// configuration *and* window state, so no step of either can be torn).
#[repr(C, align(64))]
pub(crate) struct TaskSlot {
    /// [`TASK_EMPTY`], [`TASK_CLAIMING`] | owner, or [`TASK_READY`].
    pub state: AtomicU64,
    pub name_len: AtomicU64,
    /// Writer lock of the configuration: 0 or the writer's [`Owner`].
    pub config_lock: AtomicU64,
    _pad0: [AtomicU64; 5],
    /// The name, zero-padded, as little-endian words.
    pub name: [AtomicU64; NAME_WORDS],
    /// Version of the configuration; the current copy is `config[version & 1]`.
    /// A writer fills the other copy, then bumps the version, so a reader
    /// never waits and never sees half an update (it retries if the version
    /// moved while it read).
    pub config_version: AtomicU64,
    pub config: [ConfigCopy; 2],
    _pad1: AtomicU64,
    /// GCRA theoretical arrival time, in clock ticks.
    pub tat: AtomicU64,
    _pad2: [AtomicU64; 7],
    /// Permits counted against the cap, with the tag of the last op
    /// (see `limit::ledger`).
    pub in_flight: AtomicU64,
    _pad3: [AtomicU64; 7],
    /// The global quota (see `quota`).
    pub quota: QuotaSlot,
    /// The host-wide adaptive concurrency limit (see `task::adaptive`).
    pub adaptive: AdaptiveSlot,
}

/// One copy of a task's limiter configuration, kept beside [`ConfigCopy`]
/// under the same `config_version` (copy `version & 1` is current).
#[repr(C)]
pub(crate) struct LimiterCopy {
    /// algorithm (8 bits) | min (24) << 8 | max (24) << 32.
    pub spec: AtomicU64,
    /// initial (24 bits) | generation << 24: the generation moves whenever
    /// the limiter changes, and tells the window driver to start afresh.
    pub initial: AtomicU64,
    /// Window length in ms (f64 bits).
    pub window_ms: AtomicU64,
    /// The algorithm's parameters (f64 bits).
    pub params: [AtomicU64; 4],
}

/// One committed window: what it consumed of the lanes' counters and the
/// algorithm's state after it. Two copies; `AdaptiveSlot::window_version`
/// names the current one, so a driver killed before its commit leaves the
/// previous window whole and the next driver consumes the same samples.
#[repr(C)]
pub(crate) struct WindowCopy {
    /// Clock ticks at the window's start (0 = never started).
    pub start: AtomicU64,
    /// The limiter generation the state belongs to.
    pub generation: AtomicU64,
    /// Lane counter sums consumed up to this window: success, dropped,
    /// RTT sum (ns), concurrency rejections.
    pub consumed: [AtomicU64; 4],
    /// `limit::adaptive::State` words.
    pub state: [AtomicU64; 10],
}

/// Bit 63 of [`AdaptiveSlot::limit`]: an adaptive limiter is configured.
pub(crate) const LIMIT_ADAPTIVE: u64 = 1 << 63;

/// The adaptive limit's words of a task slot, on five lines: the word read
/// by every acquire, the word written by releases when someone waits, the
/// configuration copies, then the window copies (written once per window).
#[repr(C, align(64))]
pub(crate) struct AdaptiveSlot {
    /// [`LIMIT_ADAPTIVE`] | generation (39 bits) << 24 | the limit (24 bits).
    pub limit: AtomicU64,
    /// Clock ticks at which the current window ends.
    pub due: AtomicU64,
    _pad0: [AtomicU64; 6],
    /// Futex word of waiting acquires: bit 0 = someone may be waiting, a
    /// sequence above. No waiter count: a waiter killed while waiting leaves
    /// at most bit 0 set, which the next release clears (one spare wake).
    pub wake: AtomicU32,
    _pad1: AtomicU32,
    _pad2: [AtomicU64; 7],
    /// The window driver's lock: 0 or the driver's `Owner`.
    pub window_lock: AtomicU64,
    /// Selects the current [`WindowCopy`] (`version & 1`).
    pub window_version: AtomicU64,
    pub config: [LimiterCopy; 2],
    pub windows: [WindowCopy; 2],
    /// Per window copy: samples applied by every window of its generation
    /// so far (a running total, for checking that none is lost or doubled).
    pub applied: [AtomicU64; 2],
    _reserved: [AtomicU64; 6],
}

/// One copy of a task's global-quota configuration, versioned with
/// [`TaskSlot::config`] (same `config_version`, same writer lock).
#[repr(C)]
pub(crate) struct GlobalCopy {
    /// requests/s for the whole cluster (f64 bits); 0 = no global limit.
    pub rate_bits: AtomicU64,
    /// slice_ms (low 32 bits) | fixed chunk, 0 = adaptive (high 32 bits).
    pub slice_chunk: AtomicU64,
    /// The rate to apply while the store is failing and the task has no
    /// local rate (f64 bits); 0 = `global_rate`.
    pub fallback_bits: AtomicU64,
    /// Permits per slice: `global_rate × slice_ms / 1000`, rounded down.
    pub quota: AtomicU64,
}

/// A task's global quota on this host (see `quota`): the host's share of the
/// current slice, spent with one CAS per admission, on a line of its own;
/// the state machine, read by every admission but written only on
/// transitions; the pull lock and the pullers' statistics; the fallback rate
/// and the embedded store; the configuration.
#[repr(C, align(64))]
pub(crate) struct QuotaSlot {
    /// slice (high 32 bits) | permits left on this host (low 32 bits).
    pub host: AtomicU64,
    _pad0: [AtomicU64; 7],
    /// The phase (open, limited, failed) and when it began (see `quota::pull`).
    pub phase: AtomicU64,
    /// slice + 1 whose store key is known to be exhausted; 0 = none.
    pub exhausted: AtomicU64,
    /// Store clock minus this host's wall clock, in µs (i64 bits).
    pub offset_us: AtomicU64,
    /// While failed: the table-clock tick after which one process probes.
    pub probe_at: AtomicU64,
    /// slice (high 32 bits) | permits this host was granted in it.
    pub slice_granted: AtomicU64,
    /// Permits spent in the previous slice this host pulled for.
    pub prev_spent: AtomicU64,
    /// Below this many permits left, the next admission pulls ahead.
    pub low_water: AtomicU64,
    _pad1: AtomicU64,
    /// The pull lock: 0, or the holder's `Owner` (low 32 bits) | the table
    /// clock in ms when it was taken (high 32 bits).
    pub pull_lock: AtomicU64,
    pub pulls: AtomicU64,
    pub failed_pulls: AtomicU64,
    pub pull_ns_sum: AtomicU64,
    pub pull_ns_max: AtomicU64,
    pub granted: AtomicU64,
    pub stranded: AtomicU64,
    /// Milliseconds spent open / limited / failed before the current phase.
    pub phase_ms: [AtomicU64; 3],
    _pad2: [AtomicU64; 6],
    /// GCRA theoretical arrival time of the fallback rate.
    pub fallback_tat: AtomicU64,
    /// The embedded store's key: slice (high 32 bits) | permits left.
    pub embedded: AtomicU64,
    _pad3: [AtomicU64; 6],
    pub config: [GlobalCopy; 2],
}

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
    _pad: [AtomicU64; 6],
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
    _pad0: [AtomicU64; 5],
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
    _pad: [AtomicU64; 7],
}

const _: () = {
    assert!(size_of::<Header>() == 192);
    assert!(size_of::<Header>() <= HEADER_SIZE);
    assert!(std::mem::offset_of!(Header, last_reap) == 128);
    assert!(size_of::<TaskSlot>() == 1280);
    assert!(std::mem::offset_of!(TaskSlot, adaptive) == 704);
    assert!(size_of::<AdaptiveSlot>() == 576);
    assert!(std::mem::offset_of!(AdaptiveSlot, wake) == 64);
    assert!(std::mem::offset_of!(AdaptiveSlot, window_lock) == 128);
    assert!(std::mem::offset_of!(AdaptiveSlot, windows) == 256);
    assert!(std::mem::offset_of!(TaskSlot, name) == 64);
    assert!(std::mem::offset_of!(TaskSlot, config_version) == 128);
    assert!(std::mem::offset_of!(TaskSlot, tat) == 192);
    assert!(std::mem::offset_of!(TaskSlot, in_flight) == 256);
    assert!(size_of::<QuotaSlot>() == 384);
    assert!(std::mem::offset_of!(TaskSlot, quota) == 320);
    assert!(std::mem::offset_of!(QuotaSlot, phase) == 64);
    assert!(std::mem::offset_of!(QuotaSlot, pull_lock) == 128);
    assert!(std::mem::offset_of!(QuotaSlot, fallback_tat) == 256);
    assert!(size_of::<AttachSlot>() == 64);
    assert!(size_of::<Lane>() == 128);
    assert!(std::mem::offset_of!(Lane, counters) == 64);
    assert!(size_of::<Baseline>() == 128);
    assert!(std::mem::offset_of!(Header, balancer_capacity) == 72);
    assert!(size_of::<usize>() == 8);
};

/// Byte offsets of the regions of a table with the given capacities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub task_capacity: u32,
    pub attach_capacity: u32,
    pub balancer_capacity: u32,
    pub backend_capacity: u32,
}

impl Geometry {
    pub(crate) fn tasks_offset(&self) -> usize {
        HEADER_SIZE
    }

    pub(crate) fn attach_offset(&self) -> usize {
        self.tasks_offset() + self.task_capacity as usize * size_of::<TaskSlot>()
    }

    pub(crate) fn lanes_offset(&self) -> usize {
        self.attach_offset() + self.attach_capacity as usize * size_of::<AttachSlot>()
    }

    fn pairs(&self) -> usize {
        self.task_capacity as usize * self.attach_capacity as usize
    }

    pub(crate) fn baselines_offset(&self) -> usize {
        self.lanes_offset() + self.pairs() * LANES as usize * size_of::<Lane>()
    }

    pub(crate) fn balancers_offset(&self) -> usize {
        self.baselines_offset() + self.pairs() * size_of::<Baseline>()
    }

    pub fn total_size(&self) -> usize {
        self.balancers_offset() + crate::balance::layout::region_size(self)
    }
}
