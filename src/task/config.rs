//! What a task is configured with, and how that is kept in its slot.

use std::sync::atomic::Ordering;

use crate::clock::Clock;
use crate::error::{Error, ErrorKind, Result};
use crate::table::layout::TaskSlot;

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

    /// Checks every field that is set.
    pub(crate) fn validate(&self, clock: &Clock) -> Result<Self> {
        if let Some(rate) = self.local_rate {
            interval_for(rate, clock)?;
        }
        if self.burst == Some(0) {
            return Err(Error::invalid("burst must be at least 1"));
        }
        Ok(*self)
    }

    pub(crate) fn or_defaults(&self) -> TaskSettings {
        let d = TaskSettings::default();
        TaskSettings {
            local_rate: self.local_rate.unwrap_or(d.local_rate),
            burst: self.burst.unwrap_or(d.burst),
            max_concurrency: self.max_concurrency.unwrap_or(d.max_concurrency),
        }
    }
}

/// A task's effective configuration, as every process on the host sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TaskSettings {
    pub local_rate: f64,
    pub burst: u32,
    pub max_concurrency: u32,
}

impl Default for TaskSettings {
    fn default() -> Self {
        Self {
            local_rate: 0.0,
            burst: 1,
            max_concurrency: 0,
        }
    }
}

impl TaskSettings {
    pub(crate) fn load(slot: &TaskSlot) -> Self {
        Self {
            local_rate: f64::from_bits(slot.rate_bits.load(Ordering::Relaxed)),
            burst: slot.burst.load(Ordering::Relaxed),
            max_concurrency: slot.max_concurrency.load(Ordering::Relaxed),
        }
    }

    /// Writes validated settings into a slot.
    pub(crate) fn store(&self, slot: &TaskSlot, clock: &Clock) {
        let interval = interval_for(self.local_rate, clock).unwrap_or(0);
        slot.rate_bits
            .store(self.local_rate.to_bits(), Ordering::Relaxed);
        slot.burst.store(self.burst.max(1), Ordering::Relaxed);
        slot.interval.store(interval, Ordering::Relaxed);
        slot.max_concurrency
            .store(self.max_concurrency, Ordering::Relaxed);
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
        out
    }
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
    fn unset_fields_take_defaults_and_are_not_compared() {
        let asked = TaskConfig::new().burst(5);
        let settings = asked.or_defaults();
        assert_eq!(
            settings,
            TaskSettings {
                local_rate: 0.0,
                burst: 5,
                max_concurrency: 0
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
