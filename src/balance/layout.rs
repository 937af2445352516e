//! The balancer regions of a table file: one slot per balancer, one slot per
//! backend of each balancer, and per (balancer, attachment) the ledger words
//! of the picks it holds in flight on each backend. Same rules as
//! `shm::layout`: `#[repr(C)]`, atomics only, hot words on lines of their own.

use std::sync::atomic::AtomicU64;

use crate::shm::Shm;
use crate::shm::layout::{Geometry, NAME_WORDS};

/// Bounds on the balancer geometry read from a file or asked for.
pub(crate) const MAX_BALANCER_CAPACITY: u32 = 1 << 10;
pub(crate) const MAX_BACKEND_CAPACITY: u32 = 256;

/// Time buckets of the success counts and of the retry budget: ten of one
/// second each.
pub(crate) const BUCKETS: usize = 10;

/// Backend slot kinds (low byte of [`BackendSlot::state`]); the generation of
/// the slot's current address is above.
pub(crate) const BACKEND_EMPTY: u64 = 0;
pub(crate) const BACKEND_ACTIVE: u64 = 1;
/// Taken out of the set: not picked again, its picks in flight still end.
pub(crate) const BACKEND_REMOVED: u64 = 2;

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
    /// See `balance::config::Stored`.
    pub config: [AtomicU64; 8],
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
    _pad3: [AtomicU64; 6],
}

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
    assert!(size_of::<PickLedger>() == 16);
};

fn backends_offset(g: &Geometry) -> usize {
    g.balancers_offset() + g.balancer_capacity as usize * size_of::<BalancerSlot>()
}

fn backend_count(g: &Geometry) -> usize {
    g.balancer_capacity as usize * g.backend_capacity as usize
}

fn ledgers_offset(g: &Geometry) -> usize {
    backends_offset(g) + backend_count(g) * size_of::<BackendSlot>()
}

/// Bytes of the balancer regions.
pub(crate) fn region_size(g: &Geometry) -> usize {
    g.balancer_capacity as usize * size_of::<BalancerSlot>()
        + backend_count(g)
            * (size_of::<BackendSlot>() + g.attach_capacity as usize * size_of::<PickLedger>())
}

pub(crate) fn balancer_slot(shm: &Shm, balancer: u32) -> &BalancerSlot {
    let g = &shm.geometry;
    assert!(balancer < g.balancer_capacity);
    let offset = g.balancers_offset() + balancer as usize * size_of::<BalancerSlot>();
    // SAFETY: index checked against the validated geometry.
    unsafe { shm.at(offset) }
}

/// A backend slot, or `None` for an index outside the table (indices come
/// from caller memory and the file: checked, not trusted).
pub(crate) fn backend_slot(shm: &Shm, balancer: u32, backend: u32) -> Option<&BackendSlot> {
    let g = &shm.geometry;
    if balancer >= g.balancer_capacity || backend >= g.backend_capacity {
        return None;
    }
    let index = balancer as usize * g.backend_capacity as usize + backend as usize;
    let offset = backends_offset(g) + index * size_of::<BackendSlot>();
    // SAFETY: both indices checked above.
    Some(unsafe { shm.at(offset) })
}

/// The ledger of `attach`'s picks on a backend; laid out per (balancer,
/// attachment) so one process's words share its own lines only.
pub(crate) fn pick_ledger(
    shm: &Shm,
    balancer: u32,
    attach: u32,
    backend: u32,
) -> Option<&PickLedger> {
    let g = &shm.geometry;
    if balancer >= g.balancer_capacity
        || attach >= g.attach_capacity
        || backend >= g.backend_capacity
    {
        return None;
    }
    let index = (balancer as usize * g.attach_capacity as usize + attach as usize)
        * g.backend_capacity as usize
        + backend as usize;
    let offset = ledgers_offset(g) + index * size_of::<PickLedger>();
    // SAFETY: every index checked above.
    Some(unsafe { shm.at(offset) })
}
