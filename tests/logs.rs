//! The Rust face of logging: flowctrl's events reach the `log` logger the
//! program installed, under the documented target and level, rate-limited
//! per kind and task, and written after the pull lock is released (the
//! logger here takes it again). The store is a closed port: every pull
//! fails at once.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use flowctrl::{Table, TableOptions, Task, TaskConfig};
use log::{Level, LevelFilter, Log, Metadata, Record};

static LINES: Mutex<Vec<(Level, String, String)>> = Mutex::new(Vec::new());
/// The task the logger pulls for while it logs: its pull lock must be free.
static REENTER: OnceLock<Task> = OnceLock::new();
static SLOWEST: AtomicU64 = AtomicU64::new(0);

struct Capture;

impl Log for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &Record<'_>) {
        if let Some(task) = REENTER.get() {
            // Fails at once (a closed port) unless the lock is still held:
            // then it waits until the lock counts as stale (over 2 s here).
            let began = Instant::now();
            let err = task.pull_quota(1).unwrap_err();
            assert_eq!(err.kind(), flowctrl::ErrorKind::Store, "{err}");
            SLOWEST.fetch_max(began.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
        let line = (
            record.level(),
            record.target().to_string(),
            record.args().to_string(),
        );
        LINES.lock().unwrap().push(line);
    }

    fn flush(&self) {}
}

#[test]
fn a_failing_store_is_one_warning_per_task_however_often_it_fails() {
    log::set_logger(&Capture).unwrap();
    log::set_max_level(LevelFilter::Info);
    let scratch = common::Scratch::new("logs");
    let mut options = TableOptions::default().store("redis://127.0.0.1:1/0");
    options.store.timeout = Duration::from_millis(500);
    let table = Table::open(scratch.path("t"), &options).unwrap();
    let config = TaskConfig::new().global_rate(100.0);
    let api = table.task("api", &config).unwrap();
    let _ = REENTER.set(table.task("api", &config).unwrap());
    for _ in 0..5 {
        let err = api.pull_quota(10).unwrap_err();
        assert_eq!(err.kind(), flowctrl::ErrorKind::Store, "{err}");
    }
    let lines = LINES.lock().unwrap().clone();
    let about = |task: &str| {
        lines
            .iter()
            .filter(|(_, _, m)| m.starts_with(&format!("task {task:?}:")))
            .collect::<Vec<_>>()
    };
    let api_lines = about("api");
    assert_eq!(
        api_lines.len(),
        1,
        "repeated failures within 10 s, one line: {lines:?}"
    );
    let slowest = SLOWEST.load(Ordering::Relaxed);
    assert!(
        slowest < 1000,
        "the logger waited {slowest} ms for the pull lock"
    );
    let (level, target, message) = api_lines[0];
    assert_eq!((*level, target.as_str()), (Level::Warn, "flowctrl::store"));
    assert!(
        message.contains("the quota store failed") && message.contains("127.0.0.1:1"),
        "{message}"
    );
}
