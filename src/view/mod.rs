//! A read-only view of a table, for operators: the `flowctrl` command and
//! the metrics exposition read tables through it.
//!
//! **What a view trusts: nothing of the table's owner.** It never maps the
//! table. Each read pass ([`View::snapshot`]; every other read makes one)
//! fstats the file and copies the whole table with `pread` into memory of
//! this process, checks the copy's header and geometry as an attached open
//! checks the file's (and against the header it was opened with), and runs
//! the readers on the copy, where every index read from the file is
//! checked. So an owner that truncates the file, writes garbage into it or
//! makes it anew in place gets the view's reads an error ("the table shrank
//! under the view", "the table's header changed in place") or odd numbers,
//! never a crash: a view survives truncation, which a process attached to
//! the table (it maps it) does not. Nothing it does can change the file: the
//! descriptor is read-only, and it registers nothing, takes no permit, no
//! lock and no attachment slot, so another user's table can be read
//! wherever its file mode lets this user read it. What it reports comes from
//! the readers attached handles use (`Task::stats`, `Task::settings`,
//! `Task::quota_stats`, `Balancer::stats`, `Table::check`).
//!
//! A copy costs the table's size in memory for as long as the snapshot
//! lives, and the time of a `pread` of it (the default table is 21 MiB).

use std::path::Path;
use std::sync::Arc;

use crate::balance::{self, BalancerConfig, BalancerStats};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::quota::QuotaStats;
use crate::shm::{ReadOnly, Region};
use crate::table::{self, TableCheck};
use crate::task::{self, Histogram, ProcessStats, TaskSettings, TaskStats};

/// A table opened for reading only. `Send + Sync`; every read copies the
/// table anew (take a [`View::snapshot`] for several reads of one copy).
pub struct View {
    table: Arc<ReadOnly>,
}

/// One copy of a table, read at once: every read of it answers from the
/// same bytes (the keyed tasks' key files are read when asked for).
pub struct TableSnapshot {
    region: Region,
    table: Arc<ReadOnly>,
}
/// One task as a view read it.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSnapshot {
    pub name: String,
    /// The configuration in force (its global part may be the store's:
    /// `settings.global_source`).
    pub settings: TaskSettings,
    /// The counters summed over every process that ever used the task.
    pub stats: TaskStats,
    /// Its global quota on this host (`state` is `None` without a global
    /// rate).
    pub quota: QuotaStats,
    /// Round-trip times of the permits released as success or dropped.
    pub rtt: Histogram,
    /// How long the acquires that joined the task's queue waited there.
    pub waited: Histogram,
}

/// One balancer as a view read it.
#[derive(Clone, Debug, PartialEq)]
pub struct BalancerSnapshot {
    pub name: String,
    pub config: BalancerConfig,
    pub stats: BalancerStats,
}

/// An attachment slot marked live in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttachedProcess {
    pub slot: u32,
    /// The pid its owner saw itself as (its own pid namespace).
    pub pid: u32,
    /// Whether its owner still holds the slot's kernel lock; `false`: it
    /// died and no process has reaped it yet; `None`: the kernel would not
    /// say.
    pub alive: Option<bool>,
}

