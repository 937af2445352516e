//! A table's Prometheus text exposition (format 0.0.4), encoded by
//! `prometheus-client` from what a [`View`] reads: every task's counters,
//! configuration, concurrency and global quota, every balancer's backends,
//! and the table's processes. Read only: rendering registers nothing and
//! changes nothing. `flowctrl metrics --listen ADDR` serves it; a Rust
//! service can serve it on its own endpoint:
//!
//! ```no_run
//! let view = flowctrl::View::open("/dev/shm/my-service")?;
//! let body = flowctrl::metrics::render(&view)?;
//! // answer GET /metrics with `body`, Content-Type flowctrl::metrics::CONTENT_TYPE
//! # Ok::<(), flowctrl::Error>(())
//! ```
//!
//! Names follow the Prometheus conventions: counters end in `_total`, times
//! are in seconds, the task, balancer and backend are labels, and so are a
//! refusal's `reason` and a release's `outcome`
//! (`flowctrl_requests_limited_total{task="api",reason="global"}`). The
//! docs/reference/metrics.md lists every family.

mod balance;
mod families;
mod manager;
mod quota;

pub use manager::render_manager;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use crate::view::{BalancerSnapshot, TableSnapshot, TaskSnapshot, View};

/// The `Content-Type` of what [`render`] returns.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The exposition of every task and balancer of the table `view` reads,
/// read now (one copy of the table: [`View::snapshot`]). An error when the
/// table cannot be read whole (it shrank under the view, its header
/// changed): a server answers it with 503.
pub fn render(view: &View) -> crate::Result<String> {
    Ok(render_snapshot(&view.snapshot()?))
}

/// The exposition of one copy of a table.
pub fn render_snapshot(view: &TableSnapshot) -> String {
    let processes = view.processes();
    let tasks = view.tasks();
    let keys = tasks
        .iter()
        .filter_map(|t| Some((t.name.clone(), view.key_counters(&t.name).ok()??)))
        .collect();
    let check = view.check_within(DRIFT_PATIENCE);
    let drift = tasks
        .iter()
        .filter(|t| !check.unchecked.contains(&t.name))
        .map(|t| {
            let d = check.drift.iter().find(|(n, _)| *n == t.name);
            (t.name.clone(), d.map_or(0, |(_, d)| *d))
        })
        .collect();
    let snapshot = Snapshot {
        drift,
        keys,
        tasks,
        balancers: view.balancers(),
        task_slots: view.capacity(),
        process_slots: view.max_processes(),
        layout: view.layout_version(),
        processes: processes.len(),
        unreaped: processes.iter().filter(|p| p.alive == Some(false)).count(),
    };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(snapshot));
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
        .expect("encoding into a String cannot fail");
    out
}

/// How long a scrape waits for a busy task's ledgers to hold still before
/// it leaves the task's drift out.
const DRIFT_PATIENCE: std::time::Duration = std::time::Duration::from_millis(20);

/// What one scrape read, encoded by [`families`].
#[derive(Debug)]
struct Snapshot {
    tasks: Vec<TaskSnapshot>,
    /// Each task's concurrency count less its ledgers' sum (`check`), for
    /// the tasks that held still long enough to compare.
    drift: Vec<(String, i64)>,
    /// Each keyed task's key counters.
    keys: Vec<(String, crate::KeyStats)>,
    balancers: Vec<BalancerSnapshot>,
    task_slots: u32,
    process_slots: u32,
    /// The table file's layout version.
    layout: u32,
    /// Attachment slots marked live, and those of them whose owner died.
    processes: usize,
    unreaped: usize,
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        families::table(self, &mut encoder)?;
        families::tasks(&self.tasks, &mut encoder)?;
        families::drift(&self.drift, &mut encoder)?;
        quota::quota(&self.tasks, &mut encoder)?;
        families::keys(&self.keys, &mut encoder)?;
        balance::balancers(&self.balancers, &mut encoder)
    }
}
