//! A limiter's configuration: the algorithm, its parameters and its bounds,
//! parsed from a spec string such as `"auto"` or `"gradient2 tolerance=2"`.

use std::fmt;

use super::{aimd, auto, gradient, gradient2, vegas};
use crate::error::{Error, Result};
use crate::limit::ledger::MAX_COUNT;

/// Parameters an algorithm may have.
pub const MAX_PARAMS: usize = 4;

/// Which algorithm sets the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Algorithm {
    /// No adaptation: `max_concurrency` is the cap.
    Fixed = 0,
    Aimd = 1,
    Vegas = 2,
    Gradient2 = 3,
    /// flowctrl's own (see `auto`).
    Auto = 4,
    /// The reference's first gradient limiter.
    Gradient = 5,
}

impl Algorithm {
    pub const ALL: [Algorithm; 6] = [
        Self::Fixed,
        Self::Aimd,
        Self::Vegas,
        Self::Gradient,
        Self::Gradient2,
        Self::Auto,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Fixed => "fixed",
            Self::Aimd => "aimd",
            Self::Vegas => "vegas",
            Self::Gradient => "gradient",
            Self::Gradient2 => "gradient2",
            Self::Auto => "auto",
        }
    }

    pub(crate) fn from_raw(raw: u64) -> Option<Self> {
        Self::ALL.into_iter().find(|a| *a as u64 == raw)
    }

    /// Parameter names and defaults, in storage order. A name starting with
    /// `_` is a retired slot: never parsed, shown or read, always its
    /// default (for tables shared with older versions).
    fn params(self) -> &'static [(&'static str, f64)] {
        match self {
            Self::Fixed => &[],
            Self::Aimd => aimd::PARAMS,
            Self::Vegas => vegas::PARAMS,
            Self::Gradient => gradient::PARAMS,
            Self::Gradient2 => gradient2::PARAMS,
            Self::Auto => auto::PARAMS,
        }
    }

    /// (min, max, initial) limits of the reference implementation.
    pub fn default_bounds(self) -> (u32, u32, u32) {
        match self {
            Self::Fixed => (0, 0, 0),
            Self::Aimd | Self::Gradient2 => (20, 200, 20),
            Self::Vegas => (1, 1000, 20),
            Self::Gradient => (1, 1000, 50),
            Self::Auto => (1, 1000, 4),
        }
    }
}

/// The default window length (ms): long enough for a few RTTs of a typical
/// backend call, short enough to react within a second.
pub const DEFAULT_WINDOW_MS: f64 = 100.0;

/// A whole limiter configuration, valid by construction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spec {
    pub algorithm: Algorithm,
    pub min: u32,
    pub max: u32,
    pub initial: u32,
    /// Window length (ms).
    pub window_ms: f64,
    pub params: [f64; MAX_PARAMS],
}

impl Spec {
    /// No adaptation (the default).
    pub fn fixed() -> Self {
        Self {
            algorithm: Algorithm::Fixed,
            min: 0,
            max: 0,
            initial: 0,
            window_ms: DEFAULT_WINDOW_MS,
            params: [0.0; MAX_PARAMS],
        }
    }

    pub fn is_adaptive(&self) -> bool {
        self.algorithm != Algorithm::Fixed
    }

