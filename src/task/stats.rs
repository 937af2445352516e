//! Reading a task's counters: the sum of every attachment's cell and of the
//! totals retired from attachments that have gone away.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::table::layout::StatCell;

/// Counters of one task, in permits unless named otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskStats {
    pub admitted: u64,
    pub limited_local: u64,
    pub limited_global: u64,
    pub limited_concurrency: u64,
    pub released_success: u64,
    pub released_dropped: u64,
    pub released_ignored: u64,
    /// Permits of processes that died holding them, given back by the reaper.
    pub reclaimed: u64,
    /// Admitted and not yet released or reclaimed.
    pub in_flight: u64,
    /// Acquire→release times of permits released as success or dropped,
    /// summed per permit (ns).
    pub rtt_sum_ns: u64,
    /// Permits summed in `rtt_sum_ns` (`released_success + released_dropped`).
    pub rtt_samples: u64,
}

/// One attached process's share of a task's counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessStats {
    pub pid: u32,
    pub stats: TaskStats,
}

impl TaskStats {
    /// Adds a cell's counters.
    pub(crate) fn add_cell(&mut self, cell: &StatCell) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        self.admitted += get(&cell.admitted);
        self.limited_local += get(&cell.limited_local);
        self.limited_global += get(&cell.limited_global);
        self.limited_concurrency += get(&cell.limited_concurrency);
        self.released_success += get(&cell.released_success);
        self.released_dropped += get(&cell.released_dropped);
        self.released_ignored += get(&cell.released_ignored);
        self.reclaimed += get(&cell.reclaimed);
        self.rtt_sum_ns += get(&cell.rtt_sum_ns);
        self.rtt_samples = self.released_success + self.released_dropped;
        self.in_flight = self.admitted.saturating_sub(
            self.released_success + self.released_dropped + self.released_ignored + self.reclaimed,
        );
    }

    /// Mean acquire→release time of the permits released as success or dropped.
    pub fn mean_rtt(&self) -> Option<std::time::Duration> {
        (self.rtt_samples > 0)
            .then(|| std::time::Duration::from_nanos(self.rtt_sum_ns / self.rtt_samples))
    }
}
