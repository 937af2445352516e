//! `manage`: runs a manager instance ([`flowctrl::manage::Manager`]) until
//! SIGTERM or SIGINT, which gives its lease up. SIGHUP, or a change to the
//! file, reloads the configuration; a file that fails its checks is logged
//! and the running configuration kept. Logs go to stderr.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use flowctrl::manage::{Manager, ManagerConfig};

use crate::Result;

static STOP: AtomicBool = AtomicBool::new(false);
static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

extern "C" fn on_hup(_: libc::c_int) {
    RELOAD.store(true, Ordering::Relaxed);
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Lines go to stderr through the logger `main` installed (`--log`).
pub(crate) fn run(path: &Path, metrics: Option<&str>) -> Result {
    let config = ManagerConfig::load(path)?;
    let mut manager = Manager::new(config)?;
    // SAFETY: the handlers only store to atomics.
    unsafe {
        libc::signal(libc::SIGTERM, on_stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGHUP, on_hup as *const () as libc::sighandler_t);
    }
    if let Some(listen) = metrics {
        let report = manager.report();
        // Bound before managing: a bad address is a usage error, not a log line.
        let listener = crate::http::bind(listen)?;
        crate::metrics::announce(&listener, "the manager");
        std::thread::Builder::new()
            .name("flowctrl-metrics".into())
            .spawn(move || {
                let served = crate::http::serve(listener, &mut || {
                    Ok(flowctrl::metrics::render_manager(&report.lock()))
                });
                if let Err(e) = served {
                    log::error!("metrics endpoint: {e}");
                }
            })
            .map_err(|e| crate::invalid(format!("cannot start the metrics thread: {e}")))?;
    }
    log::info!(
        "manager {} managing {} task(s) and the keys of {} from {}",
        manager.config().id,
        manager.config().tasks.len(),
        manager.config().keys.len(),
        path.display()
    );
    let mut seen = modified(path);
    let ran = manager.run(&STOP, |m| {
        let now = modified(path);
        if !RELOAD.swap(false, Ordering::Relaxed) && now == seen {
            return;
        }
        seen = now;
        match ManagerConfig::load(path) {
            Ok(config) if &config == m.config() => {}
            Ok(config) => {
                let tasks = config.tasks.len();
                match m.reconfigure(config) {
                    Ok(()) => log::info!("{}: reloaded ({tasks} task(s))", path.display()),
                    Err(e) => {
                        log::warn!("{}: {e}; keeping the running configuration", path.display())
                    }
                }
            }
            Err(e) => log::warn!("{e}; keeping the running configuration"),
        }
    });
    Ok(ran?)
}
