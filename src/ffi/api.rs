//! The exported functions.

use std::ffi::{CStr, OsStr, c_char};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::sized::{Out, init_sized, read_sized};
use super::status::{boundary, fc_status};
use super::types::*;
use crate::{
    Error, ErrorKind, Outcome, RawPermit, StoreOptions, Table, TableOptions, Task, TaskConfig,
};

const NAME_MAX: usize = FC_NAME_MAX as usize;

pub(super) fn null(what: &str) -> Error {
    Error::invalid(format!("{what} is NULL"))
}

/// Borrows `*ptr`, or fails naming the argument.
pub(super) unsafe fn arg<'a, T>(ptr: *const T, what: &str) -> Result<&'a T, Error> {
    // SAFETY: the caller passes a pointer that is NULL or valid.
    unsafe { ptr.as_ref() }.ok_or_else(|| null(what))
}

/// Checks an out-pointer before any work is done.
pub(super) fn out_arg<T>(ptr: *mut T, what: &str) -> Result<*mut T, Error> {
    if ptr.is_null() {
        return Err(null(what));
    }
    Ok(ptr)
}

/// Writes `value` to `out` (checked non-NULL before any work was done).
pub(super) unsafe fn put<T>(out: *mut T, value: T) {
    // SAFETY: checked non-NULL by the caller; C owns the memory.
    unsafe { out.write(value) }
}

/// Reads a task name: NUL-terminated within FC_NAME_MAX bytes, UTF-8.
pub(super) unsafe fn name_arg<'a>(name: *const c_char) -> Result<&'a str, Error> {
    if name.is_null() {
        return Err(null("name"));
    }
    // Never scan past one byte beyond the longest valid name.
    // SAFETY: `name` is non-NULL and NUL-terminated per the contract.
    let len = unsafe { libc::strnlen(name, NAME_MAX + 1) };
    if len > NAME_MAX {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!("task name is longer than {NAME_MAX} bytes"),
        ));
    }
    // SAFETY: `len` bytes were just scanned and are readable.
    let bytes = unsafe { std::slice::from_raw_parts(name.cast::<u8>(), len) };
    std::str::from_utf8(bytes).map_err(|e| {
        Error::new(
            ErrorKind::InvalidName,
            format!("task name is not UTF-8: {e}"),
        )
    })
}

/// `FC_UNSET` → `None`.
fn set(value: u32) -> Option<u32> {
    (value != FC_UNSET).then_some(value)
}

// The core may add fields to its option structs: they keep their defaults.
#[allow(clippy::needless_update)]
fn options_of(o: &fc_table_options) -> Result<TableOptions, Error> {
    let shared = match o.shared {
        0 => false,
        1 => true,
        other => {
            return Err(Error::invalid(format!(
                "fc_table_options.shared must be 0 or 1, not {other}"
            )));
        }
    };
    if o.reserved != 0 {
        return Err(Error::invalid(format!(
            "fc_table_options.reserved must be 0, not {}",
            o.reserved
        )));
    }
    let mut store = StoreOptions::default();
    if !o.store_url.is_null() {
        store.url = Some(unsafe { text_arg(o.store_url, "store_url") }?.to_string());
    }
    if !o.key_prefix.is_null() {
        store.key_prefix = unsafe { text_arg(o.key_prefix, "key_prefix") }?.to_string();
    }
    let ms = |v: u32, default| {
        if v == 0 {
            default
        } else {
            std::time::Duration::from_millis(v as u64)
        }
    };
    store.timeout = ms(o.store_timeout_ms, store.timeout);
    store.connect_timeout = ms(o.store_connect_timeout_ms, store.connect_timeout);
    store.probe_interval = ms(o.probe_interval_ms, store.probe_interval);
    Ok(TableOptions {
        capacity: o.capacity,
        max_processes: o.max_processes,
        mode: o.mode,
        owner: set(o.owner_uid),
        shared,
        store,
        balancers: o.balancers,
        backends_per_balancer: o.backends_per_balancer,
        ..TableOptions::default()
    })
}

