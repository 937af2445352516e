//! The host-wide clock every decision is taken against.
//!
//! Timestamps live in shared memory (the GCRA's theoretical arrival time), so
//! every process must read the same clock in the same unit. The creator of a
//! table chooses the clock once and records it in the header; every opener
//! uses what the header says.
//!
//! Where the kernel itself uses the TSC as its clocksource (x86_64 with
//! clocksource `tsc`, which the kernel selects only after checking that the
//! counter is invariant) the clock is `rdtsc`, cheaper than `clock_gettime`
//! (measured on our 2-core VMs: ~10 ns against ~23 ns) on a path that reads
//! the clock on every acquire and release. Elsewhere it is `CLOCK_MONOTONIC`
//! in nanoseconds. The TSCs of two CPUs may still disagree by a few
//! microseconds (measured on a VM: up to ~3.6 µs); decisions tolerate that
//! (the GCRA reads the clock after its word), but rates above ~100 k/s with
//! a burst of 1 can see it.

use std::time::Duration;

/// Which counter a table's timestamps come from (stored in the table header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ClockKind {
    /// `CLOCK_MONOTONIC`, one tick per nanosecond.
    Monotonic = 1,
    /// The x86_64 time-stamp counter, ticks at `ticks_per_sec`.
    Tsc = 2,
}

impl ClockKind {
    pub(crate) fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            1 => Some(Self::Monotonic),
            2 if cfg!(target_arch = "x86_64") => Some(Self::Tsc),
            _ => None,
        }
    }
}

/// A calibrated clock: reads ticks, converts tick spans to nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    kind: ClockKind,
    ticks_per_sec: u64,
    /// Nanoseconds per tick as a 32.32 fixed-point factor.
    ns_per_tick_q32: u64,
}

impl Clock {
    /// The best clock for a new table on this host.
    pub fn detect() -> Self {
        if cfg!(target_arch = "x86_64") && !sim::active() && kernel_trusts_tsc() {
            Self::new(ClockKind::Tsc, calibrate_tsc())
        } else {
            Self::monotonic()
        }
    }

    pub fn monotonic() -> Self {
        Self::new(ClockKind::Monotonic, 1_000_000_000)
    }

    pub(crate) fn new(kind: ClockKind, ticks_per_sec: u64) -> Self {
        let ticks_per_sec = ticks_per_sec.max(1);
        let ns_per_tick_q32 = ((1_000_000_000u128 << 32) / ticks_per_sec as u128) as u64;
        Self {
            kind,
            ticks_per_sec,
            ns_per_tick_q32,
        }
    }

    pub fn kind(&self) -> ClockKind {
        self.kind
    }

    pub fn ticks_per_sec(&self) -> u64 {
        self.ticks_per_sec
    }

    #[inline(always)]
    pub fn now(&self) -> u64 {
        match self.kind {
            ClockKind::Tsc => read_tsc(),
            ClockKind::Monotonic => monotonic_ns(),
        }
    }

    /// Converts a span of ticks to nanoseconds.
    #[inline]
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        ((ticks as u128 * self.ns_per_tick_q32 as u128) >> 32) as u64
    }

    /// Converts a duration to ticks, saturating.
    pub fn duration_to_ticks(&self, d: Duration) -> u64 {
        let ticks = d.as_nanos() * self.ticks_per_sec as u128 / 1_000_000_000;
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }
}

#[inline(always)]
fn read_tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86_64.
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_ns()
    }
}

#[inline]
pub(crate) fn monotonic_ns() -> u64 {
    #[cfg(feature = "sim")]
    if let Some(us) = sim::now_us() {
        return us as u64 * 1000;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The simulator's clock (feature `sim`, the `sim/` crate): one instant, µs
/// since the Unix epoch, that every clock of the process reads while it is
/// set (tables created meanwhile take `CLOCK_MONOTONIC`, which reads it).
/// Without the feature nothing is compiled in: no read is added anywhere.
#[doc(hidden)]
pub mod sim {
    #[cfg(feature = "sim")]
    static NOW_US: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

    /// Sets the simulated instant (0: the real clocks again).
    #[cfg(feature = "sim")]
    pub fn set_now_us(us: i64) {
        NOW_US.store(us.max(0), std::sync::atomic::Ordering::Relaxed);
    }

    /// The simulated instant, if one is set.
    #[cfg(feature = "sim")]
    #[inline]
    pub(crate) fn now_us() -> Option<i64> {
        match NOW_US.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            us => Some(us),
        }
    }

    pub(crate) fn active() -> bool {
        #[cfg(feature = "sim")]
        return now_us().is_some();
        #[cfg(not(feature = "sim"))]
        false
    }
}

fn kernel_trusts_tsc() -> bool {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .map(|s| s.trim() == "tsc")
        .unwrap_or(false)
}

/// Measures the TSC frequency against `CLOCK_MONOTONIC` over ~10 ms.
/// The error is a few parts per million, far below what a rate limit notices.
fn calibrate_tsc() -> u64 {
    let (ns0, tsc0) = paired_sample();
    let (mut ns1, mut tsc1);
    loop {
        (ns1, tsc1) = paired_sample();
        if ns1 - ns0 >= 10_000_000 {
            break;
        }
        std::hint::spin_loop();
    }
    ((tsc1 - tsc0) as u128 * 1_000_000_000 / (ns1 - ns0) as u128) as u64
}

/// A (monotonic ns, tsc) pair taken as close together as possible: the TSC is
/// read on both sides of `clock_gettime` and the tightest of a few tries wins.
fn paired_sample() -> (u64, u64) {
    let mut best = (0, 0, u64::MAX);
    for _ in 0..5 {
        let a = read_tsc();
        let ns = monotonic_ns();
        let b = read_tsc();
        if b.wrapping_sub(a) < best.2 {
            best = (ns, a + (b - a) / 2, b - a);
        }
    }
    (best.0, best.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detected_clock_agrees_with_monotonic() {
        let clock = Clock::detect();
        let (t0, m0) = (clock.now(), monotonic_ns());
        std::thread::sleep(Duration::from_millis(50));
        let (t1, m1) = (clock.now(), monotonic_ns());
        let measured = clock.ticks_to_ns(t1 - t0) as f64;
        let truth = (m1 - m0) as f64;
        assert!(
            (measured / truth - 1.0).abs() < 0.01,
            "{measured} vs {truth}"
        );
    }

    #[test]
    fn conversions_round_trip() {
        let clock = Clock::new(ClockKind::Tsc, 2_300_000_000);
        let ticks = clock.duration_to_ticks(Duration::from_millis(3));
        assert_eq!(ticks, 6_900_000);
        let ns = clock.ticks_to_ns(ticks);
        assert!((2_999_999..=3_000_000).contains(&ns), "{ns}");
        let mono = Clock::monotonic();
        assert_eq!(mono.ticks_to_ns(12_345), 12_345);
        assert_eq!(mono.duration_to_ticks(Duration::MAX), u64::MAX);
    }
}
