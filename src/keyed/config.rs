//! A keyed task's limits in its key file: the default and the overrides,
//! double-buffered under the file's configuration lock, and the rules a
//! decision reads for a key.

use std::sync::atomic::Ordering;

use super::global::GlobalRule;
use super::limits::Rules;
use super::{KeyConfig, KeyGlobal, KeyLimits, KeyOverflow, Keys};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::format::{
    KeyConfig as ConfigCopy, LIMITS_OVERFLOW_ADMIT, MAX_KEY_RATES, MAX_OVERRIDES, OVERRIDE_INDEX,
    read_versioned,
};
use crate::shm::Shm;

impl Keys {
    /// The rules for a key: its override's, or the default.
    #[inline(always)]
    pub(super) fn rules(&self, ident: u64) -> (Rules, bool) {
        let h = self.region.header();
        read_versioned(&h.config_version, |i| {
            let c = self.region.config(i);
            match override_of(c, ident) {
                Some(o) => (Rules::read(&c.overrides[o]), true),
                None => (Rules::read(&c.default), false),
            }
        })
    }

    /// The default limits' global slice length, if they have a global rate,
    /// and whether every override that has one counts in the same slices.
    pub(super) fn global_slicing(&self) -> Option<(u64, bool)> {
        let h = self.region.header();
        read_versioned(&h.config_version, |i| {
            let c = self.region.config(i);
            let slice_ms = GlobalRule::of(&Rules::read(&c.default))?.slice_ms;
            let one = (0..MAX_OVERRIDES)
                .filter(|&o| c.override_keys[o].load(Ordering::Relaxed) != 0)
                .filter_map(|o| GlobalRule::of(&Rules::read(&c.overrides[o])))
                .all(|r| r.slice_ms == slice_ms);
            Some((slice_ms, one))
        })
    }

    /// Writes the default limits (and the overflow policy), keeping the
    /// overrides, and with `keep_global` the global rate in force (read
    /// under the lock: a concurrent change of it is never lost). The caller
    /// validated them.
    pub(crate) fn write_default(
        &self,
        shm: &Shm,
        config: &KeyConfig,
        keep_global: bool,
    ) -> Result<()> {
        self.write(shm, |c, clock| {
            let mut limits = config.limits;
            if keep_global {
                limits.global = KeyLimits::load(&c.default, clock).global;
            }
            limits.store(&c.default, clock, config.overflow == KeyOverflow::Admit);
            Ok(())
        })
    }

