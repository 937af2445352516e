//! What a key is limited by: up to three rates, each with its burst, a
//! rate across the fleet, a concurrency cap, and shadow mode; or no limit,
//! or none admitted. Plain values, validated here (the rates' own checks
//! are `rate`'s), stored by `format::LimitsCopy`.

use std::sync::atomic::Ordering;
use std::time::Duration;

pub(crate) use super::rate::{FALLBACK_DENY, FALLBACK_LOCAL};
use super::rate::{KeyGlobal, KeyRate};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::format::{
    LIMITS_BLOCKED, LIMITS_OVERFLOW_ADMIT, LIMITS_SHADOW, LIMITS_UNLIMITED, LimitsCopy,
    MAX_KEY_RATES,
};
use crate::limit::ledger::MAX_COUNT;

/// What a key is limited by. Several rates apply at once: a request is
/// admitted only if every rate admits it, and a refused one spends none.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct KeyLimits {
    rates: [Option<KeyRate>; MAX_KEY_RATES],
    /// The key's rate across the fleet (needs the table's store).
    pub global: Option<KeyGlobal>,
    /// Permits of one key in flight on the host at most; 0: no cap.
    pub max_concurrency: u32,
    /// Decide and count "would have refused", and admit anyway.
    pub shadow: bool,
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Default)]
enum Kind {
    #[default]
    Limited,
    Unlimited,
    Blocked,
}

impl KeyLimits {
    pub fn new() -> Self {
        Self::default()
    }

    /// No key limit at all (an internal caller): the task's own limits
    /// still apply.
    pub fn unlimited() -> Self {
        Self {
            kind: Kind::Unlimited,
            ..Self::default()
        }
    }

    /// Nothing admitted (a blocked key).
    pub fn blocked() -> Self {
        Self {
            kind: Kind::Blocked,
            ..Self::default()
        }
    }

    /// Adds a rate (at most three).
    pub fn rate(mut self, rate: KeyRate) -> Self {
        if let Some(free) = self.rates.iter_mut().find(|r| r.is_none()) {
            *free = Some(rate);
        } else {
            // Kept to be refused by `validate`, never dropped silently.
            self.rates[MAX_KEY_RATES - 1] = Some(KeyRate::new(f64::NAN, Duration::ZERO));
        }
        self
    }

    pub fn max_concurrency(mut self, permits: u32) -> Self {
        self.max_concurrency = permits;
        self
    }

    pub fn shadow(mut self, on: bool) -> Self {
        self.shadow = on;
        self
    }

    /// `"10/second;1000/hour"`: rates separated by `;`, as the Python
    /// `limits` package writes them.
    pub fn parse_rates(text: &str) -> Result<Self> {
        Self::new().with_rates(text)
    }

    /// Adds the rates of `text` (as [`Self::parse_rates`] reads it): on an
    /// unlimited or blocked key, they are kept for [`Self::validate`] to
    /// refuse, never dropped.
    pub fn with_rates(self, text: &str) -> Result<Self> {
        let mut limits = self;
        let parts: Vec<&str> = text.split(';').filter(|p| !p.trim().is_empty()).collect();
        if parts.len() > MAX_KEY_RATES {
            return Err(Error::invalid(format!(
                "at most {MAX_KEY_RATES} key rates, not {}",
                parts.len()
            )));
        }
        for part in parts {
            limits = limits.rate(KeyRate::parse(part)?);
        }
        Ok(limits)
    }

    pub fn rates(&self) -> impl Iterator<Item = &KeyRate> {
        self.rates.iter().flatten()
    }

    pub fn is_unlimited(&self) -> bool {
        self.kind == Kind::Unlimited
    }

    pub fn is_blocked(&self) -> bool {
        self.kind == Kind::Blocked
    }

    /// Adds a rate across the fleet (see [`KeyGlobal`]).
    pub fn global(mut self, global: KeyGlobal) -> Self {
        self.global = Some(global);
        self
    }

