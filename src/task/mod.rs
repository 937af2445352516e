//! Tasks: the unit a limit applies to, and the admit/release decisions.

mod adaptive;
mod config;
mod global;
mod keyed;
mod lanes;
mod permit;
mod reclaim;
mod register;
mod stats;
mod stored;
mod wait;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub(crate) use config::zero_cap;
pub use config::{LocalConfig, LocalSettings, NO_CAP, TaskConfig, TaskSettings, parse_cap};
pub(crate) use global::quota_stats;
pub use keyed::KeyDecision;
pub use permit::{OwnedPermit, PERMIT_ALTERED, Permit, RawPermit};
pub(crate) use reclaim::TaskReclaim;
pub(crate) use register::{find, find_or_claim, ready};
pub use stats::{Consistency, Histogram, ProcessStats, TaskStats};
pub(crate) use stats::{
    by_process, consistency, read as read_stats, rtt_histogram, wait_histogram,
};
pub(crate) use stored::settings;
#[cfg(feature = "async")]
pub use wait::Acquire;
pub(crate) use wait::Room as WaitRoom;

use crate::error::{Error, ErrorKind, Result};
use crate::format::{COUNTERS, Counter, LANES, TaskSlot, limit_of};
use crate::limit::cap_in_force;
use crate::limit::gcra::Gcra;
use crate::limit::ledger::{MAX_COUNT, Update};
use crate::quota::{Need, Quota, Refused};
use crate::shm::Shm;
use crate::token;
use crate::words::{Limited, Outcome};
use lanes::preferred_lane;
use permit::COUNTED;

/// The answer to an acquire.
#[must_use]
pub enum Decision<'a> {
    Admitted(Permit<'a>),
    Limited(Limited),
}

impl<'a> Decision<'a> {
    pub fn permit(self) -> Option<Permit<'a>> {
        match self {
            Decision::Admitted(p) => Some(p),
            Decision::Limited(_) => None,
        }
    }
}

/// A registered task. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Task {
    shm: Arc<Shm>,
    quota: Arc<Quota>,
    /// The handle's waiters (one room per table handle).
    waits: Arc<WaitRoom>,
    index: u32,
    name: Arc<str>,
    /// The task's key file, mapped on first use by this handle's clones.
    keys: Arc<std::sync::OnceLock<Arc<crate::keyed::Keys>>>,
}

impl Task {
    pub(crate) fn new(
        shm: Arc<Shm>,
        quota: Arc<Quota>,
        waits: Arc<WaitRoom>,
        index: u32,
        name: &str,
    ) -> Self {
        Self {
            shm,
            quota,
            waits,
            index,
            name: name.into(),
            keys: Arc::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configuration every process on the host applies now.
    pub fn settings(&self) -> TaskSettings {
        stored::settings(self.shm.task_slot(self.index))
    }

    /// The host's own settings: those in force with its own global part
    /// (what registrations are compared with while a store record is in
    /// force).
    pub(crate) fn own_settings(&self) -> TaskSettings {
        stored::own_settings(self.shm.task_slot(self.index))
    }

    /// Changes the fields of `config` that are set, for every process on the
    /// host, as one unit: no acquire sees half of an update, and concurrent
    /// updates of different fields both take effect. The rate state carries
    /// over: a new rate applies from now on.
    pub fn update(&self, config: &TaskConfig) -> Result<()> {
        config.check_asked()?;
        let slot = self.shm.task_slot(self.index);
        self.quota.check_spread(config.global.shards)?;
        // Validate before taking the lock, against the host's own settings
        // (a store record in force is adopted again at the next pull).
        config
            .over(stored::own_settings(slot))
            .limits(&self.shm.clock)?;
        stored::with_lock(&self.shm, slot, || {
            let settings = config.over(stored::own_settings(slot));
            let mut limits = settings.limits(&self.shm.clock)?;
            // A store record in force stays so; the host's own numbers are
            // kept for when it goes.
            limits.global = crate::quota::keep_own(slot, limits.global);
            stored::write(slot, &limits, &settings);
            Ok(())
        })??;
        // A raised cap (or a new limiter) may admit waiters.
        wait::wake_head(&self.shm, self.index);
        Ok(())
    }

    pub(crate) fn check_matches(&self, asked: &TaskConfig) -> Result<()> {
        // With the host's own numbers: a store record in force is no
        // registration's to contradict.
        let slot = self.shm.task_slot(self.index);
        let mismatches = stored::own_settings(slot).mismatches(asked);
        if mismatches.is_empty() {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::ConfigMismatch,
            format!(
                "task {:?} is registered with {}; update the task to change its configuration",
                self.name,
                mismatches.join(", ")
            ),
        ))
    }

    /// Asks for `n` permits.
    pub fn acquire(&self, n: u32) -> Result<Decision<'_>> {
        Ok(match self.acquire_raw(n)? {
            Ok(raw) => Decision::Admitted(Permit::new(self, raw)),
            Err(limited) => Decision::Limited(limited),
        })
    }

