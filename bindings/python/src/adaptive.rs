//! Argument conversions of the adaptive limit, the waiting acquire, and
//! durations given in seconds.

use std::time::Duration;

use flowctrl::{LimiterSpec, TaskConfig};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::{InvalidArgumentError, to_py};

/// The limiter fields of a configuration (the others unset).
pub fn config(
    limiter: Option<&str>,
    min_limit: Option<u32>,
    max_limit: Option<u32>,
    initial_limit: Option<u32>,
) -> PyResult<TaskConfig> {
    Ok(TaskConfig {
        limiter: limiter.map(LimiterSpec::parse).transpose().map_err(to_py)?,
        min_limit,
        max_limit,
        initial_limit,
        ..TaskConfig::default()
    })
}

/// Adds the limiter to a settings dict.
pub fn settings(d: &Bound<'_, PyDict>, spec: &LimiterSpec) -> PyResult<()> {
    d.set_item("limiter", spec.canonical())?;
    d.set_item("min_limit", spec.min)?;
    d.set_item("max_limit", spec.max)?;
    d.set_item("initial_limit", spec.initial)?;
    Ok(())
}

/// A duration given in seconds: finite and not negative.
pub fn seconds(what: &str, value: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        InvalidArgumentError::new_err(format!(
            "{what} must be a finite number of seconds >= 0, not {value}"
        ))
    })
}

/// A wait: `None` = do not wait.
pub fn timeout(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    timeout.map(|t| seconds("timeout", t)).transpose()
}

pub fn rtt(rtt: Option<f64>) -> PyResult<Option<Duration>> {
    rtt.map(|t| seconds("rtt", t)).transpose()
}
