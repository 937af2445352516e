//! What a task reports: its counters and quota state, the check of its
//! concurrency count, and the explicit pull of global quota.

use super::args::{arg, out_arg, put};
use super::sized::{Out, init_sized};
use super::status::{boundary, fc_status};
use super::task::task_of;
use super::types::*;
use crate::{Error, QuotaState};

/// Fills `*stats`, a struct of `size` bytes (pass `sizeof *stats`), with its
/// size and zeros. Touches no other memory; thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_stats_init(stats: *mut fc_task_stats, size: usize) -> fc_status {
    boundary(|| {
        unsafe { init_sized(stats, size, "stats") }?;
        Ok(fc_status::FC_OK)
    })
}

/// Reads a task's counters, summed over every process on the host. `*out`
/// must have been filled by `fc_task_stats_init` (its `size` is read); only
/// its first `size` bytes are written. Thread-safe; no system call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_stats(task: *const fc_task, out: *mut fc_task_stats) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let out = unsafe { Out::new(out, "out") }?;
        let s = task_of(task).stats();
        let q = task_of(task).quota_stats();
        out.write(&fc_task_stats {
            size: size_of::<fc_task_stats>() as u32,
            reserved: 0,
            admitted: s.admitted,
            limited_local: s.limited_local,
            limited_global: s.limited_global,
            limited_concurrency: s.limited_concurrency,
            released_success: s.released_success,
            released_dropped: s.released_dropped,
            released_ignored: s.released_ignored,
            reclaimed: s.reclaimed,
            in_flight: s.in_flight,
            rtt_sum_ns: s.rtt_sum_ns,
            rtt_samples: s.rtt_samples,
            held: s.held,
            quota_state: match q.state {
                None => FC_QUOTA_NONE,
                Some(QuotaState::Open) => FC_QUOTA_OPEN,
                Some(QuotaState::Limited) => FC_QUOTA_LIMITED,
                Some(QuotaState::Failed) => FC_QUOTA_FAILED,
            },
            reserved1: 0,
            pulls: q.pulls,
            failed_pulls: q.failed_pulls,
            pull_ns_sum: q.pull_ns_sum,
            pull_ns_max: q.pull_ns_max,
            quota_granted: q.granted,
            quota_stranded: q.stranded,
            open_ms: q.open_ms,
            limited_ms: q.limited_ms,
            failed_ms: q.failed_ms,
            clock_offset_us: q.clock_offset_us,
            limit: s.limit,
            baseline_rtt_ns: s.baseline_rtt_ns,
            recent_rtt_ns: s.recent_rtt_ns,
            limited_fallback: q.limited_fallback,
            hosts_seen: q.hosts_seen,
            host_conflicts: q.host_conflicts,
            config_conflicts: q.config_conflicts,
            keys_created: q.keys_created,
            waiting: s.waiting,
            unlaned: s.unlaned,
            unlaned_refused: s.unlaned_refused,
            quota_shards_down: q.shards_down,
            quota_reserved: q.reserved,
            quota_returned: q.returned,
        });
        Ok(fc_status::FC_OK)
    })
}

/// Pulls up to `want` permits of the current slice from the store into the
/// host's quota now, e.g. to warm up before a known spike (admissions pull
/// by themselves). Waits for another process's pull in flight, then for at
/// most one store command. `FC_OK` with `*granted` set; `FC_LIMITED_GLOBAL`
/// when the slice is exhausted (`*granted` = 0); `FC_ERR_STORE` when the
/// store failed (the task then decides by its local limits, or its
/// fallback rate, until a probe succeeds); `FC_ERR_INVALID_ARGUMENT` for a
/// task without `global_rate` or `want` outside 1..=a slice's quota.
/// Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_pull_quota(
    task: *const fc_task,
    want: i64,
    granted: *mut i64,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let granted = out_arg(granted, "granted")?;
        let want = u64::try_from(want)
            .map_err(|_| Error::invalid(format!("want must be positive, not {want}")))?;
        let (status, n) = match task_of(task).pull_quota(want)? {
            Ok(n) => (fc_status::FC_OK, n as i64),
            Err(limited) => (limited.into(), 0),
        };
        unsafe { put(granted, n) };
        Ok(status)
    })
}

/// `*after_ns` when `fc_retry_after` cannot say (a concurrency cap: a
/// release decides; a failing store: its probe decides).
pub const FC_RETRY_UNKNOWN: u64 = u64::MAX;

/// After a request of `n` permits was refused with `limited` (an
/// `FC_LIMITED_*` status), how long until it may be admitted, in ns, where
/// that is known: the local rate's next admission; for the global quota,
/// when the slice releases more for this host, or ends. `*after_ns` is
/// `FC_RETRY_UNKNOWN` otherwise. Costs the request path nothing: call it
/// only after a refusal. Thread-safe; no system call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_retry_after(
    task: *const fc_task,
    limited: fc_status,
    n: u32,
    after_ns: *mut u64,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let after_ns = out_arg(after_ns, "after_ns")?;
        let why = match limited {
            fc_status::FC_LIMITED_LOCAL => crate::Limited::Local,
            fc_status::FC_LIMITED_GLOBAL => crate::Limited::Global,
            fc_status::FC_LIMITED_CONCURRENCY => crate::Limited::Concurrency,
            other => {
                return Err(Error::invalid(format!(
                    "fc_retry_after takes an FC_LIMITED_* status, not {}",
                    other as u32
                )));
            }
        };
        let after = task_of(task)
            .retry_after(why, n)
            .map_or(FC_RETRY_UNKNOWN, |d| {
                d.as_nanos().min(u64::MAX as u128 - 1) as u64
            });
        unsafe { put(after_ns, after) };
        Ok(fc_status::FC_OK)
    })
}

/// Compares the task's concurrency count with what the processes' ledgers
/// hold, at one instant: `*drift` = count - held, 0 when the count is exact
/// (positive = capacity leaked, negative = handed out twice). Retries while
/// traffic keeps moving the count; `FC_ERR_TIMEOUT` if it never holds still
/// for 1 s. For monitoring, not the request path. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_check(task: *const fc_task, drift: *mut i64) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let drift = out_arg(drift, "drift")?;
        let consistency = task_of(task).check()?;
        unsafe { put(drift, consistency.drift()) };
        Ok(fc_status::FC_OK)
    })
}