    /// Sets (`Some`) or removes (`None`) the override of `key`; with
    /// `keep_global`, the override keeps the global rate it has (a new one
    /// has none, nor has a key made unlimited or blocked).
    pub(crate) fn write_override(
        &self,
        shm: &Shm,
        key: &[u8],
        limits: Option<&KeyLimits>,
        keep_global: bool,
    ) -> Result<()> {
        let ident = self.hash(key)?.ident;
        self.write(shm, |c, clock| {
            let mut keys = overrides_in(c, clock);
            let had = keys
                .iter()
                .position(|(k, _)| *k == ident)
                .map(|i| keys.remove(i).1);
            if let Some(l) = limits {
                if keys.len() >= MAX_OVERRIDES {
                    return Err(Error::invalid(format!(
                        "a keyed task holds at most {MAX_OVERRIDES} overrides"
                    )));
                }
                let mut l = *l;
                if keep_global && !l.is_unlimited() && !l.is_blocked() {
                    l.global = had.and_then(|h| h.global);
                }
                keys.push((ident, l));
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
            overrides_in(self.region.config(i), clock)
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

    /// Gives the default limits (`key` `None`) or `key`'s override the
    /// global rate `global` (`None`: none), keeping the rest of them, under
    /// the configuration lock: a concurrent change of the other limits is
    /// never lost. A key without an override is refused.
    pub(crate) fn write_global(
        &self,
        shm: &Shm,
        key: Option<&[u8]>,
        global: Option<KeyGlobal>,
    ) -> Result<()> {
        let ident = key.map(|k| self.hash(k)).transpose()?.map(|h| h.ident);
        self.write(shm, |c, clock| {
            let copy = match ident {
                None => &c.default,
                Some(ident) => match override_of(c, ident) {
                    Some(o) => &c.overrides[o],
                    None => {
                        return Err(Error::invalid(
                            "the key has no override: give it one first (its rates, or none), \
                             then its global rate"
                                .to_string(),
                        ));
                    }
                },
            };
            let mut limits = KeyLimits::load(copy, clock);
            limits.global = global;
            limits.validate()?;
            let overflow_admit = ident.is_none() && copy.flags() & LIMITS_OVERFLOW_ADMIT != 0;
            limits.store(copy, clock, overflow_admit);
            Ok(())
        })
    }

    /// Copies the current limits to the next copy, lets `edit` change it,
    /// and makes it current, under the file's configuration lock.
    pub(super) fn write(
        &self,
        shm: &Shm,
        edit: impl FnOnce(&ConfigCopy, &Clock) -> Result<()>,
    ) -> Result<()> {
        let h = self.region.header();
        crate::shm::named::with_owner_lock(shm, &h.config_lock, "the key limits", || {
            let (version, next) = crate::format::next_copy(&h.config_version);
            let (from, to) = (self.region.config(next ^ 1), self.region.config(next));
            copy_config(from, to);
            edit(to, &shm.clock)?;
            let any = has_global(to);
            // Raised before the limits are published, lowered after.
            if any {
                h.any_global.store(1, Ordering::Release);
            }
            crate::format::commit(&h.config_version, version);
            // The store's record, if any, is adopted again over these.
            h.record.seen.store(0, Ordering::Release);
            if !any {
                h.any_global.store(0, Ordering::Release);
            }
            Ok(())
        })?
    }

    /// Raises `any_global` if the limits in force have a global rate (a
    /// file whose limits were written without the flag): raised too often
    /// costs a decision a branch, never a limit.
    pub(crate) fn note_any_global(&self) {
        let h = self.region.header();
        if h.any_global.load(Ordering::Acquire) == 0
            && read_versioned(&h.config_version, |i| has_global(self.region.config(i)))
        {
            h.any_global.store(1, Ordering::Release);
        }
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
        config_of(&self.region, clock)
    }
}

/// A key file's default limits and overflow policy (a mapped one or a
/// view's copy).
pub(crate) fn config_of(region: &super::KeyRegion, clock: &Clock) -> KeyConfig {
    let h = region.header();
    read_versioned(&h.config_version, |i| {
        let c = &region.config(i).default;
        KeyConfig {
            limits: KeyLimits::load(c, clock),
            capacity: region.entries(),
            overflow: if c.flags() & LIMITS_OVERFLOW_ADMIT != 0 {
                KeyOverflow::Admit
            } else {
                KeyOverflow::Shared
            },
        }
    })
}

/// A key file's overrides: each key's identity (as `KeyInfo::ident`) and
/// its limits, in the order they were written.
pub(crate) fn overrides_of(region: &super::KeyRegion, clock: &Clock) -> Vec<(u64, KeyLimits)> {
    let h = region.header();
    read_versioned(&h.config_version, |i| overrides_in(region.config(i), clock))
}

/// The overrides of one copy of the limits: (identity, limits).
pub(super) fn overrides_in(c: &ConfigCopy, clock: &Clock) -> Vec<(u64, KeyLimits)> {
    (0..MAX_OVERRIDES)
        .filter_map(|o| {
            let k = c.override_keys[o].load(Ordering::Relaxed);
            (k != 0).then(|| (k, KeyLimits::load(&c.overrides[o], clock)))
        })
        .collect()
}

/// `limits` as they read back from the file (bursts in force, rates
/// rounded to ticks): what a comparison with the file's limits needs.
pub(crate) fn normalized(limits: &KeyLimits, clock: &Clock) -> KeyLimits {
    // SAFETY: all atomics: zeroed is a valid value.
    let copy: crate::format::LimitsCopy = unsafe { std::mem::zeroed() };
    limits.store(&copy, clock, false);
    KeyLimits::load(&copy, clock)
}

pub(super) fn write_overrides(c: &ConfigCopy, clock: &Clock, keys: &[(u64, KeyLimits)]) {
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
            (&a.global, &b.global),
            (&a.global_ms, &b.global_ms),
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

/// Whether a copy of the limits gives the default or an override a
/// global rate.
fn has_global(c: &ConfigCopy) -> bool {
    c.default.global.load(Ordering::Relaxed) != 0
        || (0..MAX_OVERRIDES).any(|o| {
            c.override_keys[o].load(Ordering::Relaxed) != 0
                && c.overrides[o].global.load(Ordering::Relaxed) != 0
        })
}
