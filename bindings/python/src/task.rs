//! The Python face of tasks and permits: `Table.task(...)` returns a `Task`;
//! its acquires return `Permit`s, the core's owning permits, which release
//! once (by hand, on leaving a `with` block, or as "ignored" when dropped).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use flowctrl::{Finish, OwnedPermit, QuotaState, QuotaStats, TaskStats};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::args::{self, exit_outcome, lock};
use crate::config;
use crate::error::{InvalidArgumentError, TableClosedError, limited, to_py};
use crate::keyed;

/// A task registered in a table.
#[pyclass(frozen, module = "flowctrl")]
pub(crate) struct Task {
    pub(crate) task: flowctrl::Task,
    /// Its table's flag: a Task of a closed Table refuses use.
    pub(crate) closed: Arc<AtomicBool>,
}

impl Task {
    /// The core task, unless its Table was closed.
    #[inline]
    fn live(&self) -> PyResult<&flowctrl::Task> {
        if self.closed.load(Ordering::Acquire) {
            return Err(TableClosedError::new_err(format!(
                "task {:?}: its table is closed",
                self.task.name()
            )));
        }
        Ok(&self.task)
    }
}

/// A non-waiting acquire: with the GIL held (cheaper than letting it go and
/// taking it back) unless it may make a round trip to the store, which
/// other threads should not wait out.
#[inline]
fn acquire_now(
    py: Python<'_>,
    task: &flowctrl::Task,
    n: u32,
) -> PyResult<Result<OwnedPermit, flowctrl::Limited>> {
    if task.may_pull(n) {
        py.detach(|| task.acquire_owned(n)).map_err(to_py)
    } else {
        task.acquire_owned(n).map_err(to_py)
    }
}

#[pymethods]
impl Task {
    /// Returns a Permit, or None when a limit rejects the request. With
    /// `key` (str or bytes), the key's limits apply too (a keyed task).
    #[pyo3(signature = (n=1, *, key=None))]
    fn try_acquire(
        &self,
        py: Python<'_>,
        n: u32,
        key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Permit>> {
        let task = self.live()?;
        if let Some(key) = key {
            let key = keyed::key_bytes(key)?;
            return Ok(py
                .detach(|| task.acquire_key_owned(&key, n))
                .map_err(to_py)?
                .ok()
                .map(Permit::new));
        }
        Ok(acquire_now(py, task, n)?.ok().map(Permit::new))
    }

    /// Whether an acquire of `n` may now make a round trip to the store
    /// (the asyncio face runs such an acquire off the event loop).
    #[pyo3(name = "_may_pull", signature = (n=1))]
    fn may_pull(&self, n: u32) -> PyResult<bool> {
        Ok(self.live()?.may_pull(n))
    }

    /// Whether an acquire of `n` for a key may now make a round trip to the
    /// store (the asyncio face runs such an acquire off the event loop).
    #[pyo3(name = "_may_pull_key", signature = (n=1))]
    fn may_pull_key(&self, n: u32) -> PyResult<bool> {
        Ok(self.live()?.may_pull_key(n))
    }

    /// Returns a Permit (a context manager), or raises Limited. With a
    /// `timeout` (seconds), waits up to it for a permit, without the GIL.
    #[pyo3(signature = (n=1, timeout=None, *, key=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        n: u32,
        timeout: Option<f64>,
        key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Permit> {
        let task = self.live()?;
        if let Some(key) = key {
            let key = keyed::key_bytes(key)?;
            let timeout = args::seconds("timeout", timeout)?;
            let decision = py
                .detach(|| match timeout {
                    None => task.acquire_key_owned(&key, n),
                    Some(t) => task.acquire_key_owned_timeout(&key, n, t),
                })
                .map_err(to_py)?;
            return match decision {
                Ok(permit) => Ok(Permit::new(permit)),
                Err(refusal) => Err(keyed::limited(task, &refusal)),
            };
        }
        let decision = match args::seconds("timeout", timeout)? {
            None => acquire_now(py, task, n)?,
            Some(t) => py
                .detach(|| task.acquire_owned_wait(n, Some(t)))
                .map_err(to_py)?,
        };
        match decision {
            Ok(permit) => Ok(Permit::new(permit)),
            Err(why) => Err(limited(task, why, n)),
        }
    }

    /// An async context manager (and awaitable) giving a Permit, waiting up
    /// to `timeout` seconds without blocking the event loop.
    #[pyo3(signature = (n=1, timeout=None, *, key=None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        n: u32,
        timeout: Option<f64>,
        key: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        args::seconds("timeout", timeout)?;
        let py = slf.py();
        if let Some(key) = key {
            keyed::key_bytes(key)?;
        }
        py.import("flowctrl._aio")?
            .getattr("AsyncAcquire")?
            .call1((slf, n, timeout, key))
    }

