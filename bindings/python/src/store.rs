//! The Python face of a fleet's store: `Store(url).fleet(task)` reads the
//! census the pull script records (see the core's `quota::census`);
//! `set_task`, `task` and `remove_task` keep the tasks' records that every
//! host spends by.

use flowctrl::{GlobalConfig, StoreOptions};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::args::{self, set};
use crate::error::to_py;

/// A fleet's quota store (Redis), apart from any table.
#[pyclass(frozen, module = "flowctrl")]
pub(crate) struct Store {
    store: flowctrl::Store,
}

#[pymethods]
impl Store {
    /// Arguments left None keep the core's `StoreOptions::default()`.
    #[new]
    #[pyo3(signature = (url, *, key_prefix=None, timeout=None, connect_timeout=None))]
    fn new(
        url: String,
        key_prefix: Option<String>,
        timeout: Option<f64>,
        connect_timeout: Option<f64>,
    ) -> PyResult<Self> {
        let mut o = StoreOptions {
            url: Some(url),
            ..StoreOptions::default()
        };
        set(&mut o.key_prefix, key_prefix);
        set(&mut o.timeout, args::seconds("timeout", timeout)?);
        set(
            &mut o.connect_timeout,
            args::seconds("connect_timeout", connect_timeout)?,
        );
        Ok(Self {
            store: flowctrl::Store::open(&o).map_err(to_py)?,
        })
    }

    /// Writes `task`'s record: every host of the fleet spends by these
    /// global numbers from its next pull (within one slice), whatever its
    /// own configuration says, until `remove_task`. Fields left None take
    /// their defaults. Returns the record's version.
    #[pyo3(signature = (task, *, global_rate, slice_ms=None, chunk=None, fallback=None,
                        global_burst=None))]
    #[allow(clippy::too_many_arguments)] // the keyword arguments of the Python method
    fn set_task(
        &self,
        py: Python<'_>,
        task: &str,
        global_rate: f64,
        slice_ms: Option<u32>,
        chunk: Option<u32>,
        fallback: Option<&Bound<'_, PyAny>>,
        global_burst: Option<u32>,
    ) -> PyResult<u64> {
        let config = GlobalConfig {
            global_rate: Some(global_rate),
            slice_ms,
            chunk,
            fallback: crate::config::fallback_of(fallback, None)?,
            global_burst,
        };
        py.detach(|| self.store.set_task_config(task, &config))
            .map_err(to_py)
    }

    /// `task`'s record as a dict (its global fields and `version`), or None.
    /// A record the hosts refuse (a bad field written by hand) raises
    /// ValueError naming the field.
    fn task<'py>(&self, py: Python<'py>, task: &str) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(record) = py.detach(|| self.store.task_config(task)).map_err(to_py)? else {
            return Ok(None);
        };
        let d = crate::config::global_dict(py, &record.settings)?;
        d.set_item("version", record.version)?;
        Ok(Some(d))
    }

    /// Removes `task`'s record (hosts return to their own configuration at
    /// their next pull); whether there was one.
    fn remove_task(&self, py: Python<'_>, task: &str) -> PyResult<bool> {
        py.detach(|| self.store.remove_task_config(task))
            .map_err(to_py)
    }

    /// The live hosts of `task`: those that pulled in its last full slices,
    /// each with what it asked, was granted and claimed, and its clock
    /// offset. `slice_ms` None: the task's record's, else the default.
    #[pyo3(signature = (task, *, slice_ms=None))]
    fn fleet<'py>(
        &self,
        py: Python<'py>,
        task: &str,
        slice_ms: Option<u32>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let fleet = py
            .detach(|| self.store.fleet(task, slice_ms))
            .map_err(to_py)?;
        let d = PyDict::new(py);
        d.set_item("task", &fleet.task)?;
        d.set_item("slice_ms", fleet.slice_ms)?;
        d.set_item("slice", fleet.slice)?;
        d.set_item("quota", fleet.quota)?;
        let hosts = fleet
            .hosts
            .iter()
            .map(|h| {
                let r = PyDict::new(py);
                r.set_item("host", &h.host)?;
                r.set_item("slice", h.slice)?;
                r.set_item("asked", h.asked)?;
                r.set_item("granted", h.granted)?;
                r.set_item("claimed", h.claimed)?;
                r.set_item("offset_us", h.offset_us)?;
                r.set_item("demand", h.demand)?;
                r.set_item("success", h.health.success)?;
                r.set_item("dropped", h.health.dropped)?;
                r.set_item("mean_us", h.health.mean_us)?;
                r.set_item("p99_us", h.health.p99_us)?;
                r.set_item("own_quota", h.own_quota)?;
                Ok(r)
            })
            .collect::<PyResult<Vec<_>>>()?;
        d.set_item("hosts", hosts)?;
        Ok(d)
    }
}
