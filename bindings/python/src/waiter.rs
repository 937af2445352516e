//! The asyncio face of a waiting acquire: the core's future, polled from the
//! event loop's thread with a waker that schedules a callback on the loop
//! (`call_soon_threadsafe`). The core's waiter thread calls that waker when
//! it hands the permit over or the deadline passes, so nothing polls.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use pyo3::prelude::*;

use crate::args::lock;
use crate::error::{limited, to_py};
use crate::task::Permit;

/// One waiting acquire of `Task.acquire_async` (`flowctrl._aio` drives it).
#[pyclass(frozen, name = "_Waiter", module = "flowctrl")]
pub(crate) struct Waiter {
    task: flowctrl::Task,
    n: u32,
    /// `None` once it finished or was closed.
    future: Mutex<Option<Pin<Box<flowctrl::Acquire>>>>,
}

impl Waiter {
    pub(crate) fn new(task: &flowctrl::Task, n: u32, timeout: Option<std::time::Duration>) -> Self {
        Self {
            task: task.clone(),
            n,
            future: Mutex::new(Some(Box::pin(task.acquire_async(n, timeout)))),
        }
    }
}

/// Calls a Python callable (which schedules the loop's wake-up) when woken.
struct PyWake(Py<PyAny>);

impl Wake for PyWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // From the core's waiter thread. An interpreter shutting down, or a
        // loop already closed (the callable raises), has nobody to wake.
        let _ = Python::try_attach(|py| {
            let _ = self.0.call0(py);
        });
    }
}

#[pymethods]
impl Waiter {
    /// A Permit once admitted, None while it waits (`wake` is called when
    /// that changes); raises Limited when the deadline passed.
    fn poll(&self, py: Python<'_>, wake: Py<PyAny>) -> PyResult<Option<Permit>> {
        let waker = Waker::from(Arc::new(PyWake(wake)));
        let mut slot = lock(&self.future);
        let Some(future) = slot.as_mut() else {
            return Err(to_py(flowctrl::Error::new(
                flowctrl::ErrorKind::InvalidArgument,
                "this acquire_async already finished",
            )));
        };
        // Never blocks: an acquire that may pull from the store is left to
        // the core's waiter thread.
        let polled = py.detach(|| future.as_mut().poll(&mut Context::from_waker(&waker)));
        match polled {
            Poll::Pending => Ok(None),
            Poll::Ready(answer) => {
                *slot = None;
                match answer.map_err(to_py)? {
                    Ok(permit) => Ok(Some(Permit::new(permit))),
                    Err(why) => Err(limited(&self.task, why, self.n)),
                }
            }
        }
    }

    /// Leaves the queue (a cancelled coroutine): a permit handed over
    /// meanwhile is released, never left taken.
    fn close(&self, py: Python<'_>) {
        let future = lock(&self.future).take();
        py.detach(move || drop(future));
    }
}
