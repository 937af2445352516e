//! What a host holds a claim to in a slice: what reached its quota, what it
//! kept of that, and what it took in all (the claim every pull sends, which
//! a key created anew deducts).

use std::sync::atomic::Ordering;

use crate::format::{QuotaSlot, TaskSlot};

/// What the host took of `slice`: store grants (a reservation not yet
/// moved into its quota included) and fallback admissions.
pub(super) fn taken_in(slot: &TaskSlot, slice: u32) -> u64 {
    received_in(&slot.quota, slice) + super::reserve::held(slot, slice)
}

/// What the host holds of `slice`: [`taken_in`] less what it gave back
/// while idle (the claim a key deducts; the fallback's allowance counts it).
pub(super) fn holds_in(slot: &TaskSlot, slice: u32) -> u64 {
    taken_in(slot, slice).saturating_sub(super::idle::given_in(slot, slice))
}

/// What the host kept of `slice`: [`received_in`] less what it gave back
/// while idle (see `idle`).
pub(super) fn kept_in(slot: &TaskSlot, slice: u32) -> u64 {
    received_in(&slot.quota, slice).saturating_sub(super::idle::given_in(slot, slice))
}

/// What reached the host's quota of `slice`, and its fallback admissions.
pub(super) fn received_in(q: &QuotaSlot, slice: u32) -> u64 {
    super::pull::tagged(q.slice_granted.load(Ordering::Relaxed), slice)
        + super::pull::tagged(q.fallback_admitted.load(Ordering::Relaxed), slice)
}
