//! What a key is limited by: up to three rates, each with its burst, a
//! concurrency cap, and shadow mode; or no limit, or none admitted. Plain
//! values, validated here, stored by `format::LimitsCopy`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::format::{
    LIMITS_BLOCKED, LIMITS_OVERFLOW_ADMIT, LIMITS_SHADOW, LIMITS_UNLIMITED, LimitsCopy,
    MAX_KEY_RATES,
};
use crate::limit::ledger::MAX_COUNT;

/// At most 40 characters of `text`, for an error that echoes it.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((i, _)) => format!("{}… ({} bytes)", &text[..i], text.len()),
        None => text.to_string(),
    }
}

/// One rate of a key: `count` requests per `period`, `burst` of them at
/// once (GCRA: no window edges).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyRate {
    pub count: f64,
    pub period: Duration,
    /// Requests that may arrive at once above the smooth rate; 0: the
    /// count (a per-hour limit admits its hour's worth at once, as a fixed
    /// window would, but never more in any hour).
    pub burst: u32,
}

impl KeyRate {
    pub fn per_second(count: f64) -> Self {
        Self::new(count, Duration::from_secs(1))
    }

    pub fn new(count: f64, period: Duration) -> Self {
        Self {
            count,
            period,
            burst: 0,
        }
    }

    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = burst;
        self
    }

    /// Requests per second.
    pub fn rate(&self) -> f64 {
        self.count / self.period.as_secs_f64()
    }

    /// The burst in force: as set, or the count (at least 1).
    pub fn burst_in_force(&self) -> u32 {
        if self.burst != 0 {
            self.burst
        } else {
            (self.count.ceil() as u64).clamp(1, u32::MAX as u64) as u32
        }
    }

    fn validate(&self) -> Result<()> {
        let secs = self.period.as_secs_f64();
        if !(self.count.is_finite() && self.count > 0.0) {
            return Err(Error::invalid(format!(
                "a key rate's count must be a positive number, not {}",
                self.count
            )));
        }
        if !(0.001..=366.0 * 86_400.0).contains(&secs) {
            return Err(Error::invalid(format!(
                "a key rate's period must be between 1 ms and a year, not {:?}",
                self.period
            )));
        }
        let rate = self.rate();
        if !(1e-7..=1e9).contains(&rate) {
            return Err(Error::invalid(format!(
                "a key rate of {rate} per second is out of range (1e-7 to 1e9)"
            )));
        }
        if self.burst_in_force() > 1 << 30 {
            return Err(Error::invalid(format!(
                "a key rate's burst of {} is above 2^30",
                self.burst_in_force()
            )));
        }
        Ok(())
    }

    /// Parses `10/second`, `10/s`, `1000/hour`, `5/2m`, `100/1.5s`
    /// (`count/[n]unit`, units `ms`, `s`, `m`, `h`, `d` or their names).
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::invalid(format!(
                "key rate {:?}: {why} (expected e.g. \"10/second\" or \"1000/h\")",
                shorten(text)
            ))
        };
        let (count, per) = text.trim().split_once('/').ok_or_else(|| bad("no '/'"))?;
        let count: f64 = count
            .trim()
            .parse()
            .map_err(|_| bad("the count is not a number"))?;
        let per = per.trim();
        let split = per
            .find(|c: char| c.is_ascii_alphabetic())
            .ok_or_else(|| bad("no unit"))?;
        let (n, unit) = per.split_at(split);
        let n: f64 = if n.trim().is_empty() {
            1.0
        } else {
            n.trim()
                .parse()
                .map_err(|_| bad("the period is not a number"))?
        };
        let unit_secs = match unit.to_ascii_lowercase().as_str() {
            "ms" | "millisecond" | "milliseconds" => 0.001,
            "s" | "sec" | "second" | "seconds" => 1.0,
            "m" | "min" | "minute" | "minutes" => 60.0,
            "h" | "hour" | "hours" => 3600.0,
            "d" | "day" | "days" => 86_400.0,
            _ => return Err(bad("unknown unit")),
        };
        if !(n.is_finite() && n > 0.0 && n * unit_secs <= 366.0 * 86_400.0) {
            return Err(bad("the period is out of range"));
        }
        let rate = Self::new(count, Duration::from_secs_f64(n * unit_secs));
        rate.validate().map_err(|e| bad(e.message()))?;
        Ok(rate)
    }
}

impl std::fmt::Display for KeyRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.period.as_millis();
        let period = match ms {
            1000 => "s".to_string(),
            60_000 => "m".to_string(),
            3_600_000 => "h".to_string(),
            86_400_000 => "d".to_string(),
            _ if ms.is_multiple_of(1000) => format!("{}s", ms / 1000),
            _ => format!("{ms}ms"),
        };
        write!(f, "{}/{period}", self.count)?;
        if self.burst != 0 {
            write!(f, " burst {}", self.burst)?;
        }
        Ok(())
    }
}

