//! Balancers: choosing which backend gets a request, from statistics every
//! process on the host shares in the table.
//!
//! A balancer is a named set of backends (an address and a weight each),
//! registered like a task. Each pick chooses between two distinct backends
//! drawn at random from the eligible ones, by a cost that combines the
//! host-wide picks in flight, a peak-EWMA of the RTT and the weight (see
//! `cost`); a pick in flight is held in the table like a permit, through the
//! same crash-exact ledger, and is given back by the reaper if its process
//! dies. Failures make a backend look slow at once (a penalty RTT) and
//! eject it when most of its recent calls fail (`penalty`); new backends
//! ramp up; a host-wide retry budget bounds retries (`retry`).

mod buckets;
mod config;
mod cost;
pub(crate) mod layout;
mod membership;
mod penalty;
mod pick;
mod reclaim;
mod register;
mod retry;
mod stats;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub use config::BalancerConfig;
pub use membership::MAX_WEIGHT;
pub(crate) use reclaim::BalanceReclaim;
pub use stats::{BackendStats, BalancerStats};

use crate::error::{Error, Result};
use crate::shm::Shm;
use crate::shm::layout::NAME_MAX;
use crate::task::{Outcome, validate_name};
use layout::{MAX_BACKEND_CAPACITY, MAX_BALANCER_CAPACITY, balancer_slot};

/// Checks the balancer capacities of `TableOptions`; the backend capacity
/// the table records (0 when there are no balancers).
pub(crate) fn check_capacity(balancers: u32, backends: u32) -> Result<u32> {
    if balancers > MAX_BALANCER_CAPACITY {
        return Err(Error::invalid(format!(
            "balancers must be 0..={MAX_BALANCER_CAPACITY}, not {balancers}"
        )));
    }
    if balancers == 0 {
        return Ok(0);
    }
    if !(1..=MAX_BACKEND_CAPACITY).contains(&backends) {
        return Err(Error::invalid(format!(
            "backends_per_balancer must be 1..={MAX_BACKEND_CAPACITY}, not {backends}"
        )));
    }
    Ok(backends)
}

/// Checks a backend list against the table's capacity.
pub(crate) fn check_backends(shm: &Shm, backends: &[(&str, u32)]) -> Result<()> {
    membership::validate(backends, shm.geometry.backend_capacity)
}

/// Registers (or attaches to) the balancer `name`.
pub(crate) fn register(shm: &Arc<Shm>, name: &str, config: &BalancerConfig) -> Result<Balancer> {
    validate_name(name)?;
    let asked = config.params()?;
    let (index, _) = register::find_or_claim(shm, name, asked)?;
    let stored = config::Params::load(balancer_slot(shm, index));
    config::check_matches(name, stored, asked)?;
    Ok(Balancer {
        shm: shm.clone(),
        index,
        name: name.into(),
    })
}

/// A registered balancer. Cheap to clone; `Send + Sync`. Every process that
/// registers the same name on the same table shares its backends and their
/// statistics.
#[derive(Clone)]
pub struct Balancer {
    shm: Arc<Shm>,
    index: u32,
    name: Arc<str>,
}

/// What a pick must avoid.
#[derive(Clone, Copy, Debug, Default)]
pub struct PickOptions<'a> {
    /// Backend indices not to choose (a retry excludes the backend that just
    /// failed). Indices that name no backend are ignored; excluding every
    /// backend is an error.
    pub exclude: &'a [u32],
}

/// A pick as plain data, for faces that keep it themselves (C, Python):
/// every `RawPick` from [`Balancer::pick_raw`] goes to [`Balancer::done_raw`]
/// once. Rust code uses [`Pick`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawPick {
    /// Clock ticks when it was picked.
    pub picked_at: u64,
    /// The attachment that holds it: slot and epoch of its claim.
    pub owner: u64,
    pub balancer: u32,
    /// The backend's slot index.
    pub backend: u32,
    /// The generation of the backend's slot when it was picked.
    pub generation: u32,
    /// Bit 1: done.
    pub flags: u32,
    /// A keyed check of the fields above (as a permit's).
    pub check: u64,
    pub addr_len: u32,
    /// The backend's address (the first `addr_len` bytes).
    pub addr: [u8; NAME_MAX + 1],
}

/// [`RawPick::flags`]: done; another `done` is refused.
pub(crate) const DONE: u32 = 2;

impl RawPick {
    /// The chosen backend's address.
    pub fn address(&self) -> &str {
        let len = (self.addr_len as usize).min(NAME_MAX);
        std::str::from_utf8(&self.addr[..len]).unwrap_or("")
    }

    pub fn is_done(&self) -> bool {
        self.flags & DONE != 0
    }

    fn mac(&self, key: u64) -> u64 {
        let folded = self.picked_at
            ^ self.owner.rotate_left(21)
            ^ ((self.balancer as u64) << 32 | self.backend as u64).rotate_left(42)
            ^ (self.generation as u64).rotate_left(7);
        let h = (folded ^ key ^ 0x5bd1_e995).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^ (h >> 31)
    }
}

