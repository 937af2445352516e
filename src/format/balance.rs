//! The balancer regions: one slot per balancer, one slot per backend of each
//! balancer, and per (balancer, attachment) the ledger words of the picks it
//! holds in flight on each backend.

use std::sync::atomic::AtomicU64;

use super::NAME_WORDS;

/// Time buckets of the success counts and of the retry budget: ten of one
/// second each.
pub(crate) const BUCKETS: usize = 10;

/// Backend slot kinds (low byte of [`BackendSlot::state`]); the generation of
/// the slot's current address is above.
pub(crate) const BACKEND_EMPTY: u64 = 0;
pub(crate) const BACKEND_ACTIVE: u64 = 1;
/// Taken out of the set: not picked again, its picks in flight still end.
pub(crate) const BACKEND_REMOVED: u64 = 2;

/// Words of a balancer's configuration (see `balance::config::Params`).
pub(crate) const BALANCER_CONFIG_WORDS: usize = 8;

/// One balancer: identity and configuration on the first lines (written
/// once), then the host-wide buckets of its retry budget.
#[repr(C, align(64))]
pub(crate) struct BalancerSlot {
    /// As `TaskSlot::state`: empty, claiming | owner, or ready.
    pub state: AtomicU64,
    pub name_len: AtomicU64,
    /// Writer lock of the membership: 0 or the writer's `Owner`.
    pub member_lock: AtomicU64,
    _pad0: [AtomicU64; 5],
    pub name: [AtomicU64; NAME_WORDS],
    /// Written once, before the slot is published (see `balance::config`).
    pub config: [AtomicU64; BALANCER_CONFIG_WORDS],
    /// Per second, for the retry budget: picks and retries allowed (see
    /// `balance::buckets`).
    pub budget: [AtomicU64; BUCKETS],
    _pad1: [AtomicU64; 6],
}

/// One backend of a balancer. Line 0 is written by membership changes and
/// ejections only; the in-flight word, the estimates and the buckets are
/// each written by every pick or completion, on lines of their own.
#[repr(C, align(64))]
pub(crate) struct BackendSlot {
    /// Kind (low byte) | generation << 8.
    pub state: AtomicU64,
    pub weight: AtomicU64,
    /// When it joined, in table milliseconds.
    pub first_seen: AtomicU64,
    /// Ejected until (ms, low 48 bits) | ejections in a row (high 16 bits).
    pub penalty: AtomicU64,
    pub addr_len: AtomicU64,
    _pad0: [AtomicU64; 3],
    pub addr: [AtomicU64; NAME_WORDS],
    /// Picks in flight host-wide, through the ledger (see `limit::ledger`).
    pub in_flight: AtomicU64,
    /// Picks ever made of this backend (for statistics).
    pub picked: AtomicU64,
    _pad1: [AtomicU64; 6],
    /// Peak-EWMA of the RTT: time of the last sample (ms, high 32 bits,
    /// wrapping) | value (µs, low 32 bits); decayed on read.
    pub rtt: AtomicU64,
    /// Server-reported load: time (ms, high 32, wrapping) | f32 bits (low 32).
    pub load: AtomicU64,
    _pad2: [AtomicU64; 6],
    /// Per second: successes and failures (see `balance::buckets`).
    pub buckets: [AtomicU64; BUCKETS],
    /// Successes, failures and ejections since the backend joined, for
    /// metrics (0.3.0 left these words zero and never writes them).
    pub outcomes: [AtomicU64; OUTCOMES],
    _pad3: [AtomicU64; 3],
}

/// [`BackendSlot::outcomes`]: successes, failures, ejections.
pub(crate) const OUTCOMES: usize = 3;

/// The ledger words of one attachment's picks on one backend (a lane of the
/// backend's in-flight word).
#[repr(C)]
pub(crate) struct PickLedger {
    pub ledger: AtomicU64,
    pub intent: AtomicU64,
}

const _: () = {
    assert!(size_of::<BalancerSlot>() == 320);
    assert!(std::mem::offset_of!(BalancerSlot, budget) == 192);
    assert!(size_of::<BackendSlot>() == 384);
    assert!(std::mem::offset_of!(BackendSlot, addr) == 64);
    assert!(std::mem::offset_of!(BackendSlot, in_flight) == 128);
    assert!(std::mem::offset_of!(BackendSlot, rtt) == 192);
    assert!(std::mem::offset_of!(BackendSlot, buckets) == 256);
    assert!(std::mem::offset_of!(BackendSlot, outcomes) == 336);
    assert!(size_of::<PickLedger>() == 16);
};
