//! The C face of tasks: register, update, read the configuration, acquire
//! and release.

use std::ffi::c_char;
use std::time::Duration;

use super::args::{arg, arg_mut, name_arg, out_arg, outcome_of, put};
use super::config::{config_fields, config_of};
use super::sized::{Out, init_sized, read_sized};
use super::status::{boundary, fc_status};
use super::types::*;
use crate::{Error, Limited, PERMIT_ALTERED, RawPermit, TaskConfig};

pub(super) fn task_of(handle: &fc_task) -> &crate::Task {
    &handle.task
}

/// Fills `*config`, a struct of `size` bytes (pass `sizeof *config`), with
/// its size and every field unset (`FC_RATE_UNSET`, `FC_UNSET`). Touches no
/// other memory; thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_config_init(
    config: *mut fc_task_config,
    size: usize,
) -> fc_status {
    boundary(|| {
        unsafe { init_sized(config, size, "config") }?;
        Ok(fc_status::FC_OK)
    })
}

/// Registers the task `name` host-wide, or attaches to it if any process
/// registered it already. A new task takes the set fields of `config` and
/// the defaults for the others (no rate limit, burst 1, no cap). An existing
/// task is compared on the set fields only: one that differs answers
/// `FC_ERR_CONFIG_MISMATCH` (`fc_task_update` changes a configuration on
/// purpose). `config` NULL = every field unset; it is only read.
///
/// Waits up to 2 s for another live process registering a task in the same
/// slot, then answers `FC_ERR_TIMEOUT`. On `FC_OK`, `*out` is a new handle,
/// owned by the caller and freed with `fc_task_free`. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_register(
    table: *const fc_table,
    name: *const c_char,
    config: *const fc_task_config,
    out: *mut *mut fc_task,
) -> fc_status {
    boundary(|| {
        let table = unsafe { arg(table, "table") }?;
        let out = out_arg(out, "out")?;
        let name = unsafe { name_arg(name, "task name") }?;
        let config = if config.is_null() {
            TaskConfig::default()
        } else {
            config_of(&unsafe { read_sized(config, "config") }?)?
        };
        let task = table.table.task(name, &config)?;
        unsafe { put(out, Box::into_raw(Box::new(fc_task { task }))) };
        Ok(fc_status::FC_OK)
    })
}

/// Changes the set fields of `config` for every process on the host, as
/// one unit; unset fields keep their current values. `config` is only read.
/// Waits up to 2 s for another live process writing the task's
/// configuration, then answers `FC_ERR_TIMEOUT`. Thread-safe.
///
/// Permits already held keep what they hold: a permit acquired while the
/// task had no cap is not counted against a cap set later, and its release
/// does not lower the count of the permits acquired since.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_update(
    task: *const fc_task,
    config: *const fc_task_config,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let config = config_of(&unsafe { read_sized(config, "config") }?)?;
        task_of(task).update(&config)?;
        Ok(fc_status::FC_OK)
    })
}

/// Fills `*out` with the configuration every process on the host applies
/// now: every field set. `*out` must have been filled by
/// `fc_task_config_init` (its `size` is read); only its first `size` bytes
/// are written. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_config_get(
    task: *const fc_task,
    out: *mut fc_task_config,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let out = unsafe { Out::new(out, "out") }?;
        let size = out.len();
        out.write(&config_fields(&task_of(task).settings(), size));
        Ok(fc_status::FC_OK)
    })
}

/// Frees a task handle (NULL is ignored); the handle must not be used
/// after, and no other thread may be using it. Its permits stay held: they
/// can still be released through another handle of the same task registered
/// through the same table handle, and are given back when this process
/// detaches from the table or dies.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_free(task: *mut fc_task) {
    if !task.is_null() {
        boundary(|| {
            // SAFETY: the handle came from fc_task_register and is freed once.
            drop(unsafe { Box::from_raw(task) });
            Ok(fc_status::FC_OK)
        });
    }
}

