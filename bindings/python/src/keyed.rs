//! Keyed tasks (limits per caller) for Python: key arguments, the
//! refusal as `Limited`, a key's state and the key file's counters as
//! dicts. Conversions only: the decisions are the core's.

use std::time::Duration;

use flowctrl::{
    KeyConfig, KeyGlobal, KeyLimits, KeyOverflow, KeyRate, KeyRefusal, KeyRefused, Limited as Why,
    MAX_LOCAL,
};
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
/// "key_blocked", "key_global", or the task's own ("local", "global",
/// "concurrency").
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
    let l = match (unlimited, blocked) {
        (true, true) => {
            return Err(InvalidArgumentError::new_err(
                "a key is unlimited or blocked, not both",
            ));
        }
        (true, false) => KeyLimits::unlimited(),
        (false, true) => KeyLimits::blocked(),
        (false, false) => KeyLimits::new(),
    };
    // Rates of an unlimited or blocked key are refused by the core.
    let l = match rates {
        Some(r) => l.with_rates(r).map_err(to_py)?,
        None => l,
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

/// The keys' rate across the fleet the keyword arguments say: `key_global`
/// (a rate as "1000/hour"), `key_global_slice` (seconds, or text as "1s",
/// "500ms"), `key_global_local`, `key_global_fallback`. `None` without
/// `key_global`; its other arguments without it are refused.
pub(crate) fn global(
    rate: Option<&str>,
    slice: Option<&Bound<'_, PyAny>>,
    local: Option<i64>,
    fallback: Option<&str>,
) -> PyResult<Option<KeyGlobal>> {
    let Some(rate) = rate else {
        for (name, set) in [
            ("key_global_slice", slice.is_some()),
            ("key_global_local", local.is_some()),
            ("key_global_fallback", fallback.is_some()),
        ] {
            if set {
                return Err(InvalidArgumentError::new_err(format!(
                    "{name} needs key_global, the keys' rate across the fleet \
                     (e.g. key_global=\"1000/hour\")"
                )));
            }
        }
        return Ok(None);
    };
    let mut g = KeyGlobal::new(KeyRate::parse(rate).map_err(to_py)?);
    if let Some(slice) = slice {
        g = g.slice(slice_of(slice)?);
    }
    if let Some(n) = local {
        let n = u32::try_from(n)
            .ok()
            .filter(|n| *n <= MAX_LOCAL)
            .ok_or_else(|| {
                InvalidArgumentError::new_err(format!(
                    "key_global_local is 0 to {MAX_LOCAL} requests a slice, not {n}"
                ))
            })?;
        g = g.local(n);
    }
    if let Some(f) = fallback {
        g = g.fallback(KeyGlobal::parse_fallback(f).map_err(to_py)?);
    }
    KeyLimits::new().global(g).validate().map_err(to_py)?;
    Ok(Some(g))
}

/// A slice: seconds (whole ms), or its text.
fn slice_of(slice: &Bound<'_, PyAny>) -> PyResult<Duration> {
    if let Ok(text) = slice.cast::<PyString>() {
        return KeyGlobal::parse_slice(&text.to_cow()?).map_err(to_py);
    }
    let secs: f64 = match slice.extract() {
        Ok(s) if !slice.is_instance_of::<pyo3::types::PyBool>() => s,
        _ => {
            return Err(InvalidArgumentError::new_err(format!(
                "key_global_slice is seconds or text such as \"500ms\", not {}",
                slice.get_type().name()?
            )));
        }
    };
    let ms = secs * 1000.0;
    if !(ms.is_finite() && ms > 0.0 && ms <= 86_400_000.0) || (ms - ms.round()).abs() > 1e-6 {
        return Err(InvalidArgumentError::new_err(format!(
            "key_global_slice is whole milliseconds from 0.01 s to a day, not {secs} s"
        )));
    }
    Ok(Duration::from_millis(ms.round() as u64))
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
    d.set_item("refused_global", s.refused_global)?;
    d.set_item("record", s.record)?;
    d.set_item("record_refused", s.record_refused)?;
    Ok(d)
}
