//! What a task is configured with, and how that is kept in its slot: two
//! copies and a version, so every process reads one whole configuration
//! without waiting, and writers (serialised by an owner-tagged lock) never
//! show anyone half an update.

use std::sync::atomic::{Ordering, fence};

use crate::clock::Clock;
use crate::error::{Error, ErrorKind, Result};
use crate::limit::adaptive::Spec as LimiterSpec;
use crate::limit::ledger::MAX_COUNT;
use crate::quota::Global;

use crate::shm::Shm;
use crate::shm::layout::{GlobalCopy, TaskSlot};

/// Bounds of a global-quota slice: shorter slices cost more pulls than they
/// save in precision; longer ones strand more quota per slice.
pub(crate) const MIN_SLICE_MS: u32 = 100;
pub(crate) const MAX_SLICE_MS: u32 = 60_000;
/// Permits per slice fit the host word's 32-bit count, with room to spare.
pub(crate) const MAX_SLICE_QUOTA: u32 = 1 << 30;

/// The configuration asked for when registering or updating a task. Fields
/// left `None` keep their current value (or the default for a new task) and
/// are not compared with an existing registration.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TaskConfig {
    /// Requests per second for the whole host, fractional allowed; 0 = no
    /// local rate limit. Default 0.
    pub local_rate: Option<f64>,
    /// Permits that may be taken at once above the smooth rate. Default 1.
    pub burst: Option<u32>,
    /// Permits in flight on the host at most; 0 = no cap. Default 0.
    pub max_concurrency: Option<u32>,
    /// Requests per second for the whole cluster, pulled in chunks from the
    /// table's store; 0 = no global limit. Default 0.
    pub global_rate: Option<f64>,
    /// Length of a global-quota slice in ms, 100..=60000. Default 1000.
    pub slice_ms: Option<u32>,
    /// Permits per pull; 0 = adaptive (from the host's recent rate and the
    /// time left in the slice). Default 0.
    pub chunk: Option<u32>,
    /// The rate applied while the store is failing, when the task has no
    /// local rate; 0 = `global_rate`. Default 0.
    pub fallback_rate: Option<f64>,
    /// The algorithm that sets the concurrency limit and its parameters
    /// (default `fixed`: `max_concurrency` is the cap). Changing the
    /// algorithm resets the limits below to its defaults unless they are set.
    pub limiter: Option<LimiterSpec>,
    /// The adaptive limit's floor, ceiling and starting point.
    pub min_limit: Option<u32>,
    pub max_limit: Option<u32>,
    pub initial_limit: Option<u32>,
}

impl TaskConfig {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn local_rate(mut self, per_second: f64) -> Self {
        self.local_rate = Some(per_second);
        self
    }

    pub fn burst(mut self, permits: u32) -> Self {
        self.burst = Some(permits);
        self
    }

    pub fn max_concurrency(mut self, permits: u32) -> Self {
        self.max_concurrency = Some(permits);
        self
    }

    pub fn global_rate(mut self, per_second: f64) -> Self {
        self.global_rate = Some(per_second);
        self
    }

    pub fn slice_ms(mut self, ms: u32) -> Self {
        self.slice_ms = Some(ms);
        self
    }

    pub fn chunk(mut self, permits: u32) -> Self {
        self.chunk = Some(permits);
        self
    }

    pub fn fallback_rate(mut self, per_second: f64) -> Self {
        self.fallback_rate = Some(per_second);
        self
    }

    /// The limiter, e.g. `LimiterSpec::parse("auto")?`.
    pub fn limiter(mut self, spec: LimiterSpec) -> Self {
        self.limiter = Some(spec);
        self
    }

    pub fn min_limit(mut self, permits: u32) -> Self {
        self.min_limit = Some(permits);
        self
    }

    pub fn max_limit(mut self, permits: u32) -> Self {
        self.max_limit = Some(permits);
        self
    }

    pub fn initial_limit(mut self, permits: u32) -> Self {
        self.initial_limit = Some(permits);
        self
    }

    /// These fields over `base`'s.
    pub(crate) fn over(&self, base: TaskSettings) -> TaskSettings {
        TaskSettings {
            local_rate: self.local_rate.unwrap_or(base.local_rate),
            burst: self.burst.unwrap_or(base.burst),
            max_concurrency: self.max_concurrency.unwrap_or(base.max_concurrency),
            global_rate: self.global_rate.unwrap_or(base.global_rate),
            slice_ms: self.slice_ms.unwrap_or(base.slice_ms),
            chunk: self.chunk.unwrap_or(base.chunk),
            fallback_rate: self.fallback_rate.unwrap_or(base.fallback_rate),
            limiter: crate::task::adaptive::limiter_over(self, base.limiter),
        }
    }
}

