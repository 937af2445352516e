//! The child a case runs in: it opens a damaged table and uses whatever
//! opens, and its exit code says how that went.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{NAMES, options};
use crate::common::*;
use flowctrl::{Decision, ErrorKind, Outcome, Table, TaskConfig};

fn kind_code(kind: ErrorKind) -> i32 {
    match kind {
        ErrorKind::InvalidArgument => 10,
        ErrorKind::InvalidName => 11,
        ErrorKind::TableFull => 12,
        ErrorKind::TooManyProcesses => 13,
        ErrorKind::ConfigMismatch => 14,
        ErrorKind::Incompatible => 15,
        ErrorKind::Corrupt => 16,
        ErrorKind::Permission => 17,
        ErrorKind::Io => 18,
        ErrorKind::Timeout => 19,
        ErrorKind::Internal => 20,
        _ => 29,
    }
}

/// Exit codes of a case child (10..30: refused at open, by error kind).
/// Opened, and at least one acquire admitted a permit.
pub const RAN: i32 = 0;
pub const STOPPED_AT_TIMEOUT: i32 = 50;
pub const INTERNAL_ERROR: i32 = 51;
/// Opened, but no acquire admitted anything (every task refused or limited).
pub const NOTHING_ADMITTED: i32 = 52;
pub const PANICKED: i32 = 101;
pub const SECOND_PANICKED: i32 = 102;
pub const SECOND_CRASHED: i32 = 103;

/// Uses whatever opens. Runs in a forked child with a 5 s alarm: every wait
/// the library has is bounded (2 s for a claim or a configuration lock, 1 s
/// for busy lanes or a moving count), and the case stops at the first one
/// that expires, so a case that outlives the alarm hangs.
pub fn run_case(path: &Path, lanes: u32, concurrent: bool) -> i32 {
    let panic_note = note_path(path);
    let note = |text: &str| {
        let _ = std::fs::write(note_path(path), text);
    };
    std::panic::set_hook(Box::new(move |info| {
        let location = info.location().map(|l| l.to_string()).unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        let _ = std::fs::write(&panic_note, format!("panic at {location}: {message}"));
        raw_eprint(&format!("fuzz case panicked: {info}"));
        // A replayed case says where (a panic in `core` names no line of ours).
        if std::env::var_os("FLOWCTRL_FUZZ_REPLAY").is_some() {
            raw_eprint(&std::backtrace::Backtrace::force_capture().to_string());
        }
        // SAFETY: ends the case's process.
        unsafe { libc::_exit(PANICKED) }
    }));
    // SAFETY: schedules SIGALRM for this process only.
    unsafe { libc::alarm(5) };
    // First as `flowctrl` reads it: a read-only view of the damaged file,
    // before this process's handle reaps what reaping repairs (a view
    // reads a private copy, so nothing it does reaches the file).
    if let Ok(view) = flowctrl::View::open(path) {
        view_everything(&view);
    }
    let table = match Table::open(path, &options(lanes)) {
        Ok(t) => t,
        Err(e) => return kind_code(e.kind()),
    };
    // A second process using the table at the same time, SIGKILLed at the
    // end wherever it is, then reaped.
    let second = concurrent.then(|| SecondProcess(fork_guarded(|| second_process(path, lanes))));
    let mut internal = false;
    // Some acquire of this process admitted a permit.
    let mut admitted = false;
    // The case ends at a Timeout error (bounded waits add up otherwise).
    macro_rules! look {
        ($op:expr, $e:expr) => {
            match $e {
                Err(e) if e.kind() == ErrorKind::Timeout => {
                    note(&format!("Timeout in {}: {}", $op, e));
                    return STOPPED_AT_TIMEOUT;
                }
                Err(e) => {
                    if e.kind() == ErrorKind::Internal {
                        internal = true;
                        note(&format!("Internal error in {}: {}", $op, e));
                    }
                    None
                }
                Ok(v) => Some(v),
            }
        };
    }
    for name in NAMES.iter().chain(&["delta"]) {
        let Some(task) = look!("task", table.task(name, &TaskConfig::new())) else {
            continue;
        };
        let _ = task.settings();
        let mut permits = Vec::new();
        for n in [1, 2, 1, 3] {
            if let Some(Ok(p)) = look!("acquire_raw", task.acquire_raw(n)) {
                admitted = true;
                permits.push(p);
            }
        }
        let _ = task.stats();
        let _ = task.stats_by_process();
        look!("check", task.check());
        look!("settle_window", task.settle_window());
        let _ = task.limit();
        if let Some(Ok(mut p)) = look!(
            "acquire_raw_wait",
            task.acquire_raw_wait(1, Some(Duration::from_millis(5)))
        ) {
            admitted = true;
            look!(
                "release_raw_rtt",
                task.release_raw_rtt(&mut p, Outcome::Success, Some(Duration::from_millis(1)))
            );
        }
        let outcomes = [Outcome::Success, Outcome::Dropped, Outcome::Ignored];
        let copies = permits.clone();
        for (i, p) in permits.iter_mut().enumerate() {
            look!("release_raw", task.release_raw(p, outcomes[i % 3]));
        }
        if let Some(p) = copies.first() {
            look!(
                "release_raw of a copy",
                task.release_raw(&mut p.clone(), Outcome::Success)
            );
        }
        look!("update", task.update(&TaskConfig::new().max_concurrency(5)));
        if let Some(Decision::Admitted(p)) = look!("acquire", task.acquire(1)) {
            admitted = true;
            drop(p);
        }
        let _ = task.stats();
    }
    table.reap();
    let _ = table.check();
    // A second handle of this process attaches (and reaps) too.
    if let Some(second) = look!("second open", Table::open(path, &options(lanes))) {
        if let Some(task) = look!("second task", second.task(NAMES[0], &TaskConfig::new())) {
            if let Some(Decision::Admitted(p)) = look!("second acquire", task.acquire(1)) {
                drop(p);
            }
            look!("second check", task.check());
        }
        second.reap();
    }
    if let Some(second) = second {
        let exit = second.end();
        table.reap();
        for name in NAMES {
            if let Some(task) = look!(
                "task after the second process",
                table.task(name, &TaskConfig::new())
            ) {
                let _ = task.stats();
                look!("check after the second process", task.check());
            }
        }
        match exit {
            Exit::Code(PANICKED) => return SECOND_PANICKED,
            Exit::Code(_) => {}
            Exit::Signal(libc::SIGKILL) => {}
            Exit::Signal(sig) => {
                note(&format!("second process ended by signal {sig}"));
                return SECOND_CRASHED;
            }
            Exit::TimedOut => return SECOND_CRASHED,
        }
    }
    drop(table);
    match (internal, admitted) {
        (true, _) => INTERNAL_ERROR,
        (false, true) => RAN,
        (false, false) => NOTHING_ADMITTED,
    }
}

