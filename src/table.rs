//! The public handle of a table: opening it, registering tasks, reaping and
//! checking. The file and attachments are `shm`'s; tasks are `task`'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::balance::{self, Balancer, BalancerConfig};
use crate::clock::Clock;
use crate::config_file::{self, ConfigFile, Live};
use crate::error::{Error, Result};
use crate::format::{MAX_ATTACH_CAPACITY, MAX_TASK_CAPACITY};
use crate::quota::{Keeper, Quota, StoreOptions};
use crate::shm::Reclaim;
use crate::shm::{OpenSpec, Region, Shm};
use crate::task::{self, Task, TaskConfig, TaskReclaim, TaskSettings, WaitRoom};

use crate::format::Geometry;

/// Where a table lives when no path is given.
pub const DEFAULT_DIR: &str = "/dev/shm";
/// The file name of the default table.
pub const DEFAULT_NAME: &str = "flowctrl";

/// How to open or create a table. Geometry and mode only apply when the file
/// does not exist yet; an existing table keeps what it was created with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableOptions {
    /// Number of task slots (default 256).
    pub capacity: u32,
    /// Number of attachments (processes, or table handles) at once (default 64).
    pub max_processes: u32,
    /// File mode of a new table (default 0o600: only the owner's processes).
    pub mode: u32,
    /// The uid an existing table must belong to; `None` = this process's
    /// effective uid. Anyone who can write the file sets everyone's limits.
    pub owner: Option<u32>,
    /// Accept (and create) a table that group or others may write. Off by
    /// default: such a table lets other users change or break the limits.
    pub shared: bool,
    /// Where global quota comes from (default: the embedded store). Not
    /// recorded in the table: every process of a host must name the same.
    pub store: StoreOptions,
    /// Number of balancer slots (default 16; 0 = none).
    pub balancers: u32,
    /// Backends each balancer can hold at once (default 32).
    pub backends_per_balancer: u32,
    /// A config file (TOML) whose limits win over the ones set in code
    /// (see [`crate::ConfigFile`]); `None`: the file `FLOWCTRL_CONFIG`
    /// names, if it names one.
    pub config: Option<PathBuf>,
    /// How many (task, process) pairs can hold ledger lanes at once. 0 (the
    /// default) gives every pair its own at a fixed place, as every release
    /// did: the file grows as tasks × processes (1,280 B a pair) and 0.3
    /// processes can share it. N > 0 makes a pool of N sets, taken on a
    /// process's first use of a task and given back when it dies: the file
    /// then grows with use (4 B a pair, 1,280 B a set), and 0.3 refuses it.
    /// A process that finds the pool empty still decides: rate and global
    /// limits as always, its acquires of a capped task refused as
    /// concurrency; both counted (`TaskStats::unlaned`). Applies only when
    /// the file does not exist.
    pub lanes: u32,
}

impl Default for TableOptions {
    fn default() -> Self {
        Self {
            capacity: 256,
            max_processes: 64,
            mode: 0o600,
            owner: None,
            shared: false,
            store: StoreOptions::default(),
            balancers: 16,
            backends_per_balancer: 32,
            config: None,
            lanes: 0,
        }
    }
}

impl TableOptions {
    /// Takes global quota from the store at `url` (`redis://...`,
    /// `rediss://...`, the Sentinel and Cluster forms of `StoreOptions::url`)
    /// instead of the embedded store.
    pub fn store(mut self, url: impl Into<String>) -> Self {
        self.store.url = Some(url.into());
        self
    }

    /// Takes the table's limits from the config file at `path`.
    pub fn config(mut self, path: impl Into<PathBuf>) -> Self {
        self.config = Some(path.into());
        self
    }

    /// The options with a config file's `[table]` over the defaults, and
    /// checked as [`Table::open`] checks them: what `flowctrl config check`
    /// and `flowctrl manage` run, so a file either passes all three or none.
    /// A refused value is named with its place in the file.
    pub fn from_config(file: &ConfigFile) -> Result<Self> {
        options_with(file, &Self::default())
    }

