//! The Python face of flowctrl. Thin by rule: convert arguments, call the Rust
//! API, convert results. Decisions never touch the interpreter's state beyond
//! the objects returned, so the GIL is held only for the conversions — and is
//! let go (`py.detach`) around every call that can wait or scan: opening a
//! table, registering a task (it may wait for another process's claim),
//! reaping, updating, reading statistics, and an acquire that waits. A
//! non-waiting acquire and a release keep it: they take tens of
//! nanoseconds, less than a GIL round trip.
//!
//! It holds no logic of its own: permits and picks are the core's owning
//! guards, every default is the core's (an argument left None keeps it),
//! every check is the core's, and each conversion is written once
//! (`args.rs`: seconds, outcomes; `config.rs`: a task's configuration;
//! `error.rs`: errors and rejections to exceptions). `logging.rs` hands
//! flowctrl's log lines to Python's `logging` ("flowctrl.*").

mod args;
mod balance;
mod config;
mod error;
mod keyed;
mod logging;
mod store;
mod task;
mod waiter;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use flowctrl::TableOptions;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use args::{lock, set};
use error::{TableClosedError, to_py};
use task::{Permit, Task};

/// A shared-memory task table, attached by every process on the host.
///
/// `close()` (or leaving a `with` block) drops this handle; Tasks made from
/// the table then refuse use too (TableClosedError), while their Permits can
/// still be released so held concurrency goes back to the host. The process
/// detaches from the table once no Task or Permit of it is left.
#[pyclass(frozen, module = "flowctrl")]
struct Table {
    /// None once closed.
    table: Mutex<Option<flowctrl::Table>>,
    /// Shared with every Task made from this table.
    closed: Arc<AtomicBool>,
    path: PathBuf,
    capacity: u32,
    max_processes: u32,
}

impl Table {
    /// A handle for one call; cheap (a reference count), and never holds the
    /// lock while the call runs, so `close` never waits for a slow call.
    fn handle(&self) -> PyResult<flowctrl::Table> {
        lock(&self.table)
            .clone()
            .ok_or_else(|| closed_table(&self.path))
    }
}

fn closed_table(path: &std::path::Path) -> PyErr {
    TableClosedError::new_err(format!("table {path:?} is closed"))
}