/// A key's rate across every host of the fleet: `rate.count` per
/// `rate.period`, kept in slices of the store's clock (see
/// `docs/guide/keyed.md`, "Global rates per key").
///
/// Each slice admits at most `permits()` of the key fleet-wide, plus what
/// hosts admit on their own: a key not hot on a host passes there up to
/// `local` requests a slice without asking the store; a key hot on a host
/// (past that allowance, in this slice or the last) spends only chunks the
/// store granted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyGlobal {
    pub rate: KeyRate,
    /// The slice, a divisor of nothing: `rate.count × slice / period`
    /// permits each (rounded down, at least 1). `None`: the period.
    pub slice: Option<Duration>,
    /// Requests of a key a host admits per slice without the store while
    /// the key is not hot there (at most [`MAX_LOCAL`]): at least this
    /// many, or half the slice over the hosts the store counts, if more.
    pub local: u32,
    /// What a host admits of a key while the store fails: `Share` (the
    /// slice ÷ the hosts the store last counted, at least `local`), `Local`
    /// (the key's local limits alone) or `Deny`.
    pub fallback: crate::Fallback,
}

/// The most a host admits of a key per slice on its own.
pub const MAX_LOCAL: u32 = 31;

impl KeyGlobal {
    /// `rate` fleet-wide, in slices of its period, one request a slice on
    /// each host's own, fallback by share.
    pub fn new(rate: KeyRate) -> Self {
        Self {
            rate,
            slice: None,
            local: 1,
            fallback: crate::Fallback::Share,
        }
    }

    pub fn slice(mut self, slice: Duration) -> Self {
        self.slice = Some(slice);
        self
    }

    pub fn local(mut self, requests: u32) -> Self {
        self.local = requests;
        self
    }

    pub fn fallback(mut self, fallback: crate::Fallback) -> Self {
        self.fallback = fallback;
        self
    }

    /// The slice in force.
    pub fn slice_in_force(&self) -> Duration {
        self.slice.unwrap_or(self.rate.period)
    }

    /// Permits of one slice, fleet-wide.
    pub fn permits(&self) -> u64 {
        let ratio = self.slice_in_force().as_secs_f64() / self.rate.period.as_secs_f64();
        ((self.rate.count * ratio + 1e-9).floor() as u64).max(1)
    }

    fn validate(&self) -> Result<()> {
        self.rate.validate()?;
        if self.rate.burst != 0 {
            return Err(Error::invalid(
                "a key's global rate takes no burst: each slice's permits may all pass at once"
                    .to_string(),
            ));
        }
        let slice = self.slice_in_force();
        if !(Duration::from_millis(10)..=Duration::from_secs(86_400)).contains(&slice)
            || !slice.subsec_nanos().is_multiple_of(1_000_000)
        {
            return Err(Error::invalid(format!(
                "a key's global slice must be whole ms between 10 ms and a day, not {slice:?}"
            )));
        }
        if self.rate.period > Duration::from_secs(49 * 86_400) {
            return Err(Error::invalid(format!(
                "a key's global rate's period must be at most 49 days, not {:?}",
                self.rate.period
            )));
        }
        let ratio = slice.as_secs_f64() / self.rate.period.as_secs_f64();
        let permits = self.rate.count * ratio;
        if !(1.0..=(1u64 << 31) as f64).contains(&(permits + 1e-9)) {
            return Err(Error::invalid(format!(
                "a key's global rate of {} gives {permits:.3} permits per slice of {slice:?}:                  a slice needs 1 to 2^31 (make the slice longer or shorter)",
                self.rate
            )));
        }
        if self.local > MAX_LOCAL {
            return Err(Error::invalid(format!(
                "a key's local allowance is at most {MAX_LOCAL} requests a slice, not {}",
                self.local
            )));
        }
        if let crate::Fallback::Rate(_) = self.fallback {
            return Err(Error::invalid(
                "a key's global fallback is share, local or deny (not a rate)".to_string(),
            ));
        }
        Ok(())
    }

    fn fallback_code(&self) -> u64 {
        match self.fallback {
            crate::Fallback::Local => FALLBACK_LOCAL,
            crate::Fallback::Deny => FALLBACK_DENY,
            _ => FALLBACK_SHARE,
        }
    }
}

/// A global rate's fallback in its copy (bits 40..42 of `global`).
pub(crate) const FALLBACK_SHARE: u64 = 0;
pub(crate) const FALLBACK_LOCAL: u64 = 1;
pub(crate) const FALLBACK_DENY: u64 = 2;

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
        let mut limits = Self::new();
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
    fn rates_parse_as_the_limits_package_writes_them() {
        let l = KeyLimits::parse_rates("10/second;1000/hour").unwrap();
        let rates: Vec<_> = l.rates().copied().collect();
        assert_eq!(rates[0], KeyRate::per_second(10.0));
        assert_eq!(rates[1], KeyRate::new(1000.0, Duration::from_secs(3600)));
        assert_eq!(
            KeyRate::parse("5/2m").unwrap(),
            KeyRate::new(5.0, Duration::from_secs(120))
        );
        assert_eq!(KeyRate::parse("1/ms").unwrap().rate(), 1000.0);
        for bad in [
            "10",
            "x/s",
            "10/parsec",
            "0/s",
            "-1/s",
            "10/0s",
            "1e300/ms",
            "10/400d",
        ] {
            assert!(KeyRate::parse(bad).is_err(), "{bad}");
        }
        assert!(KeyLimits::parse_rates("1/s;2/s;3/s;4/s").is_err());
        assert!(
            KeyLimits::new()
                .rate(KeyRate::per_second(1.0))
                .rate(KeyRate::per_second(1.0))
                .rate(KeyRate::per_second(1.0))
                .rate(KeyRate::per_second(1.0))
                .validate()
                .is_err(),
            "a fourth rate is refused, not dropped"
        );
    }

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
