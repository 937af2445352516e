//! A task's global-quota configuration: what is asked, what is in force,
//! and the checks that turn the one into the other.

use crate::error::{Error, Result};
use crate::format::{Fallback, Global, MAX_SHARDS, MAX_SLICE_MS, MAX_SLICE_QUOTA, MIN_SLICE_MS};

/// The global fields asked for when registering or updating a task; `None`
/// keeps the current value (or the default) and is not compared.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GlobalConfig {
    /// Requests per second for the whole cluster, pulled in chunks from the
    /// table's store; 0 = no global limit. Default 0.
    pub global_rate: Option<f64>,
    /// Length of a global-quota slice in ms, 100..=60000. Default 1000.
    pub slice_ms: Option<u32>,
    /// Permits per pull; 0 = adaptive (from the host's recent rate and the
    /// time left in the slice). Default 0.
    pub chunk: Option<u32>,
    /// What the host admits while the store is failing. Default
    /// [`Fallback::Share`].
    pub fallback: Option<Fallback>,
    /// Permits a slice releases at once, cluster-wide; the rest is released
    /// evenly over the slice. 0 = the default, 250 ms of `global_rate`.
    pub global_burst: Option<u32>,
    /// Store keys each slice's quota is spread over, 1..=6 (a hot task on a
    /// Redis Cluster: the keys have their own hash tags, hence nodes). Every
    /// host of a task must spread it alike: set it in the task's store
    /// record. Default 1 (the keys of earlier releases).
    pub shards: Option<u32>,
}

/// A task's global fields in force.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GlobalSettings {
    pub global_rate: f64,
    pub slice_ms: u32,
    pub chunk: u32,
    pub fallback: Fallback,
    /// 0 = the default (250 ms of `global_rate`).
    pub global_burst: u32,
    pub shards: u32,
}

impl Default for GlobalSettings {
    fn default() -> Self {
        Self {
            global_rate: 0.0,
            slice_ms: 1000,
            chunk: 0,
            fallback: Fallback::Share,
            global_burst: 0,
            shards: 1,
        }
    }
}

impl GlobalConfig {
    /// These fields over `base`'s.
    pub(crate) fn over(&self, base: GlobalSettings) -> GlobalSettings {
        GlobalSettings {
            global_rate: self.global_rate.unwrap_or(base.global_rate),
            slice_ms: self.slice_ms.unwrap_or(base.slice_ms),
            chunk: self.chunk.unwrap_or(base.chunk),
            fallback: self.fallback.map_or(base.fallback, Fallback::normalized),
            global_burst: self.global_burst.unwrap_or(base.global_burst),
            shards: self.shards.unwrap_or(base.shards),
        }
    }

    /// Describes the fields that differ from `settings`.
    pub(crate) fn mismatches(&self, s: &GlobalSettings, out: &mut Vec<String>) {
        if let Some(r) = self.global_rate.filter(|r| *r != s.global_rate) {
            out.push(format!("global_rate {} (asked {r})", s.global_rate));
        }
        if let Some(v) = self.slice_ms.filter(|v| *v != s.slice_ms) {
            out.push(format!("slice_ms {} (asked {v})", s.slice_ms));
        }
        if let Some(c) = self.chunk.filter(|c| *c != s.chunk) {
            out.push(format!("chunk {} (asked {c})", s.chunk));
        }
        if let Some(f) = self
            .fallback
            .map(Fallback::normalized)
            .filter(|f| *f != s.fallback)
        {
            out.push(format!("fallback {} (asked {f})", s.fallback));
        }
        if let Some(b) = self.global_burst.filter(|b| *b != s.global_burst) {
            out.push(format!("global_burst {} (asked {b})", s.global_burst));
        }
        if let Some(n) = self.shards.filter(|n| *n != s.shards) {
            out.push(format!("shards {} (asked {n})", s.shards));
        }
    }
}

impl GlobalSettings {
    /// Checks the fields; `None` when there is no global limit.
    pub(crate) fn validate(&self) -> Result<Option<Global>> {
        if !(MIN_SLICE_MS..=MAX_SLICE_MS).contains(&self.slice_ms) {
            return Err(Error::invalid(format!(
                "slice_ms must be {MIN_SLICE_MS}..={MAX_SLICE_MS}, not {}",
                self.slice_ms
            )));
        }
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            return Err(Error::invalid(format!(
                "shards must be 1..={MAX_SHARDS}, not {}",
                self.shards
            )));
        }
        let fallback_rate = match self.fallback {
            Fallback::Rate(r) => r,
            _ => 0.0,
        };
        for (name, rate) in [
            ("global_rate", self.global_rate),
            ("fallback_rate", fallback_rate),
        ] {
            if !rate.is_finite() || rate < 0.0 {
                return Err(Error::invalid(format!(
                    "{name} must be 0 or a positive number of requests/s, not {}",
                    crate::words::num(rate)
                )));
            }
        }
        if self.global_rate == 0.0 {
            return Ok(None);
        }
        let quota = (self.global_rate * self.slice_ms as f64 / 1000.0).floor();
        if !(1.0..=MAX_SLICE_QUOTA as f64).contains(&quota) {
            return Err(Error::invalid(format!(
                "global_rate {} × slice_ms {} gives {} permits per slice: \
                 it must be 1..={MAX_SLICE_QUOTA}",
                crate::words::num(self.global_rate),
                self.slice_ms,
                crate::words::num(quota)
            )));
        }
        if self.chunk > quota as u32 {
            return Err(Error::invalid(format!(
                "chunk {} is larger than a slice's quota of {quota}",
                self.chunk
            )));
        }
        if (self.shards as f64) > quota {
            return Err(Error::invalid(format!(
                "shards {} is more than a slice's quota of {quota}: a shard needs a permit",
                self.shards
            )));
        }
        if self.global_burst > quota as u32 {
            return Err(Error::invalid(format!(
                "global_burst {} is larger than a slice's quota of {quota}",
                self.global_burst
            )));
        }
        Ok(Some(Global {
            rate: self.global_rate,
            quota: quota as u32,
            slice_ms: self.slice_ms,
            chunk: self.chunk,
            fallback: self.fallback.normalized(),
            global_burst: self.global_burst,
            shards: self.shards,
        }))
    }

    /// The settings a stored global limit stands for (`None`: the defaults).
    pub(crate) fn of(global: Option<Global>) -> Self {
        global.map_or_else(Self::default, |g| Self {
            global_rate: g.rate,
            slice_ms: g.slice_ms,
            chunk: g.chunk,
            fallback: g.fallback,
            global_burst: g.global_burst,
            shards: g.shards,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_checked() {
        let with = |shards, rate| GlobalSettings {
            global_rate: rate,
            shards,
            ..GlobalSettings::default()
        };
        assert_eq!(with(3, 1000.0).validate().unwrap().unwrap().shards, 3);
        for (bad, says) in [(0, "1..=6"), (7, "1..=6")] {
            let err = with(bad, 1000.0).validate().unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
        let err = with(6, 5.0).validate().unwrap_err().to_string();
        assert!(err.contains("a shard needs a permit"), "{err}");
    }
}
