//! What a task is configured with: its own local limits, composed with the
//! global quota's fields (`quota::GlobalConfig`) and the limiter's
//! (`limit::adaptive::LimiterConfig`), each validated by its owner. How the
//! whole is kept in the slot is `stored`'s.

use crate::clock::Clock;
use crate::error::{Error, ErrorKind, Result};
use crate::format::{self, Global, Local};
use crate::limit::adaptive::{LimiterConfig, Spec as LimiterSpec};
use crate::limit::gcra::Gcra;
use crate::limit::ledger::MAX_COUNT;
use crate::quota::{GlobalConfig, GlobalSettings, GlobalSource};
use crate::words::WaitOrder;

/// The local fields asked for; `None` keeps the current value (or the
/// default) and is not compared.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LocalConfig {
    /// Requests per second for the whole host, fractional allowed; 0 = no
    /// local rate limit. Default 0.
    pub local_rate: Option<f64>,
    /// Permits that may be taken at once above the smooth rate. Default 1.
    pub burst: Option<u32>,
    /// Permits in flight on the host at most, at least 1; [`NO_CAP`] asks
    /// for no cap (the default). 0 is refused: it reads as "no traffic" as
    /// well as "no cap".
    pub max_concurrency: Option<u32>,
    /// The order waiting acquires are admitted in. Default first come,
    /// first served.
    pub wait_order: Option<WaitOrder>,
    /// Whether a non-waiting acquire may take a permit while others wait
    /// for one (throughput first). Default false: it is refused.
    pub barging: Option<bool>,
    /// Shadow mode: a request the task's own limits would refuse is
    /// counted (`TaskStats::shadow_refused`) and admitted. Default false.
    pub shadow: Option<bool>,
}

/// `max_concurrency` (of a task or a key) asked as "no cap": what `none`
/// or `off` in a config file or `flowctrl set` means, `FC_NO_CAP` in C.
/// The settings in force report no cap as 0.
pub const NO_CAP: u32 = 0xFFFF_FFFE;

/// Why an asked `max_concurrency` of 0 is refused, in every face.
pub(crate) fn zero_cap(key: &str) -> Error {
    Error::invalid(format!(
        "{key} 0 is refused: a cap is at least 1; to remove the cap ask for none \
         (`{key} = none` or `off` in a config file or flowctrl set, FC_NO_CAP in C, \
         NO_CAP = {NO_CAP} in Rust and Python)"
    ))
}

/// A cap as written by an operator: a whole number of at least 1, or
/// `none` / `off` ([`NO_CAP`]). `key` names it in the error.
pub fn parse_cap(key: &str, text: &str) -> Result<u32> {
    match text.trim() {
        "none" | "off" => Ok(NO_CAP),
        "0" => Err(zero_cap(key)),
        t => match t.parse::<u32>() {
            Ok(n) if n != NO_CAP => Ok(n),
            _ => Err(Error::invalid(format!(
                "{key}={} is not a whole number of at least 1, nor none or off",
                crate::words::echo(t)
            ))),
        },
    }
}

/// A task's local fields in force.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LocalSettings {
    pub local_rate: f64,
    pub burst: u32,
    pub max_concurrency: u32,
    pub wait_order: WaitOrder,
    pub barging: bool,
    pub shadow: bool,
}

impl Default for LocalSettings {
    fn default() -> Self {
        Self {
            local_rate: 0.0,
            burst: 1,
            max_concurrency: 0,
            wait_order: WaitOrder::Fifo,
            barging: false,
            shadow: false,
        }
    }
}

impl LocalSettings {
    /// The wait fields as the task slot's policy word.
    pub(crate) fn wait_policy(&self) -> u64 {
        (if self.wait_order == WaitOrder::Lifo {
            format::WAIT_LIFO
        } else {
            0
        }) | if self.barging {
            format::WAIT_BARGING
        } else {
            0
        } | if self.shadow {
            format::POLICY_SHADOW
        } else {
            0
        }
    }
}