/// Asks for `n` permits. The rate is looked at first without taking
/// anything, then the concurrency cap is taken, then the rate: a rejection
/// names the limit that refused and holds nothing. `FC_OK` = admitted,
/// `*permit` filled (release it with `fc_release`); `FC_LIMITED_*` =
/// rejected, `*permit` untouched. `n` = 0, above the burst (with a rate) or
/// above the cap = `FC_ERR_INVALID_ARGUMENT`.
///
/// Cost: no allocation and no system call, with two exceptions. The first
/// call through a handle in a process forked since the handle was opened
/// attaches that process (system calls and a sweep for dead processes,
/// once). And when more threads of this process than it has ledger lanes
/// (4) are inside `fc_acquire`/`fc_release` of the task at once and one of
/// them is descheduled, a thread yields (`sched_yield`) until a lane frees,
/// for at most 1 s, then answers `FC_ERR_TIMEOUT`. The clock is read with
/// `rdtsc`, or `clock_gettime` through the vDSO. Dead processes are never
/// reaped here.
///
/// Thread-safe: any number of threads may acquire from one task at once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_acquire(
    task: *const fc_task,
    n: u32,
    permit: *mut fc_permit,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let permit = out_arg(permit, "permit")?;
        admitted(task_of(task).acquire_raw(n)?, permit)
    })
}

/// Fills `*permit` (checked non-NULL) if admitted; the status either way.
pub(super) fn admitted(
    decision: Result<RawPermit, Limited>,
    permit: *mut fc_permit,
) -> Result<fc_status, Error> {
    Ok(match decision {
        Ok(raw) => {
            unsafe { put(permit, raw.into()) };
            fc_status::FC_OK
        }
        Err(limited) => limited.into(),
    })
}

/// Releases a permit with the request's outcome (`FC_OUTCOME_*`) and marks
/// `*permit` released; the library measures the round-trip time since
/// `fc_acquire`. Same cost as `fc_acquire`.
///
/// Refused with `FC_ERR_INVALID_ARGUMENT`, nothing given back: a permit
/// released already, one of another task, table handle or process (permits
/// do not cross fork), one whose bytes were altered, and an unknown outcome.
/// The mark is in the caller's memory: a copy of a permit taken before its
/// release is not marked, and is refused only when this process holds fewer
/// permits of the task than it names (if the process holds others, one of
/// those is released in its place, and is then refused itself; for a task
/// without a cap, nothing is held and the copy is counted as one more
/// release). Release each permit once, through the `fc_permit` `fc_acquire`
/// filled.
///
/// Thread-safe: any thread may release a permit any thread acquired, but
/// two threads must not pass the same `fc_permit` at once (a data race in
/// the caller's memory).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_release(
    task: *const fc_task,
    permit: *mut fc_permit,
    outcome: fc_outcome,
) -> fc_status {
    boundary(|| unsafe { release(task, permit, outcome, None) })
}

/// `fc_release` with an optional round-trip time. Inlined into both
/// faces: as a call of its own it was a tenth of the release's
/// instructions.
#[inline(always)]
pub(super) unsafe fn release(
    task: *const fc_task,
    permit: *mut fc_permit,
    outcome: fc_outcome,
    rtt: Option<Duration>,
) -> Result<fc_status, Error> {
    let task = unsafe { arg(task, "task") }?;
    let p = unsafe { arg_mut(permit, "permit") }?;
    let outcome = outcome_of(outcome)?;
    let mut raw = RawPermit::from(*p);
    task_of(task).release_raw_rtt(&mut raw, outcome, rtt)?;
    // The mark of a spent permit, in the caller's memory.
    p.flags = raw.flags;
    Ok(fc_status::FC_OK)
}

// `fc_permit` is `RawPermit` field for field: C's copy of the core's token.
impl From<RawPermit> for fc_permit {
    fn from(r: RawPermit) -> Self {
        Self {
            acquired_at: r.acquired_at,
            owner: r.owner,
            task: r.task,
            n: r.n,
            flags: r.flags,
            reserved0: r.key_record,
            check: r.check,
            reserved: [0; 3],
        }
    }
}

impl From<fc_permit> for RawPermit {
    /// Reserved words written to make the permit read as altered: the
    /// core's check refuses it.
    fn from(p: fc_permit) -> Self {
        let written = p.reserved != [0; 3];
        Self {
            acquired_at: p.acquired_at,
            owner: p.owner,
            task: p.task,
            n: p.n,
            flags: p.flags | if written { PERMIT_ALTERED } else { 0 },
            key_record: p.reserved0,
            check: p.check,
        }
    }
}