impl View {
    /// Opens the table at `path` (a bare name is looked for in `/dev/shm`,
    /// as [`crate::Table::open`] does) for reading, and checks its header.
    /// A missing file is an error: a view never creates a table.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = table::resolve_path(Some(path.as_ref()));
        Ok(Self {
            table: Arc::new(ReadOnly::open(&path)?),
        })
    }

    /// One read pass: the table copied whole and checked. An error when the
    /// file is now shorter than its header declares ("the table shrank
    /// under the view") or its header changed in place; a later pass may
    /// succeed (or open the path anew: [`View::replaced`]).
    pub fn snapshot(&self) -> Result<TableSnapshot> {
        Ok(TableSnapshot {
            region: self.table.copy()?,
            table: self.table.clone(),
        })
    }

    pub fn path(&self) -> &Path {
        self.table.path()
    }

    /// Whether the path no longer names the file this view reads (deleted,
    /// or replaced by another table): open it anew to follow it.
    pub fn replaced(&self) -> bool {
        self.table.replaced()
    }

    /// Number of task slots.
    pub fn capacity(&self) -> u32 {
        self.table.geometry().task_capacity
    }

    /// Number of attachment slots.
    pub fn max_processes(&self) -> u32 {
        self.table.geometry().attach_capacity
    }

    /// Number of balancer slots.
    pub fn balancer_capacity(&self) -> u32 {
        self.table.geometry().balancer_capacity
    }

    /// Backends each balancer can hold.
    pub fn backends_per_balancer(&self) -> u32 {
        self.table.geometry().backend_capacity
    }

    /// The table's clock (the one its processes decide with).
    pub fn clock(&self) -> Clock {
        self.table.clock()
    }

    /// The lane pool: (sets in use, sets); `None` for a table with lanes
    /// for every pair.
    pub fn lane_pool(&self) -> Result<Option<(u32, u32)>> {
        Ok(self.snapshot()?.lane_pool())
    }

    /// Every registered task, by name.
    pub fn tasks(&self) -> Result<Vec<TaskSnapshot>> {
        Ok(self.snapshot()?.tasks())
    }

    /// The task `name`; an error naming the tasks there are if it has none.
    pub fn task(&self, name: &str) -> Result<TaskSnapshot> {
        self.snapshot()?.task(name)
    }

    /// Keyed task `name`'s key counters: [`TableSnapshot::key_counters`].
    pub fn key_counters(&self, name: &str) -> Result<Option<crate::KeyStats>> {
        self.snapshot()?.key_counters(name)
    }

    /// Keyed task `name`'s default key limits, key capacity and overflow
    /// policy (`None`: it has no key limits).
    pub fn key_config(&self, name: &str) -> Result<Option<crate::KeyConfig>> {
        self.snapshot()?.key_config(name)
    }

    /// Keyed task `name`'s overrides: [`TableSnapshot::key_overrides`].
    pub fn key_overrides(&self, name: &str) -> Result<Option<Vec<(u64, crate::KeyLimits)>>> {
        self.snapshot()?.key_overrides(name)
    }

    /// Keyed task `name`'s key counters (`None`: it has no key limits).
    pub fn key_stats(&self, name: &str) -> Result<Option<crate::KeyStats>> {
        self.snapshot()?.key_stats(name)
    }

    /// Keyed task `name`'s keys whose permits in flight differ from the
    /// processes' records: [`TableSnapshot::key_drift`].
    pub fn key_drift(&self, name: &str) -> Result<Option<Vec<(u32, u64, i64)>>> {
        self.snapshot()?.key_drift(name)
    }

    /// Keyed task `name`'s `top` keys by admissions (or refusals).
    pub fn top_keys(
        &self,
        name: &str,
        top: usize,
        by_refused: bool,
    ) -> Result<Option<Vec<crate::KeyInfo>>> {
        self.snapshot()?.top_keys(name, top, by_refused)
    }

    /// Each live attachment's share of task `name`'s counters since it
    /// attached (as [`crate::Task::stats_by_process`]).
    pub fn processes_of(&self, name: &str) -> Result<Vec<ProcessStats>> {
        self.snapshot()?.processes_of(name)
    }

    /// The attachment slots marked live, and whether their owners are.
    pub fn processes(&self) -> Result<Vec<AttachedProcess>> {
        Ok(self.snapshot()?.processes())
    }

    /// Every registered balancer, by name.
    pub fn balancers(&self) -> Result<Vec<BalancerSnapshot>> {
        Ok(self.snapshot()?.balancers())
    }

    /// [`crate::Table::check`], read only: [`TableSnapshot::check`].
    pub fn check(&self) -> Result<TableCheck> {
        Ok(self.snapshot()?.check())
    }
}

impl TableSnapshot {
    pub fn path(&self) -> &Path {
        self.table.path()
    }

    /// Number of task slots.
    pub fn capacity(&self) -> u32 {
        self.region.geometry.task_capacity
    }

