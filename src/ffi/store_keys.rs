//! The C face of keyed tasks' store records: the keys' global rates a
//! store owns (`fc_store_set_key_record`, `fc_store_get_key_record` with
//! its `fc_key_record` getters, `fc_store_remove_key_record`), the version
//! a host has in force (`fc_task_key_record_version`), and the fleet's hot
//! keys (`fc_store_hot_keys`). Conversions only: the checks are the core's.

use std::ffi::c_char;

use super::args::{arg, name_arg, out_arg, put, reserved, text_arg};
use super::keyed::{global, global_values};
use super::sized::null;
use super::status::{boundary, fc_status};
use super::store::{fc_store, remove_with};
use super::task::task_of;
use super::types::fc_task;
use crate::{Error, KeyGlobal, KeyRecord, MAX_HOT_KEYS, Store};

/// The most keys a record names (a keyed task's overrides).
pub const FC_KEY_RECORD_MAX: u32 = 64;
const _: () = assert!(FC_KEY_RECORD_MAX as usize == crate::format::MAX_OVERRIDES);
/// The most hot keys `fc_store_hot_keys` lists.
pub const FC_HOT_KEYS_MAX: u32 = 100;
const _: () = assert!(FC_HOT_KEYS_MAX as usize == MAX_HOT_KEYS);

/// A key's global rate, as `fc_task_set_key_global` takes it: `count` per
/// `period_ms` (0: no global rate, every other field 0), in slices of
/// `slice_ms` (0: the period), `local` (0 to 31; zeroed, 0, not the 1
/// Python and the config file default to), `fallback`
/// `FC_FALLBACK_SHARE`, `_LOCAL` or `_DENY`. Caller memory, 48 bytes for
/// good: zero it first (`reserved` must be 0; written as 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct fc_key_global {
    pub count: f64,
    pub period_ms: u64,
    pub slice_ms: u64,
    pub local: u32,
    pub fallback: u32,
    pub reserved: [u32; 4],
}

const _: () = assert!(size_of::<fc_key_global>() == 48);

/// One of a keyed task's hot keys. Caller memory, 128 bytes for good (the
/// reserved words are written as 0).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fc_hot_key {
    /// The key's id in the store (a hash of the task and the key).
    pub id: u64,
    /// Chunks the store's slice gave of it so far, fleet-wide, and the asks
    /// hosts made of it.
    pub given: u64,
    pub asks: u64,
    /// Its first `name_len` bytes (at most 64; not NUL-terminated), if a
    /// host named it; `name_len` 0: none did.
    pub name: [u8; 64],
    pub name_len: u32,
    pub reserved: [u32; 9],
}

const _: () = assert!(size_of::<fc_hot_key>() == 128);

/// A keyed task's record read from the store: a handle its getters read,
/// freed with `fc_key_record_free`.
pub struct fc_key_record {
    default: Option<KeyGlobal>,
    /// Each key NUL-terminated (its length excludes the NUL).
    overrides: Vec<(Vec<u8>, Option<KeyGlobal>)>,
}

/// The rate a C struct says (`what` names it in errors).
fn global_of(g: &fc_key_global, what: &str) -> Result<Option<KeyGlobal>, Error> {
    for r in g.reserved {
        reserved(r, &format!("{what}.reserved"))?;
    }
    global(g.count, g.period_ms, g.slice_ms, g.local, g.fallback)
        .map_err(|e| Error::new(e.kind(), format!("{what}: {}", e.message())))
}

fn global_to(g: Option<KeyGlobal>) -> fc_key_global {
    let (count, period_ms, slice_ms, local, fallback) = global_values(g);
    fc_key_global {
        count,
        period_ms,
        slice_ms,
        local,
        fallback,
        reserved: [0; 4],
    }
}

