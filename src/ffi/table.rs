//! The C face of tables: options, open, close, reap.

use std::ffi::{CStr, OsStr, c_char};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::args::{arg, ms_or, out_arg, put, reserved, set, text_arg};
use super::sized::{init_sized, read_sized};
use super::status::{boundary, fc_status};
use super::types::*;
use crate::{Error, StoreOptions, Table, TableOptions};

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
    reserved(o.reserved, "fc_table_options.reserved")?;
    reserved(o.reserved2, "fc_table_options.reserved2")?;
    let mut store = StoreOptions::default();
    if !o.store_url.is_null() {
        store.url = Some(unsafe { text_arg(o.store_url, "store_url") }?.to_string());
    }
    if !o.key_prefix.is_null() {
        store.key_prefix = unsafe { text_arg(o.key_prefix, "key_prefix") }?.to_string();
    }
    if !o.host_id.is_null() {
        store.host_id = Some(unsafe { text_arg(o.host_id, "host_id") }?.to_string());
    }
    store.timeout = ms_or(o.store_timeout_ms, store.timeout);
    store.connect_timeout = ms_or(o.store_connect_timeout_ms, store.connect_timeout);
    store.probe_interval = ms_or(o.probe_interval_ms, store.probe_interval);
    Ok(TableOptions {
        capacity: o.capacity,
        max_processes: o.max_processes,
        mode: o.mode,
        owner: set(o.owner_uid),
        shared,
        store,
        balancers: o.balancers,
        backends_per_balancer: o.backends_per_balancer,
        config: (!o.config_path.is_null())
            .then(|| unsafe { text_arg(o.config_path, "config_path") }.map(PathBuf::from))
            .transpose()?,
        lanes: o.lanes,
    })
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
        super::logging::from_env();
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

/// The library version, e.g. "0.3.0". Static; do not free.
#[unsafe(no_mangle)]
pub extern "C" fn fc_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
