//! A task's configuration both ways: the keyword arguments of `Table.task`
//! and `Task.update` as the core's `TaskConfig` (its three parts one to one;
//! None = unset), and the settings in force as the `settings` dict.

use flowctrl::{
    Fallback, GlobalConfig, GlobalSettings, LimiterConfig, LimiterSpec, LocalConfig, LocalSettings,
    TaskConfig, TaskSettings, WaitOrder,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::error::to_py;

/// The configuration the keyword arguments ask for.
#[allow(clippy::too_many_arguments)] // the keyword arguments of the Python methods
pub(crate) fn task_config(
    local_rate: Option<f64>,
    burst: Option<u32>,
    max_concurrency: Option<u32>,
    wait_order: Option<&str>,
    barging: Option<bool>,
    global_rate: Option<f64>,
    slice_ms: Option<u32>,
    chunk: Option<u32>,
    fallback: Option<&Bound<'_, PyAny>>,
    fallback_rate: Option<f64>,
    global_burst: Option<u32>,
    shards: Option<u32>,
    limiter: Option<&str>,
    min_limit: Option<u32>,
    max_limit: Option<u32>,
    initial_limit: Option<u32>,
) -> PyResult<TaskConfig> {
    Ok(TaskConfig {
        local: LocalConfig {
            local_rate,
            burst,
            max_concurrency,
            wait_order: wait_order
                .map(WaitOrder::parse)
                .transpose()
                .map_err(to_py)?,
            barging,
            // Set through the config file and `flowctrl set`.
            shadow: None,
        },
        global: GlobalConfig {
            global_rate,
            slice_ms,
            chunk,
            fallback: fallback_of(fallback, fallback_rate)?,
            global_burst,
            shards,
        },
        limiter: LimiterConfig {
            spec: limiter.map(LimiterSpec::parse).transpose().map_err(to_py)?,
            min_limit,
            max_limit,
            initial_limit,
        },
    })
}

/// `fallback=` ("share", "local", "deny" or requests/s) or the older
/// `fallback_rate=` (a number), as the core's policy.
pub(crate) fn fallback_of(
    fallback: Option<&Bound<'_, PyAny>>,
    rate: Option<f64>,
) -> PyResult<Option<Fallback>> {
    let policy = match fallback {
        None => None,
        Some(v) => Some(match v.extract::<f64>() {
            Ok(r) => Fallback::Rate(r),
            Err(_) => Fallback::parse(&v.extract::<String>()?).map_err(to_py)?,
        }),
    };
    match (policy, rate) {
        (Some(_), Some(_)) => Err(to_py(flowctrl::Error::new(
            flowctrl::ErrorKind::InvalidArgument,
            "give fallback= or fallback_rate=, not both",
        ))),
        (policy, rate) => Ok(policy.or(rate.map(Fallback::Rate))),
    }
}

/// A store record's global fields under their keywords' names.
pub(crate) fn global_dict<'py>(
    py: Python<'py>,
    s: &GlobalSettings,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("global_rate", s.global_rate)?;
    d.set_item("slice_ms", s.slice_ms)?;
    d.set_item("chunk", s.chunk)?;
    match s.fallback {
        Fallback::Rate(r) => d.set_item("fallback", r)?,
        policy => d.set_item("fallback", policy.to_string())?,
    }
    d.set_item("global_burst", s.global_burst)?;
    d.set_item("shards", s.shards)?;
    Ok(d)
}

/// The settings in force, every field under its keyword's name.
pub(crate) fn settings_dict<'py>(
    py: Python<'py>,
    s: &TaskSettings,
) -> PyResult<Bound<'py, PyDict>> {
    let LocalSettings {
        local_rate,
        burst,
        max_concurrency,
        wait_order,
        barging,
        shadow,
    } = s.local;
    let GlobalSettings {
        global_rate,
        slice_ms,
        chunk,
        fallback,
        global_burst,
        shards,
    } = s.global;
    let limiter = &s.limiter;
    let d = PyDict::new(py);
    d.set_item("local_rate", local_rate)?;
    d.set_item("burst", burst)?;
    d.set_item("max_concurrency", max_concurrency)?;
    d.set_item("wait_order", wait_order.name())?;
    d.set_item("barging", barging)?;
    d.set_item("shadow", shadow)?;
    d.set_item("global_rate", global_rate)?;
    d.set_item("slice_ms", slice_ms)?;
    d.set_item("chunk", chunk)?;
    match fallback {
        Fallback::Rate(r) => {
            d.set_item("fallback", r)?;
            d.set_item("fallback_rate", r)?;
        }
        policy => {
            d.set_item("fallback", policy.to_string())?;
            d.set_item("fallback_rate", 0.0)?;
        }
    }
    d.set_item("global_burst", global_burst)?;
    d.set_item("shards", shards)?;
    d.set_item("global_source", s.global_source.as_str())?;
    d.set_item("limiter", limiter.canonical())?;
    d.set_item("min_limit", limiter.min)?;
    d.set_item("max_limit", limiter.max)?;
    d.set_item("initial_limit", limiter.initial)?;
    Ok(d)
}
