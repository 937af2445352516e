//! How a task's configuration is kept in its slot: copies written as one
//! unit under the task's configuration lock, read through
//! `format::read_versioned` (one consistent configuration, never a torn
//! one).

use super::config::{Limits, LocalSettings, TaskSettings};
use crate::error::Result;
use crate::format::{self, TaskSlot};
use crate::quota::{self, GlobalSettings, GlobalSource};
use crate::shm::Shm;
use crate::words::WaitOrder;

/// Reads the current copies: one consistent configuration.
#[inline]
pub(crate) fn read(slot: &TaskSlot) -> Limits {
    format::read_versioned(&slot.config_version, |i| Limits {
        local: slot.config[i].load(),
        global: slot.quota.config[i].load(),
    })
}

/// The settings in force: the global part may be the store's.
pub(crate) fn settings(slot: &TaskSlot) -> TaskSettings {
    let limits = read(slot);
    let l = limits.local;
    let policy = slot
        .adaptive
        .wait_policy
        .load(std::sync::atomic::Ordering::Relaxed);
    TaskSettings {
        local: LocalSettings {
            local_rate: l.rate,
            burst: l.burst,
            max_concurrency: l.cap,
            wait_order: if policy & format::WAIT_LIFO != 0 {
                WaitOrder::Lifo
            } else {
                WaitOrder::Fifo
            },
            barging: policy & format::WAIT_BARGING != 0,
            shadow: policy & format::POLICY_SHADOW != 0,
        },
        global: GlobalSettings::of(limits.global),
        limiter: super::adaptive::limiter(slot).0,
        global_source: quota::global_source(slot),
    }
}

/// The host's own settings: those in force with its own global part, which
/// registrations are compared with and updates change.
pub(crate) fn own_settings(slot: &TaskSlot) -> TaskSettings {
    TaskSettings {
        global: GlobalSettings::of(quota::own_global(slot)),
        global_source: GlobalSource::Local,
        ..settings(slot)
    }
}

/// Writes a configuration into the copies readers are not using, then makes
/// them current. The caller holds the slot's configuration lock (or the slot
/// is not published yet). The wait policy is a word of its own: one word
/// needs no copies.
pub(crate) fn write(slot: &TaskSlot, limits: &Limits, settings: &TaskSettings) {
    let limiter = &settings.limiter;
    slot.adaptive.wait_policy.store(
        settings.local.wait_policy(),
        std::sync::atomic::Ordering::Release,
    );
    let (version, next) = format::next_copy(&slot.config_version);
    slot.config[next].store(&limits.local);
    slot.quota.config[next].store(limits.global.as_ref());
    let generation = super::adaptive::write_copy(slot, version, next, limiter);
    format::commit(&slot.config_version, version);
    super::adaptive::configured(slot, limiter, generation);
}

/// Runs `body` holding the task's configuration lock (see
/// `shm::named::with_owner_lock`).
pub(crate) fn with_lock<T>(shm: &Shm, slot: &TaskSlot, body: impl FnOnce() -> T) -> Result<T> {
    crate::shm::named::with_owner_lock(shm, &slot.config_lock, "the task's configuration", body)
}