    /// Number of attachment slots.
    pub fn max_processes(&self) -> u32 {
        self.region.geometry.attach_capacity
    }

    /// The layout version of the table file ([`crate::LAYOUT_VERSION`], or
    /// the pooled lanes' version).
    pub fn layout_version(&self) -> u32 {
        self.region.geometry.layout_version()
    }

    /// The lane pool: (sets in use, sets); `None` for a table with lanes
    /// for every pair.
    pub fn lane_pool(&self) -> Option<(u32, u32)> {
        crate::shm::pool::usage(&self.region)
    }

    /// Every registered task, by name.
    pub fn tasks(&self) -> Vec<TaskSnapshot> {
        let mut tasks: Vec<_> = task::ready(&self.region)
            .into_iter()
            .map(|(index, name)| self.task_at(index, name))
            .collect();
        tasks.sort_by(|a, b| a.name.cmp(&b.name));
        tasks
    }

    /// The task `name`; an error naming the tasks there are if it has none.
    pub fn task(&self, name: &str) -> Result<TaskSnapshot> {
        let index = self.index_of(name)?;
        Ok(self.task_at(index, name.to_string()))
    }

    /// The key file of keyed task `name`, copied (`None`: it has no key
    /// limits). A copy read with `pread`: a file shrunk under the view is
    /// an error, never a signal.
    fn keys_of(&self, name: &str) -> Result<Option<crate::keyed::KeyRegion>> {
        let Some((index, id)) = self.keyed(name)? else {
            return Ok(None);
        };
        crate::keyed::KeyRegion::snapshot(
            self.path(),
            id,
            index,
            self.region.geometry.attach_capacity,
        )
    }

    /// Task `name`'s slot and the table's id, if the task is keyed.
    fn keyed(&self, name: &str) -> Result<Option<(u32, u64)>> {
        use std::sync::atomic::Ordering::Relaxed;
        let index = self.index_of(name)?;
        if self.region.task_slot(index).keyed.load(Relaxed) == 0 {
            return Ok(None);
        }
        Ok(Some((index, self.region.header().table_id.load(Relaxed))))
    }

    /// Keyed task `name`'s key counters read from its key file's header
    /// alone (`keys` and `live` are 0: see [`TableSnapshot::key_stats`]).
    pub fn key_counters(&self, name: &str) -> Result<Option<crate::KeyStats>> {
        let Some((index, id)) = self.keyed(name)? else {
            return Ok(None);
        };
        Ok(crate::keyed::KeyRegion::counters(
            self.path(),
            id,
            index,
            self.region.geometry.attach_capacity,
        )?
        .map(|(c, record, capacity)| crate::keyed::counters_only(c, record, capacity)))
    }

    /// Keyed task `name`'s default key limits, key capacity and overflow
    /// policy (`None`: it has no key limits).
    pub fn key_config(&self, name: &str) -> Result<Option<crate::KeyConfig>> {
        let clock = self.region.clock;
        Ok(self
            .keys_of(name)?
            .map(|k| crate::keyed::config_of(&k, &clock)))
    }

    /// Keyed task `name`'s overrides (`None`: it has no key limits): each
    /// key's identity ([`crate::KeyInfo::ident`]) and its limits. A key
    /// without one has the task's ([`TableSnapshot::key_config`]).
    pub fn key_overrides(&self, name: &str) -> Result<Option<Vec<(u64, crate::KeyLimits)>>> {
        let clock = self.region.clock;
        Ok(self
            .keys_of(name)?
            .map(|k| crate::keyed::overrides_of(&k, &clock)))
    }

    /// Keyed task `name`'s key counters (`None`: it has no key limits).
    pub fn key_stats(&self, name: &str) -> Result<Option<crate::KeyStats>> {
        let now = self.region.clock.now();
        Ok(self
            .keys_of(name)?
            .map(|k| crate::keyed::key_stats(&k, now)))
    }

