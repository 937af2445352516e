//! A task's slot: identity, configuration copies, the hot words of its
//! local limits, then its quota and adaptive sections.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{AdaptiveSlot, Global, NAME_WORDS, QuotaSlot};

/// Slot states of a named slot (a task's or a balancer's `state`), in the
/// top two bits; a claim carries its claimer's `Owner` below.
pub(crate) const TASK_EMPTY: u64 = 0;
pub(crate) const TASK_CLAIMING: u64 = 1 << 62;
pub(crate) const TASK_READY: u64 = 2 << 62;
pub(crate) const TASK_KIND: u64 = 3 << 62;

/// One task: identity and the configuration on the first lines, then each hot
/// word on a cache line of its own, then the global quota, then the adaptive
/// limit (which needs 576 bytes: double-buffered configuration *and* window
/// state, so no step of either can be torn).
#[repr(C, align(64))]
pub(crate) struct TaskSlot {
    /// [`TASK_EMPTY`], [`TASK_CLAIMING`] | owner, or [`TASK_READY`].
    pub state: AtomicU64,
    pub name_len: AtomicU64,
    /// Writer lock of the configuration: 0 or the writer's `Owner`.
    pub config_lock: AtomicU64,
    /// What the task's releases reported since the slice in `health[0]`
    /// began are counted from (see `quota::health`): the slice + 1, then the
    /// success, dropped and RTT-sum counters then. Written by pullers only;
    /// 0.3.0 left these words zero.
    pub health: [AtomicU64; 4],
    /// Words 0..1 of the latency sketch's baseline at the slice in
    /// `health[0]` (see [`TaskSlot::sketch_base`]).
    pub sketch_base: AtomicU64,
    /// The name, zero-padded, as little-endian words.
    pub name: [AtomicU64; NAME_WORDS],
    /// Version of the configuration: copy `version & 1` of `config`,
    /// `quota.config` and `adaptive.config` is current (see `versioned`).
    pub config_version: AtomicU64,
    pub config: [ConfigCopy; 2],
    /// Slice keys this host's pulls created in the store: none while a
    /// manager writes them ahead. Written at most once a slice (0.3.0 left
    /// this word zero).
    pub keys_created: AtomicU64,
    /// GCRA theoretical arrival time, in clock ticks.
    pub tat: AtomicU64,
    /// A task spread over shards whose key's node does not answer (see
    /// `quota::down`): slice (high 32 bits) | the shards whose part this
    /// host granted itself in it (bits 8..16) | the shards found down (low
    /// 8 bits, of no slice). Written by pulls only, a few times a slice at
    /// most, so sharing `tat`'s line costs the request path nothing
    /// (0.3.0 left this word zero: no shard down).
    pub shards_down: AtomicU64,
    /// A grant the store made ahead of the slice's release (see
    /// `quota::account`): slice (high 32 bits) | permits, spendable once
    /// `quota.paced_until` has passed. Written by pulls only, under the
    /// pull lock, a few times a slice at most (0.3.0 left this word zero:
    /// none).
    pub reserved: AtomicU64,
    /// Permits received as reservations, since the task was registered
    /// (0.3.0 left this word zero).
    pub reserved_total: AtomicU64,
    /// Permits of the current slice this host gave back to the store while
    /// idle (see `quota::give_back`): slice (high 32 bits) | permits. The
    /// host's claim is what it took less this (0.3.0 left this word zero).
    pub given: AtomicU64,
    /// A give-back under way: slice (high 32 bits) | what `given` will hold
    /// once it is done; 0 = none. Written under the pull lock only.
    pub giving: AtomicU64,
    /// Permits given back while idle, since the task was registered (0.3.0
    /// left this word zero).
    pub given_total: AtomicU64,
    /// The host's busy spells (see `quota::spell`): when its
    /// keeper last found it idle, what it was asked for by then, and what
    /// its last busy spell was asked for. Written by keepers only, a few
    /// times a slice at most (0.3.0 left this word zero: none known).
    pub spell: AtomicU64,
    /// Permits counted against the cap, with the tag of the last op
    /// (see `limit::ledger`).
    pub in_flight: AtomicU64,
    /// 1 once the task has key limits (a key file beside the table, see
    /// `keyed`); 0.3.0 left this word zero: none.
    pub keyed: AtomicU64,
    /// Requests shadow mode admitted that the task's limits refused
    /// (0.3.0 left this word zero).
    pub shadow_refused: AtomicU64,
    /// Words 1..6 of the sketch's baseline: written by pullers, once a
    /// slice (0.3.0 left these words zero).
    pub sketch_base_more: [AtomicU64; 5],
    /// The global quota (see `quota`).
    pub quota: QuotaSlot,
    /// The host-wide adaptive concurrency limit (see `task::adaptive`).
    pub adaptive: AdaptiveSlot,
}

