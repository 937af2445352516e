//! flowctrl's log lines to Python's `logging`: the logger "flowctrl" and its
//! children by target ("flowctrl.store", "flowctrl.table"), through
//! pyo3-log. A line's fields (`task`, `pid`, `host`, `store`, …) are the
//! record's attributes, as strings. With no logging configured, Python's
//! last-resort handler writes warnings to stderr, as the C library does.
//!
//! The GIL: a line takes it, since Python's handlers need it. flowctrl
//! writes lines only off the request path's fast branch and never while it
//! holds one of its locks, so a thread that holds the GIL while waiting on
//! flowctrl never waits on a thread that waits for the GIL. A line from a
//! thread without the GIL (the reaper, a call that let it go) attaches to
//! the interpreter like any callback would; once the interpreter shuts
//! down (from `atexit` on) lines are dropped instead: attaching then could
//! hang or end the thread.

use std::sync::atomic::{AtomicBool, Ordering};

use log::{LevelFilter, Log, Metadata, Record};
use pyo3::prelude::*;

static STOPPED: AtomicBool = AtomicBool::new(false);

struct Bridge(pyo3_log::Logger);

fn ours(target: &str) -> bool {
    target == "flowctrl" || target.starts_with("flowctrl::")
}

impl Log for Bridge {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        ours(metadata.target()) && metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) || STOPPED.load(Ordering::Acquire) {
            return;
        }
        let _ = Python::try_attach(|py| {
            // Neither an exception pending in the caller's frame nor one
            // from a handler may be lost or leak into the other.
            let pending = PyErr::take(py);
            self.0.log(record);
            if let Some(e) = PyErr::take(py) {
                e.write_unraisable(py, None);
            }
            if let Some(e) = pending {
                e.restore(py);
            }
        });
    }

    fn flush(&self) {}
}

#[pyfunction]
fn stop_logging() {
    STOPPED.store(true, Ordering::Release);
}

/// Installs the bridge (once per process: a second import keeps the first)
/// and stops it at exit. Levels are Python's: the loggers are cached, their
/// levels asked at every line (lines are rare), so `setLevel` takes effect
/// at once.
pub(crate) fn install(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let logger = pyo3_log::Logger::new(py, pyo3_log::Caching::Loggers)?.filter(LevelFilter::Info);
    if log::set_boxed_logger(Box::new(Bridge(logger))).is_ok() {
        // flowctrl writes nothing below info.
        log::set_max_level(LevelFilter::Info);
        let stop = wrap_pyfunction!(stop_logging, m)?;
        py.import("atexit")?.call_method1("register", (stop,))?;
    }
    Ok(())
}