#[pymethods]
impl Table {
    /// Arguments left None keep the core's `TableOptions::default()`.
    #[new]
    #[pyo3(signature = (path=None, *, capacity=None, mode=None, max_processes=None, owner=None,
                        shared=None, balancers=None, backends_per_balancer=None, store=None,
                        key_prefix=None, store_timeout=None, store_connect_timeout=None,
                        probe_interval=None, host_id=None, config=None, lanes=None))]
    #[allow(clippy::too_many_arguments)] // keyword arguments of the Python constructor
    fn new(
        py: Python<'_>,
        path: Option<PathBuf>,
        capacity: Option<u32>,
        mode: Option<u32>,
        max_processes: Option<u32>,
        owner: Option<u32>,
        shared: Option<bool>,
        balancers: Option<u32>,
        backends_per_balancer: Option<u32>,
        store: Option<String>,
        key_prefix: Option<String>,
        store_timeout: Option<f64>,
        store_connect_timeout: Option<f64>,
        probe_interval: Option<f64>,
        host_id: Option<String>,
        config: Option<PathBuf>,
        lanes: Option<u32>,
    ) -> PyResult<Self> {
        let mut options = TableOptions {
            owner,
            config,
            ..TableOptions::default()
        };
        set(&mut options.capacity, capacity);
        set(&mut options.mode, mode);
        set(&mut options.max_processes, max_processes);
        set(&mut options.shared, shared);
        set(&mut options.balancers, balancers);
        set(&mut options.backends_per_balancer, backends_per_balancer);
        set(&mut options.lanes, lanes);
        let s = &mut options.store;
        s.url = store;
        s.host_id = host_id;
        set(&mut s.key_prefix, key_prefix);
        set(
            &mut s.timeout,
            args::seconds("store_timeout", store_timeout)?,
        );
        set(
            &mut s.connect_timeout,
            args::seconds("store_connect_timeout", store_connect_timeout)?,
        );
        set(
            &mut s.probe_interval,
            args::seconds("probe_interval", probe_interval)?,
        );
        // Opening may create and calibrate a table (~10 ms): let other threads run.
        let table = py
            .detach(move || match path {
                Some(p) => flowctrl::Table::open(p, &options),
                None => flowctrl::Table::open_default(&options),
            })
            .map_err(to_py)?;
        Ok(Self {
            path: table.path().to_path_buf(),
            capacity: table.capacity(),
            max_processes: table.max_processes(),
            table: Mutex::new(Some(table)),
            closed: Arc::new(AtomicBool::new(false)),
        })
    }

    #[pyo3(signature = (name, *, local_rate=None, burst=None, max_concurrency=None,
                        wait_order=None, barging=None,
                        global_rate=None, slice_ms=None, chunk=None, fallback=None, fallback_rate=None,
                        global_burst=None, shards=None,
                        limiter=None, min_limit=None, max_limit=None, initial_limit=None))]
    #[allow(clippy::too_many_arguments)] // keyword arguments of the Python method
    fn task(
        &self,
        py: Python<'_>,
        name: &str,
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
    ) -> PyResult<Task> {
        let config = config::task_config(
            local_rate,
            burst,
            max_concurrency,
            wait_order,
            barging,
            global_rate,
            slice_ms,
            chunk,
            fallback,
            fallback_rate,
            global_burst,
            shards,
            limiter,
            min_limit,
            max_limit,
            initial_limit,
        )?;
        let table = self.handle()?;
        // Registering may wait for another process that is filling the slot.
        let task = py
            .detach(move || table.task(name, &config))
            .map_err(to_py)?;
        Ok(Task {
            task,
            closed: self.closed.clone(),
        })
    }

    /// Registers (or attaches to) the balancer `name` and sets its backends
    /// (see `balance.rs`); durations in seconds, None keeps the core's
    /// `BalancerConfig::default()`.
    #[pyo3(signature = (name, backends, weights=None, *, decay=None, failure_penalty=None,
                        slow_start=None, default_rtt=None, retry_ratio=None,
                        retry_min_per_sec=None))]
    #[allow(clippy::too_many_arguments)] // keyword arguments of the Python method
    fn balancer(
        &self,
        py: Python<'_>,
        name: &str,
        backends: Vec<String>,
        weights: Option<Vec<u32>>,
        decay: Option<f64>,
        failure_penalty: Option<f64>,
        slow_start: Option<f64>,
        default_rtt: Option<f64>,
        retry_ratio: Option<f64>,
        retry_min_per_sec: Option<f64>,
    ) -> PyResult<balance::Balancer> {
        let settings = balance::Settings {
            decay,
            failure_penalty,
            slow_start,
            default_rtt,
            retry_ratio,
            retry_min_per_sec,
        };
        let (table, closed) = (self.handle()?, self.closed.clone());
        balance::register(py, table, closed, name, backends, weights, settings)
    }

    /// Looks for dead processes now; the number found (their permits are back).
    fn reap(&self, py: Python<'_>) -> PyResult<usize> {
        let table = self.handle()?;
        Ok(py.detach(move || table.reap()))
    }

    /// Checks the table: {"replaced": the path no longer names this file,
    /// "drift": {task: in_flight - held} for tasks whose count is off,
    /// "unchecked": [tasks that never held still long enough]}.
    fn check<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let table = self.handle()?;
        let report = py.detach(move || table.check());
        let d = PyDict::new(py);
        d.set_item("replaced", report.replaced)?;
        let drift = PyDict::new(py);
        for (name, by) in &report.drift {
            drift.set_item(name, by)?;
        }
        d.set_item("drift", drift)?;
        d.set_item("unchecked", report.unchecked)?;
        Ok(d)
    }

    /// Drops this handle; idempotent. Later use raises TableClosedError.
    fn close(&self, py: Python<'_>) {
        self.closed.store(true, Ordering::Release);
        let table = lock(&self.table).take();
        // The last handle detaches this process from the table.
        py.detach(move || drop(table));
    }

    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    #[getter]
    fn capacity(&self) -> u32 {
        self.capacity
    }

    #[getter]
    fn max_processes(&self) -> u32 {
        self.max_processes
    }

    /// (sets in use, sets) of a table made with ``lanes``; None for a table
    /// with lanes for every pair.
    fn lane_pool(&self) -> PyResult<Option<(u32, u32)>> {
        Ok(self.handle()?.lane_pool())
    }

    fn __enter__(slf: Py<Self>) -> PyResult<Py<Self>> {
        if slf.get().closed() {
            return Err(closed_table(&slf.get().path));
        }
        Ok(slf)
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        exc_value: &Bound<'_, PyAny>,
        traceback: &Bound<'_, PyAny>,
    ) {
        let _ = (exc_type, exc_value, traceback);
        self.close(py);
    }

    fn __repr__(&self) -> String {
        let closed = if self.closed() { " closed" } else { "" };
        format!("<flowctrl.Table {:?}{closed}>", self.path)
    }
}

#[pymodule(gil_used = false)]
fn _flowctrl(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Table>()?;
    m.add_class::<Task>()?;
    m.add_class::<Permit>()?;
    m.add_class::<waiter::Waiter>()?;
    m.add_class::<balance::Balancer>()?;
    m.add_class::<balance::Choice>()?;
    m.add_class::<store::Store>()?;
    m.add("__version__", flowctrl::VERSION)?;
    m.add("LAYOUT_VERSION", flowctrl::LAYOUT_VERSION)?;
    m.add("NO_CAP", flowctrl::NO_CAP)?;
    logging::install(m)?;
    Ok(())
}
