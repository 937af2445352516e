//! A task's global-quota section: the host's share of the current slice,
//! the state machine, the pull lock and statistics, the fallback rate, the
//! embedded store and the configuration copies.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bounds of a global-quota slice: shorter slices cost more pulls than they
/// save in precision; longer ones strand more quota per slice.
pub(crate) const MIN_SLICE_MS: u32 = 100;
pub(crate) const MAX_SLICE_MS: u32 = 60_000;
/// Permits per slice fit the host word's 32-bit count, with room to spare.
pub(crate) const MAX_SLICE_QUOTA: u32 = 1 << 30;
/// Store keys a slice's quota may be spread over (`shards`): the slot has
/// a grant tally for each shard past the first ([`QuotaSlot::shard_granted`]).
pub const MAX_SHARDS: u32 = 6;

/// What a host admits while its quota store is failing. The task's local
/// limits (`local_rate`, `max_concurrency`) apply on top of every policy, so
/// the effective fallback is the stricter of the two.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Fallback {
    /// The host's own share of the global rate: what it spent per second in
    /// its last full slice; before any, `global_rate` ÷ the hosts the store
    /// last counted; before that, the local limits alone. An outage keeps
    /// the cluster near its global rate with no operator input.
    #[default]
    Share,
    /// The task's local limits alone.
    Local,
    /// Fail closed: refuse every request that needs global quota.
    Deny,
    /// This many requests/s for this host (> 0; 0 is [`Fallback::Share`]).
    Rate(f64),
}

impl Fallback {
    /// The policy named `share`, `local`, `deny`, or a number of requests/s.
    pub fn parse(text: &str) -> crate::error::Result<Self> {
        match text {
            "share" => Ok(Self::Share),
            "local" => Ok(Self::Local),
            "deny" => Ok(Self::Deny),
            other => other.parse::<f64>().map(Self::Rate).map_err(|_| {
                crate::error::Error::invalid(format!(
                    "fallback must be 'share', 'local', 'deny' or a number of requests/s, not {}",
                    crate::words::echo(other)
                ))
            }),
        }
        .map(Self::normalized)
    }

    /// `Rate(0)` is the default policy, as `fallback_rate` 0 always was.
    pub fn normalized(self) -> Self {
        match self {
            Self::Rate(0.0) => Self::Share,
            other => other,
        }
    }

    /// The word a copy keeps: a positive rate, 0 for share, negative codes
    /// for the others (a 0.3 reader takes any of these as "no rate").
    fn to_bits(self) -> u64 {
        match self.normalized() {
            Self::Share => 0f64.to_bits(),
            Self::Local => (-1f64).to_bits(),
            Self::Deny => (-2f64).to_bits(),
            Self::Rate(r) => r.to_bits(),
        }
    }

    /// A damaged word reads as the default.
    fn from_bits(bits: u64) -> Self {
        let v = f64::from_bits(bits);
        if v == -1.0 {
            Self::Local
        } else if v == -2.0 {
            Self::Deny
        } else if v.is_finite() && v > 0.0 {
            Self::Rate(v)
        } else {
            Self::Share
        }
    }
}

impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Share => f.write_str("share"),
            Self::Local => f.write_str("local"),
            Self::Deny => f.write_str("deny"),
            Self::Rate(r) => write!(f, "{r}"),
        }
    }
}

/// A task's global limit as the request path reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Global {
    pub rate: f64,
    /// Permits per slice.
    pub quota: u32,
    pub slice_ms: u32,
    /// Fixed chunk; 0 = adaptive.
    pub chunk: u32,
    /// What the host admits while the store fails.
    pub fallback: Fallback,
    /// The burst the slice releases at once, as configured (0 = the
    /// default, [`Global::burst`]).
    pub global_burst: u32,
    /// Store keys each slice's quota is spread over, 1..=[`MAX_SHARDS`].
    pub shards: u32,
}

