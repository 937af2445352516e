//! The Python face of a fleet's store: `Store(url).fleet(task)` reads the
//! census the pull script records (see the core's `quota::census`);
//! `set_task`, `task` and `remove_task` keep the tasks' records that every
//! host spends by; `set_key_record`, `key_record`, `remove_key_record` the
//! keyed tasks' records of their keys' global rates, `hot_keys` the keys
//! the store gave most of.

use flowctrl::{GlobalConfig, KeyGlobal, KeyRecord, StoreOptions};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::args::{self, set};
use crate::error::{InvalidArgumentError, to_py};
use crate::keyed;

/// The keyword arguments of a key's global rate, as `set_keys` takes them.
const GLOBAL_FIELDS: [&str; 4] = [
    "key_global",
    "key_global_slice",
    "key_global_local",
    "key_global_fallback",
];

/// An override's rate: None (none), or a dict of `GLOBAL_FIELDS`.
fn override_of(key: &str, value: &Bound<'_, PyAny>) -> PyResult<Option<KeyGlobal>> {
    if value.is_none() {
        return Ok(None);
    }
    let d = value.cast::<PyDict>().map_err(|_| {
        InvalidArgumentError::new_err(format!(
            "overrides[{key:?}] is a dict of {GLOBAL_FIELDS:?} or None"
        ))
    })?;
    for k in d.keys() {
        let k: String = k.extract()?;
        if !GLOBAL_FIELDS.contains(&k.as_str()) {
            return Err(InvalidArgumentError::new_err(format!(
                "overrides[{key:?}]: unknown field {k:?} (known: {GLOBAL_FIELDS:?})"
            )));
        }
    }
    let get = |f: &str| d.get_item(f).map(|v| v.filter(|v| !v.is_none()));
    let (rate, slice, local, fallback) = (
        get("key_global")?,
        get("key_global_slice")?,
        get("key_global_local")?,
        get("key_global_fallback")?,
    );
    keyed::global(
        rate.map(|r| r.extract::<String>()).transpose()?.as_deref(),
        slice.as_ref(),
        local.map(|l| l.extract::<i64>()).transpose()?,
        fallback
            .map(|f| f.extract::<String>())
            .transpose()?
            .as_deref(),
    )
    .map_err(|e| {
        let why = e.value(value.py()).to_string();
        InvalidArgumentError::new_err(format!("overrides[{key:?}]: {why}"))
    })
}

/// A rate as the dict of `GLOBAL_FIELDS` `set_key_record` takes (all None
/// for none).
fn global_into(d: &Bound<'_, PyDict>, g: Option<&KeyGlobal>) -> PyResult<()> {
    d.set_item("key_global", g.map(|g| g.rate.to_string()))?;
    d.set_item("key_global_slice", g.map(KeyGlobal::slice_text))?;
    d.set_item("key_global_local", g.map(|g| g.local))?;
    d.set_item("key_global_fallback", g.map(|g| g.fallback.to_string()))?;
    Ok(())
}

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
                        global_burst=None, shards=None))]
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
        shards: Option<u32>,
    ) -> PyResult<u64> {
        let config = GlobalConfig {
            global_rate: Some(global_rate),
            slice_ms,
            chunk,
            fallback: crate::config::fallback_of(fallback, None)?,
            global_burst,
            shards,
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

    /// Writes keyed task `task`'s record of its keys' global rates: every
    /// host adopts it within about a second, over its own global rates.
    /// The `key_global*` arguments (as `Task.set_keys`'s) are the rate of
    /// every key not named; `overrides` maps a key to a dict of the same
    /// fields, or None (no global rate). Returns the record's version.
    #[pyo3(signature = (task, *, key_global=None, key_global_slice=None,
                        key_global_local=None, key_global_fallback=None, overrides=None))]
    #[allow(clippy::too_many_arguments)] // the keyword arguments of the Python method
    fn set_key_record(
        &self,
        py: Python<'_>,
        task: &str,
        key_global: Option<&str>,
        key_global_slice: Option<&Bound<'_, PyAny>>,
        key_global_local: Option<i64>,
        key_global_fallback: Option<&str>,
        overrides: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<u64> {
        let mut record = KeyRecord {
            default: keyed::global(
                key_global,
                key_global_slice,
                key_global_local,
                key_global_fallback,
            )?,
            overrides: Vec::new(),
        };
        for (key, value) in overrides.into_iter().flat_map(|d| d.iter()) {
            let key = String::from_utf8(keyed::key_bytes(&key)?)
                .map_err(|_| InvalidArgumentError::new_err("a record's key is UTF-8"))?;
            let g = override_of(&key, &value)?;
            record.overrides.push((key, g));
        }
        py.detach(|| self.store.set_key_record(task, &record))
            .map_err(to_py)
    }

    /// `task`'s record of its keys' global rates, or None: `version`, the
    /// `key_global*` fields of the default (None: none) and `overrides`,
    /// each key's dict of them. A record hosts refuse raises ValueError.
    fn key_record<'py>(&self, py: Python<'py>, task: &str) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some((version, record)) = py.detach(|| self.store.key_record(task)).map_err(to_py)?
        else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("version", version)?;
        global_into(&d, record.default.as_ref())?;
        let overrides = PyDict::new(py);
        for (key, g) in &record.overrides {
            let o = PyDict::new(py);
            global_into(&o, g.as_ref())?;
            overrides.set_item(key, o)?;
        }
        d.set_item("overrides", overrides)?;
        Ok(Some(d))
    }

    /// Removes `task`'s record of its keys' global rates (hosts keep its
    /// rates until their own are written again); whether there was one.
    fn remove_key_record(&self, py: Python<'_>, task: &str) -> PyResult<bool> {
        py.detach(|| self.store.remove_key_record(task))
            .map_err(to_py)
    }

    /// The `top` keys (at most 100) of keyed task `task` the store gave
    /// most of in its current slice of `slice_ms` (the keys' global rate's
    /// slices): `slice_ms`, `slice`, `keys` (those the store counts) and
    /// `top`, each with `id`, `name` (bytes, or None), `given` and `asks`.
    #[pyo3(signature = (task, *, slice_ms=1000, top=10))]
    fn hot_keys<'py>(
        &self,
        py: Python<'py>,
        task: &str,
        slice_ms: u32,
        top: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let hot = py
            .detach(|| self.store.hot_keys(task, slice_ms, top))
            .map_err(to_py)?;
        let d = PyDict::new(py);
        d.set_item("slice_ms", hot.slice_ms)?;
        d.set_item("slice", hot.slice)?;
        d.set_item("keys", hot.keys)?;
        let top = hot
            .top
            .iter()
            .map(|k| {
                let r = PyDict::new(py);
                r.set_item("id", k.id)?;
                r.set_item("name", k.name.as_deref().map(|n| PyBytes::new(py, n)))?;
                r.set_item("given", k.given)?;
                r.set_item("asks", k.asks)?;
                Ok(r)
            })
            .collect::<PyResult<Vec<_>>>()?;
        d.set_item("top", top)?;
        Ok(d)
    }
}
