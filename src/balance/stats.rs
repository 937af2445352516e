//! What a balancer knows about its backends, as one process reads it.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::config::Params;
use super::membership::{address_into, kind};
use super::{Balancer, buckets, cost, penalty};
use crate::format::{BACKEND_ACTIVE, BACKEND_REMOVED, load_acquire};
use crate::limit::ledger;
use crate::shm::Region;
use crate::words::NAME_MAX;

/// One backend, host-wide.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendStats {
    /// Its slot index (what `PickOptions::exclude` takes).
    pub index: u32,
    pub address: String,
    pub weight: u32,
    /// False once it was removed from the set (it still ends its picks).
    pub active: bool,
    /// Picks in flight on it from every process on the host.
    pub in_flight: u64,
    /// Picks of it since it joined.
    pub picked: u64,
    /// The RTT estimate now (decayed).
    pub rtt: Duration,
    /// Successes and failures in the last 10 s.
    pub recent_successes: u64,
    pub recent_failures: u64,
    /// Successes, failures and ejections since it joined (monotonic; a
    /// 0.3.0 process using the table counts none of its own).
    pub successes: u64,
    pub failures: u64,
    pub ejections_total: u64,
    /// How long it stays ejected (zero = not ejected).
    pub ejected_for: Duration,
    /// Ejections in a row.
    pub ejections: u32,
    /// How long since it joined.
    pub age: Duration,
    /// Its slow-start share of its weight now (1 = full).
    pub ramp: f64,
    /// The load its server last reported, if fresh.
    pub load: Option<f64>,
}

/// The backends of a balancer and its retry budget's window.
#[derive(Clone, Debug, PartialEq)]
pub struct BalancerStats {
    pub backends: Vec<BackendStats>,
    /// Picks and retries allowed in the last 10 s.
    pub recent_picks: u64,
    pub recent_retries: u64,
}

impl Balancer {
    /// Reads every backend's statistics (active and removed ones).
    pub fn stats(&self) -> BalancerStats {
        self.stats_at(self.now_ms())
    }

    pub(super) fn stats_at(&self, now_ms: u64) -> BalancerStats {
        read(&self.shm, self.index, now_ms)
    }
}

/// Balancer `index`'s statistics at table-clock instant `now_ms`. Reads only,
/// with `Relaxed` or `format::load_acquire` (views share it).
pub(crate) fn read(region: &Region, index: u32, now_ms: u64) -> BalancerStats {
    let slot = region.balancer_slot(index);
    let p = Params::load(slot);
    let sec = now_ms / 1000;
    let backends = (0..region.geometry.backend_capacity)
        .filter_map(|i| Some((i, region.backend_slot(index, i)?)))
        .filter_map(|(i, s)| {
            let k = kind(load_acquire(&s.state));
            if k != BACKEND_ACTIVE && k != BACKEND_REMOVED {
                return None;
            }
            let mut bytes = [0; NAME_MAX + 1];
            let len = address_into(s, &mut bytes);
            let (ok, failed) = buckets::window(&s.buckets, sec);
            let (until, ejections) = penalty::unpack(s.penalty.load(Ordering::Relaxed));
            let age = now_ms.saturating_sub(s.first_seen.load(Ordering::Relaxed));
            let rtt = cost::decayed_rtt(s.rtt.load(Ordering::Relaxed), now_ms, p.decay_ms as f64);
            Some(BackendStats {
                index: i,
                address: String::from_utf8_lossy(&bytes[..len]).into_owned(),
                weight: s.weight.load(Ordering::Relaxed).min(u32::MAX as u64) as u32,
                active: k == BACKEND_ACTIVE,
                in_flight: ledger::word_count(load_acquire(&s.in_flight)),
                picked: s.picked.load(Ordering::Relaxed),
                rtt: Duration::from_nanos((rtt * 1e3) as u64),
                recent_successes: ok,
                recent_failures: failed,
                successes: s.outcomes[0].load(Ordering::Relaxed),
                failures: s.outcomes[1].load(Ordering::Relaxed),
                ejections_total: s.outcomes[2].load(Ordering::Relaxed),
                ejected_for: Duration::from_millis(until.saturating_sub(now_ms)),
                ejections,
                age: Duration::from_millis(age),
                ramp: cost::ramp(age, p.slow_start_ms),
                load: cost::fresh_load(s.load.load(Ordering::Relaxed), now_ms),
            })
        })
        .collect();
    let (recent_picks, recent_retries) = buckets::window(&slot.budget, sec);
    BalancerStats {
        backends,
        recent_picks,
        recent_retries,
    }
}
