//! The C face of the table-wide check (Rust `Table::check`, Python
//! `Table.check()`): `fc_table_report_init`, `fc_table_check`.

use std::ffi::c_char;

use super::args::{arg, to_array};
use super::sized::{Out, SizedStruct, init_sized};
use super::status::{boundary, fc_status};
use super::types::fc_table;

/// What `fc_table_check` found. Fill it with `fc_table_report_init(&r,
/// sizeof r)`; it grows at its end in later versions (only the caller's
/// `size` bytes are written).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fc_table_report {
    /// `sizeof` the struct as the caller compiled it.
    pub size: u32,
    /// 1 when the path no longer names the file this handle maps (deleted
    /// or replaced): processes opening it now get another table.
    pub replaced: u32,
    /// Tasks whose concurrency count differs from their ledgers.
    pub drifted: u32,
    /// Tasks that never held still long enough to be compared.
    pub unchecked: u32,
    /// The drifted task with the largest drift (NUL-terminated; empty when
    /// none) and its drift: count - held (positive = capacity leaked,
    /// negative = handed out twice).
    pub worst_task: [c_char; 64],
    pub worst_drift: i64,
    /// Versions of the table's config file refused so far, host-wide.
    pub config_errors: u64,
}

const _: () = assert!(size_of::<fc_table_report>() == 96);

// SAFETY: plain integers and a byte array; any bit pattern is valid.
unsafe impl SizedStruct for fc_table_report {
    const NAME: &'static str = "fc_table_report";
    const INIT: &'static str = "fc_table_report_init";
    const MIN_SIZE: usize = 16;
    fn defaults() -> Self {
        Self {
            size: size_of::<Self>() as u32,
            replaced: 0,
            drifted: 0,
            unchecked: 0,
            worst_task: [0; 64],
            worst_drift: 0,
            config_errors: 0,
        }
    }
}

/// Fills `*report`, a struct of `size` bytes (pass `sizeof *report`), with
/// its size and zeros. Touches no other memory; thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_table_report_init(
    report: *mut fc_table_report,
    size: usize,
) -> fc_status {
    boundary(|| {
        unsafe { init_sized(report, size, "report") }?;
        Ok(fc_status::FC_OK)
    })
}

/// Checks the whole table: that its path still names this file, and that
/// every task's concurrency count equals what the processes' ledgers hold
/// (each task compared at an instant it holds still, for at most 1 s). The
/// table is sound when `replaced` and `drifted` are 0. For monitoring, not
/// the request path. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_table_check(
    table: *const fc_table,
    report: *mut fc_table_report,
) -> fc_status {
    boundary(|| {
        let table = &unsafe { arg(table, "table") }?.table;
        let out = unsafe { Out::new(report, "report") }?;
        let check = table.check();
        let worst = check.worst();
        out.write(&fc_table_report {
            size: size_of::<fc_table_report>() as u32,
            replaced: check.replaced as u32,
            drifted: u32::try_from(check.drift.len()).unwrap_or(u32::MAX),
            unchecked: u32::try_from(check.unchecked.len()).unwrap_or(u32::MAX),
            worst_task: worst.map_or([0; 64], |(name, _)| to_array(name)),
            worst_drift: worst.map_or(0, |(_, d)| d),
            config_errors: table.config_errors(),
        });
        Ok(fc_status::FC_OK)
    })
}
