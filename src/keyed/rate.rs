//! The rates of a key: a rate on the host ([`KeyRate`], GCRA) and a rate
//! across the fleet ([`KeyGlobal`], slices of the store's clock), as
//! values, with their text forms and their checks.

use std::time::Duration;

use crate::error::{Error, Result};

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

    pub(super) fn validate(&self) -> Result<()> {
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
        let secs = period_secs(per).map_err(bad)?;
        let rate = Self::new(count, Duration::from_secs_f64(secs));
        rate.validate().map_err(|e| bad(e.message()))?;
        Ok(rate)
    }
}

/// `[n]unit` (`s`, `2m`, `1.5s`, `500ms`) in seconds: above 0, at most a
/// year.
fn period_secs(text: &str) -> std::result::Result<f64, &'static str> {
    let per = text.trim();
    let split = per
        .find(|c: char| c.is_ascii_alphabetic())
        .ok_or("no unit")?;
    let (n, unit) = per.split_at(split);
    let n: f64 = if n.trim().is_empty() {
        1.0
    } else {
        n.trim().parse().map_err(|_| "the period is not a number")?
    };
    let unit_secs = match unit.to_ascii_lowercase().as_str() {
        "ms" | "millisecond" | "milliseconds" => 0.001,
        "s" | "sec" | "second" | "seconds" => 1.0,
        "m" | "min" | "minute" | "minutes" => 60.0,
        "h" | "hour" | "hours" => 3600.0,
        "d" | "day" | "days" => 86_400.0,
        _ => return Err("unknown unit"),
    };
    if !(n.is_finite() && n > 0.0 && n * unit_secs <= 366.0 * 86_400.0) {
        return Err("the period is out of range");
    }
    Ok(n * unit_secs)
}

/// A rate's period as its text writes it: `s`, `m`, `h`, `d` for one
/// unit, else whole seconds (`120s`) or ms.
fn period_text(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        1000 => "s".to_string(),
        60_000 => "m".to_string(),
        3_600_000 => "h".to_string(),
        86_400_000 => "d".to_string(),
        _ if ms.is_multiple_of(1000) => format!("{}s", ms / 1000),
        _ => format!("{ms}ms"),
    }
}

/// A slice as [`KeyGlobal::parse_slice`] reads it: in its largest whole
/// unit (`1d`, `2h`, `1m`, `90s`, `500ms`).
pub(crate) fn slice_text(d: Duration) -> String {
    let ms = d.as_millis();
    [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
    ]
    .into_iter()
    .find(|(unit, _)| ms != 0 && ms.is_multiple_of(*unit))
    .map_or(format!("{ms}ms"), |(unit, name)| {
        format!("{}{name}", ms / unit)
    })
}

impl std::fmt::Display for KeyRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.count, period_text(self.period))?;
        if self.burst != 0 {
            write!(f, " burst {}", self.burst)?;
        }
        Ok(())
    }
}

/// A key's rate across every host of the fleet: `rate.count` per
/// `rate.period`, kept in slices of the store's clock (see
/// `docs/guide/limits-per-caller.md`, "Global rates per key").
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
    /// slice ÷ the hosts the store last counted; at least `local` unless
    /// the store listed the key as spread), `Local` (the key's local limits
    /// alone) or `Deny`.
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

    /// The slice in force as [`KeyGlobal::parse_slice`] reads it, in its
    /// largest whole unit (`1m`, `500ms`).
    pub fn slice_text(&self) -> String {
        slice_text(self.slice_in_force())
    }

    /// Permits of one slice, fleet-wide.
    pub fn permits(&self) -> u64 {
        let ratio = self.slice_in_force().as_secs_f64() / self.rate.period.as_secs_f64();
        ((self.rate.count * ratio + 1e-9).floor() as u64).max(1)
    }

    /// A slice as text: `1s`, `500ms`, `1m`, `1h`, `1.5s` (`[n]unit`, the
    /// units of a rate's period), whole milliseconds; as [`Display`]
    /// writes it. Its range is checked with the rest (10 ms to a day).
    ///
    /// [`Display`]: std::fmt::Display
    pub fn parse_slice(text: &str) -> Result<Duration> {
        let bad = |why: &str| {
            Error::invalid(format!(
                "key global slice {:?}: {why} (expected e.g. \"1s\", \"500ms\" or \"1h\")",
                shorten(text)
            ))
        };
        let ms = period_secs(text).map_err(bad)? * 1000.0;
        if (ms - ms.round()).abs() > 1e-6 {
            return Err(bad("not whole milliseconds"));
        }
        Ok(Duration::from_millis(ms.round() as u64))
    }

    /// A rate from its texts, as the config file and the store's record
    /// write them (`key_global`, `key_global_slice`, `_local`, `_fallback`),
    /// checked whole; on a refusal, the field to blame and why.
    pub(crate) fn from_fields(
        rate: &str,
        slice: Option<&str>,
        local: Option<i64>,
        fallback: Option<&str>,
    ) -> std::result::Result<Self, (&'static str, Error)> {
        let mut g = Self::new(KeyRate::parse(rate).map_err(|e| ("key_global", e))?);
        if let Some(slice) = slice {
            g = g.slice(Self::parse_slice(slice).map_err(|e| ("key_global_slice", e))?);
        }
        if let Some(n) = local {
            g.local = u32::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_LOCAL)
                .ok_or_else(|| {
                    let why =
                        format!("key_global_local is 0 to {MAX_LOCAL} requests a slice, not {n}");
                    ("key_global_local", Error::invalid(why))
                })?;
        }
        if let Some(f) = fallback {
            g.fallback = Self::parse_fallback(f).map_err(|e| ("key_global_fallback", e))?;
        }
        // The checks of the whole: the slice's range, its permits.
        let blamed = if slice.is_some() {
            "key_global_slice"
        } else {
            "key_global"
        };
        super::KeyLimits::new()
            .global(g)
            .validate()
            .map_err(|e| (blamed, e))?;
        Ok(g)
    }

    /// A fallback as text: `share`, `local` or `deny`.
    pub fn parse_fallback(text: &str) -> Result<crate::Fallback> {
        match text.trim() {
            "share" => Ok(crate::Fallback::Share),
            "local" => Ok(crate::Fallback::Local),
            "deny" => Ok(crate::Fallback::Deny),
            other => Err(Error::invalid(format!(
                "a key's global fallback is \"share\", \"local\" or \"deny\", not {:?}",
                shorten(other)
            ))),
        }
    }

    pub(super) fn validate(&self) -> Result<()> {
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
                "a key's global rate of {} gives {permits:.3} permits per slice of {slice:?}: \
                 a slice needs 1 to 2^31 (make the slice longer or shorter)",
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

    pub(super) fn fallback_code(&self) -> u64 {
        match self.fallback {
            crate::Fallback::Local => FALLBACK_LOCAL,
            crate::Fallback::Deny => FALLBACK_DENY,
            _ => FALLBACK_SHARE,
        }
    }
}

/// `1000/h slice 1m local 1 fallback share`: the slice in force, in the
/// text [`KeyGlobal::parse_slice`] reads.
impl std::fmt::Display for KeyGlobal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} slice {} local {} fallback {}",
            self.rate,
            slice_text(self.slice_in_force()),
            self.local,
            self.fallback
        )
    }
}

/// A global rate's fallback in its copy (bits 40..42 of `global`).
pub(crate) const FALLBACK_SHARE: u64 = 0;
pub(crate) const FALLBACK_LOCAL: u64 = 1;
pub(crate) const FALLBACK_DENY: u64 = 2;

#[cfg(test)]
#[path = "rate_tests.rs"]
mod tests;