impl Global {
    /// Permits a slice releases at its start and may hold ready since: the
    /// rest is released evenly over the slice (cluster-wide), so a global
    /// limit is as smooth as a local one. Default 250 ms of the rate: a
    /// quarter of a 1 s slice, the largest chunk a host asks for, so a host
    /// with the whole rate pulls about four times per slice.
    pub fn burst(&self) -> u32 {
        let burst = match self.global_burst {
            0 => (self.rate * 0.25).round() as u32,
            b => b,
        };
        burst.clamp(1, self.quota)
    }
}

/// One copy of a task's global-quota configuration, versioned with the
/// task's other copies (same `config_version`, same writer lock).
#[repr(C)]
pub(crate) struct GlobalCopy {
    /// requests/s for the whole cluster (f64 bits); 0 = no global limit.
    pub rate_bits: AtomicU64,
    /// slice_ms (low 16 bits) | shards − 1 (bits 16..24; earlier releases
    /// wrote zeros there: one shard) | fixed chunk, 0 = adaptive (high 32
    /// bits).
    pub slice_chunk: AtomicU64,
    /// The [`Fallback`] policy (see `Fallback::to_bits`).
    pub fallback_bits: AtomicU64,
    /// Permits per slice, `global_rate × slice_ms / 1000` rounded down
    /// (low 32 bits) | the configured `global_burst`, 0 = default (high 32
    /// bits; 0.3 wrote zeros there).
    pub quota: AtomicU64,
}

impl GlobalCopy {
    /// The global limit, `None` when there is none. Clamped to what
    /// validation allows: a damaged file must not divide by zero or
    /// overflow on the request path.
    #[inline]
    pub(crate) fn load(&self) -> Option<Global> {
        let rate = f64::from_bits(self.rate_bits.load(Ordering::Relaxed));
        if rate == 0.0 {
            return None;
        }
        let slice_chunk = self.slice_chunk.load(Ordering::Relaxed);
        let quota_burst = self.quota.load(Ordering::Relaxed);
        let quota = (quota_burst as u32).clamp(1, MAX_SLICE_QUOTA);
        Some(Global {
            rate,
            quota,
            slice_ms: (slice_chunk as u32 & 0xffff).clamp(MIN_SLICE_MS, MAX_SLICE_MS),
            chunk: ((slice_chunk >> 32) as u32).min(quota),
            fallback: Fallback::from_bits(self.fallback_bits.load(Ordering::Relaxed)),
            global_burst: ((quota_burst >> 32) as u32).min(quota),
            shards: ((slice_chunk >> 16) as u32 & 0xff).min(MAX_SHARDS - 1) + 1,
        })
    }

    pub(crate) fn store(&self, g: Option<&Global>) {
        self.rate_bits
            .store(g.map_or(0, |g| g.rate.to_bits()), Ordering::Relaxed);
        self.slice_chunk.store(
            g.map_or(0, |g| {
                g.slice_ms as u64
                    | (g.shards.saturating_sub(1) as u64) << 16
                    | (g.chunk as u64) << 32
            }),
            Ordering::Relaxed,
        );
        self.fallback_bits
            .store(g.map_or(0, |g| g.fallback.to_bits()), Ordering::Relaxed);
        self.quota.store(
            g.map_or(0, |g| g.quota as u64 | (g.global_burst as u64) << 32),
            Ordering::Relaxed,
        );
    }
}

