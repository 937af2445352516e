//! The exported functions and the structs C allocates.

use std::ffi::{CStr, OsStr, c_char};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::status::{boundary, fc_status};
const NAME_MAX: usize = FC_NAME_MAX as usize;
use crate::{
    Error, ErrorKind, Outcome, RawPermit, Table, TableOptions, Task, TaskConfig, TaskStats,
};

/// Layout version of the table file this library reads and writes.
pub const FC_LAYOUT_VERSION: u32 = 1;
pub const FC_VERSION_MAJOR: u32 = 0;
pub const FC_VERSION_MINOR: u32 = 1;
pub const FC_VERSION_PATCH: u32 = 0;
/// The longest task name, in bytes (without the terminating NUL).
pub const FC_NAME_MAX: u32 = 63;

/// How a request ended, passed to `fc_release`.
pub type fc_outcome = u32;
/// The request completed; its round-trip time is a latency sample.
pub const FC_OUTCOME_SUCCESS: fc_outcome = 0;
/// It timed out or was shed: a sign the backend is struggling.
pub const FC_OUTCOME_DROPPED: fc_outcome = 1;
/// It ended before a meaningful round-trip time existed (no sample).
pub const FC_OUTCOME_IGNORED: fc_outcome = 2;

/// An open table. Thread-safe: one handle may be used from any number of
/// threads. Forked children may keep using it (each gets its own attachment).
pub struct fc_table {
    table: Table,
}

/// A registered task. Thread-safe, like `fc_table`; it keeps its table alive.
pub struct fc_task {
    task: Task,
}

/// Options for creating a table; fill with `fc_table_options_init` first.
/// They apply only when the file does not exist yet.
#[repr(C)]
pub struct fc_table_options {
    /// Task slots (default 1024).
    pub capacity: u32,
    /// Processes attached at once (default 128).
    pub max_processes: u32,
    /// File mode of a new table (default 0600).
    pub mode: u32,
}

/// A task's configuration; fill with `fc_task_config_init` first.
#[repr(C)]
pub struct fc_task_config {
    /// Requests per second for the host, fractional allowed; 0 = no limit.
    pub local_rate: f64,
    /// Permits that may be taken at once above the smooth rate (>= 1).
    pub burst: u32,
    /// Permits in flight on the host at most; 0 = no cap.
    pub max_concurrency: u32,
}

/// An admitted request, in caller memory (no allocation per request). Opaque:
/// pass it back to `fc_release` unchanged, from the same process.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fc_permit {
    pub acquired_at: u64,
    pub owner: u64,
    pub task: u32,
    pub n: u32,
    pub flags: u32,
    pub reserved: u32,
    pub check: u64,
}

/// A task's counters, in permits, summed over every process on the host.
/// Named by its tag, `struct fc_task_stats`: the function `fc_task_stats`
/// shares the name, which C allows for a tag but not for a typedef.
#[repr(C)]
pub struct fc_task_stats {
    pub admitted: u64,
    pub limited_local: u64,
    pub limited_global: u64,
    pub limited_concurrency: u64,
    pub released_success: u64,
    pub released_dropped: u64,
    pub released_ignored: u64,
    /// Permits of dead processes given back by the reaper.
    pub reclaimed: u64,
    pub in_flight: u64,
    /// Sum of acquire-to-release times of success and dropped releases (ns).
    pub rtt_sum_ns: u64,
    pub rtt_samples: u64,
}

fn null(what: &str) -> Error {
    Error::invalid(format!("{what} is NULL"))
}

/// Borrows `*ptr`, or fails naming the argument.
unsafe fn arg<'a, T>(ptr: *const T, what: &str) -> Result<&'a T, Error> {
    // SAFETY: the caller passes a pointer that is NULL or valid.
    unsafe { ptr.as_ref() }.ok_or_else(|| null(what))
}

/// Reads a task name: NUL-terminated within FC_NAME_MAX bytes, UTF-8.
unsafe fn name_arg<'a>(name: *const c_char) -> Result<&'a str, Error> {
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

/// Writes `value` to `out` (checked non-NULL before any work is done).
unsafe fn put<T>(out: *mut T, value: T) {
    // SAFETY: checked non-NULL by the caller; C owns the memory.
    unsafe { out.write(value) }
}

/// Fills `options` with the defaults.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_table_options_init(options: *mut fc_table_options) -> fc_status {
    boundary(|| {
        if options.is_null() {
            return Err(null("options"));
        }
        let d = TableOptions::default();
        let value = fc_table_options {
            capacity: d.capacity,
            max_processes: d.max_processes,
            mode: d.mode,
        };
        unsafe { put(options, value) };
        Ok(fc_status::FC_OK)
    })
}

