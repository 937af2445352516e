//! Unit tests' fixtures: a task slot as a new file holds it, and a quota
//! handle on a Redis URL nothing listens on (building one connects to
//! nothing).

use super::{Quota, StoreOptions};
use crate::format::TaskSlot;

/// A task slot, all zero.
pub(super) fn slot() -> Box<TaskSlot> {
    // SAFETY: a task slot is atomics only, and all-zero is its state in a
    // new file.
    unsafe { Box::new_zeroed().assume_init() }
}

/// A quota handle whose store is never reached.
pub(super) fn quota() -> Quota {
    let options = StoreOptions {
        url: Some("redis://127.0.0.1:1/0".into()),
        ..StoreOptions::default()
    };
    Quota::new(&options, std::path::Path::new("/t")).unwrap()
}