    /// The waiting acquire `acquire_async` drives (see `flowctrl._aio`).
    #[pyo3(name = "_waiter", signature = (n=1, timeout=None))]
    fn waiter(&self, n: u32, timeout: Option<f64>) -> PyResult<crate::waiter::Waiter> {
        let timeout = args::seconds("timeout", timeout)?;
        Ok(crate::waiter::Waiter::new(self.live()?, n, timeout))
    }

    /// Gives the task limits per caller (every process on the host):
    /// `rates` like "10/second;1000/hour", a per-key `max_concurrency`
    /// (None or `NO_CAP`: none; 0 is refused),
    /// `capacity` keys (fixed when the key file is made), `shadow`,
    /// `overflow` "shared" or "admit", and a rate across the fleet:
    /// `key_global` ("1000/hour"), `key_global_slice` (seconds or "1m";
    /// default the rate's period), `key_global_local` (default 1),
    /// `key_global_fallback` ("share", "local", "deny"). Every call sets
    /// all of them: without `key_global`, the keys have none.
    #[pyo3(signature = (rates=None, *, max_concurrency=None, capacity=65536, shadow=false,
                        overflow="shared", key_global=None, key_global_slice=None,
                        key_global_local=None, key_global_fallback=None))]
    #[allow(clippy::too_many_arguments)] // keyword arguments of the Python method
    fn set_keys(
        &self,
        py: Python<'_>,
        rates: Option<&str>,
        max_concurrency: Option<u32>,
        capacity: u32,
        shadow: bool,
        overflow: &str,
        key_global: Option<&str>,
        key_global_slice: Option<&Bound<'_, PyAny>>,
        key_global_local: Option<i64>,
        key_global_fallback: Option<&str>,
    ) -> PyResult<()> {
        let mut limits = keyed::limits(rates, max_concurrency, shadow, false, false)?;
        limits.global = keyed::global(
            key_global,
            key_global_slice,
            key_global_local,
            key_global_fallback,
        )?;
        let config = keyed::config(limits, capacity, overflow)?;
        let task = self.live()?;
        // Waits up to 2 s on the key file's config lock.
        py.detach(|| task.set_keys(&config)).map_err(to_py)
    }

    /// Gives `key` limits of its own, live (or none with `unlimited`, or
    /// nothing admitted with `blocked`): the arguments of `set_keys`, all
    /// its own (none taken from the task's).
    #[pyo3(signature = (key, rates=None, *, max_concurrency=None, unlimited=false, blocked=false,
                        shadow=false, key_global=None, key_global_slice=None,
                        key_global_local=None, key_global_fallback=None))]
    #[allow(clippy::too_many_arguments)] // keyword arguments of the Python method
    fn set_key_override(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        rates: Option<&str>,
        max_concurrency: Option<u32>,
        unlimited: bool,
        blocked: bool,
        shadow: bool,
        key_global: Option<&str>,
        key_global_slice: Option<&Bound<'_, PyAny>>,
        key_global_local: Option<i64>,
        key_global_fallback: Option<&str>,
    ) -> PyResult<()> {
        let key = keyed::key_bytes(key)?;
        let mut limits = keyed::limits(rates, max_concurrency, shadow, unlimited, blocked)?;
        limits.global = keyed::global(
            key_global,
            key_global_slice,
            key_global_local,
            key_global_fallback,
        )?;
        let task = self.live()?;
        py.detach(|| task.set_key_override(&key, Some(&limits)))
            .map_err(to_py)
    }

    /// Takes `key`'s override away: the task's key limits apply to it.
    fn remove_key_override(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = keyed::key_bytes(key)?;
        let task = self.live()?;
        py.detach(|| task.set_key_override(&key, None))
            .map_err(to_py)
    }

    /// `key`'s state, spending nothing: limit, remaining, reset_after and
    /// retry_after (seconds) of its rates on the host (a global rate's
    /// slice is the fleet's: not among them), in_flight, max_concurrency,
    /// present, overridden, blocked, unlimited.
    fn key_state<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let key = keyed::key_bytes(key)?;
        let s = self.live()?.key_state(&key).map_err(to_py)?;
        keyed::state_dict(py, &s)
    }

    /// The key file's counters (`record`, `record_refused`: the versions of
    /// the store's record in force and last refused); None for a task
    /// without key limits.
    fn key_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        match self.live()?.key_stats().map_err(to_py)? {
            Some(s) => Ok(Some(keyed::stats_dict(py, &s)?)),
            None => Ok(None),
        }
    }

    /// The concurrency limit every process applies now (the adaptive
    /// limit, or max_concurrency); None when there is no cap.
    #[getter]
    fn limit(&self) -> PyResult<Option<u32>> {
        Ok(self.live()?.limit())
    }

    /// Changes the given fields of the configuration for the whole host.
    #[pyo3(signature = (*, local_rate=None, burst=None, max_concurrency=None,
                        wait_order=None, barging=None,
                        global_rate=None, slice_ms=None, chunk=None, fallback=None, fallback_rate=None,
                        global_burst=None, shards=None,
                        limiter=None, min_limit=None, max_limit=None, initial_limit=None))]
    #[allow(clippy::too_many_arguments)] // keyword arguments of the Python method
    fn update(
        &self,
        py: Python<'_>,
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
    ) -> PyResult<()> {
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
        let task = self.live()?;
        py.detach(|| task.update(&config)).map_err(to_py)
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let task = self.live()?;
        // Sums over every process slot of the table.
        let (stats, quota) = py.detach(|| (task.stats(), task.quota_stats()));
        let d = stats_dict(py, &stats)?;
        quota_items(&d, &quota)?;
        Ok(d)
    }

    /// Pulls up to `want` permits of the current slice from the store into
    /// the host's quota now (to warm up before a known spike); returns how
    /// many were granted, 0 when the slice is exhausted. Raises StoreError
    /// when the store failed (decisions then fall back to local limits).
    fn pull_quota(&self, py: Python<'_>, want: u64) -> PyResult<u64> {
        let task = self.live()?;
        Ok(py
            .detach(|| task.pull_quota(want))
            .map_err(to_py)?
            .unwrap_or(0))
    }

    /// Statistics of each attachment live now (each open table handle of a
    /// process is one): a list of stats dicts with "pid" and "slot".
    fn stats_by_process<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let task = self.live()?;
        let rows = py.detach(|| task.stats_by_process());
        rows.iter()
            .map(|row| {
                let d = stats_dict(py, &row.stats)?;
                d.set_item("pid", row.pid)?;
                d.set_item("slot", row.slot)?;
                Ok(d)
            })
            .collect()
    }

    /// Compares the host's concurrency count with what every process's
    /// ledger holds, at one instant: {"in_flight", "held", "drift"}.
    fn check<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let task = self.live()?;
        let c = py.detach(|| task.check()).map_err(to_py)?;
        let d = PyDict::new(py);
        d.set_item("in_flight", c.in_flight)?;
        d.set_item("held", c.held)?;
        d.set_item("drift", c.drift())?;
        Ok(d)
    }

    #[getter]
    fn name(&self) -> &str {
        self.task.name()
    }

    #[getter]
    fn settings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        config::settings_dict(py, &self.live()?.settings())
    }

    fn __repr__(&self) -> String {
        format!("<flowctrl.Task {:?}>", self.task.name())
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
        ("limit", s.limit),
        ("baseline_rtt_ns", s.baseline_rtt_ns),
        ("recent_rtt_ns", s.recent_rtt_ns),
        ("waiting", s.waiting),
        ("unlaned", s.unlaned),
        ("unlaned_refused", s.unlaned_refused),
    ];
    for (k, v) in fields {
        d.set_item(k, v)?;
    }
    d.set_item("held", s.held)?;
    Ok(d)
}

