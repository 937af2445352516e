//! The C face of a fleet's store: `fc_store_open`, `fc_store_fleet` (the
//! census of a task's hosts), the tasks' records (`fc_store_set_task_config`,
//! `fc_store_get_task_config`, `fc_store_remove_task_config`),
//! `fc_store_free`. Keyed tasks' records and hot keys: `store_keys`.

use std::ffi::c_char;

use super::args::{arg, name_arg, out_arg, put, text_arg, to_array};
use super::config::{config_fields, config_of};
use super::sized::{Out, read_sized};
use super::status::{boundary, fc_status};
use super::types::{FC_RATE_UNSET, FC_UNSET, fc_task_config};
use crate::{Error, GlobalSource, LimiterConfig, LocalConfig, Store, StoreOptions, TaskSettings};

/// A fleet's quota store (Redis), apart from any table. Thread-safe.
pub struct fc_store {
    pub(super) store: Store,
}

/// One host of a task's census. Caller memory, 128 bytes for good (the
/// reserved words are room for later versions; written as 0).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fc_host_record {
    /// The host's id, NUL-terminated.
    pub host: [c_char; 64],
    /// The slice the record is of: the newest full slice the host pulled in.
    pub slice: u64,
    /// Permits it asked for, and was granted, from that slice's key.
    pub asked: u64,
    pub granted: u64,
    /// All it had taken of the slice at its last pull (grants, also of a
    /// key the store lost, and fallback admissions).
    pub claimed: u64,
    /// Its clock's offset to the store's, µs.
    pub offset_us: i64,
    /// Requests per slice it said it is asked for (admitted and refused):
    /// what fair tails divide a slice by.
    pub demand: u64,
    /// What its releases reported over that slice up to its last pull:
    /// permits released as success and as dropped, the mean and 99th
    /// percentile of their round-trip times in µs (0: no samples; each
    /// saturates at UINT32_MAX). Were reserved words before: 0 from a host
    /// that does not report them.
    pub success: u32,
    pub dropped: u32,
    pub mean_us: u32,
    pub p99_us: u32,
}

const _: () = assert!(size_of::<fc_host_record>() == 128);

fn saturate(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Opens a handle on the Redis at `url` (`redis://`, `rediss://`,
/// `unix://`, a master named by Sentinels:
/// `redis+sentinel://[:password@]host:port[,host:port...]/master[/db]`, a
/// Redis Cluster: `redis+cluster://host:port[,host:port...]`, and both with
/// TLS as `rediss+sentinel://` / `rediss+cluster://`; the query may carry
/// `timeout_ms`, `connect_timeout_ms`, `prefix`). Does not connect. On `FC_OK`, `*out` is a new handle, freed
/// with `fc_store_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_store_open(url: *const c_char, out: *mut *mut fc_store) -> fc_status {
    boundary(|| {
        super::logging::from_env();
        let out = out_arg(out, "out")?;
        let options = StoreOptions {
            url: Some(unsafe { text_arg(url, "url") }?.to_string()),
            ..StoreOptions::default()
        };
        let store = Store::open(&options)?;
        unsafe { put(out, Box::into_raw(Box::new(fc_store { store }))) };
        Ok(fc_status::FC_OK)
    })
}

/// The live hosts of `task` (slices of `slice_ms`; 0 = the task's store
/// record's, else 1000): those that pulled in its last full slices, newest
/// first. Fills up to `capacity` of `records`
/// (NULL when `capacity` is 0) and sets `*count` to how many hosts there
/// are (more than `capacity` when the array is too small). Two round trips
/// to the store; `FC_ERR_STORE` when it fails. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_store_fleet(
    store: *const fc_store,
    task: *const c_char,
    slice_ms: u32,
    records: *mut fc_host_record,
    capacity: u32,
    count: *mut u32,
) -> fc_status {
    boundary(|| {
        let store = unsafe { arg(store, "store") }?;
        let task = unsafe { name_arg(task, "task name") }?;
        let count = out_arg(count, "count")?;
        if capacity > 0 && records.is_null() {
            return Err(Error::invalid("records is NULL"));
        }
        let fleet = store
            .store
            .fleet(task, (slice_ms != 0).then_some(slice_ms))?;
        for (i, h) in fleet.hosts.iter().take(capacity as usize).enumerate() {
            let record = fc_host_record {
                host: to_array(&h.host),
                slice: h.slice,
                asked: h.asked,
                granted: h.granted,
                claimed: h.claimed,
                offset_us: h.offset_us,
                demand: h.demand,
                success: saturate(h.health.success),
                dropped: saturate(h.health.dropped),
                mean_us: saturate(h.health.mean_us),
                p99_us: saturate(h.health.p99_us),
            };
            // SAFETY: `capacity` writable records per the contract.
            unsafe { put(records.add(i), record) };
        }
        unsafe { put(count, u32::try_from(fleet.hosts.len()).unwrap_or(u32::MAX)) };
        Ok(fc_status::FC_OK)
    })
}