/// The configuration asked for when registering or updating a task: one
/// part per mechanism. Fields left `None` keep their current value (or the
/// default for a new task) and are not compared with an existing
/// registration.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TaskConfig {
    pub local: LocalConfig,
    pub global: GlobalConfig,
    pub limiter: LimiterConfig,
}

/// A task's effective configuration, as every process on the host sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TaskSettings {
    pub local: LocalSettings,
    pub global: GlobalSettings,
    /// The limiter with its bounds (`min`, `max`, `initial`).
    pub limiter: LimiterSpec,
    /// Where `global` comes from: this host's configuration, or the task's
    /// record in the store (which wins while it exists).
    pub global_source: GlobalSource,
}

impl Default for TaskSettings {
    fn default() -> Self {
        Self {
            local: LocalSettings::default(),
            global: GlobalSettings::default(),
            limiter: LimiterSpec::fixed(),
            global_source: GlobalSource::Local,
        }
    }
}

impl TaskConfig {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn local_rate(mut self, per_second: f64) -> Self {
        self.local.local_rate = Some(per_second);
        self
    }

    pub fn burst(mut self, permits: u32) -> Self {
        self.local.burst = Some(permits);
        self
    }

    /// Permits in flight on the host at most: at least 1 ([`NO_CAP`]: no
    /// cap; 0 is refused when the configuration is used).
    pub fn max_concurrency(mut self, permits: u32) -> Self {
        self.local.max_concurrency = Some(permits);
        self
    }

    /// No cap on permits in flight (removes one in force).
    pub fn no_max_concurrency(self) -> Self {
        self.max_concurrency(NO_CAP)
    }

    /// The checks of the fields as asked, before they are merged with
    /// anything: an asked `max_concurrency` of 0 is refused.
    pub(crate) fn check_asked(&self) -> Result<()> {
        if self.local.max_concurrency == Some(0) {
            return Err(zero_cap("max_concurrency"));
        }
        Ok(())
    }

    /// The settings these fields make over `base`, checked as an update of
    /// a task with those settings checks them; nothing is written. What
    /// `flowctrl set --dry-run` reports.
    pub fn preview(&self, base: &TaskSettings) -> Result<TaskSettings> {
        self.check_asked()?;
        let settings = self.over(*base);
        settings.limits(&Clock::monotonic())?;
        Ok(settings)
    }

    /// The order waiting acquires are admitted in (default
    /// [`WaitOrder::Fifo`]).
    pub fn wait_order(mut self, order: WaitOrder) -> Self {
        self.local.wait_order = Some(order);
        self
    }

    /// Lets a non-waiting acquire take a free permit while others wait
    /// (default false: while anyone waits, it is refused).
    pub fn barging(mut self, on: bool) -> Self {
        self.local.barging = Some(on);
        self
    }

    /// Shadow mode: refusals by the task's own limits are counted and
    /// admitted (a limit rolled out safely).
    pub fn shadow(mut self, on: bool) -> Self {
        self.local.shadow = Some(on);
        self
    }

    pub fn global_rate(mut self, per_second: f64) -> Self {
        self.global.global_rate = Some(per_second);
        self
    }

    pub fn slice_ms(mut self, ms: u32) -> Self {
        self.global.slice_ms = Some(ms);
        self
    }

    pub fn chunk(mut self, permits: u32) -> Self {
        self.global.chunk = Some(permits);
        self
    }

    /// What the host admits while the store fails (default
    /// [`crate::Fallback::Share`]).
    pub fn fallback(mut self, policy: crate::quota::Fallback) -> Self {
        self.global.fallback = Some(policy);
        self
    }

    /// Permits a slice releases at once, cluster-wide (0 = 250 ms of the
    /// global rate); the rest is released evenly over the slice.
    pub fn global_burst(mut self, permits: u32) -> Self {
        self.global.global_burst = Some(permits);
        self
    }

