//! The Python face of flowctrl. Thin by rule: convert arguments, call the Rust
//! API, convert results. Decisions never touch the interpreter's state beyond
//! the objects returned, so the GIL is held only for the conversions.

use std::sync::atomic::{AtomicBool, Ordering};

use flowctrl::{
    ErrorKind, Limited as Why, Outcome, RawPermit, TableOptions, TaskConfig, TaskStats,
};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;

create_exception!(
    _flowctrl,
    FlowctrlError,
    PyException,
    "Base of every flowctrl error."
);
create_exception!(
    _flowctrl,
    Limited,
    FlowctrlError,
    "A request was rejected; `reason` says by which limit."
);
create_exception!(
    _flowctrl,
    InvalidArgumentError,
    FlowctrlError,
    "An argument is out of range or does not fit the task."
);
create_exception!(
    _flowctrl,
    InvalidNameError,
    InvalidArgumentError,
    "A task name is empty, over 63 bytes or not printable."
);
create_exception!(
    _flowctrl,
    TableFullError,
    FlowctrlError,
    "Every task slot of the table is taken."
);
create_exception!(
    _flowctrl,
    TooManyProcessesError,
    FlowctrlError,
    "Every attachment slot is held by a live process."
);
create_exception!(
    _flowctrl,
    ConfigMismatchError,
    FlowctrlError,
    "The task is registered with another configuration."
);
create_exception!(
    _flowctrl,
    IncompatibleTableError,
    FlowctrlError,
    "The file is a flowctrl table of another layout version."
);
create_exception!(
    _flowctrl,
    CorruptTableError,
    FlowctrlError,
    "The file is not a flowctrl table, or is truncated or damaged."
);
create_exception!(
    _flowctrl,
    TablePermissionError,
    FlowctrlError,
    "The operating system refused access to the table."
);
create_exception!(
    _flowctrl,
    TableIOError,
    FlowctrlError,
    "An I/O error other than a permission problem."
);
create_exception!(
    _flowctrl,
    InternalError,
    FlowctrlError,
    "A bug in flowctrl."
);

/// The one mapping of the crate's error to Python exceptions.
fn to_py(e: flowctrl::Error) -> PyErr {
    let msg = e.message().to_owned();
    match e.kind() {
        ErrorKind::InvalidArgument => InvalidArgumentError::new_err(msg),
        ErrorKind::InvalidName => InvalidNameError::new_err(msg),
        ErrorKind::TableFull => TableFullError::new_err(msg),
        ErrorKind::TooManyProcesses => TooManyProcessesError::new_err(msg),
        ErrorKind::ConfigMismatch => ConfigMismatchError::new_err(msg),
        ErrorKind::Incompatible => IncompatibleTableError::new_err(msg),
        ErrorKind::Corrupt => CorruptTableError::new_err(msg),
        ErrorKind::Permission => TablePermissionError::new_err(msg),
        ErrorKind::Io => TableIOError::new_err(msg),
        _ => InternalError::new_err(msg),
    }
}

fn reason(why: Why) -> &'static str {
    match why {
        Why::Local => "local",
        Why::Concurrency => "concurrency",
        _ => "unknown",
    }
}

fn limited(py: Python<'_>, task: &str, why: Why) -> PyErr {
    let reason = reason(why);
    let err = Limited::new_err(format!("task {task:?} limited by {reason}"));
    // Setting an attribute on a fresh exception instance cannot fail in practice.
    let _ = err.value(py).setattr("reason", reason);
    err
}

fn outcome(name: &str) -> PyResult<Outcome> {
    match name {
        "success" => Ok(Outcome::Success),
        "dropped" => Ok(Outcome::Dropped),
        "ignored" => Ok(Outcome::Ignored),
        other => Err(InvalidArgumentError::new_err(format!(
            "outcome must be 'success', 'dropped' or 'ignored', not {other:?}"
        ))),
    }
}

/// A shared-memory task table, attached by every process on the host.
#[pyclass(frozen, module = "flowctrl")]
struct Table {
    table: flowctrl::Table,
}

#[pymethods]
impl Table {
    #[new]
    #[pyo3(signature = (path=None, *, capacity=1024, mode=0o600, max_processes=128))]
    fn new(
        py: Python<'_>,
        path: Option<std::path::PathBuf>,
        capacity: u32,
        mode: u32,
        max_processes: u32,
    ) -> PyResult<Self> {
        let options = TableOptions {
            capacity,
            max_processes,
            mode,
            ..TableOptions::default()
        };
        // Opening may create and calibrate a table (~10 ms): let other threads run.
        let table = py
            .detach(|| match path {
                Some(p) => flowctrl::Table::open(p, &options),
                None => flowctrl::Table::open_default(&options),
            })
            .map_err(to_py)?;
        Ok(Self { table })
    }

    #[pyo3(signature = (name, *, local_rate=None, burst=None, max_concurrency=None))]
    fn task(
        &self,
        name: &str,
        local_rate: Option<f64>,
        burst: Option<u32>,
        max_concurrency: Option<u32>,
    ) -> PyResult<Task> {
        let config = TaskConfig {
            local_rate,
            burst,
            max_concurrency,
        };
        let task = self.table.task(name, &config).map_err(to_py)?;
        Ok(Task { task })
    }

    #[getter]
    fn path(&self) -> std::path::PathBuf {
        self.table.path().to_path_buf()
    }

    #[getter]
    fn capacity(&self) -> u32 {
        self.table.capacity()
    }