    /// [`Task::acquire`] giving a permit that owns a handle of the task
    /// (an `Arc` clone): one to move into a spawned future.
    pub fn acquire_owned(&self, n: u32) -> Result<Result<OwnedPermit, Limited>> {
        Ok(self
            .acquire_raw(n)?
            .map(|raw| OwnedPermit::new(self.clone(), raw)))
    }

    /// [`Task::acquire`] for faces that keep the permit themselves; every
    /// admitted `RawPermit` must be given to [`Task::release_raw`] once.
    ///
    /// The rate is looked at first without taking anything, then the cap is
    /// taken, then the rate: a rejection names the limit that refused, and
    /// gives back exactly what an earlier check took. No system call, no
    /// allocation.
    #[inline(always)]
    pub fn acquire_raw(&self, n: u32) -> Result<Result<RawPermit, Limited>> {
        match self.decide(n, false)? {
            Err(why) => self.refused(n, why),
            admitted => Ok(admitted),
        }
    }

    /// A refusal by the task's own limits: kept, or in shadow mode counted
    /// (beside the refusal's own counter) and admitted with a permit that
    /// holds nothing. Read only on a refusal: admissions pay nothing for it.
    #[cold]
    pub(super) fn refused(&self, n: u32, why: Limited) -> Result<Result<RawPermit, Limited>> {
        let shm = &*self.shm;
        let slot = shm.task_slot(self.index);
        if slot.adaptive.wait_policy.load(Ordering::Relaxed) & crate::format::POLICY_SHADOW == 0 {
            return Ok(Err(why));
        }
        slot.shadow_refused.fetch_add(n as u64, Ordering::Relaxed);
        let owner = shm.owner()?;
        let (counters, _) = self.own_lane(owner.index().unwrap_or(0), preferred_lane());
        count(counters, Counter::Admitted, n as u64);
        Ok(Ok(RawPermit::issue(
            shm,
            owner,
            self.index,
            n,
            shm.clock.now(),
            0,
        )))
    }

    /// [`Task::decide`] for the head of the wait queue's turn, apart: the
    /// request path inlines the decision, the wait path calls this copy.
    #[inline(never)]
    pub(super) fn decide_in_turn(&self, n: u32) -> Result<Result<RawPermit, Limited>> {
        self.decide(n, true)
    }

