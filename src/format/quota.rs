//! A task's global-quota section: the host's share of the current slice,
//! the state machine, the pull lock and statistics, the fallback rate, the
//! embedded store and the configuration copies.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bounds of a global-quota slice: shorter slices cost more pulls than they
/// save in precision; longer ones strand more quota per slice.
pub(crate) const MIN_SLICE_MS: u32 = 100;
pub(crate) const MAX_SLICE_MS: u32 = 60_000;
/// Permits per slice fit the host word's 32-bit count, with room to spare.
pub(crate) const MAX_SLICE_QUOTA: u32 = 1 << 30;

/// A task's global limit as the request path reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Global {
    pub rate: f64,
    /// Permits per slice.
    pub quota: u32,
    pub slice_ms: u32,
    /// Fixed chunk; 0 = adaptive.
    pub chunk: u32,
    /// While failed and without a local rate; 0 = `rate`.
    pub fallback_rate: f64,
}

/// One copy of a task's global-quota configuration, versioned with the
/// task's other copies (same `config_version`, same writer lock).
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

impl GlobalCopy {
    /// The global limit, `None` when there is none. Clamped to what
    /// validation allows: a damaged file must not divide by zero or
    /// overflow on the request path.
    #[inline]
    pub(crate) fn load(&self) -> Option<Global> {
        let rate = f64::from_bits(self.rate_bits.load(Ordering::Relaxed));
        if rate == 0.0 {
            return None;
        }
        let slice_chunk = self.slice_chunk.load(Ordering::Relaxed);
        let quota = (self
            .quota
            .load(Ordering::Relaxed)
            .min(MAX_SLICE_QUOTA as u64) as u32)
            .max(1);
        Some(Global {
            rate,
            quota,
            slice_ms: (slice_chunk as u32).clamp(MIN_SLICE_MS, MAX_SLICE_MS),
            chunk: ((slice_chunk >> 32) as u32).min(quota),
            fallback_rate: f64::from_bits(self.fallback_bits.load(Ordering::Relaxed)),
        })
    }

    pub(crate) fn store(&self, g: Option<&Global>) {
        self.rate_bits
            .store(g.map_or(0, |g| g.rate.to_bits()), Ordering::Relaxed);
        self.slice_chunk.store(
            g.map_or(0, |g| g.slice_ms as u64 | (g.chunk as u64) << 32),
            Ordering::Relaxed,
        );
        self.fallback_bits.store(
            g.map_or(0, |g| g.fallback_rate.to_bits()),
            Ordering::Relaxed,
        );
        self.quota
            .store(g.map_or(0, |g| g.quota as u64), Ordering::Relaxed);
    }
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

const _: () = {
    assert!(size_of::<QuotaSlot>() == 384);
    assert!(std::mem::offset_of!(QuotaSlot, phase) == 64);
    assert!(std::mem::offset_of!(QuotaSlot, pull_lock) == 128);
    assert!(std::mem::offset_of!(QuotaSlot, fallback_tat) == 256);
};
