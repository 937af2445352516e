//! The Python face of a fleet's store: `Store(url).fleet(task)` reads the
//! census the pull script records (see the core's `quota::census`).

use flowctrl::{GlobalSettings, StoreOptions};
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

    /// The live hosts of `task`: those that pulled in its last full slices,
    /// each with what it asked, was granted and claimed, and its clock
    /// offset. `slice_ms` None: the core's default slice.
    #[pyo3(signature = (task, *, slice_ms=None))]
    fn fleet<'py>(
        &self,
        py: Python<'py>,
        task: &str,
        slice_ms: Option<u32>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let slice_ms = slice_ms.unwrap_or(GlobalSettings::default().slice_ms);
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
                Ok(r)
            })
            .collect::<PyResult<Vec<_>>>()?;
        d.set_item("hosts", hosts)?;
        Ok(d)
    }
}