    /// Refuses what no table can be opened with, naming the option as
    /// `[table]` spells it (`capacity`, `store`, `store_timeout_ms`, ...).
    fn check_fields(&self) -> std::result::Result<(), (&'static str, Error)> {
        if !(1..=MAX_TASK_CAPACITY).contains(&self.capacity) {
            return Err((
                "capacity",
                Error::invalid(format!(
                    "capacity must be 1..={MAX_TASK_CAPACITY}, not {}",
                    self.capacity
                )),
            ));
        }
        if !(1..=MAX_ATTACH_CAPACITY).contains(&self.max_processes) {
            return Err((
                "max_processes",
                Error::invalid(format!(
                    "max_processes must be 1..={MAX_ATTACH_CAPACITY}, not {}",
                    self.max_processes
                )),
            ));
        }
        if self.mode & !0o777 != 0 || self.mode & 0o600 != 0o600 {
            return Err((
                "mode",
                Error::invalid(format!(
                    "mode {:#o} must be permission bits including owner read and write (0o600)",
                    self.mode
                )),
            ));
        }
        if self.mode & 0o022 != 0 && !self.shared {
            return Err((
                "mode",
                Error::invalid(format!(
                    "mode {:#o} lets group or others write the table: ask for a shared table",
                    self.mode
                )),
            ));
        }
        crate::balance::check_capacity(self.balancers, 1).map_err(|e| ("balancers", e))?;
        crate::balance::check_capacity(self.balancers, self.backends_per_balancer)
            .map_err(|e| ("backends_per_balancer", e))?;
        let pairs = self.capacity as u64 * self.max_processes as u64;
        if self.lanes as u64 > pairs {
            return Err((
                "lanes",
                Error::invalid(format!(
                    "lanes must be 0 (a set per pair) or at most capacity × max_processes = \
                     {pairs}, not {}",
                    self.lanes
                )),
            ));
        }
        self.store.check_fields()?;
        crate::quota::check_url(&self.store).map_err(|e| ("store", e))
    }

    fn spec(&self) -> Result<OpenSpec> {
        self.check_fields().map_err(|(_, e)| e)?;
        let backends = crate::balance::check_capacity(self.balancers, self.backends_per_balancer)?;
        Ok(OpenSpec {
            geometry: Geometry {
                task_capacity: self.capacity,
                attach_capacity: self.max_processes,
                balancer_capacity: self.balancers,
                backend_capacity: backends,
                lane_sets: self.lanes,
            },
            mode: self.mode,
            // SAFETY: geteuid cannot fail.
            owner: self.owner.unwrap_or_else(|| unsafe { libc::geteuid() }),
            shared: self.shared,
        })
    }
}

/// Resolves the path a user gave: none → `/dev/shm/flowctrl`, a bare name →
/// `/dev/shm/<name>`, anything with a `/` → itself.
pub fn resolve_path(path: Option<&Path>) -> PathBuf {
    match path {
        None => Path::new(DEFAULT_DIR).join(DEFAULT_NAME),
        Some(p) if p.components().count() == 1 && !p.has_root() && p != Path::new(".") => {
            Path::new(DEFAULT_DIR).join(p)
        }
        Some(p) => p.to_path_buf(),
    }
}

/// A handle to a table. Cheap to clone; every clone and every [`Task`] made
/// from it share one mapping and one attachment per process.
#[derive(Clone)]
pub struct Table {
    shm: Arc<Shm>,
    quota: Arc<Quota>,
    /// The waiters of this handle's tasks.
    waits: Arc<WaitRoom>,
    /// The config file, if the table was opened with one.
    file: Option<Arc<Live>>,
}

/// What [`Table::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableCheck {
    /// The path no longer names the file this handle maps (deleted or
    /// replaced): processes opening it now get another table.
    pub replaced: bool,
    /// Tasks whose concurrency count differs from their ledgers: (name, drift).
    pub drift: Vec<(String, i64)>,
    /// Tasks that never held still long enough to be compared.
    pub unchecked: Vec<String>,
}

impl TableCheck {
    pub fn is_ok(&self) -> bool {
        !self.replaced && self.drift.is_empty()
    }

    /// The drifted task with the largest drift (either sign).
    pub fn worst(&self) -> Option<(&str, i64)> {
        self.drift
            .iter()
            .max_by_key(|(_, d)| d.unsigned_abs())
            .map(|(name, d)| (name.as_str(), *d))
    }
}

impl Table {
    /// Opens the table at `path` (see [`resolve_path`]), creating it if it does
    /// not exist, and attaches this handle to it.
    /// With a config file (the options' or `FLOWCTRL_CONFIG`'s), its
    /// `[table]` section wins over `path` and the options, and its tasks'
    /// fields are applied to the table if this version of it was not yet.
    pub fn open(path: impl AsRef<Path>, options: &TableOptions) -> Result<Self> {
        let file = ConfigFile::find(options.config.as_deref())?;
        let (path, options) = match &file {
            Some(f) => (
                f.table.path.clone().unwrap_or(path.as_ref().to_path_buf()),
                options_with(f, options)?,
            ),
            None => (path.as_ref().to_path_buf(), options.clone()),
        };
        let spec = options.spec()?;
        let path = resolve_path(Some(&path));
        let quota = Arc::new(Quota::new(&options.store, &path)?);
        let shm = Shm::open(&path, spec, &TableReclaim)?;
        let file = file.map(|f| {
            config_file::apply(&shm, &quota, &f, None);
            let live = Arc::new(Live::new(f));
            let (watched, q) = (live.clone(), quota.clone());
            shm.set_watch(Box::new(move |shm| watched.poll(shm, &q)));
            live
        });
        Ok(Self {
            shm,
            quota,
            waits: Arc::default(),
            file,
        })
    }

