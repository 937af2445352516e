//! A keyed decision: the key's rates (each, or none) and its cap, spent
//! for a request and given back if the task's own limits refuse it; a
//! release; a key's state without spending.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::fleet::GlobalPaid;
use super::global::GlobalRule;
use super::hold::Using;
use super::limits::Rules;
use super::map::{self, Hashed, Place};
use super::region::{self, KeyRegion};
use super::{KeyRefusal, KeyRefused, KeyState, Keys, hold, names};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::format::{
    KeyCounter, KeyEntry, LIMITS_BLOCKED, LIMITS_OVERFLOW_ADMIT, LIMITS_SHADOW, LIMITS_UNLIMITED,
    MAX_KEY_RATES, read_versioned,
};
use crate::limit::gcra::Gcra;
use crate::limit::ledger::{Update, Word};
use crate::quota::Quota;
use crate::shm::Shm;

/// What a keyed acquire took of the key, to give back if the task's own
/// limits refuse, or to keep in the permit.
pub(crate) struct Taken<'a> {
    keys: &'a Keys,
    entry: Option<&'a KeyEntry>,
    spent: [u64; MAX_KEY_RATES],
    /// The record holding the key's permits (with the cap), and `n`.
    using: Option<Using<'a>>,
    n: u32,
    /// What the key's global rate took.
    global: Option<GlobalPaid>,
    /// The entry decided on (`region::OVERFLOW`: the shared state).
    index: u32,
}

impl Taken<'_> {
    /// The record a permit names (index + 1; 0: none).
    pub(crate) fn record(&self) -> u32 {
        self.using.as_ref().map_or(0, |u| u.index + 1)
    }

    /// Gives everything back (the task's own limits refused).
    pub(crate) fn undo(self) {
        if let Some(paid) = self.global {
            self.keys.give_back_global(paid);
        }
        if let Some(entry) = self.entry {
            give_back_rates(entry, &self.spent);
        }
        if let Some(u) = &self.using {
            u.update_spin(-(self.n as i32), None);
        }
        let _ = self.keys;
    }
}

