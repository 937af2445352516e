//! The manager: `flowctrl manage` owns a fleet's global thresholds.
//!
//! It writes each managed task's store record (the hosts spend by it) and
//! the keys of the next slices, ahead of time, with the threshold in force,
//! so no host creates a key and no host's own numbers decide a slice while
//! a manager runs. It is never on the request path: when it dies, hosts
//! spend the slices already written, then create keys from the record as
//! they do without a manager. Only the dynamic part stops.
//!
//! Instances elect one active by a lease with a fencing token
//! (`lease`); every write carries the token and the store refuses older
//! ones (`write`). With a policy, the threshold moves once per slice from
//! the fleet's health in the census (`policy`); the census is also judged
//! for alarms (`alarms`). Each tick is one pipeline of reads and one of
//! writes for all tasks.

mod alarms;
mod config;
mod hot;
mod keys;
mod lease;
mod policy;
mod report;
mod tick;
mod write;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub use alarms::{Alarm, fleet_alarms};
pub use config::{ManagedTask, ManagerConfig, Policy};
use hot::HotWatch;
pub use hot::TOP as HOT_KEYS;
use keys::KeyWrites;
use lease::{Held, Lease};
pub use policy::{Observed, Reason, decide};
pub use report::{Decision, ManagerReport, TaskReport};
use tick::TaskState;
use write::Writer;

use crate::error::Result;
use crate::quota::{Store, key_record_key, record_copies, record_key};

/// A store record of a task no longer managed, to remove.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Unmanaged {
    /// The task's record of its global numbers (every shard's copy).
    Task(String),
    /// The keyed task's record of its keys' global rates.
    Keys(String),
}

/// A manager instance: active while it holds the lease, standby otherwise.
pub struct Manager {
    config: ManagerConfig,
    store: Store,
    lease: Lease,
    writer: Writer,
    tasks: std::collections::BTreeMap<String, TaskState>,
    keys: KeyWrites,
    hot: HotWatch,
    /// Records of tasks a reload stopped managing: removed by the active
    /// manager only, under its token (a standby's file may be ahead of the
    /// active one's).
    unmanaged: std::collections::BTreeSet<Unmanaged>,
    /// The store's clock minus ours, ms (measured at each renewal).
    offset_ms: i64,
    /// When the lease is next renewed: at a third of its TTL.
    renew_at: Instant,
    /// Acquired, but the last decisions not read back yet: nothing is
    /// written until they are (a write would undo a predecessor's cut).
    needs_resume: bool,
    report: Arc<Mutex<ManagerReport>>,
}

impl Manager {
    /// A standby instance for `config`. Refuses a store it cannot write
    /// (down, a replica, no permission): one probe write.
    pub fn new(config: ManagerConfig) -> Result<Self> {
        let store = Store::open(&config.store)?;
        if store.redis().is_cluster() {
            // Its pipelines span every task's slot: not built for a cluster.
            return Err(crate::Error::invalid(
                "the manager runs on one Redis or a Sentinel-managed one, not on a Redis \
                 Cluster (yet)",
            ));
        }
        let prefix = config.store.key_prefix.clone();
        let probe = format!("{prefix}{{manager}}:probe");
        let _: () = store
            .redis()
            .round_trip("write to the store", |conn| {
                redis::cmd("SET")
                    .arg(&probe)
                    .arg(&config.id)
                    .arg("PX")
                    .arg(1000)
                    .query(conn)
            })
            .map_err(|e| {
                crate::Error::new(
                    crate::ErrorKind::Store,
                    format!("the manager cannot write to its store: {}", e.message()),
                )
            })?;
        let lease = Lease::new(&prefix, &config.id, config.lease);
        let tasks = tick::states(&config, Default::default());
        let report = ManagerReport {
            id: config.id.clone(),
            // Counted from 0, so an increase() sees the first alarm.
            alarms: Alarm::KINDS.iter().map(|k| (*k, 0)).collect(),
            ..Default::default()
        };
        Ok(Self {
            config,
            store,
            lease,
            writer: Writer::new(&prefix),
            tasks,
            keys: KeyWrites::default(),
            hot: HotWatch::default(),
            unmanaged: Default::default(),
            offset_ms: 0,
            renew_at: Instant::now(),
            needs_resume: false,
            report: Arc::new(Mutex::new(report)),
        })
    }

