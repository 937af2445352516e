//! Argument conversions of the Python face, each in one place: durations in
//! seconds, outcome names (parsed by the core), "None keeps the core's
//! default", how a `with` block ended. A leaf: it imports nothing of the
//! face but the error mapping.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use flowctrl::Outcome;
use pyo3::prelude::*;

use crate::error::{InvalidArgumentError, to_py};

/// A duration given in seconds (`what` names the argument): finite and not
/// negative. None stays None: the core's default, or no wait.
pub(crate) fn seconds(what: &str, value: Option<f64>) -> PyResult<Option<Duration>> {
    value
        .map(|s| {
            Duration::try_from_secs_f64(s).map_err(|_| {
                InvalidArgumentError::new_err(format!(
                    "{what} must be a finite number of seconds >= 0, not {s}"
                ))
            })
        })
        .transpose()
}

/// Puts `value` into `field` when it is given; None keeps what `field`
/// holds (the core's default).
pub(crate) fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *field = value;
    }
}

/// "success", "dropped" or "ignored".
pub(crate) fn outcome(name: &str) -> PyResult<Outcome> {
    Outcome::parse(name).map_err(to_py)
}

/// How a `with` block ended: "dropped" if it raised, else "success".
pub(crate) fn exit_outcome(exc_type: &Bound<'_, PyAny>) -> Outcome {
    if exc_type.is_none() {
        Outcome::Success
    } else {
        Outcome::Dropped
    }
}

/// Nothing here panics while holding a lock, but a poisoned lock must not
/// turn into a second panic either: what it guards stays valid.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