/// Counts one into a key's statistics word without a locked instruction:
/// a load and a store, so a count racing another process's may be lost.
/// The views rank keys by it; an exact count would cost every decision an
/// atomic read-modify-write on a line other processes write too.
#[inline(always)]
fn count_approx(word: &std::sync::atomic::AtomicU64) {
    word.store(
        word.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

/// Gives back what [`spend_rate`] spent of each rate.
pub(super) fn give_back_rates<W: Word>(entry: &KeyEntry<W>, spent: &[u64; MAX_KEY_RATES]) {
    for (t, &s) in entry.tat.iter().zip(spent) {
        if s != 0 {
            let mut v = t.load(Ordering::SeqCst);
            while let Err(actual) =
                t.compare_exchange_weak(v, v.saturating_sub(s), Ordering::SeqCst, Ordering::SeqCst)
            {
                v = actual;
            }
        }
    }
}

/// Spends `n` of one rate's time `word` at `now`: `Ok(ticks spent)`, or
/// `Err(the time that refused it)`, spending nothing.
#[inline(always)]
pub(super) fn spend_rate<W: Word>(word: &W, g: Gcra, now: u64, n: u32) -> Result<u64, u64> {
    let mut tat = word.load(Ordering::SeqCst);
    loop {
        let Some(new) = g.decide(tat, now, n) else {
            return Err(tat);
        };
        match word.compare_exchange_weak(tat, new, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return Ok(new - tat.max(now)),
            Err(actual) => tat = actual,
        }
    }
}

impl Keys {
    /// Spends `n` of the key's limits for this process (`attach`, its
    /// compact owner `me`): all of them, or none and the refusal. A key's
    /// global rate is decided last, against `fleet`'s store.
    #[inline]
    pub(crate) fn take<'a>(
        &'a self,
        shm: &Shm,
        who: (u32, u32),
        fleet: (&Quota, &str),
        key: &[u8],
        n: u32,
    ) -> Result<std::result::Result<Taken<'a>, KeyRefusal>> {
        if self.region.header().any_global.load(Ordering::Acquire) != 0 {
            self.take_as::<true>(shm, who, fleet, key, n)
        } else {
            self.take_as::<false>(shm, who, fleet, key, n)
        }
    }

    /// [`Keys::take`], with the global step (`GLOBAL`) or without it.
    #[inline(always)]
    fn take_as<'a, const GLOBAL: bool>(
        &'a self,
        shm: &Shm,
        (attach, me): (u32, u32),
        fleet: (&Quota, &str),
        key: &[u8],
        n: u32,
    ) -> Result<std::result::Result<Taken<'a>, KeyRefusal>> {
        let h = self.hash(key)?;
        let (rules, _) = self.rules(h.ident);
        let shadow = rules.flags & LIMITS_SHADOW != 0;
        let none = || Taken {
            keys: self,
            entry: None,
            spent: [0; MAX_KEY_RATES],
            using: None,
            n,
            global: None,
            index: region::OVERFLOW,
        };
        if rules.flags & LIMITS_UNLIMITED != 0 {
            return Ok(Ok(none()));
        }
        if rules.flags & LIMITS_BLOCKED != 0 {
            return Ok(if shadow {
                self.region.count(KeyCounter::ShadowRefused, n as u64);
                Ok(none())
            } else {
                Err(KeyRefusal {
                    by: KeyRefused::Blocked,
                    retry_after: None,
                })
            });
        }
        for i in 0..MAX_KEY_RATES {
            if rules.interval[i] != 0 && n > rules.burst[i] {
                return Err(Error::invalid(format!(
                    "n = {n} is above the burst of {} of the key's rate {i}: it could never be \
                     admitted",
                    rules.burst[i]
                )));
            }
        }
        if GLOBAL
            && let Some(rule) = GlobalRule::of(&rules)
            && n as u64 > rule.most()
        {
            return Err(Error::invalid(format!(
                "n = {n} is above the {} a slice the key's global rate can hold: it could never \
                 be admitted",
                rule.most()
            )));
        }
        if rules.cap != 0 && n > rules.cap {
            return Err(Error::invalid(format!(
                "n = {n} is above the key's max_concurrency of {}: it could never be admitted",
                rules.cap
            )));
        }
        // A spend is kept only while the entry is still this key's (see
        // `map`): else it landed on a key moving in, and goes back.
        let decided = map::decide(
            &self.region,
            h,
            || self.place(shm, h, me, key),
            |place| {
                let (index, entry) = match place {
                    Place::Entry(e) => (e, self.region.entry(e).expect("placed in range")),
                    Place::Overflow => {
                        self.region.count(KeyCounter::Overflowed, n as u64);
                        if self.overflow_admits() {
                            return Ok(none());
                        }
                        (region::OVERFLOW, &self.region.header().overflow)
                    }
                };
                match self.spend(shm, &rules, shadow, attach, index, entry, n) {
                    Ok(Ok(taken)) => Ok(taken),
                    Ok(Err(refusal)) => {
                        entry.refused.fetch_add(n as u64, Ordering::Relaxed);
                        if index != region::OVERFLOW {
                            names::note(&self.region, h.ident, key, true);
                        }
                        Err(Ok(refusal))
                    }
                    Err(e) => Err(Err(e)),
                }
            },
            Taken::undo,
        );
        match decided {
            Ok(mut taken) => {
                if GLOBAL
                    && rules.global != 0
                    && let Err(refusal) =
                        self.pay_global(&mut taken, fleet, (key, h.ident), &rules, shadow)
                {
                    return Ok(Err(refusal));
                }
                if let Some(entry) = taken.entry {
                    count_approx(&entry.admitted);
                }
                Ok(Ok(taken))
            }
            Err(Ok(refusal)) => Ok(Err(refusal)),
            Err(Err(e)) => Err(e),
        }
    }

    /// The key's global rate, after its local limits admitted `taken`:
    /// paid into `taken`, or the refusal (and `taken` given back). Out of
    /// line: most keyed tasks have no global rate.
    #[cold]
    #[inline(never)]
    fn pay_global<'a>(
        &'a self,
        taken: &mut Taken<'a>,
        (quota, task): (&Quota, &str),
        (key, ident): (&[u8], u64),
        rules: &Rules,
        shadow: bool,
    ) -> std::result::Result<(), KeyRefusal> {
        let (Some(rule), Some(entry)) = (GlobalRule::of(rules), taken.entry) else {
            return Ok(());
        };
        let at = (taken.index, ident);
        match self.take_global(quota, task, at, key, &rule, shadow, taken.n) {
            Ok(paid) => {
                taken.global = paid;
                Ok(())
            }
            Err(refusal) => {
                entry.refused.fetch_add(taken.n as u64, Ordering::Relaxed);
                let t = std::mem::replace(
                    taken,
                    Taken {
                        keys: self,
                        entry: None,
                        spent: [0; MAX_KEY_RATES],
                        using: None,
                        n: 0,
                        global: None,
                        index: region::OVERFLOW,
                    },
                );
                t.undo();
                Err(refusal)
            }
        }
    }

    fn overflow_admits(&self) -> bool {
        let h = self.region.header();
        read_versioned(&h.config_version, |i| {
            self.region.config(i).default.flags() & LIMITS_OVERFLOW_ADMIT != 0
        })
    }

    #[cold]
    fn place(&self, shm: &Shm, h: Hashed, me: u32, key: &[u8]) -> Place {
        let place = map::place(
            &self.region,
            h,
            || shm.clock.now(),
            me,
            |owner| shm.compact_owner_alive(owner),
        );
        if matches!(place, Place::Entry(_)) {
            names::note(&self.region, h.ident, key, false);
        }
        place
    }

    /// Spends the rates (each, or none) and takes the cap.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn spend<'a>(
        &'a self,
        shm: &Shm,
        rules: &Rules,
        shadow: bool,
        attach: u32,
        index: u32,
        entry: &'a KeyEntry,
        n: u32,
    ) -> Result<std::result::Result<Taken<'a>, KeyRefusal>> {
        let mut spent = [0u64; MAX_KEY_RATES];
        let mut now = 0;
        for i in 0..MAX_KEY_RATES {
            if rules.interval[i] == 0 {
                continue;
            }
            if now == 0 {
                now = shm.clock.now();
            }
            let g = Gcra {
                interval: rules.interval[i],
                burst: rules.burst[i],
            };
            match spend_rate(&entry.tat[i], g, now, n) {
                Ok(s) => spent[i] = s,
                Err(_) if shadow => {
                    self.region.count(KeyCounter::ShadowRefused, n as u64);
                }
                Err(tat) => {
                    give_back_rates(entry, &spent);
                    self.region.count(KeyCounter::RefusedRate, n as u64);
                    let at = g.earliest(tat, n).unwrap_or(u64::MAX);
                    let wait = shm.clock.ticks_to_ns(at.saturating_sub(now));
                    return Ok(Err(KeyRefusal {
                        by: KeyRefused::Rate(i as u8),
                        retry_after: Some(Duration::from_nanos(wait)),
                    }));
                }
            }
        }
        let mut using = None;
        if rules.cap != 0 {
            let Some(u) = Using::take(&self.region, attach, index) else {
                give_back_rates(entry, &spent);
                self.region.count(KeyCounter::RecordsFull, n as u64);
                return Ok(Err(KeyRefusal {
                    by: KeyRefused::Records,
                    retry_after: None,
                }));
            };
            match u.update_spin(n as i32, (!shadow).then_some(rules.cap as u64)) {
                Update::Applied => {
                    if shadow
                        && crate::limit::ledger::word_count(entry.held.load(Ordering::Relaxed))
                            > rules.cap as u64
                    {
                        self.region.count(KeyCounter::ShadowRefused, n as u64);
                    }
                    using = Some(u);
                }
                _ => {
                    give_back_rates(entry, &spent);
                    self.region.count(KeyCounter::RefusedConcurrency, n as u64);
                    return Ok(Err(KeyRefusal {
                        by: KeyRefused::Concurrency,
                        retry_after: None,
                    }));
                }
            }
        }
        Ok(Ok(Taken {
            keys: self,
            entry: Some(entry),
            spent,
            using,
            n,
            global: None,
            index,
        }))
    }

    /// Gives back `n` permits of the key that record `record` (index + 1)
    /// of `attach` holds. Refused when the record holds fewer.
    pub(crate) fn release(&self, attach: u32, record: u32, n: u32) -> Result<()> {
        let using = record
            .checked_sub(1)
            .and_then(|r| Using::named(&self.region, attach, r))
            .filter(|u| u.held() >= n as i32)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "keyed permit released twice (its process holds fewer than {n} of the key)"
                ))
            })?;
        using.update_spin(-(n as i32), None);
        Ok(())
    }

    /// Checks the release of `n` of record `record` could be made (before
    /// the task's part of the permit is released).
    pub(crate) fn can_release(&self, attach: u32, record: u32, n: u32) -> bool {
        record
            .checked_sub(1)
            .and_then(|r| Using::named(&self.region, attach, r))
            .is_some_and(|u| u.held() >= n as i32)
    }

    /// The key's state, spending nothing.
    pub(crate) fn state(&self, shm: &Shm, key: &[u8]) -> Result<KeyState> {
        let h = self.hash(key)?;
        let (rules, overridden) = self.rules(h.ident);
        let entry = map::find(&self.region, h).and_then(|e| self.region.entry(e));
        Ok(state_of(&shm.clock, &rules, overridden, entry))
    }

    /// Gives back what a dead attachment held.
    pub(crate) fn reclaim(&self, attach: u32) -> i64 {
        hold::reclaim(&self.region, attach)
    }

    /// Entries whose count differs from what the records hold.
    pub(crate) fn drift(&self) -> Vec<(u32, u64, i64)> {
        hold::drift(&self.region)
    }
}