/// Writes keyed task `task`'s record of its keys' global rates: every
/// host of the fleet adopts it within about a second, over its own global
/// rates (its other key limits stay its own). `default_global` is the rate
/// of every key the record does not name (NULL or `count` 0: none); the
/// `n` keys (at most `FC_KEY_RECORD_MAX`, UTF-8, NUL-terminated) of `keys`
/// get the rates of `globals` (`count` 0: the key has none). Checked as
/// hosts check it: nothing is written on a refusal. `*version` (NULL = not
/// wanted) gets the record's version. One round trip; `FC_ERR_STORE` when
/// the store fails. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_store_set_key_record(
    store: *const fc_store,
    task: *const c_char,
    default_global: *const fc_key_global,
    keys: *const *const c_char,
    globals: *const fc_key_global,
    n: usize,
    version: *mut u64,
) -> fc_status {
    boundary(|| {
        let store = unsafe { arg(store, "store") }?;
        let task = unsafe { name_arg(task, "task name") }?;
        if n > FC_KEY_RECORD_MAX as usize {
            return Err(Error::invalid(format!(
                "a record names at most FC_KEY_RECORD_MAX ({FC_KEY_RECORD_MAX}) keys, not {n}"
            )));
        }
        if n > 0 && keys.is_null() {
            return Err(null("keys"));
        }
        if n > 0 && globals.is_null() {
            return Err(null("globals"));
        }
        let mut record = KeyRecord::default();
        if !default_global.is_null() {
            // SAFETY: a non-NULL pointer to one struct per the contract.
            record.default = global_of(unsafe { &*default_global }, "default_global")?;
        }
        for i in 0..n {
            // SAFETY: `n` readable entries of each array per the contract.
            let (key, g) = unsafe { (*keys.add(i), &*globals.add(i)) };
            let key = unsafe { text_arg(key, &format!("keys[{i}]")) }?;
            let g = global_of(g, &format!("globals[{i}] (key {key:?})"))?;
            record.overrides.push((key.to_string(), g));
        }
        let written = store.store.set_key_record(task, &record)?;
        if !version.is_null() {
            // SAFETY: a non-NULL out-pointer per the contract.
            unsafe { put(version, written) };
        }
        Ok(fc_status::FC_OK)
    })
}

/// Reads keyed task `task`'s record of its keys' global rates. With one,
/// `*record` is a new handle (read it with `fc_key_record_default`,
/// `_count`, `_override`; free it with `fc_key_record_free`) and
/// `*version` its version; without one, `*record` is NULL and `*version`
/// 0. A record hosts refuse (written by hand with a bad field) answers
/// `FC_ERR_INVALID_ARGUMENT` naming the field. One round trip. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_store_get_key_record(
    store: *const fc_store,
    task: *const c_char,
    record: *mut *mut fc_key_record,
    version: *mut u64,
) -> fc_status {
    boundary(|| {
        let store = unsafe { arg(store, "store") }?;
        let task = unsafe { name_arg(task, "task name") }?;
        let record = out_arg(record, "record")?;
        let version = out_arg(version, "version")?;
        let (v, handle) = match store.store.key_record(task)? {
            None => (0, std::ptr::null_mut()),
            Some((v, r)) => {
                let overrides = r
                    .overrides
                    .into_iter()
                    .map(|(k, g)| {
                        let mut key = k.into_bytes();
                        key.push(0);
                        (key, g)
                    })
                    .collect();
                let handle = fc_key_record {
                    default: r.default,
                    overrides,
                };
                (v, Box::into_raw(Box::new(handle)))
            }
        };
        unsafe {
            put(record, handle);
            put(version, v);
        }
        Ok(fc_status::FC_OK)
    })
}

/// The rate of every key `record` does not name, into `*out` (`count` 0:
/// none). Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_key_record_default(
    record: *const fc_key_record,
    out: *mut fc_key_global,
) -> fc_status {
    boundary(|| {
        let record = unsafe { arg(record, "record") }?;
        let out = out_arg(out, "out")?;
        unsafe { put(out, global_to(record.default)) };
        Ok(fc_status::FC_OK)
    })
}

/// How many keys `record` names (`*count`, at most `FC_KEY_RECORD_MAX`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_key_record_count(
    record: *const fc_key_record,
    count: *mut usize,
) -> fc_status {
    boundary(|| {
        let record = unsafe { arg(record, "record") }?;
        let count = out_arg(count, "count")?;
        unsafe { put(count, record.overrides.len()) };
        Ok(fc_status::FC_OK)
    })
}