    /// Keyed task `name`'s keys whose count of permits in flight differs
    /// from what the processes' records hold (entry, counted, recorded):
    /// empty when exact. From a copy: a view changes nothing.
    pub fn key_drift(&self, name: &str) -> Result<Option<Vec<(u32, u64, i64)>>> {
        Ok(self.keys_of(name)?.map(|k| crate::keyed::drift_of(&k)))
    }

    /// Keyed task `name`'s `top` keys by admissions (or refusals).
    pub fn top_keys(
        &self,
        name: &str,
        top: usize,
        by_refused: bool,
    ) -> Result<Option<Vec<crate::KeyInfo>>> {
        let now = self.region.clock.now();
        Ok(self
            .keys_of(name)?
            .map(|k| crate::keyed::key_infos(&k, now, top, by_refused)))
    }

    /// Each live attachment's share of task `name`'s counters since it
    /// attached (as [`crate::Task::stats_by_process`]).
    pub fn processes_of(&self, name: &str) -> Result<Vec<ProcessStats>> {
        Ok(task::by_process(&self.region, self.index_of(name)?))
    }

    /// The attachment slots marked live, and whether their owners are
    /// (asked of the kernel now).
    pub fn processes(&self) -> Vec<AttachedProcess> {
        self.region
            .attachments()
            .map(|(slot, pid)| AttachedProcess {
                slot,
                pid,
                alive: self.table.owner_alive(slot),
            })
            .collect()
    }

    /// Every registered balancer, by name.
    pub fn balancers(&self) -> Vec<BalancerSnapshot> {
        let now_ms = balance::now_ms(&self.region.clock);
        let mut balancers: Vec<_> = balance::ready(&self.region)
            .into_iter()
            .map(|(index, name)| BalancerSnapshot {
                name,
                config: balance::config_of(&self.region, index),
                stats: balance::read_stats(&self.region, index, now_ms),
            })
            .collect();
        balancers.sort_by(|a, b| a.name.cmp(&b.name));
        balancers
    }

    /// [`crate::Table::check`], read only: whether the path still names
    /// this file, and every task's concurrency count against its ledgers.
    /// The words compared are read from the file again, at one instant
    /// (`pread`s of them alone: a copy of the whole table is no instant).
    pub fn check(&self) -> TableCheck {
        table::check_region(&self.region, self.table.replaced())
    }

    /// [`Self::check`], waiting at most `patience` for each task to hold
    /// still (a scrape cannot wait a second per busy task).
    #[cfg(feature = "metrics")]
    pub(crate) fn check_within(&self, patience: std::time::Duration) -> TableCheck {
        table::check_within(&self.region, self.table.replaced(), patience)
    }

    fn task_at(&self, index: u32, name: String) -> TaskSnapshot {
        let slot = self.region.task_slot(index);
        let stats = task::read_stats(&self.region, index);
        TaskSnapshot {
            name,
            settings: task::settings(slot),
            rtt: task::rtt_histogram(&self.region, index, &stats),
            waited: task::wait_histogram(&self.region, index),
            stats,
            quota: task::quota_stats(slot),
        }
    }

    /// The slot of task `name`, found by its hash as a registration finds
    /// it; the error names the first tasks there are (ten at most).
    fn index_of(&self, name: &str) -> Result<u32> {
        if let Some(index) = task::find(&self.region, name) {
            return Ok(index);
        }
        let mut names: Vec<_> = task::ready(&self.region)
            .into_iter()
            .map(|(_, n)| n)
            .collect();
        names.sort();
        let more = names.len().saturating_sub(10);
        let mut shown: Vec<String> = names
            .iter()
            .take(10)
            .map(|n| crate::words::cut(n, 40))
            .collect();
        if more > 0 {
            shown.push(format!("and {more} more"));
        }
        Err(Error::invalid(format!(
            "table {} has no task {} (its tasks: {})",
            self.path().display(),
            crate::words::echo(name),
            if shown.is_empty() {
                "none".to_string()
            } else {
                shown.join(", ")
            }
        )))
    }
}

impl std::fmt::Debug for TableSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableSnapshot")
            .field("path", &self.path())
            .finish()
    }
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View").field("path", &self.path()).finish()
    }
}

#[cfg(test)]
mod tests;
