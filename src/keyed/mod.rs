//! Limits per caller: a keyed task applies per-key limits (rates, a
//! concurrency cap) to every key a caller passes, with every process of
//! the host deciding from the same per-key state in the task's key file.
//!
//! A keyed acquire spends the key's limits first, then the task's own; a
//! refusal by either gives back what the other took, so a request passes
//! both or spends neither. Keys are bytes of at most [`MAX_KEY_LEN`];
//! entries hold a keyed hash of them (see `map`), so a key of any length
//! costs its 96 bytes (64, and 32 for its global rate).

mod asks;
mod config;
mod decide;
mod fleet;
mod global;
mod hold;
mod limits;
mod map;
mod names;
mod rate;
mod record;
mod region;
mod spread;
mod view;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use config::{config_of, normalized, overrides_of};
pub(crate) use decide::drift_of;
pub(crate) use global::MAX_HELD as MAX_KEY_HELD;
pub use limits::KeyLimits;
pub use rate::{KeyGlobal, KeyRate, MAX_LOCAL};
pub use record::KeyRecord;
pub(crate) use record::versions as record_versions;
pub(crate) use region::path_of as key_file_path;
pub use region::{DEFAULT_KEY_CAPACITY, MAX_KEY_CAPACITY};
pub(crate) use region::{KeyRegion, check_capacity};
pub use view::{KeyGlobalNow, KeyInfo, KeyStats};
pub(crate) use view::{counters_only, key_infos, key_stats};

use crate::error::{Error, Result};
use crate::shm::Shm;
use crate::words::Limited;
use map::Hashed;

/// The longest key a keyed acquire takes, in bytes: longer ones are
/// refused (an error), never cut (two keys cut alike would share a state).
pub const MAX_KEY_LEN: usize = 4096;

/// What a keyed task's keys are limited by, and how many it holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyConfig {
    /// Every key's limits, unless it has an override.
    pub limits: KeyLimits,
    /// Keys the key file holds (fixed when it is made; default
    /// [`DEFAULT_KEY_CAPACITY`]). 96 bytes each.
    pub capacity: u32,
    /// What a key gets that finds no entry because every entry holds a
    /// live key.
    pub overflow: KeyOverflow,
}

impl Default for KeyConfig {
    fn default() -> Self {
        Self {
            limits: KeyLimits::default(),
            capacity: DEFAULT_KEY_CAPACITY,
            overflow: KeyOverflow::Shared,
        }
    }
}

impl KeyConfig {
    pub fn new(limits: KeyLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    pub fn capacity(mut self, keys: u32) -> Self {
        self.capacity = keys;
        self
    }

    pub fn overflow(mut self, overflow: KeyOverflow) -> Self {
        self.overflow = overflow;
        self
    }
}

/// The policy for keys that find no entry (counted as overflow).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum KeyOverflow {
    /// They share one state, limited as one key: new callers are served at
    /// one key's rate while every entry is live, never all refused.
    #[default]
    Shared,
    /// They pass the key limits (the task's own limits still apply).
    Admit,
}

/// Which limit refused a keyed acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyRefused {
    /// The task's own limit.
    Task(Limited),
    /// The key's rate of this index (in the order the rates were given).
    Rate(u8),
    /// The key's concurrency cap.
    Concurrency,
    /// The key is blocked (an override admitting nothing).
    Blocked,
    /// The key's global rate: its slice is spent fleet-wide (or, while
    /// the store fails, the host's fallback share of it).
    Global,
    /// The process holds permits of as many distinct keys as it has
    /// records for (see `KeyStats::records`).
    Records,
}

/// A refused keyed acquire: which limit, and when an identical request
/// can succeed (`None`: when a permit of the key is released, or never
/// for a blocked key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyRefusal {
    pub by: KeyRefused,
    pub retry_after: Option<Duration>,
}

/// A key's state for the answers a refusal needs (`RateLimit-*` headers),
/// read without spending. Its rates are the key's on the host: a global
/// rate is not one of them (its slice is the fleet's; a refusal by it says
/// when to retry, and [`crate::Task::key_limits`] its settings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct KeyState {
    /// The limit of the key's tightest rate now: its burst (0: no rate).
    pub limit: u32,
    /// Requests that rate would admit now.
    pub remaining: u32,
    /// When that rate is whole again.
    pub reset_after: Duration,
    /// When one request can pass every rate on the host (zero: now).
    pub retry_after: Duration,
    /// Permits of the key in flight on the host, and the cap (0: none).
    pub in_flight: u32,
    pub max_concurrency: u32,
    /// Whether the key holds an entry, and whether an override applies.
    pub present: bool,
    pub overridden: bool,
    pub blocked: bool,
    pub unlimited: bool,
}

/// A task's key file, mapped once per task handle.
pub(crate) struct Keys {
    pub region: KeyRegion,
    /// When this process may try again to read the store's record of the
    /// keys' global rates, after a failure (host ms; see `record`).
    retry_ms: std::sync::atomic::AtomicU64,
    /// Whether this process's keeper looked at the store's record yet.
    looked: std::sync::atomic::AtomicBool,
}

impl Keys {
    /// The task's key file, made with `capacity` keys if it has none.
    pub(crate) fn open(shm: &Shm, task: u32, capacity: u32) -> Result<Arc<Self>> {
        let keys = Self {
            region: KeyRegion::open_or_create(shm, task, capacity)?,
            retry_ms: Default::default(),
            looked: Default::default(),
        };
        keys.note_any_global();
        Ok(Arc::new(keys))
    }

    pub(crate) fn hash(&self, key: &[u8]) -> Result<Hashed> {
        if key.len() > MAX_KEY_LEN {
            return Err(Error::invalid(format!(
                "a key of {} bytes is longer than {MAX_KEY_LEN}",
                key.len()
            )));
        }
        Ok(map::hash(&self.region, key))
    }
}
