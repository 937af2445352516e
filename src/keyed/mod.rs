//! Limits per caller: a keyed task applies per-key limits (rates, a
//! concurrency cap) to every key a caller passes, with every process of
//! the host deciding from the same per-key state in the task's key file.
//!
//! A keyed acquire spends the key's limits first, then the task's own; a
//! refusal by either gives back what the other took, so a request passes
//! both or spends neither. Keys are bytes of at most [`MAX_KEY_LEN`];
//! entries hold a keyed hash of them (see `map`), so a key of any length
//! costs its 64 bytes.

mod hold;
mod limits;
mod map;
mod names;
mod region;
mod view;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub use limits::{KeyLimits, KeyRate};
pub(crate) use region::KeyRegion;
pub use region::{DEFAULT_KEY_CAPACITY, MAX_KEY_CAPACITY};
pub use view::{KeyInfo, KeyStats};
pub(crate) use view::{counters_only, key_infos, key_stats};

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::format::{
    KeyConfig as ConfigCopy, KeyCounter, KeyEntry, LIMITS_BLOCKED, LIMITS_OVERFLOW_ADMIT,
    LIMITS_SHADOW, LIMITS_UNLIMITED, MAX_KEY_RATES, MAX_OVERRIDES, OVERRIDE_INDEX, read_versioned,
};
use crate::limit::gcra::Gcra;
use crate::limit::ledger::Update;
use crate::shm::Shm;
use crate::words::Limited;
use hold::Using;
use limits::Rules;
use map::{Hashed, Place};

/// The longest key a keyed acquire takes, in bytes: longer ones are
/// refused (an error), never cut (two keys cut alike would share a state).
pub const MAX_KEY_LEN: usize = 4096;

/// What a keyed task's keys are limited by, and how many it holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyConfig {
    /// Every key's limits, unless it has an override.
    pub limits: KeyLimits,
    /// Keys the key file holds (fixed when it is made; default
    /// [`DEFAULT_KEY_CAPACITY`]). 64 bytes each.
    pub capacity: u32,
    /// What a key gets that finds no entry because every entry holds a
    /// live key.
    pub overflow: KeyOverflow,
}

impl Default for KeyConfig {
    fn default() -> Self {
        Self {
            limits: KeyLimits::default(),
            capacity: DEFAULT_KEY_CAPACITY,
            overflow: KeyOverflow::Shared,
        }
    }
}

impl KeyConfig {
    pub fn new(limits: KeyLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    pub fn capacity(mut self, keys: u32) -> Self {
        self.capacity = keys;
        self
    }

    pub fn overflow(mut self, overflow: KeyOverflow) -> Self {
        self.overflow = overflow;
        self
    }
}

/// The policy for keys that find no entry (counted as overflow).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum KeyOverflow {
    /// They share one state, limited as one key: new callers are served at
    /// one key's rate while every entry is live, never all refused.
    #[default]
    Shared,
    /// They pass the key limits (the task's own limits still apply).
    Admit,
}

/// Which limit refused a keyed acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyRefused {
    /// The task's own limit.
    Task(Limited),
    /// The key's rate of this index (in the order the rates were given).
    Rate(u8),
    /// The key's concurrency cap.
    Concurrency,
    /// The key is blocked (an override admitting nothing).
    Blocked,
    /// The process holds permits of as many distinct keys as it has
    /// records for (see `KeyStats::records`).
    Records,
}

/// A refused keyed acquire: which limit, and when an identical request
/// can succeed (`None`: when a permit of the key is released, or never
/// for a blocked key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyRefusal {
    pub by: KeyRefused,
    pub retry_after: Option<Duration>,
}

/// A key's state for the answers a refusal needs (`RateLimit-*` headers),
/// read without spending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct KeyState {
    /// The limit of the key's tightest rate now: its burst (0: no rate).
    pub limit: u32,
    /// Requests that rate would admit now.
    pub remaining: u32,
    /// When that rate is whole again.
    pub reset_after: Duration,
    /// When one request can pass every rate (zero: now).
    pub retry_after: Duration,
    /// Permits of the key in flight on the host, and the cap (0: none).
    pub in_flight: u32,
    pub max_concurrency: u32,
    /// Whether the key holds an entry, and whether an override applies.
    pub present: bool,
    pub overridden: bool,
    pub blocked: bool,
    pub unlimited: bool,
}

