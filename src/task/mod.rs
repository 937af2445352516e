//! Tasks: the unit a limit applies to, and the admit/release decisions.

mod config;
mod stats;

use std::sync::Arc;
use std::sync::atomic::Ordering;

pub use config::{TaskConfig, TaskSettings};
pub use stats::{ProcessStats, TaskStats};

use crate::error::{Error, ErrorKind, Result};
use crate::limit::{concurrency, gcra::Gcra};
use crate::table::TableInner;
use crate::table::layout::{STRIPES, StatCell};

/// Which limit turned a request away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limited {
    /// The host's local rate for the task is used up.
    Local,
    /// The host's concurrency cap for the task is reached.
    Concurrency,
}

/// How a request ended; reported at release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// It completed; its round-trip time is a latency sample.
    Success,
    /// It timed out or was shed: a sign the backend is struggling.
    Dropped,
    /// It ended before a meaningful round-trip time existed (no sample).
    Ignored,
}

/// A permit as plain data, for faces that keep it in caller memory (C) or in
/// an object of their own (Python). Rust code uses [`Permit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawPermit {
    /// Clock ticks at admission.
    pub acquired_at: u64,
    /// The attachment that holds it (see `table::attach`).
    pub owner: u64,
    /// The task's slot index.
    pub task: u32,
    pub n: u32,
    /// Bit 0: it holds concurrency. Other bits are zero.
    pub flags: u32,
}

/// [`RawPermit::flags`] bit: the permit holds `n` of the task's concurrency.
pub(crate) const COUNTED: u32 = 1;

/// A registered task. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Task {
    table: Arc<TableInner>,
    index: u32,
    name: Arc<str>,
}

/// An admitted request. Release it with an outcome; dropping it releases it
/// as [`Outcome::Ignored`].
#[must_use = "a permit holds concurrency until it is released"]
pub struct Permit<'a> {
    task: &'a Task,
    raw: RawPermit,
    released: bool,
}

/// The answer to an acquire.
#[must_use]
pub enum Decision<'a> {
    Admitted(Permit<'a>),
    Limited(Limited),
}

impl<'a> Decision<'a> {
    pub fn permit(self) -> Option<Permit<'a>> {
        match self {
            Decision::Admitted(p) => Some(p),
            Decision::Limited(_) => None,
        }
    }
}