    /// What the manager did and saw, shared with a metrics endpoint.
    pub fn report(&self) -> Arc<Mutex<ManagerReport>> {
        self.report.clone()
    }

    /// Replaces the configuration (already checked: a bad file never gets
    /// here). Tasks that stay keep their threshold; tasks no longer managed
    /// have their store record removed while this instance is active, so
    /// their hosts return to their own.
    /// Refuses, and keeps the running configuration, when `[table]`'s store
    /// settings (URL, key prefix, timeouts, ...) changed: the connection,
    /// the keys and the lease are the old store's until a restart.
    pub fn reconfigure(&mut self, config: ManagerConfig) -> Result<()> {
        if config.store != self.config.store {
            return Err(crate::Error::invalid(
                "[table]'s store settings changed (URL, key_prefix, timeouts): the manager \
                 applies them at a restart only",
            ));
        }
        let old = std::mem::take(&mut self.tasks);
        for name in old.keys().filter(|n| !config.tasks.contains_key(*n)) {
            self.unmanaged.insert(Unmanaged::Task(name.clone()));
            self.report.lock().tasks.remove(name);
        }
        for name in self.config.keys.keys() {
            self.unmanaged.insert(Unmanaged::Keys(name.clone()));
        }
        self.unmanaged.retain(|u| match u {
            Unmanaged::Task(name) => !config.tasks.contains_key(name),
            Unmanaged::Keys(name) => !config.keys.contains_key(name),
        });
        self.keys.rewrite();
        self.tasks = tick::states(&config, old);
        if (config.id.as_str(), config.lease) != (self.config.id.as_str(), self.config.lease) {
            // Another name or TTL is another lease: give ours up first.
            let _ = self.lease.release(self.store.redis());
            self.lease = Lease::new(&config.store.key_prefix, &config.id, config.lease);
        }
        self.config = config;
        Ok(())
    }

    /// Renews (or takes) the lease, then writes and judges if active.
    /// Returns whether this instance is active. Store errors are logged
    /// and retried at the next step; an active manager stays active only
    /// until its lease would lapse.
    pub fn step(&mut self) -> Result<bool> {
        let renewal = if Instant::now() >= self.renew_at {
            self.renew_at = Instant::now() + self.config.lease / 3;
            self.renew()
        } else {
            Ok(())
        };
        if let Err(e) = renewal {
            self.report.lock().store_errors += 1;
            log::warn!("manager {}: {e}", self.config.id);
        }
        let Some(token) = self.lease.token() else {
            self.report.lock().active = false;
            return Ok(false);
        };
        if self.needs_resume {
            if let Err(e) = tick::resume(self) {
                self.report.lock().store_errors += 1;
                log::warn!("manager {}: {e}", self.config.id);
                return Ok(true);
            }
            self.needs_resume = false;
        }
        let began = Instant::now();
        let fenced =
            self.remove_unmanaged(token) || tick::run(self, token)? || self.write_keys(token);
        self.read_hot_keys();
        let mut r = self.report.lock();
        r.ticks += 1;
        r.tick_seconds_last = began.elapsed().as_secs_f64();
        r.tick_seconds_max = r.tick_seconds_max.max(r.tick_seconds_last);
        if fenced {
            drop(r);
            self.step_down("a newer manager's token wrote its tasks");
            return Ok(false);
        }
        Ok(true)
    }

    /// Removes the records of the tasks no longer managed under `token`:
    /// whether a newer token fenced this manager out. Store errors are
    /// logged and retried.
    fn remove_unmanaged(&mut self, token: u64) -> bool {
        let prefix = &self.config.store.key_prefix;
        while let Some(u) = self.unmanaged.first() {
            let (name, records, what) = match u {
                Unmanaged::Task(name) => {
                    let mut records = record_copies(prefix, name);
                    records.push(record_key(prefix, name, 0, 1));
                    (name, records, "task")
                }
                Unmanaged::Keys(name) => (name, vec![key_record_key(prefix, name)], "keys'"),
            };
            match self
                .writer
                .remove(self.store.redis(), token, name, &records)
            {
                Ok(Some(_)) => log::info!(
                    task = name.as_str();
                    "task {name:?} is no longer managed: its {what} record is removed"
                ),
                Ok(None) => return true,
                Err(e) => {
                    self.report.lock().store_errors += 1;
                    log::warn!("manager {}: {e}", self.config.id);
                    return false;
                }
            }
            self.unmanaged.pop_first();
        }
        false
    }

