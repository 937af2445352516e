//! The constants and structs of the C face: the handles, and the structs C
//! allocates (each with its size first, see `sized`), with their defaults.

use std::ffi::c_char;

use super::sized::SizedStruct;
use crate::{Table, TableOptions, Task};

/// Layout version of the table file this library reads and writes.
pub const FC_LAYOUT_VERSION: u32 = 3;
const _: () = assert!(
    FC_LAYOUT_VERSION == crate::LAYOUT_VERSION,
    "the core's LAYOUT_VERSION changed: update FC_LAYOUT_VERSION"
);
pub const FC_VERSION_MAJOR: u32 = 0;
pub const FC_VERSION_MINOR: u32 = 3;
pub const FC_VERSION_PATCH: u32 = 0;
/// The longest task name, in bytes (without the terminating NUL).
pub const FC_NAME_MAX: u32 = 63;

/// An integer field of `fc_task_config` or `fc_table_options` left unset.
pub const FC_UNSET: u32 = 0xFFFF_FFFF;
/// `fc_task_config.max_concurrency` (and a key's `max_concurrency`): no
/// cap. Registering or updating with it removes a cap in force, and
/// `fc_task_config_get` reports no cap with it. A task's `max_concurrency`
/// of 0 is refused with `FC_ERR_INVALID_ARGUMENT` (it reads as "no traffic"
/// as well as "no cap"); a program built against an older header, whose
/// smaller struct said 0 = no cap, keeps that meaning both ways.
pub const FC_NO_CAP: u32 = 0xFFFF_FFFE;
const _: () = assert!(FC_NO_CAP == crate::NO_CAP);
/// `fc_task_config.local_rate` left unset (exactly this value; any other
/// negative rate is refused).
pub const FC_RATE_UNSET: f64 = -1.0;

/// How a request ended, passed to `fc_release`.
pub type fc_outcome = u32;
/// The request completed; its round-trip time is a latency sample.
pub const FC_OUTCOME_SUCCESS: fc_outcome = 0;
/// It timed out or was shed: a sign the backend is struggling.
pub const FC_OUTCOME_DROPPED: fc_outcome = 1;
/// It ended before a meaningful round-trip time existed (no sample).
pub const FC_OUTCOME_IGNORED: fc_outcome = 2;

/// An open table: this process's mapping of it and its attachment to it.
/// Thread-safe: one handle may be used from any number of threads at once.
/// A forked child may keep using the handles it inherited: its first call
/// through one attaches the child on its own.
pub struct fc_table {
    pub(super) table: Table,
}

/// A registered task. Thread-safe, like `fc_table`; it keeps its table
/// mapped and attached (closing the table handle first is fine).
pub struct fc_task {
    pub(super) task: Task,
}

