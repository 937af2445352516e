//! Global quota: a cluster-wide requests/s per task, pulled in chunks.
//!
//! Time is cut into slices (`slice_ms`, 1 s by default). The store holds one
//! counter per task per slice, starting at the slice's threshold
//! (`global_rate × slice_ms / 1000`). A host does not ask the store per
//! request: one process pulls a chunk into the task's slot (`host`: the
//! slice and the permits left), and every process on the host spends from it
//! with one compare-and-swap. The store sees one round trip per chunk.
//!
//! Per task, host-wide, a small state machine (`phase`):
//! - **open**: spend, and pull the next chunk when what is left falls below
//!   a low-water mark — before the others run dry;
//! - **limited**: the slice's key is exhausted; refuse without asking the
//!   store until the slice changes;
//! - **failed**: the store failed or timed out; decide by the task's
//!   fallback policy (by default the host's own share of the global rate)
//!   under its local limits, never blocking or failing a request, and let
//!   one process probe the store again after a jittered interval. A task
//!   spread over shards whose node of one shard fails pulls on from the
//!   others, the down shard's part decided by the fallback (`down`).
//!
//! Pulls run on the thread that needs them, not on a helper thread: nothing
//! to restart after `fork`, no thread in processes that never pull, and a
//! pull is one round trip per chunk. The room's map, and the reason for
//! every rule beyond the protocol's few ideas: docs/design/quota.md. Only
//! giving back an idle host's quota needs a thread (`keeper`): an idle host
//! makes no call.

mod account;
mod census;
mod chunk;
mod config;
mod connect;
mod deadline;
#[doc(hidden)]
pub mod decode;
mod down;
mod fair;
mod fallback;
mod give_back;
pub(crate) mod health;
mod hints;
mod hot_keys;
mod keeper;
mod keyed;
mod keys;
mod link;
mod lock;
mod notes;
mod outage;
mod phase;
mod policy;
mod pull;
mod record;
mod records;
mod redact;
mod redis;
mod redis_url;
mod script;
mod sentinel;
mod shard;
#[cfg(feature = "sim")]
pub mod sim;
mod spell;
mod stats;
mod store;
mod store_options;
#[cfg(test)]
mod testing;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

use crate::clock::Clock;
use crate::error::Result;
pub use crate::format::Fallback;
pub(crate) use crate::format::Global;
use crate::format::{QuotaSlot, TaskSlot};
use crate::shm::Shm;
use account::Account;
pub use census::{Fleet, HostHealth, HostRecord, Store};
pub(crate) use census::{merge as merge_record, parse_record};
pub use config::{GlobalConfig, GlobalSettings};
use fallback::share_left;
pub use hot_keys::{HotKey, HotKeys, MAX_HOT_KEYS};
pub(crate) use keeper::{Keeper, Tend};
pub(crate) use keyed::{KeyAsk, KeyName, KeyReply, MAX_BATCH as MAX_KEY_BATCH, key_record_key};
pub(crate) use keys::{manager_key, record_copies, record_key, slice_key};
pub(crate) use lock::reclaim_pull_lock;
use phase::{Dry, Phase};
pub(crate) use policy::part as shard_part;
pub(crate) use policy::smooth_offset;
pub(crate) use record::fields as record_fields;
pub use record::{GlobalSource, StoredConfig};
pub(crate) use record::{MAX_VERSION as MAX_RECORD_VERSION, version_of as record_version};
pub(crate) use record::{keep_own, own as own_global, source as global_source};
pub(crate) use redis::RedisStore;
pub(crate) use stats::read as stats;
use store::{Embedded, QuotaStore, slice_of, wall_us};
pub use store_options::StoreOptions;

/// This host's wall clock, ms since the Unix epoch.
pub(crate) fn wall_ms() -> i64 {
    wall_us() / 1000
}

/// Where the state machine of a task's global quota is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuotaState {
    Open,
    Limited,
    Failed,
}

