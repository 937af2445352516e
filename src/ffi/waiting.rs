//! The C face of adaptive limits and waiting: `fc_acquire_wait`,
//! `fc_release_rtt`, `fc_task_limit`.

use std::time::Duration;

use super::args::{arg, out_arg, put};
use super::status::{boundary, fc_status};
use super::task::{admitted, release, task_of};
use super::types::*;

/// `fc_acquire` that waits up to `timeout_ms` for a permit (0 = do not
/// wait), sleeping in the kernel (a futex in the table) until a release
/// frees concurrency or the limit rises; across processes. Returns as
/// `fc_acquire` does: `FC_OK` with `*permit` filled, or `FC_LIMITED_*` when
/// the deadline passed. Makes system calls while it waits; thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_acquire_wait(
    task: *const fc_task,
    n: u32,
    timeout_ms: u32,
    permit: *mut fc_permit,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let permit = out_arg(permit, "permit")?;
        let timeout = (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms as u64));
        admitted(task_of(task).acquire_raw_wait(n, timeout)?, permit)
    })
}

/// `fc_release` with the round-trip time the caller measured (`rtt_ns`),
/// used as the latency sample instead of the time since `fc_acquire`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_release_rtt(
    task: *const fc_task,
    permit: *mut fc_permit,
    outcome: fc_outcome,
    rtt_ns: u64,
) -> fc_status {
    boundary(|| unsafe { release(task, permit, outcome, Some(Duration::from_nanos(rtt_ns))) })
}

/// Reads the concurrency limit every process applies now into `*limit`:
/// the adaptive limit, or `max_concurrency`; 0 = no cap. No system call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_limit(task: *const fc_task, limit: *mut u32) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let limit = out_arg(limit, "limit")?;
        unsafe { put(limit, task_of(task).limit().unwrap_or(0)) };
        Ok(fc_status::FC_OK)
    })
}