/// Options for opening or creating a table. Fill it with
/// `fc_table_options_init(&options, sizeof options)`, then change fields.
/// `capacity`, `max_processes` and `mode` apply only when the file does not
/// exist yet; `owner_uid` and `shared` decide whether an existing one is
/// trusted.
///
/// It grows at its end in later versions: the library reads only the first
/// `size` bytes, and fields past them take their defaults. Accepted sizes:
/// 16 (the fields through `mode`) to 4096; 24 is the layout of 0.2.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fc_table_options {
    /// `sizeof` the struct as the caller compiled it; set by
    /// `fc_table_options_init`.
    pub size: u32,
    /// Task slots (default 256).
    pub capacity: u32,
    /// Attachments at once: processes, or table handles (default 64).
    pub max_processes: u32,
    /// File mode of a new table (default 0600). Group or other write bits
    /// need `shared`.
    pub mode: u32,
    /// The uid an existing table must belong to; `FC_UNSET` (the default) =
    /// this process's effective uid. A table of another owner is refused
    /// with `FC_ERR_PERMISSION`: whoever can write it sets everyone's limits.
    pub owner_uid: u32,
    /// 1 = accept (and allow creating) a table that group or others may
    /// write; 0 (the default) = refuse one with `FC_ERR_PERMISSION`.
    pub shared: u32,
    /// Where global quota comes from: `redis://[user:password@]host:port/db`,
    /// `rediss://...` (TLS), a master its Sentinels name
    /// (`redis+sentinel://[:password@]host:port[,host:port...]/master[/db]`),
    /// a Redis Cluster (`redis+cluster://host:port[,host:port...]`), those two
    /// over TLS (`rediss+sentinel://`, `rediss+cluster://`), or NULL (the
    /// default) = the embedded store (the table itself: one host, no server). The query may carry
    /// `timeout_ms`, `connect_timeout_ms` and `prefix`. Every process of a
    /// host must name the same store. Copied; not kept.
    pub store_url: *const c_char,
    /// Prefix of the store's keys; NULL (the default) = `"flowctrl:"`.
    pub key_prefix: *const c_char,
    /// How long one store command may take, in ms, all of it (writing it,
    /// reading every byte of its reply); 0 (the default) = 5. A request
    /// that connects first ends within store_connect_timeout_ms + this.
    pub store_timeout_ms: u32,
    /// How long connecting to the store may take, in ms; 0 = 20.
    pub store_connect_timeout_ms: u32,
    /// How long a failed store is left alone before one process probes it,
    /// in ms (±20 % jitter); 0 = 3000.
    pub probe_interval_ms: u32,
    /// Must be 0.
    pub reserved: u32,
    /// Balancer slots of a new table (default 16; 0 = none).
    pub balancers: u32,
    /// Backends each balancer can hold (default 32).
    pub backends_per_balancer: u32,
    /// This host's id in the store's census (1–63 printable bytes, no
    /// spaces); NULL (the default) = derived from `/etc/machine-id` and the
    /// table's path. Copied; not kept.
    pub host_id: *const c_char,
    /// A config file (TOML) whose `[table]` section and tasks' limits win
    /// over these options and the fields set in `fc_task_config`; NULL (the
    /// default) = the file the environment variable `FLOWCTRL_CONFIG`
    /// names, if any. With one, `fc_table_open(NULL, NULL, &t)` opens the
    /// file's table and `fc_task_register(t, "name", NULL, &k)` gets the
    /// file's limits; an edit of the file is applied within a second.
    /// Copied; not kept.
    pub config_path: *const c_char,
    /// How many (task, process) pairs of a new table can hold ledger lanes
    /// at once. 0 (the default): every pair has its own, the file grows as
    /// capacity × max_processes × 1,280 B, and 0.3 processes can share it.
    /// N > 0: a pool of N lane sets, taken on a process's first use of a
    /// task and given back when it dies (the file grows with use; 0.3
    /// refuses it). With the pool empty, a process still decides rate and
    /// global limits, and its acquires of a capped task are refused as
    /// concurrency; both are counted in `fc_task_stats.unlaned`.
    pub lanes: u32,
    /// Must be 0.
    pub reserved2: u32,
}

