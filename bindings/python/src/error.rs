//! The one mapping of the core's errors and rejections to Python exceptions.
//! The exception classes are plain Python (`flowctrl/_errors.py`) so that
//! they pickle by name and mix in the built-in exceptions; this module
//! imports them to raise them. Both matches are exhaustive: a new kind of
//! error or of limit in the core is a compile error here, not a fallback.

use flowctrl::{Error, ErrorKind, Limited as Why};
use pyo3::PyErr;
use pyo3::import_exception;

import_exception!(flowctrl._errors, Limited);
import_exception!(flowctrl._errors, InvalidArgumentError);
import_exception!(flowctrl._errors, InvalidNameError);
import_exception!(flowctrl._errors, ConfigMismatchError);
import_exception!(flowctrl._errors, TableClosedError);
import_exception!(flowctrl._errors, TableFullError);
import_exception!(flowctrl._errors, TooManyProcessesError);
import_exception!(flowctrl._errors, IncompatibleTableError);
import_exception!(flowctrl._errors, CorruptTableError);
import_exception!(flowctrl._errors, TablePermissionError);
import_exception!(flowctrl._errors, TableIOError);
import_exception!(flowctrl._errors, FlowctrlTimeoutError);
import_exception!(flowctrl._errors, StoreError);
import_exception!(flowctrl._errors, InternalError);

/// The core's error as the exception of its kind.
pub(crate) fn to_py(e: Error) -> PyErr {
    let msg = e.message().to_owned();
    match e.kind() {
        ErrorKind::InvalidArgument => InvalidArgumentError::new_err(msg),
        ErrorKind::InvalidName => InvalidNameError::new_err(msg),
        ErrorKind::TableFull => TableFullError::new_err(msg),
        ErrorKind::TooManyProcesses => TooManyProcessesError::new_err(msg),
        ErrorKind::ConfigMismatch => ConfigMismatchError::new_err(msg),
        ErrorKind::Incompatible => IncompatibleTableError::new_err(msg),
        ErrorKind::Corrupt => CorruptTableError::new_err(msg),
        ErrorKind::Permission => TablePermissionError::new_err(msg),
        ErrorKind::Io => TableIOError::new_err(msg),
        ErrorKind::Timeout => FlowctrlTimeoutError::new_err(msg),
        ErrorKind::Store => StoreError::new_err(msg),
        ErrorKind::Internal => InternalError::new_err(msg),
    }
}

/// `Limited.reason`: which limit refused.
fn reason(why: Why) -> &'static str {
    match why {
        Why::Local => "local",
        Why::Concurrency => "concurrency",
        Why::Global => "global",
    }
}

/// A rejection of a request for `task`, as `Limited`.
pub(crate) fn limited(task: &flowctrl::Task, why: Why, n: u32) -> PyErr {
    let reason = reason(why);
    // Read after the refusal: the request path pays nothing for it.
    let retry_after = task.retry_after(why, n).map(|d| d.as_secs_f64());
    Limited::new_err((
        format!("task {:?} limited by {reason}", task.name()),
        reason,
        retry_after,
    ))
}