    #[getter]
    fn max_processes(&self) -> u32 {
        self.table.max_processes()
    }

    /// Looks for dead processes now; True if any held slots were reclaimed.
    fn reap(&self) -> bool {
        self.table.reap()
    }

    fn __repr__(&self) -> String {
        format!("<flowctrl.Table {:?}>", self.table.path())
    }
}

/// A task registered in a table.
#[pyclass(frozen, module = "flowctrl")]
struct Task {
    task: flowctrl::Task,
}

#[pymethods]
impl Task {
    /// Returns a Permit, or None when a limit rejects the request.
    #[pyo3(signature = (n=1))]
    fn try_acquire(&self, n: u32) -> PyResult<Option<Permit>> {
        Ok(self
            .task
            .acquire_raw(n)
            .map_err(to_py)?
            .ok()
            .map(|raw| self.permit(raw)))
    }

    /// Returns a Permit (a context manager), or raises Limited.
    #[pyo3(signature = (n=1))]
    fn acquire(&self, py: Python<'_>, n: u32) -> PyResult<Permit> {
        match self.task.acquire_raw(n).map_err(to_py)? {
            Ok(raw) => Ok(self.permit(raw)),
            Err(why) => Err(limited(py, self.task.name(), why)),
        }
    }

    /// Changes the given fields of the configuration for the whole host.
    #[pyo3(signature = (*, local_rate=None, burst=None, max_concurrency=None))]
    fn update(
        &self,
        local_rate: Option<f64>,
        burst: Option<u32>,
        max_concurrency: Option<u32>,
    ) -> PyResult<()> {
        let config = TaskConfig {
            local_rate,
            burst,
            max_concurrency,
        };
        self.task.update(&config).map_err(to_py)
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.task.stats())
    }

    /// Statistics of each attached process: {pid: stats}.
    fn stats_by_process<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for row in self.task.stats_by_process() {
            out.set_item(row.pid, stats_dict(py, &row.stats)?)?;
        }
        Ok(out)
    }

    #[getter]
    fn name(&self) -> &str {
        self.task.name()
    }

    #[getter]
    fn settings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.task.settings();
        let d = PyDict::new(py);
        d.set_item("local_rate", s.local_rate)?;
        d.set_item("burst", s.burst)?;
        d.set_item("max_concurrency", s.max_concurrency)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("<flowctrl.Task {:?}>", self.task.name())
    }
}

impl Task {
    fn permit(&self, raw: RawPermit) -> Permit {
        Permit {
            task: self.task.clone(),
            raw,
            released: AtomicBool::new(false),
        }
    }
}

fn stats_dict<'py>(py: Python<'py>, s: &TaskStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let fields = [
        ("admitted", s.admitted),
        ("limited_local", s.limited_local),
        ("limited_global", s.limited_global),
        ("limited_concurrency", s.limited_concurrency),
        ("released_success", s.released_success),
        ("released_dropped", s.released_dropped),
        ("released_ignored", s.released_ignored),
        ("reclaimed", s.reclaimed),
        ("in_flight", s.in_flight),
        ("rtt_sum_ns", s.rtt_sum_ns),
        ("rtt_samples", s.rtt_samples),
    ];
    for (k, v) in fields {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// Admission for `n` permits. Release it once; as a context manager it is
/// released on exit, as "dropped" if the block raised, else "success". A
/// permit dropped unreleased is released as "ignored".
#[pyclass(frozen, module = "flowctrl")]
struct Permit {
    task: flowctrl::Task,
    raw: RawPermit,
    released: AtomicBool,
}

#[pymethods]
impl Permit {
    #[pyo3(signature = (outcome="success"))]
    fn release(&self, outcome: &str) -> PyResult<()> {
        let outcome = self::outcome(outcome)?;
        if self.released.swap(true, Ordering::AcqRel) {
            return Err(InvalidArgumentError::new_err("permit already released"));
        }
        let mut raw = self.raw;
        self.task.release_raw(&mut raw, outcome).map_err(to_py)
    }

    #[getter]
    fn n(&self) -> u32 {
        self.raw.n
    }

    #[getter]
    fn released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        exc_type: Option<Bound<'_, PyAny>>,
        _exc: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if !self.released.load(Ordering::Acquire) {
            let outcome = if exc_type.is_some_and(|t| !t.is_none()) {
                "dropped"
            } else {
                "success"
            };
            self.release(outcome)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("<flowctrl.Permit {:?} n={}>", self.task.name(), self.raw.n)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            let mut raw = self.raw;
            let _ = self.task.release_raw(&mut raw, Outcome::Ignored);
        }
    }
}

#[pymodule(gil_used = false)]
fn _flowctrl(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Table>()?;
    m.add_class::<Task>()?;
    m.add_class::<Permit>()?;
    macro_rules! add_types {
        ($($t:ident),* $(,)?) => { $( m.add(stringify!($t), py.get_type::<$t>())?; )* };
    }
    add_types!(
        FlowctrlError,
        Limited,
        InvalidArgumentError,
        InvalidNameError,
        TableFullError,
        TooManyProcessesError,
        ConfigMismatchError,
        IncompatibleTableError,
        CorruptTableError,
        TablePermissionError,
        TableIOError,
        InternalError,
    );
    m.add("__version__", flowctrl::VERSION)?;
    m.add("LAYOUT_VERSION", flowctrl::LAYOUT_VERSION)?;
    Ok(())
}