/// The `index`th key `record` names (in byte order) and its rate:
/// `*key` points to its bytes, NUL-terminated, valid until
/// `fc_key_record_free`; `*key_len` (NULL = not wanted) is their length;
/// `*global` its rate (`count` 0: none). An `index` past
/// `fc_key_record_count` is `FC_ERR_INVALID_ARGUMENT`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_key_record_override(
    record: *const fc_key_record,
    index: usize,
    key: *mut *const c_char,
    key_len: *mut usize,
    global: *mut fc_key_global,
) -> fc_status {
    boundary(|| {
        let record = unsafe { arg(record, "record") }?;
        let key = out_arg(key, "key")?;
        let global = out_arg(global, "global")?;
        let (name, g) = record.overrides.get(index).ok_or_else(|| {
            Error::invalid(format!(
                "index {index} is past the record's {} keys",
                record.overrides.len()
            ))
        })?;
        unsafe {
            put(key, name.as_ptr().cast::<c_char>());
            if !key_len.is_null() {
                put(key_len, name.len() - 1);
            }
            put(global, global_to(*g));
        }
        Ok(fc_status::FC_OK)
    })
}

/// Frees a record handle (NULL is ignored); it and its keys must not be
/// used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_key_record_free(record: *mut fc_key_record) {
    if !record.is_null() {
        boundary(|| {
            // SAFETY: the handle came from fc_store_get_key_record, freed once.
            drop(unsafe { Box::from_raw(record) });
            Ok(fc_status::FC_OK)
        });
    }
}

/// Removes keyed task `task`'s record: hosts keep its rates until their
/// own are written again. `*removed` (NULL = not wanted) is 1 if there was
/// one, else 0. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_store_remove_key_record(
    store: *const fc_store,
    task: *const c_char,
    removed: *mut u32,
) -> fc_status {
    unsafe { remove_with(store, task, removed, Store::remove_key_record) }
}

/// The versions of the store's record of the task's keys' global rates
/// the host has in force (`*adopted`; 0: none, or none since its own limits
/// were written or the record removed) and last refused (`*refused`; 0:
/// none): 0 and 0 for a task without key limits. Either pointer may be
/// NULL. Thread-safe; no system call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_key_record_version(
    task: *const fc_task,
    adopted: *mut u64,
    refused: *mut u64,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let (a, r) = task_of(task).key_record_versions()?.unwrap_or_default();
        unsafe {
            if !adopted.is_null() {
                put(adopted, a);
            }
            if !refused.is_null() {
                put(refused, r);
            }
        }
        Ok(fc_status::FC_OK)
    })
}

/// The `capacity` keys (at most `FC_HOT_KEYS_MAX`) of keyed task `task`
/// the store gave most of in its current slice of `slice_ms` (10 to
/// 86,400,000: the slices of the keys' global rate), most first, into
/// `keys` (NULL when `capacity` is 0); `*count` is how many were written.
/// `*slice` and `*pulled` (each NULL = not wanted) get the slice's number
/// and how many keys the store counts in it (those some host pulled). One
/// round trip; `FC_ERR_STORE` when the store fails. Thread-safe.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fc_store_hot_keys(
    store: *const fc_store,
    task: *const c_char,
    slice_ms: u32,
    keys: *mut fc_hot_key,
    capacity: u32,
    count: *mut u32,
    slice: *mut u64,
    pulled: *mut u64,
) -> fc_status {
    boundary(|| {
        let store = unsafe { arg(store, "store") }?;
        let task = unsafe { name_arg(task, "task name") }?;
        let count = out_arg(count, "count")?;
        if capacity > 0 && keys.is_null() {
            return Err(null("keys"));
        }
        let hot = store.store.hot_keys(task, slice_ms, capacity as usize)?;
        for (i, k) in hot.top.iter().take(capacity as usize).enumerate() {
            let name = k.name.as_deref().unwrap_or_default();
            let mut key = fc_hot_key {
                id: k.id,
                given: k.given,
                asks: k.asks,
                name: [0; 64],
                name_len: name.len().min(64) as u32,
                reserved: [0; 9],
            };
            key.name[..key.name_len as usize].copy_from_slice(&name[..key.name_len as usize]);
            // SAFETY: `capacity` writable entries per the contract.
            unsafe { put(keys.add(i), key) };
        }
        unsafe {
            put(count, hot.top.len().min(capacity as usize) as u32);
            if !slice.is_null() {
                put(slice, hot.slice);
            }
            if !pulled.is_null() {
                put(pulled, hot.keys);
            }
        }
        Ok(fc_status::FC_OK)
    })
}