/// Writes `task`'s record in the store from the global fields of `config`
/// (`global_rate` above 0 required; `slice_ms`, `chunk`, `fallback`,
/// `fallback_rate`, `global_burst` unset = their defaults). Every host of
/// the fleet spends by it from its next pull, within one slice, whatever its
/// own configuration says, until `fc_store_remove_task_config`. The local
/// and limiter fields must be unset (they are each host's own). `*version`
/// (NULL = not wanted) gets the record's version. One round trip;
/// `FC_ERR_STORE` when the store fails. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_store_set_task_config(
    store: *const fc_store,
    task: *const c_char,
    config: *const fc_task_config,
    version: *mut u64,
) -> fc_status {
    boundary(|| {
        let store = unsafe { arg(store, "store") }?;
        let task = unsafe { name_arg(task, "task name") }?;
        if config.is_null() {
            return Err(Error::invalid("config is NULL"));
        }
        let config = config_of(&unsafe { read_sized(config, "config") }?)?;
        if config.local != LocalConfig::default() || config.limiter != LimiterConfig::default() {
            return Err(Error::invalid(
                "a store record holds a task's global fields only: leave local_rate, burst, \
                 max_concurrency, limiter and its limits unset (FC_UNSET, FC_RATE_UNSET, \
                 an empty limiter)",
            ));
        }
        let written = store.store.set_task_config(task, &config.global)?;
        if !version.is_null() {
            // SAFETY: a non-NULL out-pointer per the contract.
            unsafe { put(version, written) };
        }
        Ok(fc_status::FC_OK)
    })
}

/// Reads `task`'s record in the store. With a record, fills `*out` (filled
/// by `fc_task_config_init` first: its `size` is read) with its global
/// fields, the others unset and `global_source` `FC_SOURCE_STORE`, and sets
/// `*version`; without one, sets `*version` to 0 and leaves `*out` alone.
/// A record that hosts refuse (written by hand with a bad field) answers
/// `FC_ERR_INVALID_ARGUMENT` naming the field. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_store_get_task_config(
    store: *const fc_store,
    task: *const c_char,
    out: *mut fc_task_config,
    version: *mut u64,
) -> fc_status {
    boundary(|| {
        let store = unsafe { arg(store, "store") }?;
        let task = unsafe { name_arg(task, "task name") }?;
        let out = unsafe { Out::new(out, "out") }?;
        let version = out_arg(version, "version")?;
        let Some(record) = store.store.task_config(task)? else {
            unsafe { put(version, 0u64) };
            return Ok(fc_status::FC_OK);
        };
        let mut fields = config_fields(
            &TaskSettings {
                global: record.settings,
                global_source: GlobalSource::Store,
                ..TaskSettings::default()
            },
            0,
        );
        fields.local_rate = FC_RATE_UNSET;
        fields.burst = FC_UNSET;
        fields.max_concurrency = FC_UNSET;
        fields.limiter = [0; 128];
        (fields.min_limit, fields.max_limit, fields.initial_limit) = (FC_UNSET, FC_UNSET, FC_UNSET);
        out.write(&fields);
        unsafe { put(version, record.version) };
        Ok(fc_status::FC_OK)
    })
}

/// Removes `task`'s record from the store: hosts return to their own
/// configuration at their next pull. `*removed` (NULL = not wanted) is 1 if
/// there was one, else 0. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_store_remove_task_config(
    store: *const fc_store,
    task: *const c_char,
    removed: *mut u32,
) -> fc_status {
    unsafe { remove_with(store, task, removed, Store::remove_task_config) }
}

/// A remove of one of `task`'s records by `remove`: `*removed` (NULL = not
/// wanted) is 1 if there was one, else 0.
pub(super) unsafe fn remove_with(
    store: *const fc_store,
    task: *const c_char,
    removed: *mut u32,
    remove: fn(&Store, &str) -> Result<bool, Error>,
) -> fc_status {
    boundary(|| {
        let store = unsafe { arg(store, "store") }?;
        let task = unsafe { name_arg(task, "task name") }?;
        let was = remove(&store.store, task)?;
        if !removed.is_null() {
            // SAFETY: a non-NULL out-pointer per the contract.
            unsafe { put(removed, was as u32) };
        }
        Ok(fc_status::FC_OK)
    })
}

/// Frees a store handle (NULL is ignored); it must not be used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_store_free(store: *mut fc_store) {
    if !store.is_null() {
        boundary(|| {
            // SAFETY: the handle came from fc_store_open and is freed once.
            drop(unsafe { Box::from_raw(store) });
            Ok(fc_status::FC_OK)
        });
    }
}