/// A task's global quota on this host (see `quota`): the host's share of the
/// current slice, spent with one CAS per admission, on a line of its own;
/// the state machine, read by every admission but written only on
/// transitions; the pull lock and the pullers' statistics; the fallback rate
/// and the embedded store; the configuration.
#[repr(C, align(64))]
pub(crate) struct QuotaSlot {
    /// slice (high 32 bits) | permits left on this host (low 32 bits).
    pub host: AtomicU64,
    /// slice (high 32 bits) | requests refused as global in it (written
    /// only when the host's quota is out: no admission is spending then).
    pub refused: AtomicU64,
    /// What the host was asked for in its last full slice: admitted and
    /// refused as global (its demand, for fair tails).
    pub prev_demand: AtomicU64,
    /// slice (high 32 bits) | permits granted in it from shard 1 + i (a
    /// task spread over several keys; shard 0's is `slice_granted` minus
    /// these). Written by pulls only.
    pub shard_granted: [AtomicU64; 5],
    /// The phase (open, limited, failed) and when it began (see `quota::phase`).
    pub phase: AtomicU64,
    /// slice + 1 whose store key is known to be exhausted; 0 = none. The
    /// top bit: quota may still come back in it (`quota::give_back`), so pulls
    /// go on once the pacing allows.
    pub exhausted: AtomicU64,
    /// Store clock minus this host's wall clock, in µs (i64 bits).
    pub offset_us: AtomicU64,
    /// While failed: the table-clock tick after which one process probes.
    pub probe_at: AtomicU64,
    /// slice (high 32 bits) | permits this host was granted in it.
    pub slice_granted: AtomicU64,
    /// Permits spent in the previous slice this host pulled for.
    pub prev_spent: AtomicU64,
    /// Below this many permits left, the next admission pulls ahead.
    pub low_water: AtomicU64,
    /// slice (high 32 bits) | one bit per shard whose key is exhausted in it.
    pub shards_out: AtomicU64,
    /// The pull lock: 0, or the holder's `Owner` (low 32 bits) | the table
    /// clock in ms when it was taken (high 32 bits).
    pub pull_lock: AtomicU64,
    pub pulls: AtomicU64,
    pub failed_pulls: AtomicU64,
    pub pull_ns_sum: AtomicU64,
    pub pull_ns_max: AtomicU64,
    pub granted: AtomicU64,
    pub stranded: AtomicU64,
    /// Milliseconds spent open / limited / failed before the current phase.
    pub phase_ms: [AtomicU64; 3],
    /// Hosts the store counted in the task's key at the last pull.
    pub hosts_seen: AtomicU64,
    /// Pulls whose census record showed another table under this host's id.
    pub host_conflicts: AtomicU64,
    /// The table clock (ticks) before which the slice has released nothing
    /// more for this host to pull: admissions refuse as global meanwhile,
    /// without a round trip.
    pub paced_until: AtomicU64,
    /// 1 after a pull lock was taken from a dead holder: the next pull asks
    /// the store to hand back what the key granted and the host never
    /// received (the holder died between the grant and the deposit).
    pub redeem: AtomicU64,
    /// Pulls from a key created with another threshold than this host's.
    pub config_conflicts: AtomicU64,
    /// Where the global copies' numbers come from (see `quota::record`):
    /// the store record's version this host last saw (low 56 bits) and
    /// whether the copies hold the record's numbers or another host's
    /// slicing instead of this host's own (top bits). 0 = its own (0.3).
    pub record: AtomicU64,
    /// GCRA theoretical arrival time of a fallback rate (a number; the
    /// share keeps to its release curve instead).
    pub fallback_tat: AtomicU64,
    /// The embedded store's key: slice (high 32 bits) | permits left.
    pub embedded: AtomicU64,
    /// slice (high 32 bits) | permits the fallback admitted in it: a key
    /// created anew deducts them (with what earlier keys granted).
    pub fallback_admitted: AtomicU64,
    /// Requests the fallback refused (not counted as `limited_global`).
    pub limited_fallback: AtomicU64,
    /// This host's own global configuration while the copies hold another
    /// (`record` says so): what registrations are compared with and what
    /// the copies return to when the store's record goes.
    pub own: GlobalCopy,
    pub config: [GlobalCopy; 2],
}

const _: () = {
    assert!(size_of::<QuotaSlot>() == 384);
    assert!(std::mem::offset_of!(QuotaSlot, phase) == 64);
    assert!(std::mem::offset_of!(QuotaSlot, pull_lock) == 128);
    assert!(std::mem::offset_of!(QuotaSlot, fallback_tat) == 256);
    assert!(std::mem::offset_of!(QuotaSlot, hosts_seen) == 208);
    assert!(std::mem::offset_of!(QuotaSlot, limited_fallback) == 280);
    assert!(std::mem::offset_of!(QuotaSlot, record) == 248);
    assert!(std::mem::offset_of!(QuotaSlot, own) == 288);
};