/// Reads a NUL-terminated UTF-8 option string of at most 4 KiB.
unsafe fn text_arg<'a>(text: *const c_char, what: &str) -> Result<&'a str, Error> {
    const MAX: usize = 4096;
    // SAFETY: non-NULL and NUL-terminated per the contract; never scanned
    // past MAX + 1 bytes.
    let len = unsafe { libc::strnlen(text, MAX + 1) };
    if len > MAX {
        return Err(Error::invalid(format!("{what} is longer than {MAX} bytes")));
    }
    // SAFETY: `len` bytes were just scanned and are readable.
    let bytes = unsafe { std::slice::from_raw_parts(text.cast::<u8>(), len) };
    std::str::from_utf8(bytes).map_err(|e| Error::invalid(format!("{what} is not UTF-8: {e}")))
}

/// `FC_RATE_UNSET` → `None` (exactly that value).
fn rate(value: f64) -> Option<f64> {
    (value.to_bits() != FC_RATE_UNSET.to_bits()).then_some(value)
}

#[allow(clippy::needless_update)]
fn config_of(c: &fc_task_config) -> Result<TaskConfig, Error> {
    if c.reserved != 0 {
        return Err(Error::invalid(format!(
            "fc_task_config.reserved must be 0, not {}",
            c.reserved
        )));
    }
    Ok(TaskConfig {
        local_rate: rate(c.local_rate),
        burst: set(c.burst),
        max_concurrency: set(c.max_concurrency),
        global_rate: rate(c.global_rate),
        slice_ms: set(c.slice_ms),
        chunk: set(c.chunk),
        fallback_rate: rate(c.fallback_rate),
        ..super::waiting::limiter_of(c)?
    })
}

/// An `FC_OUTCOME_*` value, checked (C may pass any integer).
pub(super) fn outcome_of(outcome: fc_outcome) -> Result<Outcome, Error> {
    match outcome {
        FC_OUTCOME_SUCCESS => Ok(Outcome::Success),
        FC_OUTCOME_DROPPED => Ok(Outcome::Dropped),
        FC_OUTCOME_IGNORED => Ok(Outcome::Ignored),
        other => Err(Error::invalid(format!("unknown outcome {other}"))),
    }
}

pub(super) fn task_of(handle: &fc_task) -> &Task {
    &handle.task
}

/// Fills `*options`, a struct of `size` bytes (pass `sizeof *options`), with
/// its size and the defaults. Touches no other memory; thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_table_options_init(
    options: *mut fc_table_options,
    size: usize,
) -> fc_status {
    boundary(|| {
        unsafe { init_sized(options, size, "options") }?;
        Ok(fc_status::FC_OK)
    })
}

/// Opens the table at `path`, creating it if missing, and attaches this
/// process to it. `path` NULL = `/dev/shm/flowctrl`; a bare name =
/// `/dev/shm/<name>`. `options` NULL = the defaults; it is only read.
///
/// Refused with `FC_ERR_PERMISSION`: a symbolic link at the path (never
/// followed), a special file (a FIFO, a device), a table owned by another
/// uid than `owner_uid`, and one that group or others may write unless
/// `shared` is 1. A directory is `FC_ERR_IO`.
///
/// Attaching sweeps the table for dead processes once and starts a
/// background thread in this process ("flowctrl-reaper") that sweeps it
/// every ~20 ms while the handle or one of its tasks lives.
///
/// On `FC_OK`, `*out` is a new handle, owned by the caller and freed with
/// `fc_table_close`. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_table_open(
    path: *const c_char,
    options: *const fc_table_options,
    out: *mut *mut fc_table,
) -> fc_status {
    boundary(|| {
        let out = out_arg(out, "out")?;
        let options = if options.is_null() {
            TableOptions::default()
        } else {
            options_of(&unsafe { read_sized(options, "options") }?)?
        };
        let path = (!path.is_null()).then(|| {
            Path::new(OsStr::from_bytes(
                // SAFETY: non-NULL and NUL-terminated per the contract.
                unsafe { CStr::from_ptr(path) }.to_bytes(),
            ))
        });
        let table = match path {
            Some(p) => Table::open(p, &options)?,
            None => Table::open_default(&options)?,
        };
        unsafe { put(out, Box::into_raw(Box::new(fc_table { table }))) };
        Ok(fc_status::FC_OK)
    })
}