/// Every read a view offers, as the `flowctrl` command makes them.
fn view_everything(view: &flowctrl::View) {
    let Ok(copy) = view.snapshot() else {
        return;
    };
    for task in copy.tasks() {
        let _ = copy.processes_of(&task.name);
        let _ = copy.key_counters(&task.name);
    }
    let _ = copy.task(NAMES[0]);
    let _ = copy.processes();
    let _ = copy.balancers();
    let _ = copy.check();
    let _ = copy.lane_pool();
    let _ = view.tasks();
    #[cfg(feature = "metrics")]
    let _ = flowctrl::metrics::render(view);
}

/// A forked process racing the case's own operations.
struct SecondProcess(libc::pid_t);

impl SecondProcess {
    /// SIGKILLs it and says how it ended (SIGKILL if it was still running).
    fn end(self) -> Exit {
        let pid = self.0;
        std::mem::forget(self);
        signal(pid, libc::SIGKILL);
        wait_timeout(pid, Duration::from_secs(2))
    }
}

impl Drop for SecondProcess {
    fn drop(&mut self) {
        signal(self.0, libc::SIGKILL);
        let _ = wait_timeout(self.0, Duration::from_secs(2));
    }
}

fn second_process(path: &Path, lanes: u32) -> i32 {
    let Ok(table) = Table::open(path, &options(lanes)) else {
        return 0;
    };
    let began = Instant::now();
    while began.elapsed() < Duration::from_millis(30) {
        for name in NAMES {
            let Ok(task) = table.task(name, &TaskConfig::new()) else {
                continue;
            };
            match task.acquire_raw(1) {
                Ok(Ok(mut p)) => {
                    let _ = task.release_raw(&mut p, Outcome::Success);
                }
                Err(e) if e.kind() == ErrorKind::Timeout => return 0,
                _ => {}
            }
        }
    }
    0
}

/// Where a case child leaves a note on how it ended (panic, Timeout).
pub fn note_path(case: &Path) -> PathBuf {
    let mut name = case.as_os_str().to_owned();
    name.push(".note");
    PathBuf::from(name)
}

/// Takes the note a case left, if any.
pub fn take_note(case: &Path) -> String {
    let path = note_path(case);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    text
}
