//! Keyed tasks (limits per caller) for Python: key arguments, the
//! refusal as `Limited`, a key's state and the key file's counters as
//! dicts. Conversions only: the decisions are the core's.

use flowctrl::{KeyConfig, KeyLimits, KeyOverflow, KeyRefusal, KeyRefused, Limited as Why};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::error::{InvalidArgumentError, Limited, to_py};

/// A key as bytes: `str` (UTF-8) or `bytes`.
pub(crate) fn key_bytes(key: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(s) = key.cast::<PyString>() {
        return Ok(s.to_cow()?.as_bytes().to_vec());
    }
    if let Ok(b) = key.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    Err(InvalidArgumentError::new_err(format!(
        "key must be str or bytes, not {}",
        key.get_type().name()?
    )))
}

/// A keyed refusal as `Limited`: `reason` "key_rate", "key_concurrency",
/// "key_blocked", "key_global", or the task's own ("local", "global", "concurrency").
pub(crate) fn limited(task: &flowctrl::Task, refusal: &KeyRefusal) -> PyErr {
    let reason = match refusal.by {
        KeyRefused::Task(Why::Local) => "local",
        KeyRefused::Task(Why::Global) => "global",
        KeyRefused::Task(Why::Concurrency) => "concurrency",
        KeyRefused::Rate(_) => "key_rate",
        KeyRefused::Concurrency | KeyRefused::Records => "key_concurrency",
        KeyRefused::Blocked => "key_blocked",
        KeyRefused::Global => "key_global",
    };
    Limited::new_err((
        format!("task {:?} limited by {reason}", task.name()),
        reason,
        refusal.retry_after.map(|d| d.as_secs_f64()),
    ))
}

/// The limits the keyword arguments say.
pub(crate) fn limits(
    rates: Option<&str>,
    max_concurrency: Option<u32>,
    shadow: bool,
    unlimited: bool,
    blocked: bool,
) -> PyResult<KeyLimits> {
    let l = match (unlimited, blocked, rates) {
        (true, true, _) => {
            return Err(InvalidArgumentError::new_err(
                "a key is unlimited or blocked, not both",
            ));
        }
        (true, false, _) => KeyLimits::unlimited(),
        (false, true, _) => KeyLimits::blocked(),
        (false, false, Some(r)) => KeyLimits::parse_rates(r).map_err(to_py)?,
        (false, false, None) => KeyLimits::new(),
    };
    let l = match max_concurrency {
        None | Some(flowctrl::NO_CAP) => l,
        Some(0) => {
            return Err(InvalidArgumentError::new_err(
                "max_concurrency = 0 would admit nothing: leave it None (or NO_CAP) for no cap",
            ));
        }
        Some(n) => l.max_concurrency(n),
    };
    Ok(l.shadow(shadow))
}

pub(crate) fn config(limits: KeyLimits, capacity: u32, overflow: &str) -> PyResult<KeyConfig> {
    let overflow = match overflow {
        "shared" => KeyOverflow::Shared,
        "admit" => KeyOverflow::Admit,
        other => {
            return Err(InvalidArgumentError::new_err(format!(
                "overflow must be \"shared\" or \"admit\", not {other:?}"
            )));
        }
    };
    Ok(KeyConfig::new(limits).capacity(capacity).overflow(overflow))
}

pub(crate) fn state_dict<'py>(
    py: Python<'py>,
    s: &flowctrl::KeyState,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("limit", s.limit)?;
    d.set_item("remaining", s.remaining)?;
    d.set_item("reset_after", s.reset_after.as_secs_f64())?;
    d.set_item("retry_after", s.retry_after.as_secs_f64())?;
    d.set_item("in_flight", s.in_flight)?;
    d.set_item("max_concurrency", s.max_concurrency)?;
    d.set_item("present", s.present)?;
    d.set_item("overridden", s.overridden)?;
    d.set_item("blocked", s.blocked)?;
    d.set_item("unlimited", s.unlimited)?;
    Ok(d)
}

pub(crate) fn stats_dict<'py>(
    py: Python<'py>,
    s: &flowctrl::KeyStats,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("capacity", s.capacity)?;
    d.set_item("keys", s.keys)?;
    d.set_item("live", s.live)?;
    d.set_item("inserted", s.inserted)?;
    d.set_item("reused", s.reused)?;
    d.set_item("overflowed", s.overflowed)?;
    d.set_item("shadow_refused", s.shadow_refused)?;
    d.set_item("refused_rate", s.refused_rate)?;
    d.set_item("refused_concurrency", s.refused_concurrency)?;
    Ok(d)
}
