//! The log lines of pulls (see `crate::events`: one per kind and task per
//! interval), apart from the pull's logic they would otherwise crowd.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Global;
use super::store::Reply;
use crate::error::Error;
use crate::events::{self, Event};
use crate::format::QuotaSlot;

/// A pull or a probe failed; `first`: the task's state just became failed.
#[cold]
pub(super) fn store_failed(task: &str, e: &Error, first: bool, g: Global, probe: Duration) {
    let what = if first { "failed" } else { "still fails" };
    events::report(
        Event::StoreFailed,
        task,
        format_args!(
            "task {task:?}: the quota store {what}: {e}; deciding by the fallback policy \
             ({}), probing every {probe:?}",
            g.fallback
        ),
    );
}

/// A shard's node failed while the task's other shards may answer: its
/// part is the fallback's until a probe finds it answering.
#[cold]
pub(super) fn shard_failed(task: &str, shard: u32, e: &Error, g: Global, probe: Duration) {
    events::report(
        Event::StoreFailed,
        task,
        format_args!(
            "task {task:?}: shard {shard} of the quota store fails: {e}; pulling from the \
             shards that answer, its part decided by the fallback policy ({}), probing \
             every {probe:?}",
            g.fallback
        ),
    );
}

/// Counts (always) and reports (rate-limited) what a reply says hosts
/// disagree on.
pub(super) fn conflicts(q: &QuotaSlot, task: &str, slice: u32, g: Global, host: &str, r: &Reply) {
    if r.config_conflict {
        q.config_conflicts.fetch_add(1, Ordering::Relaxed);
        events::report(
            Event::ConfigConflict,
            task,
            format_args!(
                "task {task:?}: slice {slice} was created with another threshold than this \
                 host's {} permits: hosts disagree on global_rate or slice_ms; spending by \
                 the slice's",
                g.quota
            ),
        );
    }
    if r.host_conflict {
        q.host_conflicts.fetch_add(1, Ordering::Relaxed);
        events::report_with(
            Event::HostConflict,
            task,
            events::Extra {
                dead_pid: None,
                host: Some(host),
            },
            format_args!(
                "task {task:?}: another table pulls under this host's id {host:?}: give each \
                 host its own (StoreOptions::host_id); a key created anew cannot deduct what \
                 both took"
            ),
        );
    }
}
