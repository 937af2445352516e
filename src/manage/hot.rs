//! The fleet's hot keys, as the manager sees them: for each keyed task it
//! owns, the keys the store gave most of in the last slice of the keys'
//! default global rate (the last read before the slice ended), for its
//! metrics. Read every [`READ_EVERY`]: one script call per task, bounded
//! to [`TOP`] keys whatever the keys.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::keyed::KeyRecord;
use crate::quota::{HotKeys, Store};

/// Keys per task the manager reports: the metrics' cardinality bound.
pub const TOP: usize = 10;
/// How often the hot keys are read: the last read of a slice is at most
/// this before its end.
const READ_EVERY: Duration = Duration::from_millis(250);

/// The slice the hot keys of `record`'s keys are read in: the default
/// rate's, else the first named key's.
fn slice_ms(record: &KeyRecord) -> Option<u32> {
    record
        .default
        .or_else(|| record.overrides.iter().find_map(|(_, g)| *g))
        .map(|g| g.slice_in_force().as_millis() as u32)
}

/// Per task: the latest read of the current slice, and the last read of
/// the slice before it (what is reported).
#[derive(Default)]
pub(super) struct HotWatch {
    reads: BTreeMap<String, (HotKeys, Option<HotKeys>)>,
    next: Option<Instant>,
}

impl HotWatch {
    /// Reads each task's hot keys if due: the tasks' last full slices.
    /// Store errors leave the last reads (the caller counts them).
    pub fn read(
        &mut self,
        store: &Store,
        records: &BTreeMap<String, KeyRecord>,
    ) -> crate::Result<BTreeMap<String, HotKeys>> {
        let now = Instant::now();
        if self.next.is_some_and(|at| now < at) {
            return Ok(self.reported());
        }
        self.next = Some(now + READ_EVERY);
        self.reads.retain(|task, _| records.contains_key(task));
        for (task, record) in records {
            let Some(slice_ms) = slice_ms(record) else {
                continue;
            };
            let read = store.hot_keys(task, slice_ms, TOP)?;
            match self.reads.get_mut(task) {
                Some((current, last))
                    if read.slice != current.slice || read.slice_ms != current.slice_ms =>
                {
                    let ended = std::mem::replace(current, read);
                    // Only the slice just before: an older one is stale.
                    *last = (ended.slice + 1 == current.slice).then_some(ended);
                }
                Some((current, _)) => *current = read,
                None => {
                    self.reads.insert(task.clone(), (read, None));
                }
            }
        }
        Ok(self.reported())
    }

    fn reported(&self) -> BTreeMap<String, HotKeys> {
        self.reads
            .iter()
            .filter_map(|(task, (_, last))| Some((task.clone(), last.clone()?)))
            .collect()
    }
}
