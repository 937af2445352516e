//! The hosts: each one a real table (a file of its own, one task) whose
//! global quota comes from the simulated store, so every decision —
//! spending, the low-water pull, chunk sizing, pacing, fair-tail demand,
//! clock-offset correction — is the library's own. A host's processes are
//! modelled as callers of its table from this one thread: the quota is
//! host-wide state in the table, so how many processes share it changes no
//! decision (only who holds the pull lock, never contended here).

use std::path::PathBuf;

use flowctrl::{Outcome, QuotaStats, StoreOptions, Table, TableOptions, Task, TaskConfig};

use crate::Result;

/// How long a host's quota stays unspent before it is given back.
pub const IDLE: std::time::Duration = std::time::Duration::from_millis(50);
/// How often each host's keeper looks, µs of simulated time.
pub const KEEP_EVERY_US: i64 = 10_000;

/// The task every host spends from.
pub const TASK: &str = "sim";

pub struct Host {
    _table: Table,
    task: Task,
}

/// What a host did in one slice.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    /// Requests asked (admitted and refused).
    pub asked: u64,
    pub admitted: u64,
}

impl Host {
    /// Opens host `id`'s table in `dir`: one task slot, two attachments,
    /// no balancers (the smallest table there is).
    pub fn open(
        dir: &std::path::Path,
        id: usize,
        config: &TaskConfig,
        skew_ms: i64,
    ) -> Result<Self> {
        let mut options = table_options(id);
        options.store.clock_skew_ms = skew_ms;
        let table = Table::open(dir.join(format!("h{id:04}")), &options)?;
        let task = table.task(TASK, config)?;
        Ok(Self {
            _table: table,
            task,
        })
    }

    /// One request through the task's real acquire and release.
    pub fn request(&self, tally: &mut Tally) -> Result<()> {
        tally.asked += 1;
        if let Ok(mut permit) = self.task.acquire_raw(1)? {
            tally.admitted += 1;
            self.task.release_raw(&mut permit, Outcome::Success)?;
        }
        Ok(())
    }

    /// The keeper thread's call: gives back what the host holds when it
    /// has been idle for `IDLE`.
    pub fn keep(&self) -> u64 {
        self.task.return_idle_quota(IDLE)
    }

    pub fn stats(&self) -> QuotaStats {
        self.task.quota_stats()
    }
}

/// The options of simulated host `id` (`h0042`): the smallest table there
/// is (one task, two processes, no balancers), its store the simulator's.
pub fn table_options(id: usize) -> TableOptions {
    TableOptions {
        capacity: 1,
        max_processes: 2,
        balancers: 0,
        store: StoreOptions {
            url: Some(flowctrl::sim::URL.into()),
            host_id: Some(format!("h{id:04}")),
            ..StoreOptions::default()
        },
        ..TableOptions::default()
    }
}

/// A directory of table files, removed when dropped.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(name: &str) -> Result<Self> {
        let path = std::env::temp_dir().join(format!("flowctrl-sim-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).map_err(|e| {
            flowctrl::Error::new(flowctrl::ErrorKind::Io, format!("{}: {e}", path.display()))
        })?;
        Ok(Self(path))
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// splitmix64: a seeded, dependency-free generator (runs repeat exactly).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}
