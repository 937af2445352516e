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
pub(crate) use register::{config_of, ready};
pub(crate) use stats::read as read_stats;
pub use stats::{BackendStats, BalancerStats};

use crate::error::{Error, Result};
use crate::format::{MAX_BACKEND_CAPACITY, MAX_BALANCER_CAPACITY};
use crate::shm::Shm;
use crate::token::{self, Finish, Guard, Issuer, Kind, SPENT, Token};
use crate::words::{NAME_MAX, Outcome, validate_name};

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

/// The table clock in ms: the time base of a balancer's words.
pub(crate) fn now_ms(clock: &crate::clock::Clock) -> u64 {
    clock.ticks_to_ns(clock.now()) / 1_000_000
}

/// Checks a backend list against the table's capacity.
pub(crate) fn check_backends(shm: &Shm, backends: &[(&str, u32)]) -> Result<()> {
    membership::validate(backends, shm.geometry.backend_capacity)
}

/// Checks a backend list apart from any table (a config file's): the
/// table's capacity is checked when it is applied.
pub(crate) fn validate_backends(backends: &[(&str, u32)]) -> Result<()> {
    membership::validate(backends, u32::MAX)
}

/// The balancer `name` if some process registered it (nothing is claimed).
pub(crate) fn find(shm: &Arc<Shm>, name: &str) -> Option<Balancer> {
    register::find(shm, name).map(|index| Balancer {
        shm: shm.clone(),
        index,
        name: name.into(),
    })
}

/// Registers (or attaches to) the balancer `name`.
pub(crate) fn register(shm: &Arc<Shm>, name: &str, config: &BalancerConfig) -> Result<Balancer> {
    validate_name(name, "balancer name")?;
    let asked = config.params()?;
    let (index, _) = register::find_or_claim(shm, name, asked)?;
    let stored = config::Params::load(shm.balancer_slot(index));
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
/// once. Rust code uses [`Pick`] or [`OwnedPick`]. Laid out as the C face's
/// 128-byte `fc_pick`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawPick {
    /// The backend's slot index.
    pub backend: u32,
    pub addr_len: u32,
    /// The backend's address (the first `addr_len` bytes), NUL-padded.
    pub addr: [u8; NAME_MAX + 1],
    /// Clock ticks when it was picked.
    pub picked_at: u64,
    /// The attachment that holds it: slot and epoch of its claim.
    pub owner: u64,
    pub balancer: u32,
    /// The generation of the backend's slot when it was picked.
    pub generation: u32,
    /// Bit 1: done.
    pub flags: u32,
    /// Zero: room for later versions (a pick with them set is refused).
    pub reserved0: u32,
    /// A keyed check of the fields above (see `token`).
    pub check: u64,
    pub reserved: [u64; 2],
}

const _: () = assert!(size_of::<RawPick>() == 128);

impl Token for RawPick {
    const KIND: Kind = Kind {
        salt: 0x5bd1_e995,
        flags: 0,
        noun: "pick",
        verb: "finish",
        spent: "it is done already",
        foreign: "it was picked by another process or table handle (picks do not cross fork)",
        elsewhere: "it was picked from another balancer",
    };

    fn fields(&self) -> token::Fields {
        token::Fields {
            at: self.picked_at,
            owner: self.owner,
            subject: self.balancer,
            item: self.backend,
            extra: self.generation as u64,
        }
    }

    fn flags(&self) -> u32 {
        self.flags
    }

    fn flags_mut(&mut self) -> &mut u32 {
        &mut self.flags
    }

    fn check(&self) -> u64 {
        self.check
    }

    fn set_check(&mut self, check: u64) {
        self.check = check;
    }

    fn reserved_clear(&self) -> bool {
        self.reserved0 == 0 && self.reserved == [0; 2] && self.addr_len as usize <= NAME_MAX
    }
}

