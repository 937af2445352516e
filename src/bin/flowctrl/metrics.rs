//! `metrics`: the table's Prometheus exposition ([`flowctrl::metrics::render`])
//! over HTTP ([`crate::http`]), every scrape reading the table anew through
//! a read-only view opened for it (a table recreated by a restarted service
//! is followed; one that cannot be read answers 503 with the reason).

use std::path::{Path, PathBuf};

use flowctrl::{Error, ErrorKind, View};

use crate::Result;

/// The library's lines (a table replaced, ...) and ours go to stderr at
/// info, through the logger `main` installed.
pub(crate) fn serve(path: &Path, listen: &str) -> Result {
    // Refuse a table that cannot be read now, rather than at the first scrape.
    let path: PathBuf = View::open(path)?.path().to_path_buf();
    let listener = crate::http::bind(listen)?;
    announce(&listener, &path.display().to_string());
    let served = crate::http::serve(listener, &mut || {
        View::open(&path)
            .and_then(|view| flowctrl::metrics::render(&view))
            .map_err(|e| e.to_string())
    });
    served.map_err(|e| Error::new(ErrorKind::Io, format!("serving {listen}: {e}")))?;
    Ok(())
}

/// Logs where `what`'s metrics are served.
pub(crate) fn announce(listener: &std::net::TcpListener, what: &str) {
    if let Ok(addr) = listener.local_addr() {
        log::info!("serving http://{addr}/metrics for {what}");
    }
}