/// A task's effective configuration, as every process on the host sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TaskSettings {
    pub local_rate: f64,
    pub burst: u32,
    pub max_concurrency: u32,
    pub global_rate: f64,
    pub slice_ms: u32,
    pub chunk: u32,
    pub fallback_rate: f64,
    /// The limiter with its bounds (`min`, `max`, `initial`).
    pub limiter: LimiterSpec,
}

impl Default for TaskSettings {
    fn default() -> Self {
        Self {
            local_rate: 0.0,
            burst: 1,
            max_concurrency: 0,
            global_rate: 0.0,
            slice_ms: 1000,
            chunk: 0,
            fallback_rate: 0.0,
            limiter: LimiterSpec::fixed(),
        }
    }
}

/// What the request path needs of the configuration, in clock ticks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Limits {
    pub interval: u64,
    pub burst: u32,
    pub cap: u32,
    pub global: Option<Global>,
}

impl TaskSettings {
    /// Checks a whole configuration and turns it into clock ticks.
    pub(crate) fn limits(&self, clock: &Clock) -> Result<Limits> {
        if self.burst == 0 {
            return Err(Error::invalid("burst must be at least 1"));
        }
        if self.max_concurrency as u64 > MAX_COUNT {
            return Err(Error::invalid(format!(
                "max_concurrency must be at most {MAX_COUNT}, not {}",
                self.max_concurrency
            )));
        }
        self.limiter.validate()?;
        let interval = interval_for(self.local_rate, clock)?;
        // The GCRA looks burst × interval ahead; past 2^62 ticks (decades)
        // that would saturate and quietly admit everything.
        if interval
            .checked_mul(self.burst as u64)
            .is_none_or(|span| span > 1 << 62)
        {
            return Err(Error::invalid(format!(
                "local_rate {} with burst {} spans more than 2^62 clock ticks \
                 (the burst would never refill): raise the rate or lower the burst",
                self.local_rate, self.burst
            )));
        }
        Ok(Limits {
            interval,
            burst: self.burst,
            cap: self.max_concurrency,
            global: self.global()?,
        })
    }

    /// Checks the global-quota fields; `None` when there is no global limit.
    fn global(&self) -> Result<Option<Global>> {
        if !(MIN_SLICE_MS..=MAX_SLICE_MS).contains(&self.slice_ms) {
            return Err(Error::invalid(format!(
                "slice_ms must be {MIN_SLICE_MS}..={MAX_SLICE_MS}, not {}",
                self.slice_ms
            )));
        }
        for (name, rate) in [
            ("global_rate", self.global_rate),
            ("fallback_rate", self.fallback_rate),
        ] {
            if !rate.is_finite() || rate < 0.0 {
                return Err(Error::invalid(format!(
                    "{name} must be 0 or a positive number of requests/s, not {rate}"
                )));
            }
        }
        if self.global_rate == 0.0 {
            return Ok(None);
        }
        let quota = (self.global_rate * self.slice_ms as f64 / 1000.0).floor();
        if !(1.0..=MAX_SLICE_QUOTA as f64).contains(&quota) {
            return Err(Error::invalid(format!(
                "global_rate {} × slice_ms {} gives {quota} permits per slice: \
                 it must be 1..={MAX_SLICE_QUOTA}",
                self.global_rate, self.slice_ms
            )));
        }
        if self.chunk > quota as u32 {
            return Err(Error::invalid(format!(
                "chunk {} is larger than a slice's quota of {quota}",
                self.chunk
            )));
        }
        Ok(Some(Global {
            rate: self.global_rate,
            quota: quota as u32,
            slice_ms: self.slice_ms,
            chunk: self.chunk,
            fallback_rate: self.fallback_rate,
        }))
    }