    /// Writes the keyed tasks' records that are due: whether a newer
    /// token fenced this manager out. Store errors are logged and retried.
    fn write_keys(&mut self, token: u64) -> bool {
        let prefix = &self.config.store.key_prefix;
        match self
            .keys
            .write(self.store.redis(), prefix, token, &self.config.keys)
        {
            Ok(Ok(written)) => {
                self.report.lock().key_records_written += written;
                false
            }
            Ok(Err(())) => true,
            Err(e) => {
                self.report.lock().store_errors += 1;
                log::warn!("manager {}: {e}", self.config.id);
                false
            }
        }
    }

    /// The keyed tasks' hot keys of their last slice, into the report.
    fn read_hot_keys(&mut self) {
        match self.hot.read(&self.store, &self.config.keys) {
            Ok(hot) => self.report.lock().hot_keys = hot,
            Err(e) => {
                self.report.lock().store_errors += 1;
                log::warn!("manager {}: {e}", self.config.id);
            }
        }
    }

    fn renew(&mut self) -> Result<()> {
        let (sec, usec): (i64, i64) = self
            .store
            .redis()
            .round_trip("read the time", |conn| redis::cmd("TIME").query(conn))?;
        let local = crate::quota::wall_ms();
        self.offset_ms = sec * 1000 + usec / 1000 - local;
        let held = self.lease.renew(self.store.redis())?;
        let mut r = self.report.lock();
        r.holder = self.lease.holder.clone();
        match held {
            Held::Ours { token, new } => {
                r.active = true;
                r.token = token;
                if new {
                    r.acquisitions += 1;
                    drop(r);
                    self.keys.rewrite();
                    log::warn!("manager {}: active (lease token {token})", self.config.id);
                    self.needs_resume = true;
                }
            }
            Held::Theirs { lost } => {
                r.active = false;
                drop(r);
                if lost {
                    self.step_down("its lease was taken over");
                }
            }
        }
        Ok(())
    }

    fn step_down(&mut self, why: &str) {
        log::warn!("manager {}: stepping down: {why}", self.config.id);
        self.lease = Lease::new(
            &self.config.store.key_prefix,
            &self.config.id,
            self.config.lease,
        );
        let mut r = self.report.lock();
        r.active = false;
        r.step_downs += 1;
    }

    /// How long to sleep between steps: a tenth of the shortest slice, at
    /// most a third of the lease (its renewal period).
    pub fn period(&self) -> Duration {
        let slice = self
            .config
            .tasks
            .values()
            .map(|t| t.global.slice_ms)
            .min()
            .unwrap_or(1000);
        Duration::from_millis((slice as u64 / 10).clamp(10, 250)).min(self.lease.ttl() / 3)
    }

    /// Steps until `stop` is set, then gives the lease up.
    pub fn run(&mut self, stop: &AtomicBool, mut between: impl FnMut(&mut Self)) -> Result<()> {
        while !stop.load(Ordering::Relaxed) {
            self.step()?;
            between(self);
            std::thread::sleep(self.period());
        }
        if let Err(e) = self.lease.release(self.store.redis()) {
            log::warn!("manager {}: {e}", self.config.id);
        }
        Ok(())
    }

    /// Writes every task's slices ahead now under `token`, whether or not
    /// this instance holds the lease (tests of fencing: a paused manager's
    /// write after its successor's). Returns whether the store fenced it out.
    #[doc(hidden)]
    pub fn write_with_token(&mut self, token: u64) -> Result<bool> {
        self.tasks.values_mut().for_each(TaskState::rewrite);
        self.keys.rewrite();
        Ok(tick::run(self, token)? || self.write_keys(token))
    }

    pub fn config(&self) -> &ManagerConfig {
        &self.config
    }
}