    /// The config file in force (its last good version), if any.
    pub fn config_file(&self) -> Option<Arc<ConfigFile>> {
        self.file.as_ref().map(|f| f.current())
    }

    /// Versions of the config file refused so far, host-wide.
    pub fn config_errors(&self) -> u64 {
        self.shm
            .header()
            .config_errors
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Opens the default table, `/dev/shm/flowctrl`.
    pub fn open_default(options: &TableOptions) -> Result<Self> {
        Self::open(resolve_path(None), options)
    }

    pub fn path(&self) -> &Path {
        self.shm.path()
    }

    /// Number of task slots.
    pub fn capacity(&self) -> u32 {
        self.shm.geometry.task_capacity
    }

    /// Number of attachment slots.
    pub fn max_processes(&self) -> u32 {
        self.shm.geometry.attach_capacity
    }

    /// The lane pool of a table created with `lanes = N`: (sets in use, N);
    /// `None` for a table with lanes for every pair.
    pub fn lane_pool(&self) -> Option<(u32, u32)> {
        crate::shm::pool::usage(&self.shm)
    }

    /// The table file's size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.shm.size() as u64
    }

    /// The clock decisions are taken against.
    pub fn clock(&self) -> Clock {
        self.shm.clock
    }

    /// A handle of the task in slot `index`, sharing this table's waiters.
    fn handle(&self, index: u32, name: &str) -> Task {
        // Every task: one may gain a global limit by an update.
        Keeper::watch(&self.shm, &self.quota, index, name);
        Task::new(
            self.shm.clone(),
            self.quota.clone(),
            self.waits.clone(),
            index,
            name,
        )
    }

    /// Registers the task `name`, or attaches to it if any process on the host
    /// registered it already. The first registration sets the configuration:
    /// a later one that names a different value for any field it sets fails
    /// with [`ErrorKind::ConfigMismatch`](crate::ErrorKind::ConfigMismatch) (fields left unset are not
    /// compared); [`Task::update`] changes a task's configuration on purpose.
    /// Waits up to 2 s for another live process registering a task in the
    /// same slot, then fails with [`ErrorKind::Timeout`](crate::ErrorKind::Timeout).
    ///
    /// With a config file that names the task, the file's fields win over
    /// `config`'s and over what the table holds (they are applied host-wide
    /// if the table differs); the fields only `config` sets are compared.
    pub fn task(&self, name: &str, config: &TaskConfig) -> Result<Task> {
        crate::words::validate_name(name, "task name")?;
        config.check_asked()?;
        self.quota.check_spread(config.global.shards)?;
        let Some(file) = self.config_file() else {
            let index = task::find_or_claim(&self.shm, name, config.over(TaskSettings::default()))?;
            let task = self.handle(index, name);
            task.check_matches(config)?;
            return Ok(task);
        };
        let settings = file.task_over(name, config).over(TaskSettings::default());
        self.quota.check_spread(Some(settings.global.shards))?;
        let index = task::find_or_claim(&self.shm, name, settings)?;
        let task = self.handle(index, name);
        if let Some(fields) = file.tasks.get(name) {
            // Only the version the table applied is applied again: a
            // process that has not read a newer one must not undo it.
            if file.is_applied(&self.shm) {
                config_file::update_if_needed(&task, fields)?;
            }
            task.check_matches(&config_file::not_in(fields, config))?;
        } else {
            task.check_matches(config)?;
        }
        if let Some(keys) = file.keys.get(name)
            && file.is_applied(&self.shm)
        {
            config_file::apply_keys(&task, keys)?;
        }
        Ok(task)
    }

