//! Task names, and finding a task's slot by name or claiming one for a new
//! task (the probing and claiming are `shm::named`'s, shared with
//! balancers).

use std::sync::atomic::Ordering;

use super::config::TaskSettings;
use super::stored;
use crate::error::Result;
use crate::format::TaskSlot;
use crate::shm::named::{self, Named};
use crate::shm::{Region, Shm};

/// The registered tasks: (slot index, name), a slot whose name is not
/// readable named `#<index>`.
pub(crate) fn ready(region: &Region) -> Vec<(u32, String)> {
    (0..region.geometry.task_capacity)
        .filter_map(|index| {
            let named = named(region.task_slot(index));
            named
                .is_ready()
                .then(|| (index, named.name().unwrap_or_else(|| format!("#{index}"))))
        })
        .collect()
}

/// The slot of the registered task `name`, if it is one (never claims).
pub(crate) fn find(region: &Region, name: &str) -> Option<u32> {
    named::find(region.geometry.task_capacity, name, |index| {
        named(region.task_slot(index))
    })
}

/// The name a slot holds, if it is readable (for reports).
pub(crate) fn slot_name(slot: &TaskSlot) -> Option<String> {
    named(slot).name()
}

/// Finds the slot of `name`, or claims an empty one and publishes it with
/// `settings` (already validated). Returns the slot index.
pub(crate) fn find_or_claim(shm: &Shm, name: &str, settings: TaskSettings) -> Result<u32> {
    let limits = settings.limits(&shm.clock)?;
    let named = |index| named(shm.task_slot(index));
    let capacity = shm.geometry.task_capacity;
    let (index, _) = named::find_or_claim(shm, "task", capacity, name, named, |index| {
        // Nobody reads an unpublished slot's configuration: it is written
        // without the configuration lock.
        let slot = shm.task_slot(index);
        let named = named(index);
        named.write_name(name);
        slot.config_lock.store(0, Ordering::Relaxed);
        slot.quota.record.store(0, Ordering::Relaxed);
        stored::write(slot, &limits, &settings);
        named.publish();
    })?;
    Ok(index)
}

fn named(slot: &TaskSlot) -> Named<'_> {
    Named {
        state: &slot.state,
        name_len: &slot.name_len,
        name: &slot.name,
    }
}