/// The global quota's part of `stats()`.
fn quota_items(d: &Bound<'_, PyDict>, q: &QuotaStats) -> PyResult<()> {
    let state = q.state.map(|s| match s {
        QuotaState::Open => "open",
        QuotaState::Limited => "limited",
        QuotaState::Failed => "failed",
    });
    d.set_item("quota_state", state)?;
    for (k, v) in [
        ("pulls", q.pulls),
        ("failed_pulls", q.failed_pulls),
        ("pull_ns_sum", q.pull_ns_sum),
        ("pull_ns_max", q.pull_ns_max),
        ("quota_granted", q.granted),
        ("quota_stranded", q.stranded),
        ("open_ms", q.open_ms),
        ("limited_ms", q.limited_ms),
        ("failed_ms", q.failed_ms),
    ] {
        d.set_item(k, v)?;
    }
    d.set_item("limited_fallback", q.limited_fallback)?;
    d.set_item("hosts_seen", q.hosts_seen)?;
    d.set_item("host_conflicts", q.host_conflicts)?;
    d.set_item("config_conflicts", q.config_conflicts)?;
    d.set_item("keys_created", q.keys_created)?;
    d.set_item("quota_shards_down", q.shards_down)?;
    d.set_item("quota_reserved", q.reserved)?;
    d.set_item("quota_returned", q.returned)?;
    d.set_item("clock_offset_us", q.clock_offset_us)
}