    /// Whether these limits limit anything.
    pub fn is_empty(&self) -> bool {
        self.kind == Kind::Limited
            && self.rates().next().is_none()
            && self.max_concurrency == 0
            && self.global.is_none()
    }

    /// Checks the limits as setting them would (`flowctrl set --dry-run`).
    pub fn validate(&self) -> Result<()> {
        for rate in self.rates() {
            rate.validate()?;
        }
        if self.max_concurrency as u64 > MAX_COUNT {
            return Err(Error::invalid(format!(
                "a key's max_concurrency of {} is above {MAX_COUNT}",
                self.max_concurrency
            )));
        }
        if let Some(g) = &self.global {
            g.validate()?;
        }
        if self.kind != Kind::Limited
            && (self.rates().next().is_some() || self.max_concurrency != 0 || self.global.is_some())
        {
            return Err(Error::invalid(
                "an unlimited or blocked key takes no rate or cap".to_string(),
            ));
        }
        Ok(())
    }

    pub(crate) fn store(&self, copy: &LimitsCopy, clock: &Clock, overflow_admit: bool) {
        let mut bursts = [0u32; MAX_KEY_RATES];
        for (i, burst) in bursts.iter_mut().enumerate() {
            let (interval, rate) = match self.rates[i] {
                Some(r) => {
                    *burst = r.burst_in_force();
                    let ticks = clock.ticks_per_sec() as f64 / r.rate();
                    ((ticks.round() as u64).max(1), r.rate())
                }
                None => (0, 0.0),
            };
            copy.interval[i].store(interval, Ordering::Relaxed);
            copy.rate_bits[i].store(rate.to_bits(), Ordering::Relaxed);
        }
        let periods = self
            .rates
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let ms = r.map_or(0, |r| r.period.as_millis().min(0x1f_ffff) as u64);
                ms << (21 * i)
            })
            .fold(0, |a, b| a | b);
        copy.bursts.store(
            bursts[0] as u64 | (bursts[1] as u64) << 32,
            Ordering::Relaxed,
        );
        copy.burst2_cap.store(
            bursts[2] as u64 | (self.max_concurrency as u64) << 32,
            Ordering::Relaxed,
        );
        copy.periods.store(periods, Ordering::Relaxed);
        let flags = (if self.shadow { LIMITS_SHADOW } else { 0 })
            | match self.kind {
                Kind::Limited => 0,
                Kind::Unlimited => LIMITS_UNLIMITED,
                Kind::Blocked => LIMITS_BLOCKED,
            }
            | if overflow_admit {
                LIMITS_OVERFLOW_ADMIT
            } else {
                0
            };
        copy.flags.store(flags, Ordering::Relaxed);
        let (global, global_ms) = match &self.global {
            Some(g) => (
                g.permits() | (g.local as u64) << 32 | g.fallback_code() << 40,
                g.slice_in_force().as_millis() as u64 | (g.rate.period.as_millis() as u64) << 32,
            ),
            None => (0, 0),
        };
        copy.global.store(global, Ordering::Relaxed);
        copy.global_ms.store(global_ms, Ordering::Relaxed);
    }

    pub(crate) fn load(copy: &LimitsCopy, clock: &Clock) -> Self {
        let _ = clock;
        let bursts = copy.bursts.load(Ordering::Relaxed);
        let burst2_cap = copy.burst2_cap.load(Ordering::Relaxed);
        let periods = copy.periods.load(Ordering::Relaxed);
        let burst = [bursts as u32, (bursts >> 32) as u32, burst2_cap as u32];
        let flags = copy.flags();
        let mut limits = Self {
            max_concurrency: ((burst2_cap >> 32) as u32).min(MAX_COUNT as u32),
            shadow: flags & LIMITS_SHADOW != 0,
            kind: if flags & LIMITS_BLOCKED != 0 {
                Kind::Blocked
            } else if flags & LIMITS_UNLIMITED != 0 {
                Kind::Unlimited
            } else {
                Kind::Limited
            },
            ..Self::default()
        };
        for (i, burst) in burst.into_iter().enumerate() {
            let rate = f64::from_bits(copy.rate_bits[i].load(Ordering::Relaxed));
            if copy.interval[i].load(Ordering::Relaxed) == 0
                || rate.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
            {
                continue;
            }
            let ms = (periods >> (21 * i)) & 0x1f_ffff;
            let period = Duration::from_millis(ms.max(1));
            let mut r = KeyRate::new(rate * period.as_secs_f64(), period);
            // The default burst reads back as the default.
            if burst != r.burst_in_force() {
                r.burst = burst;
            }
            limits.rates[i] = Some(r);
        }
        let (global, global_ms) = (
            copy.global.load(Ordering::Relaxed),
            copy.global_ms.load(Ordering::Relaxed),
        );
        let permits = global & 0xffff_ffff;
        let (slice_ms, period_ms) = (global_ms & 0xffff_ffff, global_ms >> 32);
        if permits != 0 && slice_ms != 0 && period_ms != 0 {
            let period = Duration::from_millis(period_ms);
            let slice = Duration::from_millis(slice_ms);
            limits.global = Some(KeyGlobal {
                rate: KeyRate::new(permits as f64 * period_ms as f64 / slice_ms as f64, period),
                slice: (slice != period).then_some(slice),
                local: ((global >> 32) & 0xff) as u32,
                fallback: match (global >> 40) & 3 {
                    FALLBACK_LOCAL => crate::Fallback::Local,
                    FALLBACK_DENY => crate::Fallback::Deny,
                    _ => crate::Fallback::Share,
                },
            });
        }
        limits
    }
}