    /// Parses `"name key=value ..."`; unset parameters take their defaults,
    /// the bounds the algorithm's defaults.
    pub fn parse(text: &str) -> Result<Self> {
        let mut words = text.split_whitespace();
        let name = words.next().unwrap_or("fixed");
        let algorithm = Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "unknown limiter {}: expected one of fixed, aimd, vegas, gradient, gradient2, auto",
                    crate::words::echo(name)
                ))
            })?;
        let names = algorithm.params();
        let mut params = [0.0; MAX_PARAMS];
        for (i, (_, default)) in names.iter().enumerate() {
            params[i] = *default;
        }
        let mut window_ms = DEFAULT_WINDOW_MS;
        for word in words {
            let (key, value) = word.split_once('=').ok_or_else(|| {
                Error::invalid(format!(
                    "limiter {name}: expected key=value, not {}",
                    crate::words::echo(word)
                ))
            })?;
            let value: f64 = value.parse().map_err(|_| {
                Error::invalid(format!(
                    "limiter {name}: {}={} is not a number",
                    crate::words::echo(key),
                    crate::words::echo(value)
                ))
            })?;
            if key == "window" && algorithm != Algorithm::Fixed {
                window_ms = value;
            } else if let Some(i) = names.iter().position(|(n, _)| *n == key && !retired(n)) {
                params[i] = value;
            } else {
                let known: Vec<&str> = names
                    .iter()
                    .map(|(n, _)| *n)
                    .filter(|n| !retired(n))
                    .collect();
                return Err(Error::invalid(format!(
                    "limiter {name} has no parameter {} (it has: window{}{})",
                    crate::words::echo(key),
                    if known.is_empty() { "" } else { ", " },
                    known.join(", ")
                )));
            }
        }
        let (min, max, initial) = algorithm.default_bounds();
        let spec = Self {
            algorithm,
            min,
            max,
            initial,
            window_ms,
            params,
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Whether this spec (as asked) differs from `other` (in force) in its
    /// algorithm, or in a window or parameter it gives a value other than
    /// the default (a default is what an unset field reads as).
    pub(crate) fn differs_where_set(&self, other: &Spec) -> bool {
        let defaults = self.algorithm.params();
        self.algorithm != other.algorithm
            || (self.window_ms != other.window_ms && self.window_ms != DEFAULT_WINDOW_MS)
            || defaults.iter().enumerate().any(|(i, (name, default))| {
                !retired(name) && self.params[i] != other.params[i] && self.params[i] != *default
            })
    }

    /// The same algorithm with other bounds (unchecked; see [`Spec::validate`]).
    pub fn with_bounds(mut self, min: u32, max: u32, initial: u32) -> Self {
        (self.min, self.max, self.initial) = (min, max, initial);
        self
    }

    /// Refuses bounds and parameters the algorithms cannot work with.
    pub fn validate(&self) -> Result<()> {
        let name = self.algorithm.name();
        if self.algorithm == Algorithm::Fixed {
            return Ok(());
        }
        if !(1.0..=60_000.0).contains(&self.window_ms) {
            return Err(Error::invalid(format!(
                "limiter {name}: window must be 1 to 60000 ms, not {}",
                self.window_ms
            )));
        }
        for (i, (key, _)) in self.algorithm.params().iter().enumerate() {
            let v = self.params[i];
            if retired(key) {
                continue;
            }
            let ok = v.is_finite()
                && match (self.algorithm, *key) {
                    (_, "backoff") => v > 0.0 && v < 1.0,
                    (_, "smoothing") => v > 0.0 && v <= 1.0,
                    // 0 = off (see `aimd`).
                    (Algorithm::Aimd, "tolerance" | "baseline_window") => v >= 0.0,
                    (Algorithm::Auto, "tolerance") => v > 1.0 && v <= auto::MAX_TOLERANCE,
                    (_, "tolerance") => v >= 1.0,
                    (_, "queue") => v >= 0.0,
                    _ => v > 0.0,
                };
            if !ok {
                let hint = match (self.algorithm, *key) {
                    (Algorithm::Auto, "tolerance") => {
                        format!(" (above 1, at most {})", auto::MAX_TOLERANCE)
                    }
                    _ => String::new(),
                };
                return Err(Error::invalid(format!(
                    "limiter {name}: {key}={v} is out of range{hint}"
                )));
            }
        }
        if self.algorithm == Algorithm::Aimd {
            aimd::validate(self).map_err(|e| Error::invalid(format!("limiter aimd: {e}")))?;
        }
        if self.algorithm == Algorithm::Vegas && self.params[0] > self.params[1] {
            return Err(Error::invalid(format!(
                "limiter vegas: alpha {} is above beta {}",
                self.params[0], self.params[1]
            )));
        }
        if self.min == 0 || self.min > self.max || self.max as u64 > MAX_COUNT {
            return Err(Error::invalid(format!(
                "limiter {name}: limits need 1 <= min_limit <= max_limit <= {MAX_COUNT}, \
                 not min {} max {}",
                self.min, self.max
            )));
        }
        if !(self.min..=self.max).contains(&self.initial) {
            return Err(Error::invalid(format!(
                "limiter {name}: initial_limit {} is outside [{}, {}]",
                self.initial, self.min, self.max
            )));
        }
        Ok(())
    }

    pub fn param(&self, i: usize) -> f64 {
        self.params[i]
    }

    pub fn window_ns(&self) -> u64 {
        (self.window_ms * 1e6) as u64
    }

    /// Rounds down to whole permits within the bounds.
    pub fn clamp(&self, limit: f64) -> f64 {
        let limit = if limit.is_finite() { limit } else { 0.0 };
        limit.clamp(self.min as f64, self.max.max(self.min) as f64)
    }

    /// The spec string with every parameter, e.g. `"vegas window=100
    /// alpha=3 beta=6 smoothing=1 probe=30"` (bounds are separate fields).
    pub fn canonical(&self) -> String {
        self.to_string()
    }
}