/// Opens the table at `path`, creating it if missing, and attaches this
/// process. `path` NULL = `/dev/shm/flowctrl`; a bare name = `/dev/shm/<name>`.
/// `options` NULL = defaults. On `FC_OK`, `*out` is a new handle that the
/// caller frees with `fc_table_close`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_table_open(
    path: *const c_char,
    options: *const fc_table_options,
    out: *mut *mut fc_table,
) -> fc_status {
    boundary(|| {
        if out.is_null() {
            return Err(null("out"));
        }
        let options = match unsafe { options.as_ref() } {
            None => TableOptions::default(),
            Some(o) => TableOptions {
                capacity: o.capacity,
                max_processes: o.max_processes,
                mode: o.mode,
                ..TableOptions::default()
            },
        };
        let path = (!path.is_null()).then(|| {
            Path::new(OsStr::from_bytes(
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

/// Frees a table handle (NULL is ignored). Tasks registered through it stay
/// valid; this process detaches once the table and all its tasks are freed,
/// giving back any permits it still holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_table_close(table: *mut fc_table) {
    if !table.is_null() {
        // SAFETY: the handle came from fc_table_open and is freed once.
        boundary(|| {
            drop(unsafe { Box::from_raw(table) });
            Ok(fc_status::FC_OK)
        });
    }
}

/// Fills `config` with the defaults: no rate limit, burst 1, no cap.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_config_init(config: *mut fc_task_config) -> fc_status {
    boundary(|| {
        if config.is_null() {
            return Err(null("config"));
        }
        let d = crate::TaskSettings::default();
        let value = fc_task_config {
            local_rate: d.local_rate,
            burst: d.burst,
            max_concurrency: d.max_concurrency,
        };
        unsafe { put(config, value) };
        Ok(fc_status::FC_OK)
    })
}

fn config_of(c: &fc_task_config) -> TaskConfig {
    TaskConfig::new()
        .local_rate(c.local_rate)
        .burst(c.burst)
        .max_concurrency(c.max_concurrency)
}

/// Registers the task `name` host-wide, or attaches to it if registered
/// already. With a `config`, the first registration wins and a different one
/// answers `FC_ERR_CONFIG_MISMATCH` (use `fc_task_update` to change it); with
/// `config` NULL, an existing task is taken as it is and a new one gets the
/// defaults. On `FC_OK`, `*out` is a new handle freed with `fc_task_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_register(
    table: *const fc_table,
    name: *const c_char,
    config: *const fc_task_config,
    out: *mut *mut fc_task,
) -> fc_status {
    boundary(|| {
        let table = unsafe { arg(table, "table") }?;
        if out.is_null() {
            return Err(null("out"));
        }
        let name = unsafe { name_arg(name) }?;
        let config = unsafe { config.as_ref() }
            .map(config_of)
            .unwrap_or_default();
        let task = table.table.task(name, &config)?;
        unsafe { put(out, Box::into_raw(Box::new(fc_task { task }))) };
        Ok(fc_status::FC_OK)
    })
}

/// Changes a task's configuration for every process on the host.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_update(
    task: *const fc_task,
    config: *const fc_task_config,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let config = unsafe { arg(config, "config") }?;
        task.task.update(&config_of(config))?;
        Ok(fc_status::FC_OK)
    })
}

/// Reads the configuration every process on the host applies now.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_config_get(
    task: *const fc_task,
    out: *mut fc_task_config,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        if out.is_null() {
            return Err(null("out"));
        }
        let s = task.task.settings();
        let value = fc_task_config {
            local_rate: s.local_rate,
            burst: s.burst,
            max_concurrency: s.max_concurrency,
        };
        unsafe { put(out, value) };
        Ok(fc_status::FC_OK)
    })
}

/// Frees a task handle (NULL is ignored). Permits acquired through it must be
/// released before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_free(task: *mut fc_task) {
    if !task.is_null() {
        // SAFETY: the handle came from fc_task_register and is freed once.
        boundary(|| {
            drop(unsafe { Box::from_raw(task) });
            Ok(fc_status::FC_OK)
        });
    }
}

/// Asks for `n` permits: concurrency is checked first, then the local rate.
/// `FC_OK` = admitted, `*permit` filled (release it with `fc_release`);
/// `FC_LIMITED_*` = rejected, nothing held; n = 0 or n above the burst or the
/// cap = `FC_ERR_INVALID_ARGUMENT`. No allocation, no system call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_acquire(
    task: *const fc_task,
    n: u32,
    permit: *mut fc_permit,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        if permit.is_null() {
            return Err(null("permit"));
        }
        Ok(match task.task.acquire_raw(n)? {
            Ok(raw) => {
                let value = fc_permit {
                    acquired_at: raw.acquired_at,
                    owner: raw.owner,
                    task: raw.task,
                    n: raw.n,
                    flags: raw.flags,
                    reserved: 0,
                    check: raw.check,
                };
                unsafe { put(permit, value) };
                fc_status::FC_OK
            }
            Err(limited) => limited.into(),
        })
    })
}

/// Releases a permit with the request's outcome (`FC_OUTCOME_*`); the library
/// measures the round-trip time since `fc_acquire`. A permit of another task,
/// table or process (permits do not cross fork) answers
/// `FC_ERR_INVALID_ARGUMENT`, and so does releasing more permits than this
/// process holds of the task. Release each permit once: the permit is caller
/// memory, so a second release while the process holds other permits of the
/// task cannot be told from releasing one of those (it is then that permit's
/// release which is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_release(
    task: *const fc_task,
    permit: *const fc_permit,
    outcome: fc_outcome,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let p = unsafe { arg(permit, "permit") }?;
        let outcome = match outcome {
            FC_OUTCOME_SUCCESS => Outcome::Success,
            FC_OUTCOME_DROPPED => Outcome::Dropped,
            FC_OUTCOME_IGNORED => Outcome::Ignored,
            other => return Err(Error::invalid(format!("unknown outcome {other}"))),
        };
        let mut raw = RawPermit {
            acquired_at: p.acquired_at,
            owner: p.owner,
            task: p.task,
            n: p.n,
            flags: p.flags,
            check: p.check,
        };
        task.task.release_raw(&mut raw, outcome)?;
        Ok(fc_status::FC_OK)
    })
}

/// Reads a task's counters, summed over every process on the host.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_stats(task: *const fc_task, out: *mut fc_task_stats) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        if out.is_null() {
            return Err(null("out"));
        }
        let s: TaskStats = task.task.stats();
        let value = fc_task_stats {
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
        };
        unsafe { put(out, value) };
        Ok(fc_status::FC_OK)
    })
}

/// The library version, e.g. "0.1.0". Static; do not free.
#[unsafe(no_mangle)]
pub extern "C" fn fc_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
