//! A read-only view of a table, for operators: the `flowctrl` command and
//! the metrics exposition read tables through it.
//!
//! A view maps the file without write permission from a read-only
//! descriptor (`shm::ReadOnly`), after the checks of the header and
//! geometry an attached open makes. It registers nothing, takes no permit,
//! no lock and no attachment slot, and needs no trust in the table's owner:
//! another user's table can be read wherever its file mode lets this user
//! read it. What it reports comes from the readers attached handles use
//! (`Task::stats`, `Task::settings`, `Task::quota_stats`, `Balancer::stats`,
//! `Table::check`), run on the read-only mapping.

use std::path::Path;

use crate::balance::{self, BalancerConfig, BalancerStats};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::quota::QuotaStats;
use crate::shm::ReadOnly;
use crate::table::{self, TableCheck};
use crate::task::{self, ProcessStats, TaskSettings, TaskStats};

/// A table opened for reading only. `Send + Sync`; every call reads the
/// table anew.
pub struct View {
    table: ReadOnly,
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
    /// as [`crate::Table::open`] does) for reading. A missing file is an
    /// error: a view never creates a table.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = table::resolve_path(Some(path.as_ref()));
        Ok(Self {
            table: ReadOnly::open(&path)?,
        })
    }

    pub fn path(&self) -> &Path {
        self.table.path()
    }

    /// Number of task slots.
    pub fn capacity(&self) -> u32 {
        self.table.geometry.task_capacity
    }

    /// Number of attachment slots.
    pub fn max_processes(&self) -> u32 {
        self.table.geometry.attach_capacity
    }

    /// The lane pool: (sets in use, sets); `None` for a table with lanes
    /// for every pair.
    pub fn lane_pool(&self) -> Option<(u32, u32)> {
        crate::shm::pool::usage(&self.table)
    }

    /// Number of balancer slots.
    pub fn balancer_capacity(&self) -> u32 {
        self.table.geometry.balancer_capacity
    }

    /// Backends each balancer can hold.
    pub fn backends_per_balancer(&self) -> u32 {
        self.table.geometry.backend_capacity
    }

    /// The table's clock (the one its processes decide with).
    pub fn clock(&self) -> Clock {
        self.table.clock
    }

    /// Every registered task, by name.
    pub fn tasks(&self) -> Vec<TaskSnapshot> {
        let mut tasks: Vec<_> = task::ready(&self.table)
            .into_iter()
            .map(|(index, name)| self.snapshot(index, name))
            .collect();
        tasks.sort_by(|a, b| a.name.cmp(&b.name));
        tasks
    }

    /// The task `name`; an error naming the tasks there are if it has none.
    pub fn task(&self, name: &str) -> Result<TaskSnapshot> {
        let index = self.index_of(name)?;
        Ok(self.snapshot(index, name.to_string()))
    }

    /// The key file of keyed task `name`, copied (`None`: it has no key
    /// limits). A copy read with `pread`: a file shrunk under the view is
    /// an error, never a signal.
    fn keys_of(&self, name: &str) -> Result<Option<crate::keyed::KeyRegion>> {
        let index = self.index_of(name)?;
        let slot = self.table.task_slot(index);
        if slot.keyed.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return Ok(None);
        }
        crate::keyed::KeyRegion::snapshot(
            &self.table.path,
            self.table
                .header()
                .table_id
                .load(std::sync::atomic::Ordering::Relaxed),
            index,
            self.table.geometry.attach_capacity,
        )
    }

    /// Keyed task `name`'s key counters read from its key file's header
    /// alone (`keys` and `live` are 0: see [`View::key_stats`]).
    pub fn key_counters(&self, name: &str) -> Result<Option<crate::KeyStats>> {
        let index = self.index_of(name)?;
        if self
            .table
            .task_slot(index)
            .keyed
            .load(std::sync::atomic::Ordering::Relaxed)
            == 0
        {
            return Ok(None);
        }
        let id = self
            .table
            .header()
            .table_id
            .load(std::sync::atomic::Ordering::Relaxed);
        Ok(crate::keyed::KeyRegion::counters(
            &self.table.path,
            id,
            index,
            self.table.geometry.attach_capacity,
        )?
        .map(|(c, capacity)| crate::keyed::counters_only(c, capacity)))
    }

    /// Keyed task `name`'s key counters (`None`: it has no key limits).
    pub fn key_stats(&self, name: &str) -> Result<Option<crate::KeyStats>> {
        let now = self.table.clock.now();
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
        let now = self.table.clock.now();
        Ok(self
            .keys_of(name)?
            .map(|k| crate::keyed::key_infos(&k, now, top, by_refused)))
    }

    /// Each live attachment's share of task `name`'s counters since it
    /// attached (as [`crate::Task::stats_by_process`]).
    pub fn processes_of(&self, name: &str) -> Result<Vec<ProcessStats>> {
        Ok(task::by_process(&self.table, self.index_of(name)?))
    }

    /// The attachment slots marked live, and whether their owners are.
    pub fn processes(&self) -> Vec<AttachedProcess> {
        self.table
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
        let now_ms = balance::now_ms(&self.table.clock);
        let mut balancers: Vec<_> = balance::ready(&self.table)
            .into_iter()
            .map(|(index, name)| BalancerSnapshot {
                name,
                config: balance::config_of(&self.table, index),
                stats: balance::read_stats(&self.table, index, now_ms),
            })
            .collect();
        balancers.sort_by(|a, b| a.name.cmp(&b.name));
        balancers
    }

    /// [`crate::Table::check`], read only: whether the path still names
    /// this file, and every task's concurrency count against its ledgers.
    pub fn check(&self) -> TableCheck {
        table::check_region(&self.table, self.table.replaced())
    }

    fn snapshot(&self, index: u32, name: String) -> TaskSnapshot {
        let slot = self.table.task_slot(index);
        TaskSnapshot {
            name,
            settings: task::settings(slot),
            stats: task::read_stats(&self.table, index),
            quota: task::quota_stats(slot),
        }
    }

    /// The slot of task `name`, found by its hash as a registration finds
    /// it; the error names the first tasks there are (ten at most).
    fn index_of(&self, name: &str) -> Result<u32> {
        if let Some(index) = task::find(&self.table, name) {
            return Ok(index);
        }
        let mut names: Vec<_> = task::ready(&self.table)
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

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View").field("path", &self.path()).finish()
    }
}