/// A task's local limits as the request path reads them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Local {
    /// GCRA emission interval in clock ticks; 0 = no local rate limit.
    pub interval: u64,
    /// The configured rate (requests/s), kept for reporting.
    pub rate: f64,
    pub burst: u32,
    /// The fixed concurrency cap; 0 = none.
    pub cap: u32,
}

/// One copy of a task's local limits.
#[repr(C)]
pub(crate) struct ConfigCopy {
    /// [`Local::interval`].
    pub interval: AtomicU64,
    /// [`Local::rate`] (f64 bits).
    pub rate_bits: AtomicU64,
    /// burst (low 32 bits) | cap (high 32 bits).
    pub limits: AtomicU64,
}

impl ConfigCopy {
    #[inline]
    pub(crate) fn load(&self) -> Local {
        let limits = self.limits.load(Ordering::Relaxed);
        Local {
            interval: self.interval.load(Ordering::Relaxed),
            rate: f64::from_bits(self.rate_bits.load(Ordering::Relaxed)),
            burst: limits as u32,
            cap: (limits >> 32) as u32,
        }
    }

    pub(crate) fn store(&self, local: &Local) {
        self.interval.store(local.interval, Ordering::Relaxed);
        self.rate_bits
            .store(local.rate.to_bits(), Ordering::Relaxed);
        self.limits.store(
            local.burst as u64 | (local.cap as u64) << 32,
            Ordering::Relaxed,
        );
    }
}

/// Words of a slice's sketch baseline: a wrapping 32-bit count per bucket,
/// two to a word (a bucket gains fewer than 2^32 releases in a slice).
pub(crate) const SKETCH_BASE_WORDS: usize = 10;

impl TaskSlot {
    /// Word `i` of [`SKETCH_BASE_WORDS`] of the latency sketch's baseline
    /// (see `quota::health`): spare words of the slot, written by pullers
    /// once a slice, on lines the request path reads but never writes.
    pub(crate) fn sketch_base(&self, i: usize) -> &AtomicU64 {
        match i {
            0 => &self.sketch_base,
            1..6 => &self.sketch_base_more[i - 1],
            _ => &self.adaptive.sketch_base[i - 6],
        }
    }

    /// Word `i` of [`super::WAIT_WORDS`]: the waiting-time buckets, then their
    /// sum in nanoseconds.
    pub(crate) fn wait_word(&self, i: usize) -> &AtomicU64 {
        let a = &self.adaptive;
        if i < a.waits.len() {
            &a.waits[i]
        } else {
            &a.waits_more[i - a.waits.len()]
        }
    }

    /// Makes `global` the copies' global limit, keeping the local limits and
    /// the limiter (its generation too: the adaptive limit carries on). The
    /// caller holds the configuration lock.
    pub(crate) fn write_global(&self, global: Option<&Global>) {
        let (version, next) = super::next_copy(&self.config_version);
        let current = (version & 1) as usize;
        self.config[next].store(&self.config[current].load());
        self.quota.config[next].store(global);
        let (spec, generation) = self.adaptive.config[current].load();
        self.adaptive.config[next].store(&spec, generation);
        super::commit(&self.config_version, version);
    }

    /// The copies' global limit (for the quota's slow path, which must see
    /// a change a pull just made).
    pub(crate) fn global(&self) -> Option<Global> {
        super::read_versioned(&self.config_version, |i| self.quota.config[i].load())
    }
}

const _: () = {
    assert!(size_of::<TaskSlot>() == 1280);
    assert!(std::mem::offset_of!(TaskSlot, name) == 64);
    assert!(std::mem::offset_of!(TaskSlot, config_version) == 128);
    assert!(std::mem::offset_of!(TaskSlot, tat) == 192);
    assert!(std::mem::offset_of!(TaskSlot, in_flight) == 256);
    assert!(std::mem::offset_of!(TaskSlot, quota) == 320);
    assert!(std::mem::offset_of!(TaskSlot, sketch_base) == 56);
    assert!(std::mem::offset_of!(TaskSlot, sketch_base_more) == 280);
    assert!(std::mem::offset_of!(TaskSlot, adaptive) == 704);
};
