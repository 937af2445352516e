//! A table's options as the tests write them: [`options`] (the library's
//! defaults) followed by only what a test changes, each by its name:
//!
//! ```ignore
//! Table::open(path, &options().capacity(4).processes(2))
//! Table::open(path, &host_options(&url, "a").probe(PROBE))
//! ```
//!
//! `store(url)` and `config(path)` are the library's own builder methods;
//! [`Options`] adds the rest.

use std::time::Duration;

use flowctrl::{Store, StoreOptions, TableOptions};

/// The library's default options.
pub fn options() -> TableOptions {
    TableOptions::default()
}

/// A host of a test that reaches a real store at `url`, known to it as
/// `host` (`None`: the library's default id), with a command timeout of
/// 500 ms: room for a loaded 2-core machine (an outage is a refused
/// connection, noticed at once whatever the timeout).
pub fn host_options<'a>(url: &str, host: impl Into<Option<&'a str>>) -> TableOptions {
    options()
        .store(url)
        .timeout(Duration::from_millis(500))
        .host(host)
}

/// A host of a Sentinel or Cluster test: [`host_options`] that also
/// connects within 500 ms and probes a failed store every `probe`.
pub fn ha_options(url: &str, probe: Duration) -> TableOptions {
    host_options(url, None)
        .connect_timeout(Duration::from_millis(500))
        .probe(probe)
}

/// 8 tasks, 8 processes, 2 balancers of 4 backends: the small table the
/// command-line tests fill and read.
pub fn cli_options() -> TableOptions {
    options().capacity(8).processes(8).balancers(2).backends(4)
}

/// The setters [`TableOptions`] lacks, one a field.
pub trait Options: Sized {
    /// Task slots.
    fn capacity(self, tasks: u32) -> Self;
    /// Attachments (processes) at once.
    fn processes(self, processes: u32) -> Self;
    /// Balancer slots.
    fn balancers(self, balancers: u32) -> Self;
    /// Backends each balancer holds at once.
    fn backends(self, backends: u32) -> Self;
    /// The new file's mode.
    fn mode(self, mode: u32) -> Self;
    /// Pooled lane sets (0: a set per pair).
    fn lanes(self, lanes: u32) -> Self;
    /// The store's URL, or none (the embedded store).
    fn store_url(self, url: Option<String>) -> Self;
    /// The store's command timeout.
    fn timeout(self, timeout: Duration) -> Self;
    /// The store's connect timeout.
    fn connect_timeout(self, timeout: Duration) -> Self;
    /// How often a failed store is probed.
    fn probe(self, interval: Duration) -> Self;
    /// The host id the store knows this table by (`None`: the default).
    fn host<'a>(self, id: impl Into<Option<&'a str>>) -> Self;
    /// A skew added to this host's clock.
    fn clock_skew_ms(self, skew_ms: i64) -> Self;
}

impl Options for TableOptions {
    fn capacity(mut self, tasks: u32) -> Self {
        self.capacity = tasks;
        self
    }

    fn processes(mut self, processes: u32) -> Self {
        self.max_processes = processes;
        self
    }

    fn balancers(mut self, balancers: u32) -> Self {
        self.balancers = balancers;
        self
    }

    fn backends(mut self, backends: u32) -> Self {
        self.backends_per_balancer = backends;
        self
    }

    fn mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self
    }

    fn lanes(mut self, lanes: u32) -> Self {
        self.lanes = lanes;
        self
    }

    fn store_url(mut self, url: Option<String>) -> Self {
        self.store.url = url;
        self
    }

    fn timeout(mut self, timeout: Duration) -> Self {
        self.store.timeout = timeout;
        self
    }

    fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.store.connect_timeout = timeout;
        self
    }

    fn probe(mut self, interval: Duration) -> Self {
        self.store.probe_interval = interval;
        self
    }

    fn host<'a>(mut self, id: impl Into<Option<&'a str>>) -> Self {
        self.store.host_id = id.into().map(str::to_string);
        self
    }

    fn clock_skew_ms(mut self, skew_ms: i64) -> Self {
        self.store.clock_skew_ms = skew_ms;
        self
    }
}

/// The store at `url` as a test's own admin connection (records, the
/// census, hot keys): commands within 500 ms and connections too. The
/// library's defaults (5 ms, 20 ms) are a request's bounds, which a
/// loaded 2-core machine passes.
pub fn admin_store(url: &str) -> Store {
    Store::open(&StoreOptions {
        url: Some(url.to_string()),
        timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(500),
        ..StoreOptions::default()
    })
    .expect("the test's store")
}