/// What a task's global quota did on this host (host-wide, since the task
/// was registered).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QuotaStats {
    pub state: Option<QuotaState>,
    /// Round trips to the store, failed ones included.
    pub pulls: u64,
    pub failed_pulls: u64,
    pub pull_ns_sum: u64,
    pub pull_ns_max: u64,
    /// Permits pulled from the store.
    pub granted: u64,
    /// Permits pulled but left unspent when their slice ended.
    pub stranded: u64,
    /// Time spent in each state.
    pub open_ms: u64,
    pub limited_ms: u64,
    pub failed_ms: u64,
    /// The store's clock minus this host's, as last measured, in µs.
    pub clock_offset_us: i64,
    /// Requests the fallback policy refused while the store failed (apart
    /// from `limited_global`, the slice's quota used up).
    pub limited_fallback: u64,
    /// Hosts the store counted in the task's key at the last pull.
    pub hosts_seen: u64,
    /// Pulls that found another table using this host's id.
    pub host_conflicts: u64,
    /// Pulls from a slice key created with another threshold than this
    /// host's (hosts disagree on `global_rate`; every host spends by the
    /// key's).
    pub config_conflicts: u64,
    /// Slice keys this host's pulls created in the store (Redis): 0 while
    /// a manager writes every slice's key ahead (`flowctrl manage`).
    pub keys_created: u64,
    /// Of a task spread over `shards` keys: the shards whose node this host
    /// last found down, bit i for shard i (0: every shard answers). While
    /// any is set the task reports failed, pulls the live shards and grants
    /// itself its fallback share of the down ones' parts.
    pub shards_down: u64,
    /// Permits the store granted as reservations (past 100 hosts, an ask
    /// the slice's release held back, granted at once and spendable after
    /// its wait): counted when received; `granted` counts them once moved
    /// into the host's quota.
    pub reserved: u64,
    /// Permits given back to the store while the host was idle (see
    /// `Task::return_idle_quota`): counted in `granted`, never in `stranded`.
    pub returned: u64,
}

/// The task a quota operation is for: the table, the task's slot and
/// name, and its global limit as read with the rest of its configuration.
#[derive(Clone, Copy)]
pub(crate) struct TaskRef<'a> {
    pub shm: &'a Shm,
    /// The task's slot index (its lanes are found by it).
    pub index: u32,
    pub slot: &'a TaskSlot,
    pub task: &'a str,
    pub g: Global,
}

/// What an admission asks: `n` permits, and the task's `burst` (the
/// fallback rate's burst while the store fails).
#[derive(Clone, Copy)]
pub(crate) struct Need {
    pub n: u32,
    pub burst: u32,
}

/// Why the global quota refused: the slice is used up, or the store is
/// failing and the fallback policy refused. Both answer `Limited::Global`;
/// they are counted apart (`limited_global`, `limited_fallback`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    Exhausted,
    Fallback,
}

/// How an admission was paid for globally, so a later refusal can give it
/// back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spent {
    /// From the host's quota of this slice.
    Quota(u32),
    /// The store is failing: the fallback admitted it in this slice.
    Fallback(u32),
}

/// The global quota of one table handle: its store and options.
pub(crate) struct Quota {
    store: Box<dyn QuotaStore>,
    options: StoreOptions,
    /// This host's id in the store's census.
    host: String,
    skew_us: i64,
    /// The wall clock minus the table clock, in µs, as last measured: the
    /// request path turns the table clock reading it makes anyway into wall
    /// time with one add instead of a second clock read.
    wall_base_us: AtomicI64,
    /// The table clock when `wall_base_us` was measured.
    based_at: AtomicU64,
    /// The tasks whose idle quota this handle's keeper thread gives back,
    /// and what it saw of them.
    keeper: Keeper,
    /// The host id and the redacted store its pulls' lines carry.
    origin: Arc<crate::events::Origin>,
}

/// Checks the options' store URL as opening the store would (its scheme,
/// its query, its hosts), without connecting.
pub(crate) fn check_url(options: &StoreOptions) -> Result<()> {
    match &options.url {
        None => Ok(()),
        #[cfg(feature = "sim")]
        Some(url) if url == sim::URL => Ok(()),
        Some(url) => redis::RedisStore::open(url, options).map(drop),
    }
}

