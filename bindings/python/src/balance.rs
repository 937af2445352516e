//! The Python face of balancers: `Table.balancer(...)` returns a `Balancer`;
//! `Balancer.pick()` a `Choice`, the core's owning pick, which records its
//! outcome when released. Thin like the rest: convert, call
//! `flowctrl::Balancer`, convert back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use flowctrl::{BalancerConfig, Finish, OwnedPick, PickOptions};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::args::{self, exit_outcome, lock, set};
use crate::error::{InvalidArgumentError, TableClosedError, to_py};

/// The configuration `Table.balancer` takes as keyword arguments (durations
/// in seconds); None keeps the core's default.
pub(crate) struct Settings {
    pub decay: Option<f64>,
    pub failure_penalty: Option<f64>,
    pub slow_start: Option<f64>,
    pub default_rtt: Option<f64>,
    pub retry_ratio: Option<f64>,
    pub retry_min_per_sec: Option<f64>,
}

impl Settings {
    /// The core's configuration: its defaults, with the arguments given.
    fn config(&self) -> PyResult<BalancerConfig> {
        let mut c = BalancerConfig::default();
        set(&mut c.decay, args::seconds("decay", self.decay)?);
        set(
            &mut c.failure_penalty,
            args::seconds("failure_penalty", self.failure_penalty)?,
        );
        set(
            &mut c.slow_start,
            args::seconds("slow_start", self.slow_start)?,
        );
        set(
            &mut c.default_rtt,
            args::seconds("default_rtt", self.default_rtt)?,
        );
        set(&mut c.retry_ratio, self.retry_ratio);
        set(&mut c.retry_min_per_sec, self.retry_min_per_sec);
        Ok(c)
    }
}

/// The Python API's separate address and weight lists as the core's pairs
/// (weights default to 1 each); the core checks the pairs.
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
    let config = s.config()?;
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
        let lb = self.live()?;
        // Addresses that name no active backend exclude nothing.
        let exclude: Vec<u32> = exclude
            .iter()
            .flatten()
            .filter_map(|address| lb.index_of(address))
            .collect();
        let pick = lb.pick_owned(&PickOptions { exclude: &exclude });
        Ok(Choice {
            pick: Mutex::new(pick.map_err(to_py)?),
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
            d.set_item("successes", b.successes)?;
            d.set_item("failures", b.failures)?;
            d.set_item("ejections_total", b.ejections_total)?;
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
/// unreleased, it is released as "ignored" (by the core's guard).
#[pyclass(frozen, module = "flowctrl")]
pub(crate) struct Choice {
    /// Finished under the lock, so two threads cannot both release it.
    pick: Mutex<OwnedPick>,
}

#[pymethods]
impl Choice {
    /// Records the call's outcome ("success", "dropped" = a failure,
    /// "ignored" = no sample); `rtt` in seconds overrides the time measured
    /// since the pick; `load` is the server's reported load (0..1).
    #[pyo3(signature = (outcome="success", *, rtt=None, load=None))]
    fn release(&self, outcome: &str, rtt: Option<f64>, load: Option<f64>) -> PyResult<()> {
        let how = Finish {
            outcome: args::outcome(outcome)?,
            rtt: args::seconds("rtt", rtt)?,
            load,
        };
        let mut pick = lock(&self.pick);
        if pick.finish_once(how).map_err(to_py)? {
            Ok(())
        } else {
            Err(InvalidArgumentError::new_err(format!(
                "balancer {:?}: choice already released",
                pick.issuer().name()
            )))
        }
    }

    /// The chosen backend's address.
    #[getter]
    fn backend(&self) -> String {
        lock(&self.pick).backend().to_owned()
    }

    /// The chosen backend's index in the balancer.
    #[getter]
    fn index(&self) -> u32 {
        lock(&self.pick).index()
    }

    #[getter]
    fn released(&self) -> bool {
        lock(&self.pick).is_finished()
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
        let how = exit_outcome(exc_type).into();
        lock(&self.pick).finish_once(how).map(drop).map_err(to_py)
    }

    fn __repr__(&self) -> String {
        let pick = lock(&self.pick);
        format!(
            "<flowctrl.Choice {:?} {}>",
            pick.issuer().name(),
            pick.backend()
        )
    }
}
