//! The Python face of balancers: `Table.balancer(...)` returns a `Balancer`;
//! `Balancer.pick()` a `Choice`, which records its outcome when released.
//! Thin like the rest: convert, call `flowctrl::Balancer`, convert back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flowctrl::{BalancerConfig, Outcome, PickOptions, RawPick};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{InvalidArgumentError, TableClosedError};
use crate::{exit_outcome, lock, outcome, to_py};

/// The configuration `Table.balancer` takes as keyword arguments (seconds).
pub(crate) struct Settings {
    pub decay: f64,
    pub failure_penalty: f64,
    pub slow_start: f64,
    pub default_rtt: f64,
    pub retry_ratio: f64,
    pub retry_min_per_sec: f64,
}

fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| InvalidArgumentError::new_err(format!("{what} must be >= 0 seconds, not {s}")))
}

fn backend_list(backends: &[String], weights: Option<Vec<u32>>) -> PyResult<Vec<(&str, u32)>> {
    let weights = weights.unwrap_or_else(|| vec![1; backends.len()]);
    if weights.len() != backends.len() {
        return Err(InvalidArgumentError::new_err(format!(
            "{} weights for {} backends",
            weights.len(),
            backends.len()
        )));
    }
    Ok(backends.iter().map(String::as_str).zip(weights).collect())
}

/// Registers (or attaches to) a balancer and sets its backends.
pub(crate) fn register(
    py: Python<'_>,
    table: flowctrl::Table,
    closed: Arc<AtomicBool>,
    name: &str,
    backends: Vec<String>,
    weights: Option<Vec<u32>>,
    s: Settings,
) -> PyResult<Balancer> {
    let config = BalancerConfig {
        decay: seconds("decay", s.decay)?,
        failure_penalty: seconds("failure_penalty", s.failure_penalty)?,
        slow_start: seconds("slow_start", s.slow_start)?,
        default_rtt: seconds("default_rtt", s.default_rtt)?,
        retry_ratio: s.retry_ratio,
        retry_min_per_sec: s.retry_min_per_sec,
    };
    let list = backend_list(&backends, weights)?;
    // Registering and setting backends may wait for another process.
    let lb = py
        .detach(|| table.balancer_with_backends(name, &config, &list))
        .map_err(to_py)?;
    Ok(Balancer { lb, closed })
}

/// A balancer: a set of backends shared by every process on the host.
#[pyclass(frozen, module = "flowctrl")]
pub(crate) struct Balancer {
    lb: flowctrl::Balancer,
    /// Its table's flag: a Balancer of a closed Table refuses use.
    closed: Arc<AtomicBool>,
}

impl Balancer {
    fn live(&self) -> PyResult<&flowctrl::Balancer> {
        if self.closed.load(Ordering::Acquire) {
            return Err(TableClosedError::new_err(format!(
                "balancer {:?}: its table is closed",
                self.lb.name()
            )));
        }
        Ok(&self.lb)
    }
}

#[pymethods]
impl Balancer {
    /// Chooses a backend; `exclude` names addresses not to choose (a retry
    /// excludes the one that failed). Excluding every backend raises.
    #[pyo3(signature = (exclude=None))]
    fn pick(&self, exclude: Option<Vec<String>>) -> PyResult<Choice> {
        let exclude = exclude.unwrap_or_default();
        let lb = self.live()?;
        let mut indices = [0u32; 16];
        let mut more = Vec::new();
        let mut n = 0;
        for index in exclude.iter().filter_map(|a| lb.index_of(a)) {
            if n < indices.len() {
                indices[n] = index;
                n += 1;
            } else {
                more.push(index);
            }
        }
        let exclude: &[u32] = if more.is_empty() {
            &indices[..n]
        } else {
            more.extend_from_slice(&indices);
            &more
        };
        let raw = lb.pick_raw(&PickOptions { exclude }).map_err(to_py)?;
        Ok(Choice {
            lb: lb.clone(),
            raw: Mutex::new(raw),
        })
    }

    /// Replaces the backends (addresses, optional weights 1..=1000000):
    /// those that stay keep their statistics, new ones ramp up.
    #[pyo3(signature = (backends, weights=None))]
    fn set_backends(
        &self,
        py: Python<'_>,
        backends: Vec<String>,
        weights: Option<Vec<u32>>,
    ) -> PyResult<()> {
        let lb = self.live()?.clone();
        let list = backend_list(&backends, weights)?;
        py.detach(|| lb.set_backends(&list)).map_err(to_py)
    }

