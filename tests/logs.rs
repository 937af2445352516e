//! The Rust face of logging: flowctrl's events reach the `log` logger the
//! program installed, under the documented target and level, rate-limited
//! per kind and task, and written after the pull lock is released (the
//! logger here takes it again); a store that comes back is an info line.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

use flowctrl::{ErrorKind, Table, TableOptions, Task, TaskConfig};
use log::{Level, LevelFilter, Log, Metadata, Record};

static LINES: Mutex<Vec<(Level, String, String)>> = Mutex::new(Vec::new());
/// A line's message and its structured fields (the `log` crate's
/// key-values) as text.
type Fielded = (String, Vec<(String, String)>);
static FIELDS: Mutex<Vec<Fielded>> = Mutex::new(Vec::new());

/// Collects a record's key-values as text.
struct Pairs(Vec<(String, String)>);

impl<'kvs> log::kv::VisitSource<'kvs> for Pairs {
    fn visit_pair(
        &mut self,
        key: log::kv::Key<'kvs>,
        value: log::kv::Value<'kvs>,
    ) -> Result<(), log::kv::Error> {
        self.0.push((key.to_string(), value.to_string()));
        Ok(())
    }
}
/// The task the logger pulls for while it logs a line about it: its pull
/// lock must be free.
static REENTER: OnceLock<Task> = OnceLock::new();
static SLOWEST_MS: AtomicU64 = AtomicU64::new(0);

struct Capture;

impl Log for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &Record<'_>) {
        let message = record.args().to_string();
        if let Some(task) = REENTER
            .get()
            .filter(|_| message.starts_with("task \"api\""))
        {
            // Fails at once (a closed port) unless the lock is still held:
            // then it waits until the lock counts as stale (over 2 s here).
            let began = Instant::now();
            let err = task.pull_quota(1).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Store, "{err}");
            SLOWEST_MS.fetch_max(began.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
        let mut pairs = Pairs(Vec::new());
        record.key_values().visit(&mut pairs).unwrap();
        FIELDS.lock().unwrap().push((message.clone(), pairs.0));
        let line = (record.level(), record.target().to_string(), message);
        LINES.lock().unwrap().push(line);
    }

    fn flush(&self) {}
}

fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_logger(&Capture).unwrap();
        log::set_max_level(LevelFilter::Info);
    });
}

/// The lines about `task` so far: (level, target, message).
fn lines_about(task: &str) -> Vec<(Level, String, String)> {
    let prefix = format!("task {task:?}:");
    let lines = LINES.lock().unwrap();
    lines
        .iter()
        .filter(|(_, _, m)| m.starts_with(&prefix))
        .cloned()
        .collect()
}

/// The store is a closed port: every pull fails at once.
#[test]
fn a_failing_store_is_one_warning_per_task_however_often_it_fails() {
    install();
    let scratch = common::Scratch::new("logs");
    let mut options = TableOptions::default().store("redis://127.0.0.1:1/0");
    options.store.timeout = Duration::from_millis(500);
    let table = Table::open(scratch.path("t"), &options).unwrap();
    let config = TaskConfig::new().global_rate(100.0);
    let api = table.task("api", &config).unwrap();
    let _ = REENTER.set(table.task("api", &config).unwrap());
    for _ in 0..5 {
        let err = api.pull_quota(10).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Store, "{err}");
    }
    let lines = lines_about("api");
    assert_eq!(lines.len(), 1, "repeats within 10 s, one line: {lines:?}");
    let slowest = SLOWEST_MS.load(Ordering::Relaxed);
    assert!(
        slowest < 1000,
        "the logger waited {slowest} ms for the lock"
    );
    let (level, target, message) = &lines[0];
    assert_eq!((*level, target.as_str()), (Level::Warn, "flowctrl::store"));
    assert!(
        message.contains("the quota store failed") && message.contains("127.0.0.1:1"),
        "{message}"
    );
    // The task, the process, the host and the store (redacted) are
    // structured fields too (`flowctrl manage --log-format json` writes
    // them as such); the text is unchanged.
    let fields = FIELDS.lock().unwrap();
    let (_, pairs) = fields.iter().find(|(m, _)| m == message).unwrap();
    let keys: Vec<_> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["task", "pid", "host", "store"], "{pairs:?}");
    let pid = std::process::id().to_string();
    assert_eq!(pairs[0].1, "api");
    assert_eq!(pairs[1].1, pid);
    assert_eq!(pairs[2].1.len(), 16, "the default host id: {pairs:?}");
    assert_eq!(pairs[3].1, "Redis at redis://127.0.0.1:1/0");
}

/// A real Redis, killed and restarted: a warning, then an info line.
#[test]
fn a_store_that_answers_again_is_an_info_line() {
    install();
    let mut redis = common::redis::RedisServer::start();
    let scratch = common::Scratch::new("logs-back");
    let options = common::options::host_options(&redis.url(), None);
    let table = Table::open(scratch.path("t"), &options).unwrap();
    let task = table
        .task("back", &TaskConfig::new().global_rate(1000.0))
        .unwrap();
    task.pull_quota(10).unwrap().unwrap();
    redis.kill();
    assert!(task.pull_quota(10).is_err());
    redis.restart();
    // A restarted server can refuse the first connection for a moment
    // (EAGAIN seen in a clean-clone run); repeats stay one warning line.
    let began = std::time::Instant::now();
    while let Err(e) = task.pull_quota(10) {
        assert!(
            began.elapsed().as_secs() < 5,
            "the store never answered again: {e}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let lines = lines_about("back");
    let kinds: Vec<_> = lines.iter().map(|(l, t, _)| (*l, t.as_str())).collect();
    let store = "flowctrl::store";
    assert_eq!(
        kinds,
        [(Level::Warn, store), (Level::Info, store)],
        "{lines:?}"
    );
    assert!(
        lines[1].2.ends_with("the quota store answers again"),
        "{lines:?}"
    );
}