impl Task {
    pub(crate) fn new(table: Arc<TableInner>, index: u32, name: &str) -> Self {
        Self {
            table,
            index,
            name: name.into(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configuration every process on the host applies now.
    pub fn settings(&self) -> TaskSettings {
        TaskSettings::load(self.table.task_slot(self.index))
    }

    /// Changes the fields of `config` that are set, for every process on the
    /// host. The rate state carries over: a new rate applies from now on.
    pub fn update(&self, config: &TaskConfig) -> Result<()> {
        let config = config.validate(&self.table.clock)?;
        let current = self.settings();
        let merged = TaskConfig {
            local_rate: config.local_rate.or(Some(current.local_rate)),
            burst: config.burst.or(Some(current.burst)),
            max_concurrency: config.max_concurrency.or(Some(current.max_concurrency)),
        };
        merged
            .or_defaults()
            .store(self.table.task_slot(self.index), &self.table.clock);
        Ok(())
    }

    pub(crate) fn check_matches(&self, asked: &TaskConfig) -> Result<()> {
        let mismatches = self.settings().mismatches(asked);
        if mismatches.is_empty() {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::ConfigMismatch,
            format!(
                "task {:?} is registered with {}; update the task to change its configuration",
                self.name,
                mismatches.join(", ")
            ),
        ))
    }

    /// Asks for `n` permits.
    pub fn acquire(&self, n: u32) -> Result<Decision<'_>> {
        Ok(match self.acquire_raw(n)? {
            Ok(raw) => Decision::Admitted(Permit {
                task: self,
                raw,
                released: false,
            }),
            Err(limited) => Decision::Limited(limited),
        })
    }

    /// [`Task::acquire`] for faces that keep the permit themselves; every
    /// admitted `RawPermit` must be given to [`Task::release_raw`] once.
    #[inline]
    pub fn acquire_raw(&self, n: u32) -> Result<Result<RawPermit, Limited>> {
        let table = &*self.table;
        let slot = table.task_slot(self.index);
        let owner = table.owner()?;
        let cell = table.cell(self.index, table.attach_index(owner), stripe());
        let cap = slot.max_concurrency.load(Ordering::Relaxed);
        let gcra = Gcra {
            interval: slot.interval.load(Ordering::Relaxed),
            burst: slot.burst.load(Ordering::Relaxed),
        };
        if n == 0 || (gcra.interval != 0 && n > gcra.burst) || (cap != 0 && n > cap) {
            return Err(self.unadmittable(n));
        }
        let counted = cap != 0;
        if counted
            && !concurrency::try_take(&slot.in_flight, cap as u64, n as u64)
            // Maybe a dead process holds permits: look (rate-limited), retry once.
            && !(table.maybe_reap(table.clock.now())
                && concurrency::try_take(&slot.in_flight, cap as u64, n as u64))
        {
            count(&cell.limited_concurrency, n as u64);
            return Ok(Err(Limited::Concurrency));
        }
        let now = if gcra.interval == 0 {
            table.clock.now()
        } else {
            match gcra.try_take(&slot.tat, n, || table.clock.now()) {
                Some(now) => now,
                None => {
                    if counted {
                        concurrency::give_back(&slot.in_flight, n as u64);
                    }
                    count(&cell.limited_local, n as u64);
                    return Ok(Err(Limited::Local));
                }
            }
        };
        count(&cell.admitted, n as u64);
        Ok(Ok(RawPermit {
            acquired_at: now,
            owner,
            task: self.index,
            n,
            flags: if counted { COUNTED } else { 0 },
        }))
    }

    #[cold]
    fn unadmittable(&self, n: u32) -> Error {
        let s = self.settings();
        let why = if n == 0 {
            "n must be at least 1".to_string()
        } else if s.local_rate != 0.0 && n > s.burst {
            format!(
                "n = {n} is above the burst of {}: it could never be admitted",
                s.burst
            )
        } else {
            format!(
                "n = {n} is above max_concurrency {}: it could never be admitted",
                s.max_concurrency
            )
        };
        Error::invalid(format!("task {:?}: {why}", self.name))
    }

    /// Releases a permit from [`Task::acquire_raw`], recording its outcome and
    /// round-trip time. Refuses a permit of another task, table or process
    /// (permits do not cross `fork`), and a release of more permits than this
    /// process holds of the task — so a buggy caller can never return
    /// concurrency that other processes hold. A raw permit carries no state of
    /// its own: releasing one twice while holding others of the task is
    /// accepted, and one of those is then refused.
    #[inline]
    pub fn release_raw(&self, permit: &mut RawPermit, outcome: Outcome) -> Result<()> {
        let table = &*self.table;
        let owner = table.owner()?;
        if permit.task != self.index || permit.owner != owner || permit.n == 0 {
            return Err(self.foreign_permit(permit, owner));
        }
        let attach = table.attach_index(owner);
        let cell = table.cell(self.index, attach, stripe());
        let n = permit.n as u64;
        // Usually the acquiring thread releases: its own stripe shows the
        // permit held. Otherwise count over every stripe of this process.
        if n > held(&[cell]) && n > held(&table.cells(self.index, attach)) {
            return Err(Error::invalid(format!(
                "task {:?}: permit released twice (this process holds fewer than {n})",
                self.name
            )));
        }
        if permit.flags & COUNTED != 0 {
            concurrency::give_back(&table.task_slot(self.index).in_flight, n);
        }
        let counter = match outcome {
            Outcome::Success => &cell.released_success,
            Outcome::Dropped => &cell.released_dropped,
            Outcome::Ignored => {
                count_released(&cell.released_ignored, n);
                return Ok(());
            }
        };
        let rtt = table
            .clock
            .ticks_to_ns(table.clock.now().saturating_sub(permit.acquired_at));
        count(&cell.rtt_sum_ns, rtt.saturating_mul(n));
        count_released(counter, n);
        Ok(())
    }

    #[cold]
    fn foreign_permit(&self, permit: &RawPermit, owner: u64) -> Error {
        let why = if permit.task != self.index {
            "it was issued for another task"
        } else if permit.owner != owner {
            "it was issued to another process or table (permits do not cross fork)"
        } else {
            "it is empty (n = 0)"
        };
        Error::invalid(format!(
            "task {:?}: cannot release this permit: {why}",
            self.name
        ))
    }

    /// The task's counters, summed over every process that ever used it.
    pub fn stats(&self) -> TaskStats {
        let table = &*self.table;
        let mut total = TaskStats::default();
        total.add_cell(&table.task_slot(self.index).retired);
        for attach in 0..table.geometry.attach_capacity {
            for cell in table.cells(self.index, attach) {
                total.add_cell(cell);
            }
        }
        total
    }

    /// The counters of each process attached now (pids as the table sees them).
    pub fn stats_by_process(&self) -> Vec<ProcessStats> {
        let table = &*self.table;
        table
            .attachments()
            .map(|(attach, pid)| {
                let mut stats = TaskStats::default();
                for cell in table.cells(self.index, attach) {
                    stats.add_cell(cell);
                }
                ProcessStats { pid, stats }
            })
            .collect()
    }
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task")
            .field("name", &self.name)
            .field("settings", &self.settings())
            .finish()
    }
}

/// Counts into this process's own cell: an uncontended atomic add.
#[inline(always)]
fn count(counter: &std::sync::atomic::AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// Counts a release. Release ordering pairs with [`held`]: whoever sees a
/// release counted also sees the admission it released.
#[inline(always)]
fn count_released(counter: &std::sync::atomic::AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Release);
}

/// A lower bound of the permits held in `cells`, safe against other threads
/// acquiring and releasing meanwhile: all releases are read before any
/// admission, so a permit held throughout is always counted as held.
#[inline]
fn held(cells: &[&StatCell]) -> u64 {
    let released: u64 = cells
        .iter()
        .flat_map(|c| {
            [
                &c.released_success,
                &c.released_dropped,
                &c.released_ignored,
            ]
        })
        .map(|c| c.load(Ordering::Acquire))
        .sum();
    let admitted: u64 = cells
        .iter()
        .map(|c| c.admitted.load(Ordering::Relaxed))
        .sum();
    admitted.saturating_sub(released)
}

/// This thread's statistics stripe: threads take stripes in turn.
#[inline]
fn stripe() -> u32 {
    use std::sync::atomic::AtomicU32;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    thread_local! {
        static STRIPE: u32 = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

impl<'a> Permit<'a> {
    pub fn n(&self) -> u32 {
        self.raw.n
    }

    pub fn raw(&self) -> &RawPermit {
        &self.raw
    }

    pub fn task(&self) -> &'a Task {
        self.task
    }

    /// Releases the permit with the request's outcome.
    pub fn release(mut self, outcome: Outcome) -> Result<()> {
        self.released = true;
        self.task.release_raw(&mut self.raw, outcome)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if !self.released {
            let _ = self.task.release_raw(&mut self.raw, Outcome::Ignored);
        }
    }
}

impl std::fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("task", &self.task.name)
            .field("n", &self.raw.n)
            .finish()
    }
}
