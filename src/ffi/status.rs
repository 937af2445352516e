//! Status codes, the thread-local last error, and the panic boundary.

use std::cell::Cell;
use std::ffi::{CStr, c_char};
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
    /// A key's rate refused a keyed acquire (`fc_acquire_key`).
    FC_LIMITED_KEY_RATE = 4,
    /// A key's concurrency cap refused it (or its process holds permits
    /// of as many distinct keys as it has records for).
    FC_LIMITED_KEY_CONCURRENCY = 5,
    /// The key is blocked (an override admitting nothing).
    FC_LIMITED_KEY_BLOCKED = 6,
    /// A key's global rate refused it: the key's slice is spent across
    /// the fleet (or the host's fallback share of it, while the store
    /// fails).
    FC_LIMITED_KEY_GLOBAL = 7,
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
    /// The operating system refused access, or the table is not to be
    /// trusted: a symbolic link, not a regular file, owned by another uid,
    /// or writable by group or others without `shared`.
    FC_ERR_PERMISSION = 108,
    /// Another process held a claim (a task slot being registered, a
    /// configuration being written) past its deadline (2 s), a task's count
    /// never held still for `fc_task_check` (1 s), or every ledger lane of
    /// this process stayed busy for 1 s.
    FC_ERR_TIMEOUT = 109,
    /// The quota store could not be reached, timed out, or holds something
    /// that is not quota (`fc_pull_quota` only: decisions fall back to local
    /// limits instead of failing).
    FC_ERR_STORE = 110,
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
            ErrorKind::Timeout => Self::FC_ERR_TIMEOUT,
            ErrorKind::Store => Self::FC_ERR_STORE,
            ErrorKind::Internal => Self::FC_ERR_INTERNAL,
        }
    }
}

impl From<Limited> for fc_status {
    fn from(l: Limited) -> Self {
        match l {
            Limited::Local => Self::FC_LIMITED_LOCAL,
            Limited::Concurrency => Self::FC_LIMITED_CONCURRENCY,
            Limited::Global => Self::FC_LIMITED_GLOBAL,
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
    (
        fc_status::FC_LIMITED_KEY_RATE,
        "limited by the key's rate\0",
    ),
    (
        fc_status::FC_LIMITED_KEY_CONCURRENCY,
        "limited by the key's concurrency\0",
    ),
    (fc_status::FC_LIMITED_KEY_BLOCKED, "the key is blocked\0"),
    (
        fc_status::FC_LIMITED_KEY_GLOBAL,
        "limited by the key's global rate\0",
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
    (fc_status::FC_ERR_STORE, "quota store failed\0"),
    (fc_status::FC_ERR_IO, "I/O error\0"),
    (fc_status::FC_ERR_PERMISSION, "permission denied\0"),
    (fc_status::FC_ERR_TIMEOUT, "timed out\0"),
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

/// Room for the last error's reason, NUL included; longer ones are cut.
const LAST_ERROR_CAP: usize = 1024;

thread_local! {
    /// A plain byte array, so the thread-local has no destructor: it stays
    /// usable while the thread's other thread-locals are destroyed (a C++
    /// `thread_local` whose destructor releases a permit, say).
    static LAST_ERROR: Cell<[u8; LAST_ERROR_CAP]> = const { Cell::new([0; LAST_ERROR_CAP]) };
}

/// What `fc_last_error` answers if this thread's reason cannot be reached.
const UNAVAILABLE: &CStr = c"(flowctrl: the reason is not available on this thread any more)";

/// The reason for the last error returned on this thread, NUL-terminated:
/// empty if there was none yet, cut at 1023 bytes. Never NULL; do not free.
/// Valid until the next failing `fc_*` call on this thread or the thread's
/// end. Callable at any time, in thread-local destructors too.
#[unsafe(no_mangle)]
pub extern "C" fn fc_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.as_ptr().cast::<c_char>().cast_const())
        .unwrap_or(UNAVAILABLE.as_ptr())
}

/// Records `e`'s reason for `fc_last_error` and answers its status. Never
/// panics and never allocates.
pub(crate) fn fail(e: &Error) -> fc_status {
    let _ = LAST_ERROR.try_with(|slot| slot.set(truncated(e.message())));
    e.into()
}

/// `message` as a NUL-terminated C string in a fixed buffer: NULs shown as
/// `\0`, cut on a character boundary with "..." when too long.
fn truncated(message: &str) -> [u8; LAST_ERROR_CAP] {
    const ELLIPSIS: &[u8] = b"...";
    let mut buf = [0u8; LAST_ERROR_CAP];
    let mut len = 0;
    let mut utf8 = [0u8; 4];
    for c in message.chars() {
        let bytes: &[u8] = if c == '\0' {
            b"\\0"
        } else {
            c.encode_utf8(&mut utf8).as_bytes()
        };
        // Keep room for the ellipsis and the NUL.
        if len + bytes.len() > LAST_ERROR_CAP - 1 - ELLIPSIS.len() {
            buf[len..len + ELLIPSIS.len()].copy_from_slice(ELLIPSIS);
            return buf;
        }
        buf[len..len + bytes.len()].copy_from_slice(bytes);
        len += bytes.len();
    }
    buf
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

#[cfg(test)]
mod tests {
    use super::*;

    fn text(buf: &[u8; LAST_ERROR_CAP]) -> &str {
        let end = buf.iter().position(|b| *b == 0).expect("NUL-terminated");
        std::str::from_utf8(&buf[..end]).expect("UTF-8")
    }

    #[test]
    fn reasons_are_cut_on_a_character_boundary() {
        assert_eq!(text(&truncated("short")), "short");
        assert_eq!(text(&truncated("a\0b")), "a\\0b");
        let long = "é".repeat(LAST_ERROR_CAP);
        let cut = truncated(&long);
        let shown = text(&cut);
        assert!(
            shown.ends_with("...") && shown.len() < LAST_ERROR_CAP,
            "{}",
            shown.len()
        );
        assert!(shown.trim_end_matches("...").chars().all(|c| c == 'é'));
    }

    #[test]
    fn the_last_error_is_per_thread_and_never_null() {
        let status = fail(&Error::new(ErrorKind::Timeout, "slow"));
        assert_eq!(status, fc_status::FC_ERR_TIMEOUT);
        let here = unsafe { std::ffi::CStr::from_ptr(fc_last_error()) };
        assert_eq!(here.to_str().unwrap(), "slow");
        std::thread::spawn(|| {
            let there = unsafe { std::ffi::CStr::from_ptr(fc_last_error()) };
            assert_eq!(there.to_bytes(), b"");
        })
        .join()
        .unwrap();
    }
}