/// A task's configuration. Fill it with
/// `fc_task_config_init(&config, sizeof config)`, which leaves every field
/// unset, then set the fields you mean. Registering compares only the set
/// fields with an existing task's; updating changes only the set fields.
///
/// It grows at its end in later versions: the library reads only the first
/// `size` bytes, and fields past them are unset. Accepted sizes: 24 (the
/// layout of 0.2) to 4096.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fc_task_config {
    /// `sizeof` the struct as the caller compiled it; set by
    /// `fc_task_config_init`.
    pub size: u32,
    /// Permits that may be taken at once above the smooth rate (>= 1;
    /// default 1). `FC_UNSET` = unset.
    pub burst: u32,
    /// Requests per second for the host, fractional allowed; 0 = no limit
    /// (the default). `FC_RATE_UNSET` = unset.
    pub local_rate: f64,
    /// Permits in flight on the host at most (>= 1); `FC_NO_CAP` = no cap
    /// (the default); 0 is refused. `FC_UNSET` = unset.
    pub max_concurrency: u32,
    /// Must be 0 (room for a later field); anything else is refused.
    pub reserved: u32,
    /// Requests per second for the whole cluster, pulled in chunks from the
    /// table's store; 0 = no global limit (the default). `FC_RATE_UNSET` =
    /// unset.
    pub global_rate: f64,
    /// Length of a global-quota slice in ms, 100..=60000 (default 1000).
    /// `FC_UNSET` = unset.
    pub slice_ms: u32,
    /// Permits per pull; 0 = adaptive (the default). `FC_UNSET` = unset.
    pub chunk: u32,
    /// Requests per second for this host while the store fails, with
    /// `fallback` = `FC_FALLBACK_RATE` (or `fallback` unset: a rate > 0
    /// means that policy, 0 the default policy). `FC_RATE_UNSET` = unset.
    pub fallback_rate: f64,
    /// The limiter, as a NUL-terminated spec: an algorithm name (`"fixed"`,
    /// `"aimd"`, `"vegas"`, `"gradient"`, `"gradient2"`, `"auto"`) then
    /// `key=value` parameters, e.g. `"gradient2 tolerance=2 window=100"`. Every
    /// algorithm but `fixed` takes `window` (ms); the others are listed in
    /// docs/guide/adaptive-limits.md. Empty (the default) = unset. `fc_task_config_get`
    /// writes the spec with every parameter.
    pub limiter: [c_char; 128],
    /// The adaptive limit's floor, ceiling and starting point. `FC_UNSET`
    /// = unset (an algorithm that is set brings its defaults).
    pub min_limit: u32,
    pub max_limit: u32,
    pub initial_limit: u32,
    /// Must be 0.
    pub reserved2: u32,
    /// What the host admits while the store fails: `FC_FALLBACK_*`;
    /// `FC_UNSET` = unset (the default, `FC_FALLBACK_SHARE`, for a new
    /// task). The local limits apply on top of every policy.
    pub fallback: u32,
    /// Must be 0.
    pub reserved3: u32,
    /// Permits a slice releases at once, cluster-wide; the rest is released
    /// evenly over the slice. 0 = the default (250 ms of `global_rate`).
    /// `FC_UNSET` = unset.
    pub global_burst: u32,
    /// Where the global fields in force come from, `FC_SOURCE_*`: written by
    /// `fc_task_config_get`. Not a setting (a task's record in the store
    /// wins while it exists): registering and updating accept
    /// `FC_SOURCE_LOCAL` (0) or `FC_SOURCE_STORE` and read nothing from it.
    /// While it is `FC_SOURCE_STORE` the global fields read back are the
    /// record's: written back with `fc_task_update` they become this host's
    /// own numbers (used when the record goes), and a registration is
    /// compared with the host's own numbers, not with them.
    pub global_source: u32,
    /// Store keys each slice's quota is spread over, 1..=6 (a hot task on a
    /// Redis Cluster); every host of the task must agree. `FC_UNSET` =
    /// unset (1 for a new task).
    pub shards: u32,
    /// Must be 0.
    pub reserved4: u32,
    /// The order waiting acquires are admitted in, host-wide:
    /// `FC_WAIT_FIFO` (the default) or `FC_WAIT_LIFO`. `FC_UNSET` = unset.
    pub wait_order: u32,
    /// 1 = a non-waiting acquire may take a free permit while others wait
    /// (throughput first); 0 (the default) = it is refused while anyone
    /// waits. `FC_UNSET` = unset.
    pub barging: u32,
}

/// `fc_task_config.wait_order`: first come, first served.
pub const FC_WAIT_FIFO: u32 = 0;
/// The newest waiter first: under overload the fresh requests are served.
pub const FC_WAIT_LIFO: u32 = 1;

/// `fc_task_config.global_source`: this host's own configuration.
pub const FC_SOURCE_LOCAL: u32 = 0;
/// The task's record in the store (`fc_store_set_task_config`).
pub const FC_SOURCE_STORE: u32 = 1;

/// `fc_task_config.fallback`: the host's own share of the global rate (what
/// it spent per second in its last full slice; before any, the global rate
/// over the hosts the store last counted; before that, the local limits).
pub const FC_FALLBACK_SHARE: u32 = 0;
/// The task's local limits alone.
pub const FC_FALLBACK_LOCAL: u32 = 1;
/// Refuse every request that needs global quota (`FC_LIMITED_GLOBAL`).
pub const FC_FALLBACK_DENY: u32 = 2;
/// `fallback_rate` requests/s for this host.
pub const FC_FALLBACK_RATE: u32 = 3;

/// An admitted request, in caller memory: no allocation per request and no
/// init call. Its size is 64 bytes and never changes (the reserved words are
/// room for later versions). Opaque: pass it to `fc_release` as
/// `fc_acquire` filled it, in the same process; `fc_release` marks it
/// released. A released, altered, foreign or inherited-across-fork permit is
/// refused.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fc_permit {
    pub acquired_at: u64,
    pub owner: u64,
    pub task: u32,
    pub n: u32,
    pub flags: u32,
    /// A keyed permit's hold of its key (opaque; 0 in permits of tasks
    /// without key limits, as in every permit before them).
    pub reserved0: u32,
    pub check: u64,
    pub reserved: [u64; 3],
}