/// [`Keys::drift`] of a key file a view copied.
pub(crate) fn drift_of(region: &KeyRegion) -> Vec<(u32, u64, i64)> {
    hold::drift(region)
}

fn state_of(clock: &Clock, rules: &Rules, overridden: bool, entry: Option<&KeyEntry>) -> KeyState {
    let now = clock.now();
    let mut s = KeyState {
        present: entry.is_some(),
        overridden,
        blocked: rules.flags & LIMITS_BLOCKED != 0,
        unlimited: rules.flags & LIMITS_UNLIMITED != 0,
        max_concurrency: rules.cap,
        in_flight: entry.map_or(0, |e| {
            crate::limit::ledger::word_count(e.held.load(Ordering::Relaxed)) as u32
        }),
        ..KeyState::default()
    };
    let mut tightest: Option<f64> = None;
    for i in 0..MAX_KEY_RATES {
        let interval = rules.interval[i];
        if interval == 0 {
            continue;
        }
        let burst = rules.burst[i];
        let tat = entry.map_or(0, |e| e.tat[i].load(Ordering::Relaxed));
        let ahead = tat.saturating_sub(now);
        let used = ahead.div_ceil(interval).min(burst as u64) as u32;
        let remaining = burst - used;
        let g = Gcra { interval, burst };
        let retry = if remaining >= 1 {
            0
        } else {
            g.earliest(tat, 1).unwrap_or(u64::MAX).saturating_sub(now)
        };
        s.retry_after = s
            .retry_after
            .max(Duration::from_nanos(clock.ticks_to_ns(retry)));
        let fill = remaining as f64 / burst as f64;
        if tightest.is_none_or(|t| fill < t) {
            tightest = Some(fill);
            s.limit = burst;
            s.remaining = remaining;
            s.reset_after = Duration::from_nanos(clock.ticks_to_ns(ahead));
        }
    }
    if s.blocked {
        s.remaining = 0;
    }
    s
}