    /// Spreads each slice's quota over `n` store keys (1..=6) with their
    /// own hash tags: on a Redis Cluster, a hot task's pulls are not bound
    /// by one node. Every host of the task must agree (set it in the store
    /// record).
    pub fn shards(mut self, n: u32) -> Self {
        self.global.shards = Some(n);
        self
    }

    /// `fallback(Fallback::Rate(per_second))`; 0 = the default policy.
    pub fn fallback_rate(self, per_second: f64) -> Self {
        self.fallback(crate::quota::Fallback::Rate(per_second))
    }

    /// The limiter, e.g. `LimiterSpec::parse("auto")?`.
    pub fn limiter(mut self, spec: LimiterSpec) -> Self {
        self.limiter.spec = Some(spec);
        self
    }

    pub fn min_limit(mut self, permits: u32) -> Self {
        self.limiter.min_limit = Some(permits);
        self
    }

    pub fn max_limit(mut self, permits: u32) -> Self {
        self.limiter.max_limit = Some(permits);
        self
    }

    pub fn initial_limit(mut self, permits: u32) -> Self {
        self.limiter.initial_limit = Some(permits);
        self
    }

    /// These fields over `base`'s.
    pub(crate) fn over(&self, base: TaskSettings) -> TaskSettings {
        let l = &self.local;
        TaskSettings {
            local: LocalSettings {
                local_rate: l.local_rate.unwrap_or(base.local.local_rate),
                burst: l.burst.unwrap_or(base.local.burst),
                max_concurrency: match l.max_concurrency {
                    Some(NO_CAP) => 0,
                    asked => asked.unwrap_or(base.local.max_concurrency),
                },
                wait_order: l.wait_order.unwrap_or(base.local.wait_order),
                barging: l.barging.unwrap_or(base.local.barging),
                shadow: l.shadow.unwrap_or(base.local.shadow),
            },
            global: self.global.over(base.global),
            limiter: self.limiter.over(base.limiter),
            global_source: base.global_source,
        }
    }
}

/// What the request path needs of the configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Limits {
    pub local: Local,
    pub global: Option<Global>,
}

impl LocalSettings {
    /// Checks the local fields and turns them into clock ticks.
    fn validate(&self, clock: &Clock) -> Result<Local> {
        if self.burst == 0 {
            return Err(Error::invalid("burst must be at least 1"));
        }
        if self.max_concurrency as u64 > MAX_COUNT {
            return Err(Error::invalid(format!(
                "max_concurrency must be at most {MAX_COUNT}, not {}",
                self.max_concurrency
            )));
        }
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
        Ok(Local {
            interval,
            rate: self.local_rate,
            burst: self.burst,
            cap: self.max_concurrency,
        })
    }

    fn mismatches(&self, asked: &LocalConfig, out: &mut Vec<String>) {
        if let Some(r) = asked.local_rate.filter(|r| *r != self.local_rate) {
            out.push(format!("local_rate {} (asked {r})", self.local_rate));
        }
        if let Some(b) = asked.burst.filter(|b| *b != self.burst) {
            out.push(format!("burst {} (asked {b})", self.burst));
        }
        let cap = asked
            .max_concurrency
            .map(|c| if c == NO_CAP { 0 } else { c });
        if let Some(c) = cap.filter(|c| *c != self.max_concurrency) {
            out.push(format!(
                "max_concurrency {} (asked {c})",
                self.max_concurrency
            ));
        }
        if let Some(o) = asked.wait_order.filter(|o| *o != self.wait_order) {
            out.push(format!(
                "wait_order {} (asked {})",
                self.wait_order.name(),
                o.name()
            ));
        }
        if let Some(b) = asked.barging.filter(|b| *b != self.barging) {
            out.push(format!("barging {} (asked {b})", self.barging));
        }
        if let Some(b) = asked.shadow.filter(|b| *b != self.shadow) {
            out.push(format!("shadow {} (asked {b})", self.shadow));
        }
    }
}