/// A task's counters, in permits, summed over every process on the host.
/// Fill it with `fc_task_stats_init(&stats, sizeof stats)` once; then
/// `fc_task_stats` may refill it any number of times.
///
/// It grows at its end in later versions: the library writes only the first
/// `size` bytes. Accepted sizes: 96 (the fields through `rtt_samples`) to
/// 4096.
///
/// Named by its tag, `struct fc_task_stats`: the function `fc_task_stats`
/// shares the name, which C allows for a tag but not for a typedef.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fc_task_stats {
    /// `sizeof` the struct as the caller compiled it; set by
    /// `fc_task_stats_init`.
    pub size: u32,
    /// Written as 0.
    pub reserved: u32,
    pub admitted: u64,
    pub limited_local: u64,
    pub limited_global: u64,
    pub limited_concurrency: u64,
    pub released_success: u64,
    pub released_dropped: u64,
    pub released_ignored: u64,
    /// Permits of dead processes given back by the reaper.
    pub reclaimed: u64,
    /// The host's concurrency count: permits counted against the cap now
    /// (permits of a task without a cap are not counted).
    pub in_flight: u64,
    /// Sum of acquire-to-release times of success and dropped releases (ns).
    pub rtt_sum_ns: u64,
    pub rtt_samples: u64,
    /// What the processes' ledgers say they hold: equal to `in_flight` when
    /// nothing is in motion (`fc_task_check` compares them at one instant).
    pub held: i64,
    /// The global quota's state: `FC_QUOTA_*`.
    pub quota_state: u32,
    /// Written as 0.
    pub reserved1: u32,
    /// Round trips to the store (failed ones included) and failed ones.
    pub pulls: u64,
    pub failed_pulls: u64,
    /// Time spent in pulls: total and longest, in ns.
    pub pull_ns_sum: u64,
    pub pull_ns_max: u64,
    /// Permits pulled from the store, and those left unspent when their
    /// slice ended.
    pub quota_granted: u64,
    pub quota_stranded: u64,
    /// Time spent open, limited and failed, in ms.
    pub open_ms: u64,
    pub limited_ms: u64,
    pub failed_ms: u64,
    /// The store's clock minus this host's, as last measured, in µs.
    pub clock_offset_us: i64,
    /// The concurrency limit applied now: the adaptive limit, or
    /// `max_concurrency`; 0 = no cap.
    pub limit: u64,
    /// The adaptive limiter's no-load RTT estimate (ns; 0 = none).
    pub baseline_rtt_ns: u64,
    /// The RTT of its last window with samples (ns; 0 = none).
    pub recent_rtt_ns: u64,
    /// Requests the fallback policy refused while the store failed; they
    /// are not in `limited_global` (the slice's quota used up).
    pub limited_fallback: u64,
    /// Hosts the store counted in the task's slice key at the last pull.
    pub hosts_seen: u64,
    /// Pulls that found another table pulling under this host's id.
    pub host_conflicts: u64,
    /// Pulls from a slice key created with another threshold than this
    /// host's (hosts disagree on `global_rate`).
    pub config_conflicts: u64,
    /// Slice keys this host's pulls created in the store: 0 while a
    /// manager writes every slice's key ahead.
    pub keys_created: u64,
    /// Acquires waiting for a permit now, host-wide (`fc_acquire_wait`).
    pub waiting: u64,
    /// Acquires decided without lanes of their process's own (the table's
    /// lane pool was empty; see `fc_table_options.lanes`).
    pub unlaned: u64,
    /// Of those, acquires of a capped task, refused (also counted in
    /// `limited_concurrency`).
    pub unlaned_refused: u64,
    /// Of a task spread over `shards` keys: the shards whose node this host
    /// last found down, bit i for shard i; 0 while every shard answers.
    pub quota_shards_down: u64,
    /// Permits the store granted as reservations: past 100 hosts, an ask
    /// the slice's release held back is granted at once and spent after
    /// its wait (one round trip instead of two). Counted when received;
    /// `quota_granted` counts them once moved into the host's quota.
    pub quota_reserved: u64,
    /// Permits given back to the store while the host was idle (its
    /// keeper thread: others spend them); counted in `quota_granted`,
    /// never in `quota_stranded`.
    pub quota_returned: u64,
}