/// The rate words a decision reads: interval and burst per rate.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Rules {
    pub interval: [u64; MAX_KEY_RATES],
    pub burst: [u32; MAX_KEY_RATES],
    pub cap: u32,
    pub flags: u64,
    /// The global rate's words (see `LimitsCopy::global`); 0: none.
    pub global: u64,
    pub global_ms: u64,
}

impl Rules {
    #[inline(always)]
    pub(crate) fn read(copy: &LimitsCopy) -> Self {
        let bursts = copy.bursts.load(Ordering::Relaxed);
        let burst2_cap = copy.burst2_cap.load(Ordering::Relaxed);
        Self {
            interval: [
                copy.interval[0].load(Ordering::Relaxed),
                copy.interval[1].load(Ordering::Relaxed),
                copy.interval[2].load(Ordering::Relaxed),
            ],
            burst: [bursts as u32, (bursts >> 32) as u32, burst2_cap as u32],
            cap: ((burst2_cap >> 32) as u32).min(MAX_COUNT as u32),
            flags: copy.flags.load(Ordering::Relaxed),
            global: copy.global.load(Ordering::Relaxed),
            global_ms: copy.global_ms.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_round_trip_through_their_copy() {
        let clock = Clock::new(crate::clock::ClockKind::Monotonic, 1_000_000_000);
        let copy: LimitsCopy = unsafe { std::mem::zeroed() };
        let l = KeyLimits::parse_rates("10/s;1000/h")
            .unwrap()
            .max_concurrency(7)
            .shadow(true);
        l.store(&copy, &clock, false);
        let back = KeyLimits::load(&copy, &clock);
        assert_eq!(back.max_concurrency, 7);
        assert!(back.shadow);
        let rates: Vec<_> = back
            .rates()
            .map(|r| (r.rate(), r.burst_in_force()))
            .collect();
        assert_eq!(rates.len(), 2);
        assert!((rates[0].0 - 10.0).abs() < 1e-9 && rates[0].1 == 10);
        assert!((rates[1].0 - 1000.0 / 3600.0).abs() < 1e-9 && rates[1].1 == 1000);
        KeyLimits::blocked().store(&copy, &clock, false);
        assert!(KeyLimits::load(&copy, &clock).is_blocked());
    }
}
