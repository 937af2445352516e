//! The C face of a fleet's store: `fc_store_open`, `fc_store_fleet` (the
//! census of a task's hosts), `fc_store_free`.

use std::ffi::c_char;

use super::args::{arg, name_arg, out_arg, put, text_arg, to_array};
use super::status::{boundary, fc_status};
use crate::{Error, Store, StoreOptions};

/// A fleet's quota store (Redis), apart from any table. Thread-safe.
pub struct fc_store {
    store: Store,
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
    pub reserved: [u64; 3],
}

const _: () = assert!(size_of::<fc_host_record>() == 128);

/// Opens a handle on the Redis at `url` (`redis://`, `rediss://`,
/// `unix://`; the query may carry `timeout_ms`, `connect_timeout_ms`,
/// `prefix`). Does not connect. On `FC_OK`, `*out` is a new handle, freed
/// with `fc_store_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_store_open(url: *const c_char, out: *mut *mut fc_store) -> fc_status {
    boundary(|| {
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

/// The live hosts of `task` (slices of `slice_ms`): those that pulled in its
/// last full slices, newest first. Fills up to `capacity` of `records`
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
        let fleet = store.store.fleet(task, slice_ms)?;
        for (i, h) in fleet.hosts.iter().take(capacity as usize).enumerate() {
            let record = fc_host_record {
                host: to_array(&h.host),
                slice: h.slice,
                asked: h.asked,
                granted: h.granted,
                claimed: h.claimed,
                offset_us: h.offset_us,
                reserved: [0; 3],
            };
            // SAFETY: `capacity` writable records per the contract.
            unsafe { put(records.add(i), record) };
        }
        unsafe { put(count, u32::try_from(fleet.hosts.len()).unwrap_or(u32::MAX)) };
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