/// Frees a table handle (NULL is ignored); the handle must not be used
/// after, and no other thread may be using it. Tasks registered through it
/// stay valid: this process detaches once the table handle and all its
/// tasks are freed, giving back any permits it still holds through them.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_table_close(table: *mut fc_table) {
    if !table.is_null() {
        boundary(|| {
            // SAFETY: the handle came from fc_table_open and is freed once.
            drop(unsafe { Box::from_raw(table) });
            Ok(fc_status::FC_OK)
        });
    }
}

/// Sweeps the table for dead processes now and gives back what they held;
/// `*reaped` = how many were found. Rarely needed: each attached process
/// does this in a background thread. Thread-safe; makes system calls (one
/// lock probe per attachment slot in use).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_table_reap(table: *const fc_table, reaped: *mut u32) -> fc_status {
    boundary(|| {
        let table = unsafe { arg(table, "table") }?;
        let reaped = out_arg(reaped, "reaped")?;
        let found = table.table.reap();
        unsafe { put(reaped, u32::try_from(found).unwrap_or(u32::MAX)) };
        Ok(fc_status::FC_OK)
    })
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
        let name = unsafe { name_arg(name) }?;
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
        let s = task_of(task).settings();
        out.write(&fc_task_config {
            size: size_of::<fc_task_config>() as u32,
            burst: s.burst,
            local_rate: s.local_rate,
            max_concurrency: s.max_concurrency,
            reserved: 0,
            global_rate: s.global_rate,
            slice_ms: s.slice_ms,
            chunk: s.chunk,
            fallback_rate: s.fallback_rate,
            ..super::waiting::limiter_fields(&s.limiter)
        });
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
    decision: Result<RawPermit, crate::Limited>,
    permit: *mut fc_permit,
) -> Result<fc_status, Error> {
    Ok(match decision {
        Ok(raw) => {
            let value = fc_permit {
                acquired_at: raw.acquired_at,
                owner: raw.owner,
                task: raw.task,
                n: raw.n,
                flags: raw.flags,
                reserved0: 0,
                check: raw.check,
                reserved: [0; 3],
            };
            unsafe { put(permit, value) };
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

/// `fc_release` with an optional round-trip time.
pub(super) unsafe fn release(
    task: *const fc_task,
    permit: *mut fc_permit,
    outcome: fc_outcome,
    rtt: Option<std::time::Duration>,
) -> Result<fc_status, Error> {
    {
        let task = unsafe { arg(task, "task") }?;
        // SAFETY: NULL or valid per the contract; C owns the memory.
        let p = unsafe { permit.as_mut() }.ok_or_else(|| null("permit"))?;
        let outcome = outcome_of(outcome)?;
        if p.reserved0 != 0 || p.reserved != [0; 3] {
            return Err(Error::invalid(format!(
                "task {:?}: cannot release this permit: its reserved words were altered",
                task_of(task).name()
            )));
        }
        let mut raw = RawPermit {
            acquired_at: p.acquired_at,
            owner: p.owner,
            task: p.task,
            n: p.n,
            flags: p.flags,
            check: p.check,
        };
        task_of(task).release_raw_rtt(&mut raw, outcome, rtt)?;
        // The mark of a spent permit, in the caller's memory.
        p.flags = raw.flags;
        Ok(fc_status::FC_OK)
    }
}

/// The library version, e.g. "0.1.0". Static; do not free.
#[unsafe(no_mangle)]
pub extern "C" fn fc_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
