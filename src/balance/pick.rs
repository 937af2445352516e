//! Pick and done: power of two distinct choices over the eligible backends,
//! the pick held in the backend's in-flight word through this process's
//! ledger, and the outcome recorded in the backend's statistics.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::cost::{self, Inputs};
use super::membership::{address_into, generation, kind};
use super::{Balancer, PickOptions, RawPick, buckets, penalty, retry};
use crate::error::{Error, ErrorKind, Result};
use crate::format::{BACKEND_ACTIVE, BUCKETS, BackendSlot, MAX_BACKEND_CAPACITY};
use crate::limit::ledger::{self, Update};
use crate::token;
use crate::words::NAME_MAX;
use crate::words::Outcome;

/// How long a thread waits for another thread of its process that is
/// mid-update on the same backend's ledger (one lane per process).
const LANE_DEADLINE: Duration = Duration::from_secs(1);
/// Picks retried when the chosen backend's slot changed under the pick.
const RACE_RETRIES: u32 = 8;

/// A per-thread xorshift generator, seeded from the process's random keys:
/// no system call per pick.
fn random() -> u64 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new(crate::shm::random_u64() | 1);
    }
    STATE
        .try_with(|s| {
            let mut x = s.get();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.set(x);
            x.wrapping_mul(0x2545_F491_4F6C_DD1D)
        })
        .unwrap_or(0x9E37_79B9)
}

fn below(n: usize) -> usize {
    (((random() >> 32) * n as u64) >> 32) as usize
}

/// A uniform number in 0..1.
pub(crate) fn unit() -> f64 {
    (random() >> 11) as f64 / (1u64 << 53) as f64
}

impl Balancer {
    fn slot(&self, backend: u32) -> Option<&BackendSlot> {
        self.shm.backend_slot(self.index, backend)
    }

    fn inputs(&self, s: &BackendSlot, now_ms: u64, p: &super::config::Params) -> Inputs {
        Inputs {
            rtt_us: cost::decayed_rtt(s.rtt.load(Ordering::Relaxed), now_ms, p.decay_ms as f64),
            in_flight: ledger::word_count(s.in_flight.load(Ordering::Relaxed)),
            weight: s.weight.load(Ordering::Relaxed),
            ramp: cost::ramp(
                now_ms.saturating_sub(s.first_seen.load(Ordering::Relaxed)),
                p.slow_start_ms,
            ),
            load: cost::fresh_load(s.load.load(Ordering::Relaxed), now_ms),
        }
    }