    /// The fields of `asked` that differ from these settings, described.
    pub(crate) fn mismatches(&self, asked: &TaskConfig) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(r) = asked.local_rate.filter(|r| *r != self.local_rate) {
            out.push(format!("local_rate {} (asked {r})", self.local_rate));
        }
        if let Some(b) = asked.burst.filter(|b| *b != self.burst) {
            out.push(format!("burst {} (asked {b})", self.burst));
        }
        if let Some(c) = asked.max_concurrency.filter(|c| *c != self.max_concurrency) {
            out.push(format!(
                "max_concurrency {} (asked {c})",
                self.max_concurrency
            ));
        }
        if let Some(r) = asked.global_rate.filter(|r| *r != self.global_rate) {
            out.push(format!("global_rate {} (asked {r})", self.global_rate));
        }
        if let Some(s) = asked.slice_ms.filter(|s| *s != self.slice_ms) {
            out.push(format!("slice_ms {} (asked {s})", self.slice_ms));
        }
        if let Some(c) = asked.chunk.filter(|c| *c != self.chunk) {
            out.push(format!("chunk {} (asked {c})", self.chunk));
        }
        if let Some(r) = asked.fallback_rate.filter(|r| *r != self.fallback_rate) {
            out.push(format!("fallback_rate {} (asked {r})", self.fallback_rate));
        }
        crate::task::adaptive::mismatches(&self.limiter, asked, &mut out);
        out
    }
}

/// Reads the current copy: a consistent configuration. A reader retries only
/// when a write completed while it read; a table someone keeps rewriting
/// gets the last copy read after a bounded number of tries.
#[inline]
pub(crate) fn read(slot: &TaskSlot) -> (Limits, f64) {
    let mut tries = 0;
    loop {
        let version = slot.config_version.load(Ordering::Acquire);
        let copy = &slot.config[(version & 1) as usize];
        let interval = copy.interval.load(Ordering::Relaxed);
        let limits = copy.limits.load(Ordering::Relaxed);
        let rate = copy.rate_bits.load(Ordering::Relaxed);
        let global = read_global(&slot.quota.config[(version & 1) as usize]);
        fence(Ordering::Acquire);
        tries += 1;
        if slot.config_version.load(Ordering::Relaxed) == version || tries >= 64 {
            let limits = Limits {
                interval,
                burst: limits as u32,
                cap: (limits >> 32) as u32,
                global,
            };
            return (limits, f64::from_bits(rate));
        }
    }
}

#[inline]
fn read_global(copy: &GlobalCopy) -> Option<Global> {
    let rate = f64::from_bits(copy.rate_bits.load(Ordering::Relaxed));
    if rate == 0.0 {
        return None;
    }
    // Clamped to what validation allows: a damaged file must not divide by
    // zero or overflow on the request path.
    let slice_chunk = copy.slice_chunk.load(Ordering::Relaxed);
    let quota = (copy
        .quota
        .load(Ordering::Relaxed)
        .min(MAX_SLICE_QUOTA as u64) as u32)
        .max(1);
    Some(Global {
        rate,
        quota,
        slice_ms: (slice_chunk as u32).clamp(MIN_SLICE_MS, MAX_SLICE_MS),
        chunk: ((slice_chunk >> 32) as u32).min(quota),
        fallback_rate: f64::from_bits(copy.fallback_bits.load(Ordering::Relaxed)),
    })
}

pub(crate) fn settings(slot: &TaskSlot) -> TaskSettings {
    let (limits, rate) = read(slot);
    let defaults = TaskSettings::default();
    let global = limits.global;
    TaskSettings {
        local_rate: rate,
        burst: limits.burst,
        max_concurrency: limits.cap,
        global_rate: global.map_or(0.0, |g| g.rate),
        slice_ms: global.map_or(defaults.slice_ms, |g| g.slice_ms),
        chunk: global.map_or(defaults.chunk, |g| g.chunk),
        fallback_rate: global.map_or(defaults.fallback_rate, |g| g.fallback_rate),
        limiter: limiter(slot).0,
    }
}

/// The current limiter copy and its generation, read like [`read`].
pub(crate) fn limiter(slot: &TaskSlot) -> (LimiterSpec, u64) {
    let mut tries = 0;
    loop {
        let version = slot.config_version.load(Ordering::Acquire);
        let read = crate::task::adaptive::read_copy(&slot.adaptive.config[(version & 1) as usize]);
        fence(Ordering::Acquire);
        tries += 1;
        if slot.config_version.load(Ordering::Relaxed) == version || tries >= 64 {
            return read;
        }
    }
}