    /// Registers the balancer `name`, or attaches to it if any process on the
    /// host registered it already (see [`Balancer`]).
    ///
    /// With a config file that names the balancer, its options win over
    /// `config`, and its backends (if it lists them) are set.
    pub fn balancer(&self, name: &str, config: &BalancerConfig) -> Result<Balancer> {
        let file = self.config_file();
        let Some(section) = file.as_ref().and_then(|f| f.balancers.get(name)) else {
            return balance::register(&self.shm, name, config);
        };
        let balancer = balance::register(&self.shm, name, &section.config)?;
        if let Some(backends) = &section.backends {
            let list: Vec<(&str, u32)> = backends.iter().map(|(a, w)| (a.as_str(), *w)).collect();
            balancer.set_backends(&list)?;
        }
        Ok(balancer)
    }

    /// [`Table::balancer`], then [`Balancer::set_backends`]; the list is
    /// checked first, so a bad one takes no balancer slot.
    pub fn balancer_with_backends(
        &self,
        name: &str,
        config: &BalancerConfig,
        backends: &[(&str, u32)],
    ) -> Result<Balancer> {
        balance::check_backends(&self.shm, backends)?;
        let balancer = self.balancer(name, config)?;
        balancer.set_backends(backends)?;
        Ok(balancer)
    }

    /// Looks for dead processes now and gives back what they held; returns
    /// how many were found. Each attached process also does this in a
    /// background thread (host-wide at most every 10 ms), so calling it is
    /// rarely needed.
    pub fn reap(&self) -> usize {
        self.shm.reap()
    }

    /// Checks the table: that the path still names this file, and that every
    /// task's concurrency count equals what the processes' ledgers hold.
    pub fn check(&self) -> TableCheck {
        check_region(&self.shm, self.shm.replaced())
    }
}

/// The options with a config file's `[table]` fields over them, checked:
/// a value the file set that is refused is named with its place in it.
fn options_with(file: &ConfigFile, code: &TableOptions) -> Result<TableOptions> {
    let t = &file.table;
    let mut o = code.clone();
    let ms = |v: Option<u32>, d: &mut std::time::Duration| {
        if let Some(ms) = v {
            *d = std::time::Duration::from_millis(ms as u64);
        }
    };
    if let Some(url) = &t.store {
        o.store.url = Some(url.clone());
    }
    if let Some(p) = &t.key_prefix {
        o.store.key_prefix = p.clone();
    }
    ms(t.store_timeout_ms, &mut o.store.timeout);
    ms(t.connect_timeout_ms, &mut o.store.connect_timeout);
    ms(t.probe_interval_ms, &mut o.store.probe_interval);
    if let Some(id) = &t.host_id {
        o.store.host_id = Some(id.clone());
    }
    let set = |v: Option<u32>, field: &mut u32| {
        if let Some(v) = v {
            *field = v;
        }
    };
    set(t.capacity, &mut o.capacity);
    set(t.max_processes, &mut o.max_processes);
    set(t.lanes, &mut o.lanes);
    set(t.balancers, &mut o.balancers);
    set(t.backends_per_balancer, &mut o.backends_per_balancer);
    set(t.mode, &mut o.mode);
    if let Some(shared) = t.shared {
        o.shared = shared;
    }
    o.check_fields()
        .map_err(|(field, e)| match file.table_at(field) {
            Some(at) => Error::new(e.kind(), format!("{at}: [table] {field}: {}", e.message())),
            None => e,
        })?;
    Ok(o)
}

/// [`Table::check`] of a mapping (an attached handle's or a view's), whose
/// path no longer names it if `replaced`.
pub(crate) fn check_region(region: &Region, replaced: bool) -> TableCheck {
    check_within(region, replaced, Duration::from_secs(1))
}

/// [`check_region`], giving up on a task that does not hold still for
/// `patience` (it is listed as unchecked).
pub(crate) fn check_within(region: &Region, replaced: bool, patience: Duration) -> TableCheck {
    let mut report = TableCheck {
        replaced,
        ..TableCheck::default()
    };
    for (index, name) in task::ready(region) {
        match task::consistency(region, index, &name, patience) {
            Ok(c) if c.drift() != 0 => report.drift.push((name, c.drift())),
            Ok(_) => {}
            Err(_) => report.unchecked.push(name),
        }
    }
    report
}

/// What a dead attachment held: task permits, then balancer picks.
struct TableReclaim;

impl Reclaim for TableReclaim {
    fn reclaim(&self, shm: &Shm, attach: u32) {
        TaskReclaim.reclaim(shm, attach);
        balance::BalanceReclaim.reclaim(shm, attach);
    }

    fn baseline(&self, shm: &Shm, attach: u32) {
        TaskReclaim.baseline(shm, attach);
    }
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("path", &self.path())
            .field("capacity", &self.capacity())
            .field("max_processes", &self.max_processes())
            .field("lane_pool", &self.lane_pool())
            .finish()
    }
}