/// A task's key file, mapped once per task handle.
pub(crate) struct Keys {
    pub region: KeyRegion,
}

impl Keys {
    /// The task's key file, made with `capacity` keys if it has none.
    pub(crate) fn open(shm: &Shm, task: u32, capacity: u32) -> Result<Arc<Self>> {
        Ok(Arc::new(Self {
            region: KeyRegion::open_or_create(shm, task, capacity)?,
        }))
    }

    pub(crate) fn hash(&self, key: &[u8]) -> Result<Hashed> {
        if key.len() > MAX_KEY_LEN {
            return Err(Error::invalid(format!(
                "a key of {} bytes is longer than {MAX_KEY_LEN}",
                key.len()
            )));
        }
        Ok(map::hash(&self.region, key))
    }

    /// The rules for a key: its override's, or the default.
    #[inline(always)]
    fn rules(&self, ident: u64) -> (Rules, bool) {
        let h = self.region.header();
        read_versioned(&h.config_version, |i| {
            let c = self.region.config(i);
            match override_of(c, ident) {
                Some(o) => (Rules::read(&c.overrides[o]), true),
                None => (Rules::read(&c.default), false),
            }
        })
    }

    /// Writes the default limits (and the overflow policy), keeping the
    /// overrides. The caller validated them.
    pub(crate) fn write_default(&self, shm: &Shm, config: &KeyConfig) -> Result<()> {
        self.write(shm, |c, clock| {
            config
                .limits
                .store(&c.default, clock, config.overflow == KeyOverflow::Admit);
            Ok(())
        })
    }

    /// Sets (`Some`) or removes (`None`) the override of `key`.
    pub(crate) fn write_override(
        &self,
        shm: &Shm,
        key: &[u8],
        limits: Option<&KeyLimits>,
    ) -> Result<()> {
        let ident = self.hash(key)?.ident;
        self.write(shm, |c, clock| {
            let current = override_of(c, ident);
            let mut keys: Vec<(u64, KeyLimits)> = (0..MAX_OVERRIDES)
                .filter_map(|i| {
                    let k = c.override_keys[i].load(Ordering::Relaxed);
                    (k != 0 && Some(i) != current)
                        .then(|| (k, KeyLimits::load(&c.overrides[i], clock)))
                })
                .collect();
            if let Some(l) = limits {
                if keys.len() >= MAX_OVERRIDES {
                    return Err(Error::invalid(format!(
                        "a keyed task holds at most {MAX_OVERRIDES} overrides"
                    )));
                }
                keys.push((ident, *l));
            }
            write_overrides(c, clock, &keys);
            Ok(())
        })
    }

    /// Makes `overrides` the task's overrides, as a whole; false if they
    /// were so already.
    pub(crate) fn replace_overrides(
        &self,
        shm: &Shm,
        overrides: &[(&[u8], KeyLimits)],
    ) -> Result<bool> {
        if overrides.len() > MAX_OVERRIDES {
            return Err(Error::invalid(format!(
                "a keyed task holds at most {MAX_OVERRIDES} overrides"
            )));
        }
        let clock = &shm.clock;
        let mut wanted: Vec<(u64, KeyLimits)> = overrides
            .iter()
            .map(|(k, l)| Ok((self.hash(k)?.ident, normalized(l, clock))))
            .collect::<Result<_>>()?;
        wanted.sort_by_key(|(k, _)| *k);
        wanted.dedup_by_key(|(k, _)| *k);
        let h = self.region.header();
        let mut current: Vec<(u64, KeyLimits)> = read_versioned(&h.config_version, |i| {
            let c = self.region.config(i);
            (0..MAX_OVERRIDES)
                .filter_map(|o| {
                    let k = c.override_keys[o].load(Ordering::Relaxed);
                    (k != 0).then(|| (k, KeyLimits::load(&c.overrides[o], clock)))
                })
                .collect()
        });
        current.sort_by_key(|(k, _)| *k);
        if current == wanted {
            return Ok(false);
        }
        self.write(shm, |c, clock| {
            write_overrides(c, clock, &wanted);
            Ok(())
        })?;
        Ok(true)
    }

