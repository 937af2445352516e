//! The C face of adaptive limits and waiting: the limiter fields of
//! `fc_task_config`, `fc_acquire_wait`, `fc_release_rtt`, `fc_task_limit`.

use std::ffi::{CStr, c_char};
use std::time::Duration;

use super::api::{admitted, arg, out_arg, put, release, task_of};
use super::sized::SizedStruct;
use super::status::{boundary, fc_status};
use super::types::*;
use crate::{Error, LimiterSpec, TaskConfig};

/// The limiter fields of `c` as a `TaskConfig` (other fields unset).
pub(super) fn limiter_of(c: &fc_task_config) -> Result<TaskConfig, Error> {
    if c.reserved2 != 0 {
        return Err(Error::invalid(format!(
            "fc_task_config.reserved2 must be 0, not {}",
            c.reserved2
        )));
    }
    let bytes: Vec<u8> = c.limiter.iter().map(|b| *b as u8).collect();
    let text = CStr::from_bytes_until_nul(&bytes)
        .map_err(|_| Error::invalid("fc_task_config.limiter is not NUL-terminated"))?
        .to_str()
        .map_err(|_| Error::invalid("fc_task_config.limiter is not UTF-8"))?;
    let set = |v: u32| (v != FC_UNSET).then_some(v);
    Ok(TaskConfig {
        limiter: if text.is_empty() {
            None
        } else {
            Some(LimiterSpec::parse(text)?)
        },
        min_limit: set(c.min_limit),
        max_limit: set(c.max_limit),
        initial_limit: set(c.initial_limit),
        ..TaskConfig::default()
    })
}

/// A config whose limiter fields say `spec` (the others at their defaults).
pub(super) fn limiter_fields(spec: &LimiterSpec) -> fc_task_config {
    let mut c = fc_task_config::defaults();
    let text = spec.canonical();
    let len = text.len().min(c.limiter.len() - 1);
    for (dst, src) in c.limiter.iter_mut().zip(&text.as_bytes()[..len]) {
        *dst = *src as c_char;
    }
    if spec.is_adaptive() {
        (c.min_limit, c.max_limit, c.initial_limit) = (spec.min, spec.max, spec.initial);
    } else {
        (c.min_limit, c.max_limit, c.initial_limit) = (0, 0, 0);
    }
    c
}

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
