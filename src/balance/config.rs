//! A balancer's configuration: set by the process that registers it, stored
//! in its slot, and read (and checked again: the file is not trusted) by
//! every pick.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::format::BalancerSlot;

/// How a balancer weighs its backends. Every field has a default; see
/// docs/guide/load-balancing.md for why each is what it is.
#[derive(Clone, Debug, PartialEq)]
pub struct BalancerConfig {
    /// Time constant of the RTT estimate's decay (default 10 s).
    pub decay: Duration,
    /// The RTT a failed call records at least (default 5 s).
    pub failure_penalty: Duration,
    /// How long a new backend ramps up (default 30 s; zero = off).
    pub slow_start: Duration,
    /// The RTT assumed for a backend before any sample when no other
    /// backend has one either (default 100 ms).
    pub default_rtt: Duration,
    /// Retries allowed as a share of the picks of the last 10 s (default 0.2).
    pub retry_ratio: f64,
    /// Retries allowed per second on top of the share (default 10).
    pub retry_min_per_sec: f64,
}

impl Default for BalancerConfig {
    fn default() -> Self {
        Self {
            decay: Duration::from_secs(10),
            failure_penalty: Duration::from_secs(5),
            slow_start: Duration::from_secs(30),
            default_rtt: Duration::from_millis(100),
            retry_ratio: 0.2,
            retry_min_per_sec: 10.0,
        }
    }
}

impl BalancerConfig {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn decay(mut self, d: Duration) -> Self {
        self.decay = d;
        self
    }

    pub fn failure_penalty(mut self, d: Duration) -> Self {
        self.failure_penalty = d;
        self
    }

    pub fn slow_start(mut self, d: Duration) -> Self {
        self.slow_start = d;
        self
    }

    pub fn default_rtt(mut self, d: Duration) -> Self {
        self.default_rtt = d;
        self
    }

    pub fn retry_budget(mut self, ratio: f64, min_per_sec: f64) -> Self {
        self.retry_ratio = ratio;
        self.retry_min_per_sec = min_per_sec;
        self
    }

    /// The stored form, after checking every field.
    pub(crate) fn params(&self) -> Result<Params> {
        let ms = |d: Duration, what: &str, min: u64, max: u64| {
            let v = d.as_millis().min(u64::MAX as u128) as u64;
            if (min..=max).contains(&v) {
                Ok(v)
            } else {
                Err(Error::invalid(format!(
                    "{what} must be {min} ms to {max} ms, not {d:?}"
                )))
            }
        };
        let hour = 3_600_000;
        let default_rtt_us = self.default_rtt.as_micros().min(u64::MAX as u128) as u64;
        if !(1..=60_000_000).contains(&default_rtt_us) {
            return Err(Error::invalid(format!(
                "default_rtt must be 1 µs to 60 s, not {:?}",
                self.default_rtt
            )));
        }
        let share = |v: f64, what: &str, max: f64| {
            if v.is_finite() && (0.0..=max).contains(&v) {
                Ok(v)
            } else {
                Err(Error::invalid(format!(
                    "{what} must be 0 to {max}, not {}",
                    crate::words::num(v)
                )))
            }
        };
        Ok(Params {
            decay_ms: ms(self.decay, "decay", 1, hour)?,
            penalty_ms: ms(self.failure_penalty, "failure_penalty", 1, 300_000)?,
            slow_start_ms: ms(self.slow_start, "slow_start", 0, hour)?,
            default_rtt_us,
            retry_ratio: share(self.retry_ratio, "retry_ratio", 10.0)?,
            retry_min_per_sec: share(self.retry_min_per_sec, "retry_min_per_sec", 1e6)?,
        })
    }
}

/// The configuration as the table holds it (`BalancerSlot::config`, words
/// 0–5 in field order).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Params {
    pub decay_ms: u64,
    pub penalty_ms: u64,
    pub slow_start_ms: u64,
    pub default_rtt_us: u64,
    pub retry_ratio: f64,
    pub retry_min_per_sec: f64,
}

impl Params {
    pub(crate) fn store(&self, slot: &BalancerSlot) {
        let words = [
            self.decay_ms,
            self.penalty_ms,
            self.slow_start_ms,
            self.default_rtt_us,
            self.retry_ratio.to_bits(),
            self.retry_min_per_sec.to_bits(),
        ];
        for (w, v) in slot.config.iter().zip(words) {
            w.store(v, Ordering::Relaxed);
        }
    }

    /// Reads the stored configuration, forcing each word into its range: a
    /// damaged word gives odd balancing, never a division by zero.
    pub(crate) fn load(slot: &BalancerSlot) -> Self {
        let w = |i: usize| slot.config[i].load(Ordering::Relaxed);
        let share = |bits: u64, max: f64| {
            let v = f64::from_bits(bits);
            if v.is_finite() {
                v.clamp(0.0, max)
            } else {
                0.0
            }
        };
        Self {
            decay_ms: w(0).clamp(1, 3_600_000),
            penalty_ms: w(1).clamp(1, 300_000),
            slow_start_ms: w(2).min(3_600_000),
            default_rtt_us: w(3).clamp(1, 60_000_000),
            retry_ratio: share(w(4), 10.0),
            retry_min_per_sec: share(w(5), 1e6),
        }
    }

    pub(crate) fn config(&self) -> BalancerConfig {
        BalancerConfig {
            decay: Duration::from_millis(self.decay_ms),
            failure_penalty: Duration::from_millis(self.penalty_ms),
            slow_start: Duration::from_millis(self.slow_start_ms),
            default_rtt: Duration::from_micros(self.default_rtt_us),
            retry_ratio: self.retry_ratio,
            retry_min_per_sec: self.retry_min_per_sec,
        }
    }
}

/// Refuses a registration that asks for another configuration than the one
/// the balancer has.
pub(crate) fn check_matches(name: &str, stored: Params, asked: Params) -> Result<()> {
    if stored == asked {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::ConfigMismatch,
        format!(
            "balancer {name:?} is registered with {:?}, not {:?}",
            stored.config(),
            asked.config()
        ),
    ))
}