/// A retired parameter slot (see [`Algorithm::params`]).
fn retired(name: &str) -> bool {
    name.starts_with('_')
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.algorithm.name())?;
        if self.algorithm == Algorithm::Fixed {
            return Ok(());
        }
        write!(f, " window={}", self.window_ms)?;
        for (i, (key, _)) in self.algorithm.params().iter().enumerate() {
            if !retired(key) {
                write!(f, " {key}={}", self.params[i])?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_round_trip_and_refuse_bad_input() {
        let s = Spec::parse("gradient2 tolerance=2 window=50").unwrap();
        assert_eq!(s.params[0], 2.0);
        assert_eq!(s.window_ms, 50.0);
        assert_eq!(Spec::parse(&s.canonical()).unwrap(), s);
        for a in Algorithm::ALL {
            let s = Spec::parse(a.name()).unwrap();
            assert_eq!(Spec::parse(&s.canonical()).unwrap(), s, "{a:?}");
            assert_eq!(Algorithm::from_raw(a as u64), Some(a));
        }
        for bad in [
            "bbr",
            "vegas alpha",
            "vegas alpha=x",
            "vegas gamma=1",
            "vegas alpha=NaN",
            "vegas alpha=-1",
            "vegas alpha=7",
            "aimd backoff=1.5",
            "aimd window=0",
            "gradient2 tolerance=0.5",
            "auto window=inf",
            "auto tolerance=1",
            "auto tolerance=4.5",
            "auto baseline_window=2000",
            "auto _baseline_window=2000",
            "aimd tolerance=1.5",
            "aimd baseline_window=2000",
            "aimd tolerance=0.5 baseline_window=100",
            "gradient probe=0",
        ] {
            assert!(Spec::parse(bad).is_err(), "{bad}");
        }
        // 0.3's `auto` (probe_interval, baseline_window, tolerance, backoff)
        // stays valid, with its tolerance; today's `auto` keeps the retired
        // slot at 0.3's default, valid under 0.3's rules (every slot > 0,
        // tolerance >= 1, backoff in (0, 1)).
        let mut old = Spec::parse("auto").unwrap();
        old.params = [3000.0, 2000.0, 1.1, 0.9];
        assert!(old.validate().is_ok());
        assert_eq!((old.param(0), old.param(2)), (3000.0, 1.1));
        let new = Spec::parse("auto").unwrap();
        assert_eq!(new.params, [5000.0, 2000.0, 1.25, 0.9]);
        // Asking `auto` (its defaults) attaches to 0.3's; a value given
        // other than the default is compared.
        assert!(!new.differs_where_set(&old));
        assert!(
            Spec::parse("auto tolerance=2")
                .unwrap()
                .differs_where_set(&old)
        );
        assert!(
            Spec::parse("auto window=50")
                .unwrap()
                .differs_where_set(&old)
        );
        assert!(Spec::parse("vegas").unwrap().differs_where_set(&old));
        assert!(!new.to_string().contains("baseline_window"), "{new}");
        let aimd = Spec::parse("aimd tolerance=1.5 baseline_window=2000").unwrap();
        assert_eq!(aimd.params[2..], [1.5, 2000.0]);
        let err = Spec::parse("auto tolerance=9").unwrap_err().to_string();
        assert!(
            err.contains("tolerance=9 is out of range (above 1"),
            "{err}"
        );
        let s = Spec::parse("auto").unwrap();
        assert!(s.with_bounds(5, 4, 5).validate().is_err());
        assert!(s.with_bounds(0, 4, 1).validate().is_err());
        assert!(s.with_bounds(1, 4, 9).validate().is_err());
        assert!(s.with_bounds(1, u32::MAX, 9).validate().is_err());
        assert!(s.with_bounds(1, 4, 4).validate().is_ok());
    }
}