    /// The decision; `in_turn` is true for a turn taken for the head of the
    /// wait queue (the one acquire that may pass the queue). Always inlined:
    /// once it grew past the inliner's threshold (a change of the quota's
    /// slow path did it), every acquire paid a call and its spills, +29
    /// instructions.
    #[inline(always)]
    fn decide(&self, n: u32, in_turn: bool) -> Result<Result<RawPermit, Limited>> {
        let shm = &*self.shm;
        let owner = shm.owner()?;
        let attach = owner.index().unwrap_or(0);
        let slot = shm.task_slot(self.index);
        let config::Limits {
            local: limits,
            global,
        } = stored::read(slot);
        if n == 0
            || (limits.interval != 0 && n > limits.burst)
            || (limits.cap != 0 && n > limits.cap)
        {
            return Err(self.unadmittable(n));
        }
        let a = &slot.adaptive;
        let adaptive = limit_of(a.limit.load(Ordering::Relaxed));
        let cap = cap_in_force(limits.cap, adaptive);
        if cap != 0 && n as u64 > MAX_COUNT {
            return Err(self.unadmittable(n));
        }
        let lane = preferred_lane();
        let (counters, own) = self.own_lane(attach, lane);
        if !in_turn
            && a.queued.load(Ordering::Relaxed) != 0
            && let Some(why) = wait::queue_refusal(slot, cap, limits.interval)
        {
            count(counters, refusal_counter(why), n as u64);
            return Ok(Err(why));
        }
        let gcra = Gcra {
            interval: limits.interval,
            burst: limits.burst,
        };
        let (mut tat, mut now) = (0, 0);
        if gcra.interval != 0 {
            tat = slot.tat.load(Ordering::Relaxed);
            now = shm.clock.now();
            if gcra.decide(tat, now, n).is_none() {
                count(counters, Counter::LimitedLocal, n as u64);
                return Ok(Err(Limited::Local));
            }
        }
        let counted = cap != 0;
        if counted && own.is_none() {
            return Ok(Err(self.refuse_unlaned(n)));
        }
        if counted && self.move_count(attach, lane, n as i32, Some(cap as u64))? == Update::Refused
        {
            count(counters, Counter::LimitedConcurrency, n as u64);
            if adaptive.is_some() {
                self.window_due(shm.clock.now());
            }
            return Ok(Err(Limited::Concurrency));
        }
        let mut spent = None;
        if let Some(global) = global {
            if gcra.interval == 0 {
                now = shm.clock.now();
            }
            let need = Need {
                n,
                burst: limits.burst,
            };
            let taken = self.quota.take(self.quota_ref(slot, global), need, now);
            match taken {
                Ok(Ok(s)) => spent = Some(s),
                refused => {
                    if counted {
                        self.give_back_count(attach, lane, n)?;
                    }
                    // A fallback refusal is counted by the quota, apart.
                    if refused?.err() == Some(Refused::Exhausted) {
                        count(counters, Counter::LimitedGlobal, n as u64);
                    }
                    return Ok(Err(Limited::Global));
                }
            }
        }
        if gcra.interval == 0 {
            if spent.is_none() {
                now = shm.clock.now();
            }
        } else {
            match gcra.take_from(&slot.tat, tat, now, n, || shm.clock.now()) {
                Some(at) => now = at,
                None => {
                    if let Some(spent) = spent {
                        self.quota.give_back(slot, spent, n);
                    }
                    if counted {
                        self.give_back_count(attach, lane, n)?;
                    }
                    count(counters, Counter::LimitedLocal, n as u64);
                    return Ok(Err(Limited::Local));
                }
            }
        }
        count(counters, Counter::Admitted, n as u64);
        if adaptive.is_some() {
            self.window_due(now);
        }
        Ok(Ok(RawPermit::issue(
            shm,
            owner,
            self.index,
            n,
            now,
            if counted { COUNTED } else { 0 },
        )))
    }

    #[cold]
    fn unadmittable(&self, n: u32) -> Error {
        let s = self.settings();
        let why = if n == 0 {
            "n must be at least 1".to_string()
        } else if n as u64 > MAX_COUNT {
            format!("n = {n} is above the {MAX_COUNT} permits a task counts at once")
        } else if s.local.local_rate != 0.0 && n > s.local.burst {
            format!(
                "n = {n} is above the burst of {}: it could never be admitted",
                s.local.burst
            )
        } else {
            format!(
                "n = {n} is above max_concurrency {}: it could never be admitted",
                s.local.max_concurrency
            )
        };
        Error::invalid(format!("task {:?}: {why}", self.name))
    }

    /// Releases a permit from [`Task::acquire_raw`], recording its outcome and
    /// round-trip time, and marks it spent. Refused: a permit already spent,
    /// one of another task, table or process (permits do not cross `fork`),
    /// one whose fields were altered, and a release of more permits than this
    /// process holds of the task. A byte copy of a spent permit is refused
    /// only then: while the process holds others of the task, it releases
    /// one of theirs (the spent mark lives in the caller's copy).
    #[inline]
    pub fn release_raw(&self, permit: &mut RawPermit, outcome: Outcome) -> Result<()> {
        self.release_raw_rtt(permit, outcome, None)
    }

