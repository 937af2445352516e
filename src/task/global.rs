//! A task's global quota: the task layer's side of `quota` (explicit pulls
//! and statistics); admissions take quota in `Task::acquire_raw`.

use super::{Limited, Task, config};
use crate::error::{Error, Result};
use crate::format::TaskSlot;
use crate::quota::{Global, QuotaStats, TaskRef};

impl Task {
    /// Pulls up to `want` permits of the current slice from the store into
    /// the host's quota now — to warm up before a known spike; admissions
    /// pull by themselves. Waits for another process's pull in flight, then
    /// for at most one store command. `Ok(Ok(granted))`, or
    /// `Ok(Err(Limited::Global))` when the slice is exhausted; an
    /// [`ErrorKind::Store`] error when the store failed (the task then
    /// decides by its fallback until a probe succeeds).
    pub fn pull_quota(&self, want: u64) -> Result<Result<u64, Limited>> {
        let slot = self.shm.task_slot(self.index);
        let Some(global) = config::read(slot).global else {
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

    pub(super) fn quota_ref<'a>(&'a self, slot: &'a TaskSlot, g: Global) -> TaskRef<'a> {
        TaskRef {
            shm: &self.shm,
            slot,
            task: &self.name,
            g,
        }
    }

    /// What the task's global quota did on this host.
    pub fn quota_stats(&self) -> QuotaStats {
        let slot = self.shm.task_slot(self.index);
        self.quota.stats(slot, config::read(slot).global)
    }
}

/// What the global quota of the task in `slot` did on its host, read
/// without a store (views: the state is judged by this host's clock and the
/// store offset the table keeps).
pub(crate) fn quota_stats(slot: &TaskSlot) -> QuotaStats {
    crate::quota::stats(slot, config::read(slot).global, 0)
}
