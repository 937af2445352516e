//! A task's global quota: the task layer's side of `quota` (explicit pulls
//! and statistics); admissions take quota in `Task::acquire_raw`.

use super::{Limited, Task, stored};
use crate::error::{Error, Result};
use crate::format::TaskSlot;
use crate::quota::{Global, QuotaStats, TaskRef};

impl Task {
    /// Pulls up to `want` permits of the current slice from the store into
    /// the host's quota now — to warm up before a known spike; admissions
    /// pull by themselves. Waits for another process's pull in flight, then
    /// for at most one store command. `Ok(Ok(granted))`, or
    /// `Ok(Err(Limited::Global))` when the slice is exhausted (or has
    /// released nothing more for this host yet). Past 100 hosts the grant
    /// may be a reservation: counted here, spendable after the wait the
    /// store named (see docs/guide/global-limits.md, "Reservations"). An
    /// [`ErrorKind::Store`] error when the store failed (the task then
    /// decides by its fallback until a probe succeeds).
    pub fn pull_quota(&self, want: u64) -> Result<Result<u64, Limited>> {
        let slot = self.shm.task_slot(self.index);
        let Some(global) = stored::read(slot).global else {
            return Err(Error::invalid(format!(
                "task {:?} has no global_rate: there is no quota to pull",
                self.name
            )));
        };
        if want == 0 || want > global.quota as u64 {
            return Err(Error::invalid(format!(
                "want must be 1..={} (a slice's quota), not {want}",
                global.quota
            )));
        }
        let granted = self.quota.pull_now(self.quota_ref(slot, global), want)?;
        Ok(if granted == 0 {
            Err(Limited::Global)
        } else {
            Ok(granted)
        })
    }

    /// Gives back to the store what this host holds of the current slice
    /// when no admission has spent any of it, and none was refused as
    /// global, for `idle` (as seen by this
    /// handle's earlier calls: the first call only looks), so the other
    /// hosts can spend it; the store puts it back into the slice's key. The
    /// table's keeper thread calls it (see docs/guide/global-limits.md, "Idle
    /// quota");
    /// returns the permits given back (0: not idle, nothing held, the
    /// embedded store, a task spread over shards, or the store failing).
    pub fn return_idle_quota(&self, idle: std::time::Duration) -> u64 {
        let slot = self.shm.task_slot(self.index);
        match stored::read(slot).global {
            Some(g) => self.quota.return_idle(self.quota_ref(slot, g), idle),
            None => 0,
        }
    }

    pub(super) fn quota_ref<'a>(&'a self, slot: &'a TaskSlot, g: Global) -> TaskRef<'a> {
        TaskRef {
            shm: &self.shm,
            index: self.index,
            slot,
            task: &self.name,
            g,
        }
    }

    /// Whether `acquire(n)` may now make a round trip to the store (pull
    /// quota, or probe a failed store): no when the task has no global limit
    /// or this host holds enough of the slice. Two loads and a clock read;
    /// the Python face lets other threads run around an acquire that may.
    pub fn may_pull(&self, n: u32) -> bool {
        let slot = self.shm.task_slot(self.index);
        match stored::read(slot).global {
            None => false,
            Some(g) => self
                .quota
                .may_pull(self.quota_ref(slot, g), n, self.shm.clock.now()),
        }
    }

    /// How long until a request of `n` refused for `why` may be admitted,
    /// where that is known: the local rate's next admission, the time the
    /// slice releases more (or ends) for a global refusal. `None` for the
    /// concurrency cap (a release decides) and while the store fails.
    /// Read after a refusal, so the request path pays nothing for it.
    pub fn retry_after(&self, why: Limited, n: u32) -> Option<std::time::Duration> {
        let slot = self.shm.task_slot(self.index);
        let limits = stored::read(slot);
        let now = self.shm.clock.now();
        match why {
            Limited::Concurrency => None,
            Limited::Local => {
                let l = limits.local;
                if l.interval == 0 {
                    return None;
                }
                let gcra = crate::limit::gcra::Gcra {
                    interval: l.interval,
                    burst: l.burst,
                };
                let tat = slot.tat.load(std::sync::atomic::Ordering::Relaxed);
                let at = gcra.earliest(tat, n)?;
                Some(std::time::Duration::from_nanos(
                    self.shm.clock.ticks_to_ns(at.saturating_sub(now)),
                ))
            }
            Limited::Global => {
                let g = limits.global?;
                self.quota.retry_after(self.quota_ref(slot, g), now)
            }
        }
    }

    /// What the task's global quota did on this host.
    pub fn quota_stats(&self) -> QuotaStats {
        let slot = self.shm.task_slot(self.index);
        self.quota.stats(slot, stored::read(slot).global)
    }
}

/// What the global quota of the task in `slot` did on its host, read
/// without a store (views: the state is judged by this host's clock and the
/// store offset the table keeps).
pub(crate) fn quota_stats(slot: &TaskSlot) -> QuotaStats {
    crate::quota::stats(slot, stored::read(slot).global, 0)
}