    /// [`Task::release_raw`] with the round-trip time the caller measured
    /// (`None`: the time since the acquire).
    #[inline(always)]
    pub fn release_raw_rtt(
        &self,
        permit: &mut RawPermit,
        outcome: Outcome,
        rtt: Option<Duration>,
    ) -> Result<()> {
        let shm = &*self.shm;
        let owner = shm.owner()?;
        token::verify(permit, shm.permit_key, owner, self.index).map_err(|why| {
            token::refusal::<RawPermit>(&format_args!("task {:?}", self.name), why)
        })?;
        let attach = owner.index().unwrap_or(0);
        let lane = preferred_lane();
        let slot = shm.task_slot(self.index);
        let n = permit.n;
        let keys = if permit.key_record != 0 {
            let keys = self.keys_in_use()?;
            if !keys.can_release(attach, permit.key_record, n) {
                return Err(self.released_twice(n));
            }
            Some(keys)
        } else {
            None
        };
        if permit.flags & COUNTED != 0 {
            if self.held_by(attach) < n as i64 {
                return Err(self.released_twice(n));
            }
            self.give_back_count(attach, lane, n)?;
            // Pairs with the fence of a waiter publishing itself before its
            // handle's try: one of the two sees the other.
            std::sync::atomic::fence(Ordering::SeqCst);
            wait::freed(shm, self.index);
        }
        let (counters, own) = self.own_lane(attach, lane);
        let counter = match outcome {
            Outcome::Success => Counter::ReleasedSuccess,
            Outcome::Dropped => Counter::ReleasedDropped,
            Outcome::Ignored => Counter::ReleasedIgnored,
        };
        let adaptive = limit_of(slot.adaptive.limit.load(Ordering::Relaxed)).is_some();
        let now = if outcome != Outcome::Ignored || adaptive {
            shm.clock.now()
        } else {
            0
        };
        if outcome != Outcome::Ignored {
            let rtt = match rtt {
                Some(rtt) => rtt.as_nanos().min(u64::MAX as u128) as u64,
                None => shm
                    .clock
                    .ticks_to_ns(now.saturating_sub(permit.acquired_at)),
            };
            // The bucket first, then the counters (see `quota::health`).
            let id = attach * LANES + lane;
            crate::quota::health::record(shm, own, (self.index, id), rtt, n as u64);
            count(counters, Counter::RttSumNs, rtt.saturating_mul(n as u64));
        }
        count(counters, counter, n as u64);
        if let Some(keys) = keys {
            keys.release(attach, permit.key_record, n)?;
        }
        token::spend(permit);
        if adaptive {
            self.window_due(now);
        }
        Ok(())
    }

    #[cold]
    fn released_twice(&self, n: u32) -> Error {
        Error::invalid(format!(
            "task {:?}: permit released twice (this process holds fewer than {n})",
            self.name
        ))
    }

    /// Runs the adaptive window if it is due (a load of a line every
    /// acquire reads anyway; the window itself is rare and `#[cold]`).
    #[inline]
    fn window_due(&self, now: u64) {
        let a = &self.shm.task_slot(self.index).adaptive;
        if now >= a.due.load(Ordering::Relaxed)
            && let Ok(me) = self.shm.owner()
        {
            adaptive::drive(&self.shm, self.index, me, now);
        }
    }

    /// Runs the adaptive window now; returns the samples the windows of
    /// the current limiter have applied, and the windows run on the table.
    /// For tests that no sample is lost or counted twice.
    #[doc(hidden)]
    pub fn settle_window(&self) -> Result<(u64, u64)> {
        Ok(adaptive::settle(&self.shm, self.index, self.shm.owner()?))
    }

    /// Looks after this task's keys once, as the keeper thread does every
    /// 10 ms (the simulator runs no threads).
    #[doc(hidden)]
    pub fn tend_keys(&self) {
        use crate::quota::Tend;
        if let Some(keys) = self.keys.get() {
            keys.tend(&self.shm, &self.quota, &self.name);
        }
    }

    /// The concurrency limit every process applies now: the adaptive limit,
    /// or `max_concurrency` (`None` when there is no cap).
    pub fn limit(&self) -> Option<u32> {
        limit(self.shm.task_slot(self.index))
    }
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task")
            .field("name", &self.name)
            .field("settings", &self.settings())
            .finish()
    }
}

/// The concurrency limit of the task in `slot` (see [`Task::limit`]).
pub(crate) fn limit(slot: &TaskSlot) -> Option<u32> {
    let cap = stored::read(slot).local.cap;
    let adaptive = limit_of(crate::format::load_acquire(&slot.adaptive.limit));
    Some(cap_in_force(cap, adaptive)).filter(|&c| c != 0)
}

fn refusal_counter(why: Limited) -> Counter {
    match why {
        Limited::Local => Counter::LimitedLocal,
        Limited::Concurrency => Counter::LimitedConcurrency,
        Limited::Global => Counter::LimitedGlobal,
    }
}

/// Counts into a lane of this process (an uncontended atomic add), or the
/// task's shared line of unlaned counts.
#[inline(always)]
fn count(counters: &[AtomicU64; COUNTERS], counter: Counter, n: u64) {
    counters[counter as usize].fetch_add(n, Ordering::Relaxed);
}