    /// Whether the host-wide retry budget allows a retry now (if so, it is
    /// counted).
    fn retry_allowed(&self) -> PyResult<bool> {
        Ok(self.live()?.retry_allowed())
    }

    /// {address: {...}} for every backend, host-wide.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let lb = self.live()?.clone();
        let stats = py.detach(move || lb.stats());
        let out = PyDict::new(py);
        for b in &stats.backends {
            let d = PyDict::new(py);
            d.set_item("index", b.index)?;
            d.set_item("weight", b.weight)?;
            d.set_item("active", b.active)?;
            d.set_item("in_flight", b.in_flight)?;
            d.set_item("picked", b.picked)?;
            d.set_item("rtt", b.rtt.as_secs_f64())?;
            d.set_item("recent_successes", b.recent_successes)?;
            d.set_item("recent_failures", b.recent_failures)?;
            d.set_item("ejected_for", b.ejected_for.as_secs_f64())?;
            d.set_item("ejections", b.ejections)?;
            d.set_item("age", b.age.as_secs_f64())?;
            d.set_item("ramp", b.ramp)?;
            d.set_item("load", b.load)?;
            out.set_item(&b.address, d)?;
        }
        Ok(out)
    }

    #[getter]
    fn name(&self) -> &str {
        self.lb.name()
    }

    fn __repr__(&self) -> String {
        format!("<flowctrl.Balancer {:?}>", self.lb.name())
    }
}

/// A chosen backend. Release it once; as a context manager it is released
/// on exit, as "dropped" if the block raised, else "success". Dropped
/// unreleased, it is released as "ignored".
#[pyclass(frozen, module = "flowctrl")]
pub(crate) struct Choice {
    lb: flowctrl::Balancer,
    raw: Mutex<RawPick>,
}

impl Choice {
    fn release_once(
        &self,
        outcome: Outcome,
        rtt: Option<Duration>,
        load: Option<f64>,
    ) -> PyResult<bool> {
        let mut raw = lock(&self.raw);
        if raw.is_done() {
            return Ok(false);
        }
        self.lb
            .done_raw(&mut raw, outcome, rtt, load)
            .map_err(to_py)?;
        Ok(true)
    }
}

#[pymethods]
impl Choice {
    /// Records the call's outcome ("success", "dropped" = a failure,
    /// "ignored" = no sample); `rtt` in seconds overrides the time measured
    /// since the pick; `load` is the server's reported load (0..1).
    #[pyo3(signature = (outcome="success", *, rtt=None, load=None))]
    fn release(&self, outcome: &str, rtt: Option<f64>, load: Option<f64>) -> PyResult<()> {
        let rtt = rtt.map(|s| seconds("rtt", s)).transpose()?;
        if self.release_once(self::outcome(outcome)?, rtt, load)? {
            Ok(())
        } else {
            Err(InvalidArgumentError::new_err(format!(
                "balancer {:?}: choice already released",
                self.lb.name()
            )))
        }
    }

    /// The chosen backend's address.
    #[getter]
    fn backend(&self) -> String {
        lock(&self.raw).address().to_owned()
    }

    /// The chosen backend's index in the balancer.
    #[getter]
    fn index(&self) -> u32 {
        lock(&self.raw).backend
    }

    #[getter]
    fn released(&self) -> bool {
        lock(&self.raw).is_done()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        exc_type: &Bound<'_, PyAny>,
        exc_value: &Bound<'_, PyAny>,
        traceback: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let _ = (exc_value, traceback);
        self.release_once(exit_outcome(exc_type), None, None)
            .map(drop)
    }

    fn __repr__(&self) -> String {
        format!("<flowctrl.Choice {:?} {}>", self.lb.name(), self.backend())
    }
}

impl Drop for Choice {
    fn drop(&mut self) {
        let raw = self.raw.get_mut().unwrap_or_else(PoisonError::into_inner);
        if !raw.is_done() {
            let _ = self.lb.done_raw(raw, Outcome::Ignored, None, None);
        }
    }
}