    /// Moves `backend`'s in-flight word by `delta` through this process's
    /// ledger lane for it. A give-back (`delta` < 0) the lane does not hold
    /// is refused inside the ledger's op (its floor is 0): of two threads
    /// finishing copies of one pick at once, one moves the count.
    fn move_in_flight(&self, attach: u32, backend: u32, delta: i32) -> Result<()> {
        let shm = &*self.shm;
        let word = &self
            .slot(backend)
            .ok_or_else(|| Error::invalid("backend index outside the table"))?
            .in_flight;
        let lane = |id: u32| {
            shm.pick_ledger(self.index, id, backend)
                .map(|l| ledger::Lane {
                    id,
                    ledger: &l.ledger,
                    intent: &l.intent,
                })
        };
        let mine = lane(attach)
            .ok_or_else(|| Error::new(ErrorKind::Internal, "attachment outside the table"))?;
        let mut waited: Option<Instant> = None;
        loop {
            let done = if delta < 0 {
                ledger::update_floored(word, lane, mine, delta, 0)
            } else {
                ledger::update(word, lane, mine, delta, None)
            };
            match done {
                Update::Busy => {}
                Update::Refused if delta < 0 => {
                    return Err(Error::invalid(format!(
                        "balancer {:?}: this process holds no pick on backend {backend} (done twice?)",
                        self.name
                    )));
                }
                Update::Refused => {
                    return Err(Error::new(
                        ErrorKind::Internal,
                        format!(
                            "balancer {:?}: backend {backend}'s in-flight count is at its most                              (a damaged table?)",
                            self.name
                        ),
                    ));
                }
                _ => return Ok(()),
            }
            if waited.get_or_insert_with(Instant::now).elapsed() > LANE_DEADLINE {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "balancer {:?}: this process's ledger stayed busy",
                        self.name
                    ),
                ));
            }
            std::thread::yield_now();
        }
    }

    pub(super) fn pick_at(&self, options: &PickOptions, now_ms: u64) -> Result<RawPick> {
        let shm = &*self.shm;
        let owner = shm.owner()?;
        let attach = owner.index().unwrap_or(0);
        let p = super::config::Params::load(shm.balancer_slot(self.index));
        let capacity = self.capacity().min(MAX_BACKEND_CAPACITY);
        for _ in 0..RACE_RETRIES {
            // Candidates (active, not excluded), healthy ones first.
            let mut all = [0u16; MAX_BACKEND_CAPACITY as usize];
            let (mut n, mut healthy, mut active) = (0, 0, 0);
            for i in 0..capacity {
                let Some(s) = self.slot(i) else { break };
                if kind(s.state.load(Ordering::Acquire)) != BACKEND_ACTIVE {
                    continue;
                }
                active += 1;
                if options.exclude.contains(&i) {
                    continue;
                }
                all[n] = i as u16;
                n += 1;
                if !penalty::ejected(s.penalty.load(Ordering::Relaxed), now_ms) {
                    all.swap(healthy, n - 1);
                    healthy += 1;
                }
            }
            if n == 0 {
                return Err(Error::invalid(if active == 0 {
                    format!("balancer {:?} has no backends", self.name)
                } else {
                    format!("balancer {:?}: every backend is excluded", self.name)
                }));
            }
            let pool = if healthy == 0 || penalty::panic(healthy, n) {
                &all[..n]
            } else {
                &all[..healthy]
            };
            let chosen = if pool.len() == 1 {
                pool[0] as u32
            } else {
                let a = below(pool.len());
                let mut b = below(pool.len() - 1);
                if b >= a {
                    b += 1;
                }
                let (a, b) = (pool[a] as u32, pool[b] as u32);
                let cost_of = |i| {
                    self.slot(i)
                        .map_or(f64::INFINITY, |s| cost::cost(self.inputs(s, now_ms, &p)))
                };
                let (ca, cb) = (cost_of(a), cost_of(b));
                if ca < cb || (ca == cb && random() & 1 == 0) {
                    a
                } else {
                    b
                }
            };
            let s = self.slot(chosen).expect("a candidate is inside the table");
            let state = s.state.load(Ordering::Acquire);
            self.move_in_flight(attach, chosen, 1)?;
            if s.state.load(Ordering::Acquire) != state || kind(state) != BACKEND_ACTIVE {
                // Removed or reused meanwhile: give it back and choose again.
                self.move_in_flight(attach, chosen, -1)?;
                continue;
            }
            s.picked.fetch_add(1, Ordering::Relaxed);
            buckets::add(&shm.balancer_slot(self.index).budget, now_ms / 1000, 1, 0);
            let mut raw = RawPick {
                backend: chosen,
                addr_len: 0,
                addr: [0; NAME_MAX + 1],
                picked_at: shm.clock.now(),
                owner: owner.0,
                balancer: self.index,
                generation: generation(state),
                flags: 0,
                reserved0: 0,
                check: 0,
                reserved: [0; 2],
            };
            raw.addr_len = address_into(s, &mut raw.addr) as u32;
            token::seal(&mut raw, shm.permit_key);
            return Ok(raw);
        }
        Err(Error::new(
            ErrorKind::Timeout,
            format!(
                "balancer {:?}: its backends kept changing under the pick",
                self.name
            ),
        ))
    }

    pub(super) fn done_at(
        &self,
        pick: &mut RawPick,
        outcome: Outcome,
        rtt: Option<Duration>,
        load: Option<f64>,
        now_ms: u64,
    ) -> Result<()> {
        let shm = &*self.shm;
        let owner = shm.owner()?;
        token::verify(pick, shm.permit_key, owner, self.index).map_err(|why| {
            token::refusal::<RawPick>(&format_args!("balancer {:?}", self.name), why)
        })?;
        if self.slot(pick.backend).is_none() {
            return Err(Error::invalid(format!(
                "balancer {:?}: cannot finish this pick: it names no backend of this table",
                self.name
            )));
        }
        // A slot is given to another backend only once no pick on it is in
        // flight: a pick of an older generation was done already.
        let s = self.slot(pick.backend).expect("checked above");
        if generation(s.state.load(Ordering::Acquire)) != pick.generation {
            return Err(Error::invalid(format!(
                "balancer {:?}: this pick was done already (its backend's slot holds another)",
                self.name
            )));
        }
        // Refused, nothing moved, when this process holds no pick on the
        // backend: a pick done twice (two copies of it finished at once
        // both get here; the ledger lets one through).
        let attach = owner.index().unwrap_or(0);
        self.move_in_flight(attach, pick.backend, -1)?;
        token::spend(pick);
        let load = load.filter(|l| l.is_finite() && *l >= 0.0);
        let p = super::config::Params::load(shm.balancer_slot(self.index));
        let elapsed_us = match rtt {
            Some(d) => d.as_micros().min(u32::MAX as u128) as f64,
            None => {
                shm.clock
                    .ticks_to_ns(shm.clock.now().saturating_sub(pick.picked_at))
                    as f64
                    / 1e3
            }
        };
        // An ignored outcome gives the pick back without a sample: neither
        // its RTT nor the load its caller passed along.
        if let Some(load) = load
            && outcome != Outcome::Ignored
        {
            s.load
                .store(cost::pack_load(now_ms, load), Ordering::Relaxed);
        }
        let sec = now_ms / 1000;
        let decay = p.decay_ms as f64;
        match outcome {
            Outcome::Ignored => {}
            Outcome::Success => {
                update_rtt(s, |w| cost::observe_success(w, elapsed_us, now_ms, decay));
                buckets::add(&s.buckets, sec, 1, 0);
                s.outcomes[0].fetch_add(1, Ordering::Relaxed);
                let (ok, failed) = buckets::window(&s.buckets, sec);
                if !penalty::failing(ok, failed) {
                    penalty::forgive(&s.penalty, now_ms);
                }
            }
            Outcome::Dropped => {
                let penalty_us = p.penalty_ms as f64 * 1e3;
                update_rtt(s, |w| {
                    let current = cost::decayed_rtt(w, now_ms, decay);
                    let sample = cost::penalty_rtt(elapsed_us, current, penalty_us);
                    cost::observe(w, sample, now_ms, decay)
                });
                buckets::add(&s.buckets, sec, 0, 1);
                s.outcomes[1].fetch_add(1, Ordering::Relaxed);
                let (ok, failed) = buckets::window(&s.buckets, sec);
                if penalty::failing(ok, failed) && penalty::eject(&s.penalty, now_ms, unit()) {
                    s.outcomes[2].fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    pub(super) fn retry_allowed_at(&self, now_ms: u64) -> bool {
        let slot = self.shm.balancer_slot(self.index);
        let p = super::config::Params::load(slot);
        let sec = now_ms / 1000;
        let (picks, retries) = buckets::window(&slot.budget, sec);
        let ok = retry::allowed(
            picks,
            retries,
            p.retry_ratio,
            p.retry_min_per_sec,
            BUCKETS as u64,
        );
        if ok {
            buckets::add(&slot.budget, sec, 0, 1);
        }
        ok
    }
}

fn update_rtt(s: &BackendSlot, next: impl Fn(u64) -> u64) {
    let mut current = s.rtt.load(Ordering::Relaxed);
    loop {
        match s.rtt.compare_exchange_weak(
            current,
            next(current),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return,
            Err(seen) => current = seen,
        }
    }
}
