//! Changing a balancer's set of backends while traffic flows. A backend
//! that stays keeps its slot and statistics; one that leaves is marked
//! removed (not picked again; the picks in flight on it still end normally);
//! a new one takes an empty slot, or a removed one nobody holds a pick on.
//! Each slot is written with its state not active and published by its
//! state last, so a writer killed half-way leaves no half-written backend
//! that can be picked.

use std::sync::atomic::Ordering;

use super::cost::{decayed_rtt, pack_rtt};
use crate::error::{Error, ErrorKind, Result};
use crate::format::NAME_WORDS;
use crate::format::{BACKEND_ACTIVE, BACKEND_EMPTY, BACKEND_REMOVED, BackendSlot};
use crate::limit::ledger;
use crate::shm::Shm;
use crate::shm::named::name_words;
use crate::words::NAME_MAX;

/// The largest weight (weights are relative; this keeps costs finite).
pub const MAX_WEIGHT: u32 = 1_000_000;

pub(crate) fn kind(state: u64) -> u64 {
    state & 0xff
}

pub(crate) fn generation(state: u64) -> u32 {
    (state >> 8) as u32
}

fn state_of(kind: u64, generation: u32) -> u64 {
    (generation as u64) << 8 | kind
}

/// Checks an address: 1–63 bytes, printable, no spaces.
pub(crate) fn validate_address(address: &str) -> Result<()> {
    if address.is_empty() || address.len() > NAME_MAX {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!(
                "backend address must be 1..={NAME_MAX} bytes, not {} ({})",
                address.len(),
                crate::words::echo(address)
            ),
        ));
    }
    if let Some(c) = address
        .chars()
        .find(|c| c.is_control() || c.is_whitespace())
    {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!(
                "backend address {:?} contains U+{:04X}",
                address.escape_default().to_string(),
                c as u32
            ),
        ));
    }
    Ok(())
}

/// Checks the length of a backend list against the table's capacity.
pub(crate) fn check_count(count: usize, capacity: u32) -> Result<()> {
    if count > capacity as usize {
        return Err(Error::new(
            ErrorKind::TableFull,
            format!("{count} backends given; the table holds {capacity} per balancer"),
        ));
    }
    Ok(())
}

/// Checks a new backend list: not empty, within capacity, no duplicate
/// address, weights 1..=MAX_WEIGHT.
pub(crate) fn validate(backends: &[(&str, u32)], capacity: u32) -> Result<()> {
    if backends.is_empty() {
        return Err(Error::invalid("a balancer needs at least one backend"));
    }
    check_count(backends.len(), capacity)?;
    for (i, (address, weight)) in backends.iter().enumerate() {
        validate_address(address)?;
        if !(1..=MAX_WEIGHT).contains(weight) {
            return Err(Error::invalid(format!(
                "backend {address:?}: weight must be 1..={MAX_WEIGHT}, not {weight}"
            )));
        }
        if backends[..i].iter().any(|(a, _)| a == address) {
            return Err(Error::invalid(format!(
                "backend {address:?} is listed twice"
            )));
        }
    }
    Ok(())
}

/// The address a slot holds, into `out`; its length (0 if unreadable).
pub(crate) fn address_into(slot: &BackendSlot, out: &mut [u8; NAME_WORDS * 8]) -> usize {
    let len = slot.addr_len.load(Ordering::Relaxed);
    if len == 0 || len > NAME_MAX as u64 {
        return 0;
    }
    for (i, w) in slot.addr.iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    len as usize
}

fn holds(slot: &BackendSlot, address: &str) -> bool {
    let mut bytes = [0; NAME_WORDS * 8];
    let len = address_into(slot, &mut bytes);
    &bytes[..len] == address.as_bytes()
}

