//! Finding a balancer's slot by name or claiming one (the probing and
//! claiming are `shm::named`'s, shared with tasks), and the lock of its
//! membership.

use std::sync::atomic::{AtomicU64, Ordering};

use super::config::Params;
use crate::error::{Error, ErrorKind, Result};
use crate::format::BalancerSlot;
use crate::shm::named::{self, Named};
use crate::shm::{Region, Shm};

/// The slot of balancer `name`, claimed and published with `params` if it
/// is new. Returns the slot index and whether this call created it.
pub(crate) fn find_or_claim(shm: &Shm, name: &str, params: Params) -> Result<(u32, bool)> {
    let capacity = shm.geometry.balancer_capacity;
    if capacity == 0 {
        return Err(Error::new(
            ErrorKind::TableFull,
            format!(
                "{} has no balancer slots (created with balancers = 0 or by an older flowctrl)",
                shm.path().display()
            ),
        ));
    }
    let named = |index| named(shm.balancer_slot(index));
    named::find_or_claim(shm, "balancer", capacity, name, named, |index| {
        // Its backends are empty: a slot is never freed, and a claim taken
        // over from a dead claimer never got as far as adding any
        // (membership needs the slot published).
        let slot = shm.balancer_slot(index);
        let named = named(index);
        named.write_name(name);
        slot.member_lock.store(0, Ordering::Relaxed);
        params.store(slot);
        named.publish();
    })
}

/// The slot of balancer `name` if it is registered.
pub(crate) fn find(shm: &Shm, name: &str) -> Option<u32> {
    named::find(shm.geometry.balancer_capacity, name, |index| {
        named(shm.balancer_slot(index))
    })
}

/// The registered balancers: (slot index, name), a slot whose name is not
/// readable named `#<index>`.
pub(crate) fn ready(region: &Region) -> Vec<(u32, String)> {
    (0..region.geometry.balancer_capacity)
        .filter_map(|index| {
            let named = named(region.balancer_slot(index));
            named
                .is_ready()
                .then(|| (index, named.name().unwrap_or_else(|| format!("#{index}"))))
        })
        .collect()
}

/// The configuration balancer `index` was registered with.
pub(crate) fn config_of(region: &Region, index: u32) -> super::BalancerConfig {
    Params::load(region.balancer_slot(index)).config()
}

fn named(slot: &BalancerSlot) -> Named<'_> {
    Named {
        state: &slot.state,
        name_len: &slot.name_len,
        name: &slot.name,
    }
}

/// Runs `body` holding the membership lock `lock` (see
/// `shm::named::with_owner_lock`).
pub(crate) fn with_lock<T>(shm: &Shm, lock: &AtomicU64, body: impl FnOnce() -> T) -> Result<T> {
    named::with_owner_lock(shm, lock, "the balancer's membership", body)
}
