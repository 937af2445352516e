//! Status codes, the thread-local last error, and the panic boundary.

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::{Error, ErrorKind, Limited};

/// The result of every fallible `fc_*` function. The numbers are stable.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum fc_status {
    /// Success; for `fc_acquire`, admitted.
    FC_OK = 0,
    /// Rejected: the host's local rate for the task is used up.
    FC_LIMITED_LOCAL = 1,
    /// Rejected: the cluster-wide quota for the task is used up.
    FC_LIMITED_GLOBAL = 2,
    /// Rejected: the host's concurrency cap for the task is reached.
    FC_LIMITED_CONCURRENCY = 3,
    /// A NULL pointer, n = 0, n above the burst, a bad option or permit.
    FC_ERR_INVALID_ARGUMENT = 100,
    /// A task name that is empty, over 63 bytes, not UTF-8 or not printable.
    FC_ERR_INVALID_NAME = 101,
    /// Every task slot of the table is taken.
    FC_ERR_TABLE_FULL = 102,
    /// Every attachment slot of the table is held by a live process.
    FC_ERR_TOO_MANY_PROCESSES = 103,
    /// The task is registered with another configuration.
    FC_ERR_CONFIG_MISMATCH = 104,
    /// The file is a flowctrl table of another layout version.
    FC_ERR_INCOMPATIBLE = 105,
    /// The file is not a flowctrl table, or is truncated or damaged.
    FC_ERR_CORRUPT = 106,
    /// An I/O error other than a permission problem.
    FC_ERR_IO = 107,
    /// The operating system refused access.
    FC_ERR_PERMISSION = 108,
    /// A bug in flowctrl; `fc_last_error()` tells more.
    FC_ERR_INTERNAL = 199,
}

impl From<&Error> for fc_status {
    fn from(e: &Error) -> Self {
        match e.kind() {
            ErrorKind::InvalidArgument => Self::FC_ERR_INVALID_ARGUMENT,
            ErrorKind::InvalidName => Self::FC_ERR_INVALID_NAME,
            ErrorKind::TableFull => Self::FC_ERR_TABLE_FULL,
            ErrorKind::TooManyProcesses => Self::FC_ERR_TOO_MANY_PROCESSES,
            ErrorKind::ConfigMismatch => Self::FC_ERR_CONFIG_MISMATCH,
            ErrorKind::Incompatible => Self::FC_ERR_INCOMPATIBLE,
            ErrorKind::Corrupt => Self::FC_ERR_CORRUPT,
            ErrorKind::Io => Self::FC_ERR_IO,
            ErrorKind::Permission => Self::FC_ERR_PERMISSION,
            _ => Self::FC_ERR_INTERNAL,
        }
    }
}

impl From<Limited> for fc_status {
    fn from(l: Limited) -> Self {
        match l {
            Limited::Local => Self::FC_LIMITED_LOCAL,
            Limited::Concurrency => Self::FC_LIMITED_CONCURRENCY,
        }
    }
}

const STATUS_TEXT: &[(fc_status, &str)] = &[
    (fc_status::FC_OK, "ok\0"),
    (fc_status::FC_LIMITED_LOCAL, "limited by the local rate\0"),
    (
        fc_status::FC_LIMITED_GLOBAL,
        "limited by the global quota\0",
    ),
    (
        fc_status::FC_LIMITED_CONCURRENCY,
        "limited by concurrency\0",
    ),
    (fc_status::FC_ERR_INVALID_ARGUMENT, "invalid argument\0"),
    (fc_status::FC_ERR_INVALID_NAME, "invalid task name\0"),
    (fc_status::FC_ERR_TABLE_FULL, "table full\0"),
    (
        fc_status::FC_ERR_TOO_MANY_PROCESSES,
        "too many processes attached\0",
    ),
    (
        fc_status::FC_ERR_CONFIG_MISMATCH,
        "task configuration mismatch\0",
    ),
    (
        fc_status::FC_ERR_INCOMPATIBLE,
        "incompatible table layout\0",
    ),
    (fc_status::FC_ERR_CORRUPT, "corrupt or truncated table\0"),
    (fc_status::FC_ERR_IO, "I/O error\0"),
    (fc_status::FC_ERR_PERMISSION, "permission denied\0"),
    (fc_status::FC_ERR_INTERNAL, "internal error\0"),
];

/// A static, NUL-terminated description of a status code (any value, also
/// unknown ones). Never NULL; do not free.
#[unsafe(no_mangle)]
pub extern "C" fn fc_status_str(status: u32) -> *const c_char {
    STATUS_TEXT
        .iter()
        .find(|(s, _)| *s as u32 == status)
        .map_or("unknown status\0", |(_, text)| text)
        .as_ptr()
        .cast()
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// The reason for the last error returned on this thread, NUL-terminated
/// (empty if none yet). Valid until the next failing `fc_*` call on this
/// thread; do not free.
#[unsafe(no_mangle)]
pub extern "C" fn fc_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

pub(crate) fn fail(e: &Error) -> fc_status {
    let text = CString::new(e.message().replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|slot| *slot.borrow_mut() = text);
    e.into()
}

/// Runs the body of an exported function: errors become their status (with
/// the reason recorded), and a panic becomes `FC_ERR_INTERNAL` instead of
/// unwinding into C.
#[inline(always)]
pub(crate) fn boundary(body: impl FnOnce() -> Result<fc_status, Error>) -> fc_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => fail(&e),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            fail(&Error::new(
                ErrorKind::Internal,
                format!("flowctrl panicked: {what}"),
            ))
        }
    }
}