/// A backend chosen for one request. Finish it with [`Pick::done`];
/// dropping it finishes it as [`Outcome::Ignored`] (no sample).
#[must_use = "a pick holds the backend's in-flight count until it is done"]
pub struct Pick<'a> {
    balancer: &'a Balancer,
    raw: RawPick,
}

impl Pick<'_> {
    /// The chosen backend's address.
    pub fn backend(&self) -> &str {
        self.raw.address()
    }

    /// The chosen backend's slot index (what [`PickOptions::exclude`] takes).
    pub fn index(&self) -> u32 {
        self.raw.backend
    }

    pub fn raw(&self) -> &RawPick {
        &self.raw
    }

    /// Records the call's outcome; its RTT is measured since the pick.
    pub fn done(mut self, outcome: Outcome) -> Result<()> {
        self.balancer.done_raw(&mut self.raw, outcome, None, None)
    }

    /// As [`Pick::done`], with the RTT the caller measured (`None` = since the
    /// pick) and the load the server reported with its response (0 = idle,
    /// 1 = saturated; `None` = no report).
    pub fn done_with(
        mut self,
        outcome: Outcome,
        rtt: Option<Duration>,
        load: Option<f64>,
    ) -> Result<()> {
        self.balancer.done_raw(&mut self.raw, outcome, rtt, load)
    }
}

impl Drop for Pick<'_> {
    fn drop(&mut self) {
        if !self.raw.is_done() {
            let _ = self
                .balancer
                .done_raw(&mut self.raw, Outcome::Ignored, None, None);
        }
    }
}

impl std::fmt::Debug for Pick<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pick")
            .field("balancer", &self.balancer.name())
            .field("backend", &self.backend())
            .finish()
    }
}

impl Balancer {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configuration every process applies.
    pub fn config(&self) -> BalancerConfig {
        config::Params::load(balancer_slot(&self.shm, self.index)).config()
    }

    /// Backends per balancer in this table (the largest backend index + 1).
    pub fn capacity(&self) -> u32 {
        self.shm.geometry.backend_capacity
    }

    /// Sets the backends: `(address, weight)` pairs, weights 1..=1,000,000.
    /// Backends that stay keep their statistics; those not listed are not
    /// picked again (picks in flight on them end normally); new ones ramp up
    /// over the slow-start period (except in a balancer's first set). Waits
    /// up to 2 s for another live process changing them.
    pub fn set_backends(&self, backends: &[(&str, u32)]) -> Result<()> {
        membership::validate(backends, self.capacity())?;
        let slot = balancer_slot(&self.shm, self.index);
        let p = config::Params::load(slot);
        register::with_lock(&self.shm, &slot.member_lock, || {
            membership::apply(
                &self.shm,
                self.index,
                backends,
                self.now_ms(),
                p.slow_start_ms,
                p.default_rtt_us,
                p.decay_ms,
            )
        })?
    }

    /// The slot index of the active backend `address`, if any.
    pub fn index_of(&self, address: &str) -> Option<u32> {
        let mut bytes = [0; NAME_MAX + 1];
        (0..self.capacity()).find(|&i| {
            layout::backend_slot(&self.shm, self.index, i).is_some_and(|s| {
                membership::kind(s.state.load(Ordering::Acquire)) == layout::BACKEND_ACTIVE && {
                    let len = membership::address_into(s, &mut bytes);
                    &bytes[..len] == address.as_bytes()
                }
            })
        })
    }

    /// Chooses a backend for one request.
    pub fn pick(&self, options: &PickOptions) -> Result<Pick<'_>> {
        Ok(Pick {
            balancer: self,
            raw: self.pick_raw(options)?,
        })
    }

    /// [`Balancer::pick`] for faces that keep the pick themselves.
    pub fn pick_raw(&self, options: &PickOptions) -> Result<RawPick> {
        self.pick_at(options, self.now_ms())
    }

    /// Records a pick's outcome and gives its in-flight count back; marks it
    /// done. `rtt` overrides the time measured since the pick; `load` is the
    /// server's reported load (see [`Pick::done_with`]). Refused: a pick done
    /// already, one of another balancer, table or process, one whose fields
    /// were altered, and one this process holds no pick for.
    pub fn done_raw(
        &self,
        pick: &mut RawPick,
        outcome: Outcome,
        rtt: Option<Duration>,
        load: Option<f64>,
    ) -> Result<()> {
        self.done_at(pick, outcome, rtt, load, self.now_ms())
    }

    /// Whether a retry may be sent now, by the host-wide retry budget; if
    /// so, the retry is counted against it.
    pub fn retry_allowed(&self) -> bool {
        self.retry_allowed_at(self.now_ms())
    }

    fn now_ms(&self) -> u64 {
        let clock = &self.shm.clock;
        clock.ticks_to_ns(clock.now()) / 1_000_000
    }
}

impl std::fmt::Debug for Balancer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Balancer")
            .field("name", &self.name)
            .finish()
    }
}

#[cfg(test)]
mod tests;