/// Admission for `n` permits. Release it once; as a context manager it is
/// released on exit, as "dropped" if the block raised, else "success". A
/// permit dropped unreleased is released as "ignored" (by the core's guard).
/// It stays releasable after its Table is closed, so the concurrency it
/// holds goes back.
#[pyclass(frozen, module = "flowctrl")]
pub(crate) struct Permit {
    /// Finished under the lock, so two threads cannot both release it; the
    /// core marks it released only when the release succeeded.
    permit: Mutex<OwnedPermit>,
}

impl Permit {
    pub(crate) fn new(permit: OwnedPermit) -> Self {
        Self {
            permit: Mutex::new(permit),
        }
    }
}

#[pymethods]
impl Permit {
    /// `rtt`: the round-trip time the caller measured (seconds), used as
    /// the latency sample instead of the time since the acquire.
    #[pyo3(signature = (outcome="success", *, rtt=None))]
    fn release(&self, outcome: &str, rtt: Option<f64>) -> PyResult<()> {
        let how = Finish {
            rtt: args::seconds("rtt", rtt)?,
            ..args::outcome(outcome)?.into()
        };
        let mut permit = lock(&self.permit);
        if permit.finish_once(how).map_err(to_py)? {
            Ok(())
        } else {
            Err(InvalidArgumentError::new_err(format!(
                "task {:?}: permit already released",
                permit.task().name()
            )))
        }
    }

    #[getter]
    fn n(&self) -> u32 {
        lock(&self.permit).n()
    }

    #[getter]
    fn released(&self) -> bool {
        lock(&self.permit).is_finished()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Releases the permit unless the block released it already.
    fn __exit__(
        &self,
        exc_type: &Bound<'_, PyAny>,
        exc_value: &Bound<'_, PyAny>,
        traceback: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let _ = (exc_value, traceback);
        let how = exit_outcome(exc_type).into();
        lock(&self.permit).finish_once(how).map(drop).map_err(to_py)
    }

    fn __repr__(&self) -> String {
        let permit = lock(&self.permit);
        format!(
            "<flowctrl.Permit {:?} n={}>",
            permit.task().name(),
            permit.n()
        )
    }
}