    /// Copies the current limits to the next copy, lets `edit` change it,
    /// and makes it current, under the file's configuration lock.
    fn write(&self, shm: &Shm, edit: impl FnOnce(&ConfigCopy, &Clock) -> Result<()>) -> Result<()> {
        let h = self.region.header();
        crate::shm::named::with_owner_lock(shm, &h.config_lock, "the key limits", || {
            let (version, next) = crate::format::next_copy(&h.config_version);
            let (from, to) = (self.region.config(next ^ 1), self.region.config(next));
            copy_config(from, to);
            edit(to, &shm.clock)?;
            crate::format::commit(&h.config_version, version);
            Ok(())
        })?
    }

    /// The limits in force for `key` (its override's or the default) and
    /// whether an override applies.
    pub(crate) fn limits_of(&self, clock: &Clock, key: &[u8]) -> Result<(KeyLimits, bool)> {
        let ident = self.hash(key)?.ident;
        let h = self.region.header();
        Ok(read_versioned(&h.config_version, |i| {
            let c = self.region.config(i);
            match override_of(c, ident) {
                Some(o) => (KeyLimits::load(&c.overrides[o], clock), true),
                None => (KeyLimits::load(&c.default, clock), false),
            }
        }))
    }

    /// The default limits and the overflow policy.
    pub(crate) fn default_config(&self, clock: &Clock) -> KeyConfig {
        let h = self.region.header();
        read_versioned(&h.config_version, |i| {
            let c = &self.region.config(i).default;
            KeyConfig {
                limits: KeyLimits::load(c, clock),
                capacity: self.region.entries(),
                overflow: if c.flags() & LIMITS_OVERFLOW_ADMIT != 0 {
                    KeyOverflow::Admit
                } else {
                    KeyOverflow::Shared
                },
            }
        })
    }
}

/// `limits` as they read back from the file (bursts in force, rates
/// rounded to ticks): what a comparison with the file's limits needs.
pub(crate) fn normalized(limits: &KeyLimits, clock: &Clock) -> KeyLimits {
    // SAFETY: all atomics: zeroed is a valid value.
    let copy: crate::format::LimitsCopy = unsafe { std::mem::zeroed() };
    limits.store(&copy, clock, false);
    KeyLimits::load(&copy, clock)
}

fn write_overrides(c: &ConfigCopy, clock: &Clock, keys: &[(u64, KeyLimits)]) {
    for i in 0..MAX_OVERRIDES {
        c.override_keys[i].store(0, Ordering::Relaxed);
    }
    for w in &c.index {
        w.store(0, Ordering::Relaxed);
    }
    for (i, (k, l)) in keys.iter().enumerate().take(MAX_OVERRIDES) {
        l.store(&c.overrides[i], clock, false);
        c.override_keys[i].store(*k, Ordering::Relaxed);
        let mut slot = *k as usize % OVERRIDE_INDEX;
        while c.index[slot].load(Ordering::Relaxed) != 0 {
            slot = (slot + 1) % OVERRIDE_INDEX;
        }
        c.index[slot].store(i as u64 + 1, Ordering::Relaxed);
    }
}

fn override_of(c: &ConfigCopy, ident: u64) -> Option<usize> {
    let mut slot = ident as usize % OVERRIDE_INDEX;
    for _ in 0..OVERRIDE_INDEX {
        let v = c.index[slot].load(Ordering::Relaxed);
        let o = (v as usize).checked_sub(1)?;
        if o < MAX_OVERRIDES && c.override_keys[o].load(Ordering::Relaxed) == ident {
            return Some(o);
        }
        slot = (slot + 1) % OVERRIDE_INDEX;
    }
    None
}