impl TaskSettings {
    /// Checks a whole configuration, each part by its owner.
    pub(crate) fn limits(&self, clock: &Clock) -> Result<Limits> {
        let local = self.local.validate(clock)?;
        self.limiter.validate()?;
        Ok(Limits {
            local,
            global: self.global.validate()?,
        })
    }

    /// The fields of `asked` that differ from these settings, described.
    pub(crate) fn mismatches(&self, asked: &TaskConfig) -> Vec<String> {
        let mut out = Vec::new();
        self.local.mismatches(&asked.local, &mut out);
        asked.global.mismatches(&self.global, &mut out);
        asked.limiter.mismatches(&self.limiter, &mut out);
        out
    }
}

/// The GCRA emission interval for `rate` requests/s, in clock ticks (0 for no
/// limit). A rate must leave at least one tick between permits.
fn interval_for(rate: f64, clock: &Clock) -> Result<u64> {
    if rate == 0.0 {
        return Ok(0);
    }
    let ticks = clock.ticks_per_sec();
    let interval = Gcra::interval_of(rate, ticks);
    if !rate.is_finite() || rate < 0.0 || !(1.0..=(1u64 << 62) as f64).contains(&interval) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "local_rate must be 0 (no limit) or between {:.3e} and {:.3e} requests/s, not {}",
                ticks as f64 / (1u64 << 62) as f64,
                ticks as f64,
                crate::words::num(rate)
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
            local: LocalSettings {
                local_rate: 1e-6,
                burst: 10_000,
                ..LocalSettings::default()
            },
            ..TaskSettings::default()
        };
        assert_eq!(
            slow.limits(&clock).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        let mut fine = slow;
        fine.local.burst = 1;
        assert!(fine.limits(&clock).is_ok());
        let mut huge_cap = TaskSettings::default();
        huge_cap.local.max_concurrency = u32::MAX;
        assert!(huge_cap.limits(&clock).is_err());
    }

    #[test]
    fn a_cap_of_0_is_refused_and_none_is_no_cap() {
        for (text, cap) in [("none", NO_CAP), ("off", NO_CAP), (" 12 ", 12)] {
            assert_eq!(parse_cap("max_concurrency", text).unwrap(), cap, "{text}");
        }
        for bad in ["0", "-1", "many", "4294967294", ""] {
            let e = parse_cap("key_max_concurrency", bad).unwrap_err();
            assert!(e.message().contains("key_max_concurrency"), "{bad}: {e}");
        }
        let e = TaskConfig::new()
            .max_concurrency(0)
            .check_asked()
            .unwrap_err();
        assert!(e.message().contains("max_concurrency 0 is refused"), "{e}");
        assert!(TaskConfig::new().no_max_concurrency().check_asked().is_ok());
        // No cap is 0 in force, and matches an uncapped task.
        let mut capped = TaskSettings::default();
        capped.local.max_concurrency = 8;
        let none = TaskConfig::new().no_max_concurrency();
        let settings = none.preview(&capped).unwrap();
        assert_eq!(settings.local.max_concurrency, 0);
        assert!(settings.mismatches(&none).is_empty());
        assert_eq!(capped.mismatches(&none).len(), 1);
        assert!(
            TaskConfig::new()
                .max_concurrency(0)
                .preview(&capped)
                .is_err()
        );
    }

    #[test]
    fn unset_fields_keep_the_base_and_are_not_compared() {
        let settings = TaskConfig::new().burst(5).over(TaskSettings::default());
        let mut expected = TaskSettings::default();
        expected.local.burst = 5;
        assert_eq!(settings, expected);
        assert!(settings.mismatches(&TaskConfig::new()).is_empty());
        assert_eq!(
            settings
                .mismatches(&TaskConfig::new().burst(6).local_rate(0.0))
                .len(),
            1
        );
    }
}