/// Writes a configuration into the copy readers are not using, then makes it
/// current. The caller holds the slot's configuration lock (or the slot is
/// not published yet).
pub(crate) fn write(slot: &TaskSlot, limits: Limits, rate: f64, limiter: &LimiterSpec) {
    // Pairs with the readers' fence: a reader that sees any of these stores
    // also sees the version bump that preceded this write.
    fence(Ordering::Release);
    let version = slot.config_version.load(Ordering::Relaxed);
    let next = (version.wrapping_add(1) & 1) as usize;
    let copy = &slot.config[next];
    copy.interval.store(limits.interval, Ordering::Relaxed);
    copy.rate_bits.store(rate.to_bits(), Ordering::Relaxed);
    copy.limits.store(
        limits.burst as u64 | (limits.cap as u64) << 32,
        Ordering::Relaxed,
    );
    let global = &slot.quota.config[next];
    let g = limits.global;
    global
        .rate_bits
        .store(g.map_or(0, |g| g.rate.to_bits()), Ordering::Relaxed);
    global.slice_chunk.store(
        g.map_or(0, |g| g.slice_ms as u64 | (g.chunk as u64) << 32),
        Ordering::Relaxed,
    );
    global.fallback_bits.store(
        g.map_or(0, |g| g.fallback_rate.to_bits()),
        Ordering::Relaxed,
    );
    global
        .quota
        .store(g.map_or(0, |g| g.quota as u64), Ordering::Relaxed);
    let generation = crate::task::adaptive::write_copy(slot, version, limiter);
    slot.config_version
        .store(version.wrapping_add(1), Ordering::Release);
    crate::task::adaptive::configured(slot, limiter, generation);
}

/// Runs `body` holding the task's configuration lock (see
/// `shm::named::with_owner_lock`).
pub(crate) fn with_lock<T>(shm: &Shm, slot: &TaskSlot, body: impl FnOnce() -> T) -> Result<T> {
    crate::shm::named::with_owner_lock(shm, &slot.config_lock, "the task's configuration", body)
}

/// The GCRA emission interval for `rate` requests/s, in clock ticks (0 for no
/// limit). A rate must leave at least one tick between permits.
fn interval_for(rate: f64, clock: &Clock) -> Result<u64> {
    if rate == 0.0 {
        return Ok(0);
    }
    let ticks = clock.ticks_per_sec() as f64;
    let interval = ticks / rate;
    if !rate.is_finite() || rate < 0.0 || !(1.0..=(1u64 << 62) as f64).contains(&interval) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "local_rate must be 0 (no limit) or between {:.3e} and {:.3e} requests/s, not {rate}",
                ticks / (1u64 << 62) as f64,
                ticks
            ),
        ));
    }
    Ok(interval.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ClockKind;

    #[test]
    fn rates_map_to_intervals_and_bad_rates_are_refused() {
        let clock = Clock::new(ClockKind::Monotonic, 1_000_000_000);
        assert_eq!(interval_for(0.0, &clock), Ok(0));
        assert_eq!(interval_for(1000.0, &clock), Ok(1_000_000));
        assert_eq!(interval_for(0.5, &clock), Ok(2_000_000_000));
        for bad in [-1.0, f64::NAN, f64::INFINITY, 2e9, 1e-12] {
            let err = interval_for(bad, &clock).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn a_burst_that_would_saturate_the_horizon_is_refused() {
        let clock = Clock::new(ClockKind::Tsc, 2_100_000_000);
        let slow = TaskSettings {
            local_rate: 1e-6,
            burst: 10_000,
            ..TaskSettings::default()
        };
        assert_eq!(
            slow.limits(&clock).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        let fine = TaskSettings { burst: 1, ..slow };
        assert!(fine.limits(&clock).is_ok());
        let huge_cap = TaskSettings {
            max_concurrency: u32::MAX,
            ..TaskSettings::default()
        };
        assert!(huge_cap.limits(&clock).is_err());
    }

    #[test]
    fn unset_fields_keep_the_base_and_are_not_compared() {
        let settings = TaskConfig::new().burst(5).over(TaskSettings::default());
        assert_eq!(
            settings,
            TaskSettings {
                burst: 5,
                ..TaskSettings::default()
            }
        );
        assert!(settings.mismatches(&TaskConfig::new()).is_empty());
        assert_eq!(
            settings
                .mismatches(&TaskConfig::new().burst(6).local_rate(0.0))
                .len(),
            1
        );
    }
}