impl RawPick {
    /// The chosen backend's address.
    pub fn address(&self) -> &str {
        let len = (self.addr_len as usize).min(NAME_MAX);
        std::str::from_utf8(&self.addr[..len]).unwrap_or("")
    }

    pub fn is_done(&self) -> bool {
        self.flags & SPENT != 0
    }
}

impl Issuer for Balancer {
    type Raw = RawPick;

    fn finish_raw(&self, raw: &mut RawPick, how: Finish) -> Result<()> {
        self.done_raw(raw, how.outcome, how.rtt, how.load)
    }

    fn is_spent(raw: &RawPick) -> bool {
        raw.is_done()
    }
}

/// A backend chosen for one request, borrowing its balancer. Finish it with
/// [`Pick::done`]; dropping it finishes it as [`Outcome::Ignored`] (no
/// sample).
pub type Pick<'a> = Guard<Balancer, &'a Balancer>;

/// A pick that keeps its balancer alive (`Send + 'static`).
pub type OwnedPick = Guard<Balancer, Balancer>;

impl<H: std::borrow::Borrow<Balancer>> Guard<Balancer, H> {
    /// The chosen backend's address.
    pub fn backend(&self) -> &str {
        self.raw().address()
    }

    /// The chosen backend's slot index (what [`PickOptions::exclude`] takes).
    pub fn index(&self) -> u32 {
        self.raw().backend
    }

    /// Records the call's outcome; its RTT is measured since the pick.
    pub fn done(self, outcome: Outcome) -> Result<()> {
        self.finish(outcome.into())
    }

    /// As [`Pick::done`], with the RTT the caller measured (`None` = since the
    /// pick) and the load the server reported with its response (0 = idle,
    /// 1 = saturated; `None` = no report). [`Outcome::Ignored`] records
    /// neither.
    pub fn done_with(
        self,
        outcome: Outcome,
        rtt: Option<Duration>,
        load: Option<f64>,
    ) -> Result<()> {
        self.finish(Finish { outcome, rtt, load })
    }
}

impl Balancer {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configuration every process applies.
    pub fn config(&self) -> BalancerConfig {
        config::Params::load(self.shm.balancer_slot(self.index)).config()
    }

    /// Backends per balancer in this table (the largest backend index + 1).
    pub fn capacity(&self) -> u32 {
        self.shm.geometry.backend_capacity
    }

    /// Refuses a backend list longer than the table holds, before a face
    /// reads it from caller memory.
    pub fn check_backend_count(&self, count: usize) -> Result<()> {
        membership::check_count(count, self.capacity())
    }

    /// Sets the backends: `(address, weight)` pairs, weights 1..=1,000,000.
    /// Backends that stay keep their statistics; those not listed are not
    /// picked again (picks in flight on them end normally); new ones ramp up
    /// over the slow-start period (except in a balancer's first set). Waits
    /// up to 2 s for another live process changing them.
    pub fn set_backends(&self, backends: &[(&str, u32)]) -> Result<()> {
        membership::validate(backends, self.capacity())?;
        let slot = self.shm.balancer_slot(self.index);
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
            self.shm.backend_slot(self.index, i).is_some_and(|s| {
                membership::kind(s.state.load(Ordering::Acquire)) == crate::format::BACKEND_ACTIVE
                    && {
                        let len = membership::address_into(s, &mut bytes);
                        &bytes[..len] == address.as_bytes()
                    }
            })
        })
    }

    /// Chooses a backend for one request.
    pub fn pick(&self, options: &PickOptions) -> Result<Pick<'_>> {
        Ok(Pick::new(self, self.pick_raw(options)?))
    }

    /// [`Balancer::pick`] giving a pick that owns a handle of the balancer.
    pub fn pick_owned(&self, options: &PickOptions) -> Result<OwnedPick> {
        Ok(OwnedPick::new(self.clone(), self.pick_raw(options)?))
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
        now_ms(&self.shm.clock)
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
