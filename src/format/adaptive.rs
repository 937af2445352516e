//! A task's adaptive-limit section: the limit word every acquire reads, the
//! futex word of waiting acquires, the limiter's configuration copies and
//! the committed window copies.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::limit::adaptive::{Algorithm, STATE_WORDS, Spec, State};
use crate::limit::ledger::MAX_COUNT;

/// Bit 63 of [`AdaptiveSlot::limit`]: an adaptive limiter is configured.
pub(crate) const LIMIT_ADAPTIVE: u64 = 1 << 63;
const GEN_SHIFT: u32 = 24;
const GEN_MASK: u64 = (1 << 39) - 1;

/// Bits of [`AdaptiveSlot::wait_policy`] (0 in a table made by 0.3.0: the
/// defaults, first come first served and no barging).
pub(crate) const WAIT_LIFO: u64 = 1;
pub(crate) const WAIT_BARGING: u64 = 2;
/// Shadow mode: a request the task's limits refuse is counted and admitted
/// (0.3.0 knows no such bit: its processes refuse).
pub(crate) const POLICY_SHADOW: u64 = 4;

/// The limit word's limit, if an adaptive limiter is configured.
#[inline]
pub(crate) fn limit_of(word: u64) -> Option<u32> {
    (word & LIMIT_ADAPTIVE != 0).then_some((word & MAX_COUNT) as u32)
}

/// The limit word's limiter generation.
pub(crate) fn generation_of(word: u64) -> u64 {
    (word >> GEN_SHIFT) & GEN_MASK
}

/// A limit word: adaptive or not, the generation and the limit (saturated).
pub(crate) fn make_limit(adaptive: bool, generation: u64, limit: f64) -> u64 {
    let limit = (limit.max(0.0) as u64).min(MAX_COUNT);
    (if adaptive { LIMIT_ADAPTIVE } else { 0 }) | (generation & GEN_MASK) << GEN_SHIFT | limit
}

/// The generation after `generation`.
pub(crate) fn next_generation(generation: u64) -> u64 {
    generation.wrapping_add(1) & GEN_MASK
}

/// One copy of a task's limiter configuration, kept beside the task's other
/// copies under the same `config_version` (copy `version & 1` is current).
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

impl LimiterCopy {
    /// The limiter and its generation; one a damaged table made invalid
    /// reads as `fixed`.
    pub(crate) fn load(&self) -> (Spec, u64) {
        let word = self.spec.load(Ordering::Relaxed);
        let initial = self.initial.load(Ordering::Relaxed);
        let window_ms = f64::from_bits(self.window_ms.load(Ordering::Relaxed));
        let params =
            std::array::from_fn(|i| f64::from_bits(self.params[i].load(Ordering::Relaxed)));
        let generation = initial >> GEN_SHIFT;
        let spec = Algorithm::from_raw(word & 0xFF).map(|algorithm| Spec {
            algorithm,
            min: ((word >> 8) & MAX_COUNT) as u32,
            max: ((word >> 32) & MAX_COUNT) as u32,
            initial: (initial & MAX_COUNT) as u32,
            window_ms,
            params,
        });
        match spec.filter(|s| s.validate().is_ok()) {
            Some(s) => (s, generation),
            None => (Spec::fixed(), generation),
        }
    }

    pub(crate) fn store(&self, spec: &Spec, generation: u64) {
        self.spec.store(
            spec.algorithm as u64 | (spec.min as u64) << 8 | (spec.max as u64) << 32,
            Ordering::Relaxed,
        );
        self.initial.store(
            spec.initial as u64 | generation << GEN_SHIFT,
            Ordering::Relaxed,
        );
        self.window_ms
            .store(spec.window_ms.to_bits(), Ordering::Relaxed);
        for (w, p) in self.params.iter().zip(spec.params) {
            w.store(p.to_bits(), Ordering::Relaxed);
        }
    }
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

impl WindowCopy {
    pub(crate) fn load_state(&self) -> State {
        let words: [u64; STATE_WORDS] =
            std::array::from_fn(|i| self.state[i].load(Ordering::Relaxed));
        State::from_words(words)
    }