/// Applies a validated list under the membership lock. `now_ms` is the
/// table time; `slow_start_ms` back-dates the first set's backends so a
/// balancer does not ramp up its whole initial set.
pub(crate) fn apply(
    shm: &Shm,
    balancer: u32,
    backends: &[(&str, u32)],
    now_ms: u64,
    slow_start_ms: u64,
    default_rtt_us: u64,
    decay_ms: u64,
) -> Result<()> {
    let capacity = shm.geometry.backend_capacity;
    let slot = |i| {
        shm.backend_slot(balancer, i)
            .expect("index below the capacity")
    };
    let kinds: Vec<u64> = (0..capacity)
        .map(|i| kind(slot(i).state.load(Ordering::Acquire)))
        .collect();
    let known = |address: &str| {
        (0..capacity).find(|&i| {
            matches!(kinds[i as usize], BACKEND_ACTIVE | BACKEND_REMOVED) && holds(slot(i), address)
        })
    };
    let wanted = |i: u32| backends.iter().any(|(a, _)| holds(slot(i), a));
    // Slots a new backend may take: empty, or removed with no pick in flight.
    let mut free = (0..capacity).filter(|&i| match kinds[i as usize] {
        BACKEND_EMPTY => true,
        BACKEND_REMOVED => {
            !wanted(i) && ledger::word_count(slot(i).in_flight.load(Ordering::Acquire)) == 0
        }
        _ => false,
    });
    let mut plan = Vec::with_capacity(backends.len());
    for (address, weight) in backends {
        let target = match known(address) {
            Some(i) => (i, false),
            None => (
                free.next().ok_or_else(|| {
                    Error::new(
                        ErrorKind::TableFull,
                        format!(
                            "no free backend slot for {address:?}: {capacity} are in use or \
                             still have picks in flight"
                        ),
                    )
                })?,
                true,
            ),
        };
        plan.push((target, *address, *weight));
    }
    let initial = !kinds.contains(&BACKEND_ACTIVE);
    let seed = seed_rtt(shm, balancer, now_ms, decay_ms).unwrap_or(default_rtt_us as f64);
    // Leavers first, so nothing is picked that the new list lacks.
    for i in 0..capacity {
        if kinds[i as usize] == BACKEND_ACTIVE && !plan.iter().any(|((j, _), _, _)| *j == i) {
            let s = slot(i);
            let state = s.state.load(Ordering::Acquire);
            s.state.store(
                state_of(BACKEND_REMOVED, generation(state)),
                Ordering::Release,
            );
        }
    }
    for ((i, fresh), address, weight) in plan {
        let s = slot(i);
        let state = s.state.load(Ordering::Acquire);
        s.weight.store(weight as u64, Ordering::Relaxed);
        if !fresh {
            s.state.store(
                state_of(BACKEND_ACTIVE, generation(state)),
                Ordering::Release,
            );
            continue;
        }
        let next = generation(state).wrapping_add(1);
        s.state
            .store(state_of(BACKEND_EMPTY, next), Ordering::Release);
        let first_seen = if initial {
            now_ms.saturating_sub(slow_start_ms)
        } else {
            now_ms
        };
        s.first_seen.store(first_seen, Ordering::Relaxed);
        s.penalty.store(0, Ordering::Relaxed);
        s.rtt.store(pack_rtt(now_ms, seed), Ordering::Relaxed);
        s.load.store(0, Ordering::Relaxed);
        s.picked.store(0, Ordering::Relaxed);
        for b in s.buckets.iter().chain(&s.outcomes) {
            b.store(0, Ordering::Relaxed);
        }
        for (w, v) in s.addr.iter().zip(name_words(address)) {
            w.store(v, Ordering::Relaxed);
        }
        s.addr_len.store(address.len() as u64, Ordering::Relaxed);
        s.state
            .store(state_of(BACKEND_ACTIVE, next), Ordering::Release);
    }
    Ok(())
}

/// A new backend's first RTT estimate: the mean of the active backends'
/// estimates now (so it is neither favoured as instant nor shunned as
/// unknown), or `None` when there are none.
fn seed_rtt(shm: &Shm, balancer: u32, now_ms: u64, decay_ms: u64) -> Option<f64> {
    let estimates: Vec<f64> = (0..shm.geometry.backend_capacity)
        .filter_map(|i| shm.backend_slot(balancer, i))
        .filter(|s| kind(s.state.load(Ordering::Acquire)) == BACKEND_ACTIVE)
        .map(|s| decayed_rtt(s.rtt.load(Ordering::Relaxed), now_ms, decay_ms as f64))
        .filter(|&e| e > 0.0)
        .collect();
    (!estimates.is_empty()).then(|| estimates.iter().sum::<f64>() / estimates.len() as f64)
}