/// 16 hex digits from the machine's id and the table's path (FNV-1a: stable
/// across builds and languages, unlike the standard library's hasher).
fn default_host_id(table: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let machine = std::fs::read("/etc/machine-id")
        .or_else(|_| std::fs::read("/var/lib/dbus/machine-id"))
        .unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in machine
        .trim_ascii()
        .iter()
        .chain(b"\0")
        .chain(table.as_os_str().as_bytes())
    {
        h = (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// How often the wall clock is read again for [`Quota::wall_base_us`]: the
/// table clock and the wall clock drift apart by parts per million, and NTP
/// slews the wall clock.
const REBASE_MS: u64 = 100;

impl Quota {
    /// The quota of a table handle; `table` (its path) names the host when
    /// the options do not.
    pub fn new(options: &StoreOptions, table: &std::path::Path) -> Result<Self> {
        let host = match &options.host_id {
            Some(id) => {
                crate::words::validate_host_id(id)?;
                id.clone()
            }
            None => default_host_id(table),
        };
        options.check()?;
        let store: Box<dyn QuotaStore> = match &options.url {
            None => Box::new(Embedded),
            #[cfg(feature = "sim")]
            Some(url) if url == sim::URL => sim::open(options)?,
            Some(url) => Box::new(redis::RedisStore::open(url, options)?),
        };
        let origin = Arc::new(crate::events::Origin {
            host: host.clone(),
            store: store.describe(),
        });
        Ok(Self {
            origin,
            store,
            options: options.clone(),
            host,
            skew_us: options.clock_skew_ms.saturating_mul(1000),
            wall_base_us: AtomicI64::new(0),
            based_at: AtomicU64::new(0),
            keeper: Keeper::default(),
        })
    }

    /// Refuses `shards` past 1 without a Redis store: the embedded store
    /// keeps one word per task, so spreading would do nothing.
    pub(crate) fn check_spread(&self, shards: Option<u32>) -> Result<()> {
        match shards {
            Some(n) if n > 1 && !self.store.spreads() => Err(crate::Error::invalid(format!(
                "shards {n} spreads a task over Redis keys: the embedded store has one per task"
            ))),
            _ => Ok(()),
        }
    }

    /// This host's wall clock corrected by the store offset it measured.
    fn store_now_us(&self, q: &QuotaSlot) -> i64 {
        wall_us() + self.skew_us + q.offset_us.load(Ordering::Relaxed) as i64
    }

    /// [`Quota::store_now_us`] at table-clock instant `now`, from the base
    /// (read again every [`REBASE_MS`]).
    #[inline]
    fn store_us_at(&self, clock: &Clock, q: &QuotaSlot, now: u64) -> i64 {
        let at = self.based_at.load(Ordering::Relaxed);
        let table_us = (clock.ticks_to_ns(now) / 1000) as i64;
        let base = if at == 0 || now.wrapping_sub(at) > REBASE_MS * clock.ticks_per_sec() / 1000 {
            let base = wall_us() - table_us;
            self.wall_base_us.store(base, Ordering::Relaxed);
            self.based_at.store(now.max(1), Ordering::Relaxed);
            base
        } else {
            self.wall_base_us.load(Ordering::Relaxed)
        };
        table_us + base + self.skew_us + q.offset_us.load(Ordering::Relaxed) as i64
    }

    /// Takes `need.n` permits of the task's global quota at table-clock
    /// instant `now`, pulling when the host runs low.
    #[inline]
    pub fn take(&self, t: TaskRef<'_>, need: Need, now: u64) -> Result<Result<Spent, Refused>> {
        let q = &t.slot.quota;
        let slice = slice_of(self.store_us_at(&t.shm.clock, q, now), t.g.slice_ms);
        if let Some(left) = Account::of(t.slot).spend(slice, need.n) {
            if left < q.low_water.load(Ordering::Relaxed) as u32 {
                self.pull_ahead(t, slice);
            }
            return Ok(Ok(Spent::Quota(slice)));
        }
        self.take_slow(t, need)
    }

    /// A request that found no permits: pulls (at most
    /// [`policy::MAX_PULLS_PER_TAKE`] times), waits for another process's
    /// pull up to one command timeout, or is decided as [`Phase::when_dry`]
    /// says.
    #[cold]
    fn take_slow(&self, t: TaskRef<'_>, need: Need) -> Result<Result<Spent, Refused>> {
        let (q, account) = (&t.slot.quota, Account::of(t.slot));
        let until = Instant::now() + self.options.timeout;
        let mut pulls = 0;
        let mut t = t;
        loop {
            // A pull may have just adopted the store's numbers.
            t.g = t.slot.global().unwrap_or(t.g);
            let now_us = self.store_now_us(q);
            let slice = slice_of(now_us, t.g.slice_ms);
            if account.spend(slice, need.n).is_some() {
                return Ok(Ok(Spent::Quota(slice)));
            }
            let phase = Phase::at(t.shm, t.slot, slice, down::partial(t.slot, t.g));
            let short = || {
                !account.has_reservation()
                    && share_left(t.slot, t.g, slice).is_some_and(|left| left < need.n as u64)
            };
            match phase.when_dry(pulls, short) {
                Dry::Refuse => {
                    account.count_refused(slice, need.n);
                    return Ok(Err(Refused::Exhausted));
                }
                Dry::ProbeOrFallback if !self.probe_due(t.shm, q) => {
                    return Ok(self.fallback(t, need, (slice, now_us)));
                }
                Dry::ProbeOrFallback | Dry::Pull => {}
            }
            match lock::try_lock(t.shm, q, self.stale_after())? {
                Some(lock) => {
                    pulls += 1;
                    let want = self.want(t.slot, t.g, need.n);
                    let _ = self.pull_locked(t, want, &lock);
                }
                None if Instant::now() >= until => {
                    // Another process's pull is slower than a store command
                    // may be: it is about to fail. Do not wait for it.
                    return Ok(if phase.falls_back() {
                        self.fallback(t, need, (slice, now_us))
                    } else {
                        account.count_refused(slice, need.n);
                        Err(Refused::Exhausted)
                    });
                }
                None => std::thread::sleep(policy::WAIT_POLL),
            }
        }
    }

    /// Gives back what [`Quota::take`] took when a later check refused.
    #[inline]
    pub fn give_back(&self, slot: &TaskSlot, spent: Spent, n: u32) {
        Account::of(slot).unspend(spent, n);
    }
}