/// `fc_task_stats.quota_state`: the task has no global limit.
pub const FC_QUOTA_NONE: u32 = 0;
/// Spending pulled quota, pulling more as needed.
pub const FC_QUOTA_OPEN: u32 = 1;
/// The slice's quota is exhausted cluster-wide: refused until the next slice.
pub const FC_QUOTA_LIMITED: u32 = 2;
/// The store fails: deciding by local limits, probing now and then.
pub const FC_QUOTA_FAILED: u32 = 3;

// The sizes are ABI: the C tests check the same numbers from the header.
const _: () = {
    assert!(size_of::<fc_table_options>() == 88);
    assert!(size_of::<fc_task_config>() == 224);
    assert!(size_of::<fc_task_stats>() == 304);
    assert!(size_of::<fc_permit>() == 64);
};

// SAFETY: repr(C), `size: u32` first, integers, floats and pointers only
// (read, never followed, by `sized`), no padding (the sizes above are the
// sums of the fields).
unsafe impl SizedStruct for fc_table_options {
    const NAME: &'static str = "fc_table_options";
    const INIT: &'static str = "fc_table_options_init";
    const MIN_SIZE: usize = 16;
    fn defaults() -> Self {
        let d = TableOptions::default();
        Self {
            size: size_of::<Self>() as u32,
            capacity: d.capacity,
            max_processes: d.max_processes,
            mode: d.mode,
            owner_uid: d.owner.unwrap_or(FC_UNSET),
            shared: d.shared as u32,
            store_url: std::ptr::null(),
            key_prefix: std::ptr::null(),
            store_timeout_ms: 0,
            store_connect_timeout_ms: 0,
            probe_interval_ms: 0,
            reserved: 0,
            balancers: d.balancers,
            backends_per_balancer: d.backends_per_balancer,
            host_id: std::ptr::null(),
            config_path: std::ptr::null(),
            lanes: d.lanes,
            reserved2: 0,
        }
    }
}

// SAFETY: as above.
unsafe impl SizedStruct for fc_task_config {
    const NAME: &'static str = "fc_task_config";
    const INIT: &'static str = "fc_task_config_init";
    const MIN_SIZE: usize = 24;
    fn defaults() -> Self {
        Self {
            size: size_of::<Self>() as u32,
            burst: FC_UNSET,
            local_rate: FC_RATE_UNSET,
            max_concurrency: FC_UNSET,
            reserved: 0,
            global_rate: FC_RATE_UNSET,
            slice_ms: FC_UNSET,
            chunk: FC_UNSET,
            fallback_rate: FC_RATE_UNSET,
            limiter: [0; 128],
            min_limit: FC_UNSET,
            max_limit: FC_UNSET,
            initial_limit: FC_UNSET,
            reserved2: 0,
            fallback: FC_UNSET,
            reserved3: 0,
            global_burst: FC_UNSET,
            global_source: FC_SOURCE_LOCAL,
            shards: FC_UNSET,
            reserved4: 0,
            wait_order: FC_UNSET,
            barging: FC_UNSET,
        }
    }
}

// SAFETY: as above.
unsafe impl SizedStruct for fc_task_stats {
    const NAME: &'static str = "struct fc_task_stats";
    const INIT: &'static str = "fc_task_stats_init";
    const MIN_SIZE: usize = 96;
    fn defaults() -> Self {
        Self {
            size: size_of::<Self>() as u32,
            reserved: 0,
            admitted: 0,
            limited_local: 0,
            limited_global: 0,
            limited_concurrency: 0,
            released_success: 0,
            released_dropped: 0,
            released_ignored: 0,
            reclaimed: 0,
            in_flight: 0,
            rtt_sum_ns: 0,
            rtt_samples: 0,
            held: 0,
            quota_state: FC_QUOTA_NONE,
            reserved1: 0,
            pulls: 0,
            failed_pulls: 0,
            pull_ns_sum: 0,
            pull_ns_max: 0,
            quota_granted: 0,
            quota_stranded: 0,
            open_ms: 0,
            limited_ms: 0,
            failed_ms: 0,
            clock_offset_us: 0,
            limit: 0,
            baseline_rtt_ns: 0,
            recent_rtt_ns: 0,
            limited_fallback: 0,
            hosts_seen: 0,
            host_conflicts: 0,
            config_conflicts: 0,
            keys_created: 0,
            waiting: 0,
            unlaned: 0,
            unlaned_refused: 0,
            quota_shards_down: 0,
            quota_reserved: 0,
            quota_returned: 0,
        }
    }
}