    pub(crate) fn store_state(&self, state: &State) {
        for (w, s) in self.state.iter().zip(state.to_words()) {
            w.store(s, Ordering::Relaxed);
        }
    }
}

/// The adaptive limit's words of a task slot, on five lines: the word read
/// by every acquire, the word written by releases when someone waits, the
/// configuration copies, then the window copies (written once per window).
#[repr(C, align(64))]
pub(crate) struct AdaptiveSlot {
    /// [`LIMIT_ADAPTIVE`] | generation (39 bits) << 24 | the limit (24 bits).
    pub limit: AtomicU64,
    /// Clock ticks at which the current window ends.
    pub due: AtomicU64,
    /// Nonzero while some process may have waiters queued for this task
    /// (see `task::wait`): on the line every acquire reads, so the check
    /// that keeps a non-waiting acquire from jumping the queue is free.
    pub queued: AtomicU64,
    /// [`WAIT_LIFO`] | [`WAIT_BARGING`], written with the configuration.
    pub wait_policy: AtomicU64,
    /// Words 6..10 of the task's sketch baseline (see `TaskSlot::sketch_base`):
    /// written once a slice by a puller, read by no acquire (0.3.0 left
    /// these words zero).
    pub sketch_base: [AtomicU64; 4],
    /// The futex word of 0.3's waiting acquires, which woke every waiter on
    /// a release. Unused since: left for a 0.3 process sharing the table.
    pub legacy_wake: AtomicU32,
    _pad1: AtomicU32,
    /// The last ticket a waiter took: tickets order the host-wide queue.
    pub tickets: AtomicU64,
    /// Waiting times, words 0..6 of [`WAIT_WORDS`] (see `TaskSlot::wait_word`):
    /// on the line every waiter writes its ticket to. Monotonic; 0.3.0 left
    /// these words zero and never waits in the queue.
    pub waits: [AtomicU64; 6],
    /// The window driver's lock: 0 or the driver's `Owner`.
    pub window_lock: AtomicU64,
    /// Selects the current [`WindowCopy`] (`version & 1`).
    pub window_version: AtomicU64,
    pub config: [LimiterCopy; 2],
    pub windows: [WindowCopy; 2],
    /// Per window copy: samples applied by every window of its generation
    /// so far (a running total, for checking that none is lost or doubled).
    pub applied: [AtomicU64; 2],
    /// Words 6..12 of [`WAIT_WORDS`] (0.3.0 left these words zero).
    pub waits_more: [AtomicU64; 6],
}

/// Buckets of the waiting-time histogram: octaves from ~1 ms (the latency
/// sketch's buckets taken two at a time), the last open-ended.
pub(crate) const WAIT_BUCKETS: usize = 11;
/// Its words: the buckets' counts, then the waits' sum in nanoseconds.
pub(crate) const WAIT_WORDS: usize = WAIT_BUCKETS + 1;

const _: () = {
    assert!(STATE_WORDS == 10);
    assert!(WAIT_WORDS == 12);
    assert!(size_of::<AdaptiveSlot>() == 576);
    assert!(std::mem::offset_of!(AdaptiveSlot, legacy_wake) == 64);
    assert!(std::mem::offset_of!(AdaptiveSlot, queued) == 16);
    assert!(std::mem::offset_of!(AdaptiveSlot, window_lock) == 128);
    assert!(std::mem::offset_of!(AdaptiveSlot, windows) == 256);
    // The words 0.3.0 left zero, where 0.3.0 had padding.
    assert!(std::mem::offset_of!(AdaptiveSlot, sketch_base) == 32);
    assert!(std::mem::offset_of!(AdaptiveSlot, waits) == 80);
    assert!(std::mem::offset_of!(AdaptiveSlot, waits_more) == 528);
};