fn copy_config(from: &ConfigCopy, to: &ConfigCopy) {
    let copy = |a: &crate::format::LimitsCopy, b: &crate::format::LimitsCopy| {
        for i in 0..MAX_KEY_RATES {
            b.interval[i].store(a.interval[i].load(Ordering::Relaxed), Ordering::Relaxed);
            b.rate_bits[i].store(a.rate_bits[i].load(Ordering::Relaxed), Ordering::Relaxed);
        }
        for (x, y) in [
            (&a.bursts, &b.bursts),
            (&a.burst2_cap, &b.burst2_cap),
            (&a.flags, &b.flags),
            (&a.periods, &b.periods),
        ] {
            y.store(x.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    };
    copy(&from.default, &to.default);
    for i in 0..MAX_OVERRIDES {
        copy(&from.overrides[i], &to.overrides[i]);
        to.override_keys[i].store(
            from.override_keys[i].load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
    }
    for i in 0..OVERRIDE_INDEX {
        to.index[i].store(from.index[i].load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// What a keyed acquire took of the key, to give back if the task's own
/// limits refuse, or to keep in the permit.
pub(crate) struct Taken<'a> {
    keys: &'a Keys,
    entry: Option<&'a KeyEntry>,
    spent: [u64; MAX_KEY_RATES],
    /// The record holding the key's permits (with the cap), and `n`.
    using: Option<Using<'a>>,
    n: u32,
}

impl Taken<'_> {
    /// The record a permit names (index + 1; 0: none).
    pub(crate) fn record(&self) -> u32 {
        self.using.as_ref().map_or(0, |u| u.index + 1)
    }

    /// Gives everything back (the task's own limits refused).
    pub(crate) fn undo(self) {
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

fn give_back_rates(entry: &KeyEntry, spent: &[u64; MAX_KEY_RATES]) {
    for (t, &s) in entry.tat.iter().zip(spent) {
        if s != 0 {
            let _ = t.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                Some(v.saturating_sub(s))
            });
        }
    }
}

impl Keys {
    /// Spends `n` of the key's limits for this process (`attach`, its
    /// compact owner `me`): all of them, or none and the refusal.
    #[inline]
    pub(crate) fn take<'a>(
        &'a self,
        shm: &Shm,
        attach: u32,
        me: u32,
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
        if rules.cap != 0 && n > rules.cap {
            return Err(Error::invalid(format!(
                "n = {n} is above the key's max_concurrency of {}: it could never be admitted",
                rules.cap
            )));
        }
        loop {
            let place = match map::find(&self.region, h) {
                Some(e) => Place::Entry(e),
                None => self.place(shm, h, me, key),
            };
            let (index, entry) = match place {
                Place::Entry(e) => (e, self.region.entry(e).expect("placed in range")),
                Place::Overflow => {
                    self.region.count(KeyCounter::Overflowed, n as u64);
                    if self.overflow_admits() {
                        return Ok(Ok(none()));
                    }
                    (region::OVERFLOW, &self.region.header().overflow)
                }
            };
            let decided = self.spend(shm, &rules, shadow, attach, index, entry, n)?;
            let taken = match decided {
                Ok(t) => t,
                Err(refusal) => {
                    entry.refused.fetch_add(n as u64, Ordering::Relaxed);
                    if index != region::OVERFLOW {
                        names::note(&self.region, h.ident, key);
                    }
                    return Ok(Err(refusal));
                }
            };
            // The entry must still be this key's (see `map`): else the
            // spend landed on a key moving in, and goes back.
            let ident = self.region.ident_of(index);
            if index == region::OVERFLOW
                || ident.is_some_and(|w| w.load(Ordering::SeqCst) == h.ident)
            {
                count_approx(&entry.admitted);
                return Ok(Ok(taken));
            }
            taken.undo();
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
            names::note(&self.region, h.ident, key);
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
            let word = &entry.tat[i];
            let mut tat = word.load(Ordering::SeqCst);
            loop {
                match g.decide(tat, now, n) {
                    Some(new) => match word.compare_exchange_weak(
                        tat,
                        new,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    ) {
                        Ok(_) => {
                            spent[i] = new - tat.max(now);
                            break;
                        }
                        Err(actual) => tat = actual,
                    },
                    None if shadow => {
                        self.region.count(KeyCounter::ShadowRefused, n as u64);
                        break;
                    }
                    None => {
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
