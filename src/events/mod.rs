//! Events worth an operator's attention, logged through the `log` crate at
//! most once per kind and subject (a task, a table) per [`INTERVAL_MS`] in
//! each process; the next line of the kind carries the count of those left
//! out ("… (and 41 more since)"), so an outage is one line per task every
//! ten seconds, not one per request.
//!
//! Nothing here runs on the request path's fast branch: the call sites are
//! pulls, reaps, record changes and checks. When no logger wants the level
//! (`log::max_level()`, one atomic load) an event costs nothing more.
//!
//! Lines are never written while a lock is held: a site under a lock holds
//! a [`Defer`], and the lines wait in a thread-local queue until the last
//! `Defer` of the thread is dropped (after the lock). A logger that calls
//! back into flowctrl (a C callback, Python's handlers) then finds every
//! lock free.
//!
//! The limiter is a fixed table of atomics, not a map behind a mutex: no
//! allocation, and a `fork()` while another thread was inside it leaves
//! nothing locked in the child. Under races its counts are approximate.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use log::Level;

mod limiter;
pub(crate) mod line;
mod time;
use limiter::{ARMED, Limiter};
pub use time::rfc3339;

/// One line per event kind and subject per this many milliseconds.
pub(crate) const INTERVAL_MS: u64 = 10_000;

/// The target of the quota store's events (pulls, records, the census).
pub(crate) const STORE: &str = "flowctrl::store";
/// The target of the table's events (the file, the reaper).
pub(crate) const TABLE: &str = "flowctrl::table";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A pull or a probe of the store failed.
    StoreFailed,
    /// The store answers again.
    StoreRecovered,
    /// Hosts disagree on a task's global_rate or slice_ms.
    ConfigConflict,
    /// Another table pulls under this host's id.
    HostConflict,
    RecordAdopted,
    RecordRemoved,
    RecordRefused,
    /// The census holds a record flowctrl does not write.
    CensusSkipped,
    /// The table file was deleted or replaced while in use.
    TableReplaced,
    /// Permits of a dead process were given back.
    Reclaimed,
    /// No reaper thread could be started.
    NoReaper,
    /// A version of the config file was applied to the table.
    ConfigApplied,
    /// A version of the config file was refused (the one in force is kept).
    ConfigRefused,
    /// The config file is gone (its last good version is kept).
    ConfigGone,
}

impl Event {
    pub fn level(self) -> Level {
        match self {
            Event::StoreRecovered | Event::RecordAdopted | Event::RecordRemoved => Level::Info,
            Event::Reclaimed | Event::ConfigApplied => Level::Info,
            _ => Level::Warn,
        }
    }

    pub fn target(self) -> &'static str {
        match self {
            Event::TableReplaced
            | Event::Reclaimed
            | Event::NoReaper
            | Event::ConfigApplied
            | Event::ConfigRefused
            | Event::ConfigGone => TABLE,
            _ => STORE,
        }
    }

    /// What its subject is, as the name of the structured field that
    /// carries it: a task's name, a table's path or a config file's path.
    pub fn subject_key(self) -> &'static str {
        match self {
            Event::TableReplaced | Event::NoReaper => "table",
            Event::ConfigApplied | Event::ConfigRefused | Event::ConfigGone => "file",
            _ => "task",
        }
    }

    /// Whether a logger may want it: no limiter, no formatting otherwise.
    pub fn enabled(self) -> bool {
        self.level() <= log::max_level()
    }
}

/// Structured fields of a line beyond its subject, for loggers that read
/// them (the `log` crate's key-values: `flowctrl manage --log-format
/// json`, the C library's stderr formats); the C callback gets the text
/// alone. Every line also carries `pid` (the process that wrote it) and,
/// within an [`Origin`], its `host` and `store`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Extra<'a> {
    /// The dead process the event is about (`dead_pid`).
    pub dead_pid: Option<u32>,
    /// The host id the event is about, when no [`Origin`] names it.
    pub host: Option<&'a str>,
}

/// Where a table's store lines come from: its quota host id and its store
/// as [`crate::quota`] describes it (redacted: never a password).
#[derive(Debug)]
pub(crate) struct Origin {
    pub host: String,
    pub store: String,
}

/// Lines of this thread carry `origin`'s fields until the guard drops (the
/// origin before it comes back). Nothing is touched while no logger wants
/// a line.
pub(crate) fn within(origin: &Arc<Origin>) -> Within {
    if log::max_level() == log::LevelFilter::Off {
        return Within(None);
    }
    let before = ORIGIN.try_with(|o| o.replace(Some(Arc::clone(origin))));
    Within(before.ok())
}

/// Restores the thread's previous [`Origin`] when dropped (`None`: it
/// replaced none).
pub(crate) struct Within(Option<Option<Arc<Origin>>>);

impl Drop for Within {
    fn drop(&mut self) {
        if let Some(before) = self.0.take() {
            let _ = ORIGIN.try_with(|o| o.replace(before));
        }
    }
}

/// The thread's origin, cloned out: no borrow is held while a logger runs
/// (it may call back into flowctrl, which may enter another one).
fn origin() -> Option<Arc<Origin>> {
    ORIGIN.try_with(|o| o.borrow().clone()).ok().flatten()
}

/// Logs `event` about `subject` unless this process logged one of the same
/// kind and subject within [`INTERVAL_MS`].
pub(crate) fn report(event: Event, subject: &str, message: fmt::Arguments<'_>) {
    report_with(event, subject, Extra::default(), message);
}

/// [`report`], with structured fields beyond the subject.
pub(crate) fn report_with(
    event: Event,
    subject: &str,
    extra: Extra<'_>,
    message: fmt::Arguments<'_>,
) {
    if !event.enabled() {
        return;
    }
    let key = key(event, subject);
    if let Some(left_out) = LIMITER.admit(key, now_ms()) {
        if event == Event::StoreFailed {
            LIMITER.arm(key, now_ms());
        }
        emit(event, subject, extra, message, left_out);
    }
}

/// Logs that the store answers again for `subject`: always when this
/// process logged a failure of it since its last such line (so its last
/// word is not "failing" once the store is back), else when `observed` (it
/// saw the task's shared state leave "failed"), rate-limited. Cheap when
/// neither: every successful pull calls it.
pub(crate) fn recovered(subject: &str, observed: bool, message: fmt::Arguments<'_>) {
    let event = Event::StoreRecovered;
    if !event.enabled() || (!observed && ARMED.load(Ordering::Relaxed) == 0) {
        return;
    }
    let now = now_ms();
    let key = key(event, subject);
    let extra = Extra::default();
    if LIMITER.disarm(self::key(Event::StoreFailed, subject)) {
        emit(event, subject, extra, message, LIMITER.force(key, now));
    } else if observed && let Some(left_out) = LIMITER.admit(key, now) {
        emit(event, subject, extra, message, left_out);
    }
}

fn emit(event: Event, subject: &str, extra: Extra<'_>, message: fmt::Arguments<'_>, left_out: u64) {
    let (level, target) = (event.level(), event.target());
    let origin = origin();
    let host = extra.host.or(origin.as_deref().map(|o| o.host.as_str()));
    let store = origin.as_deref().map(|o| o.store.as_str());
    let queued = QUEUE.try_with(|queue| {
        if HELD.get() == 0 {
            return false;
        }
        queue.borrow_mut().push(Queued {
            level,
            target,
            line: format!("{message}{}", LeftOut(left_out)),
            subject_key: event.subject_key(),
            subject: subject.to_string(),
            dead_pid: extra.dead_pid,
            host: host.map(str::to_string),
            store: store.map(str::to_string),
        });
        true
    });
    if queued != Ok(true) {
        let fields = Fields {
            subject_key: event.subject_key(),
            subject,
            dead_pid: extra.dead_pid,
            host,
            store,
        };
        write(
            level,
            target,
            format_args!("{message}{}", LeftOut(left_out)),
            &fields,
        );
    }
}

/// A line's structured fields: its subject under its key, then `pid`,
/// `dead_pid`, `host` and `store` where known.
struct Fields<'a> {
    subject_key: &'static str,
    subject: &'a str,
    dead_pid: Option<u32>,
    host: Option<&'a str>,
    store: Option<&'a str>,
}

impl log::kv::Source for Fields<'_> {
    fn visit<'kvs>(
        &'kvs self,
        visitor: &mut dyn log::kv::VisitSource<'kvs>,
    ) -> Result<(), log::kv::Error> {
        use log::kv::{Key, Value};
        visitor.visit_pair(Key::from_str(self.subject_key), Value::from(self.subject))?;
        visitor.visit_pair(Key::from_str("pid"), Value::from(std::process::id()))?;
        if let Some(pid) = self.dead_pid {
            visitor.visit_pair(Key::from_str("dead_pid"), Value::from(pid))?;
        }
        if let Some(host) = self.host {
            visitor.visit_pair(Key::from_str("host"), Value::from(host))?;
        }
        if let Some(store) = self.store {
            visitor.visit_pair(Key::from_str("store"), Value::from(store))?;
        }
        Ok(())
    }
}

/// One line to the logger, with its fields as key-values.
fn write(level: Level, target: &str, args: fmt::Arguments<'_>, fields: &Fields<'_>) {
    if level > log::max_level() {
        return;
    }
    log::logger().log(
        &log::Record::builder()
            .args(args)
            .level(level)
            .target(target)
            .module_path_static(Some(module_path!()))
            .file_static(Some(file!()))
            .key_values(fields)
            .build(),
    );
}

/// A line held back by a [`Defer`].
#[derive(Clone, Debug, PartialEq)]
struct Queued {
    level: Level,
    target: &'static str,
    line: String,
    subject_key: &'static str,
    subject: String,
    dead_pid: Option<u32>,
    host: Option<String>,
    store: Option<String>,
}

/// " (and N more since)" after a line that stands for N left out.
struct LeftOut(u64);

impl fmt::Display for LeftOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => Ok(()),
            n => write!(f, " (and {n} more since)"),
        }
    }
}

thread_local! {
    /// How many [`Defer`]s this thread holds.
    static HELD: Cell<u32> = const { Cell::new(0) };
    static QUEUE: RefCell<Vec<Queued>> = const { RefCell::new(Vec::new()) };
    /// The origin of this thread's lines (see [`within`]).
    static ORIGIN: RefCell<Option<Arc<Origin>>> = const { RefCell::new(None) };
}

/// Holds this thread's lines back until dropped (the last one writes them):
/// taken before a lock, so it is dropped after it.
pub(crate) struct Defer(std::marker::PhantomData<*const ()>);

pub(crate) fn defer() -> Defer {
    let _ = HELD.try_with(|held| held.set(held.get() + 1));
    Defer(std::marker::PhantomData)
}

impl Drop for Defer {
    fn drop(&mut self) {
        let last = HELD.try_with(|held| {
            held.set(held.get().saturating_sub(1));
            held.get() == 0
        });
        if last != Ok(true) {
            return;
        }
        // Taken whole: a logger that reports again pushes onto a new queue.
        let lines = QUEUE.try_with(|q| std::mem::take(&mut *q.borrow_mut()));
        for q in lines.unwrap_or_default() {
            let fields = Fields {
                subject_key: q.subject_key,
                subject: &q.subject,
                dead_pid: q.dead_pid,
                host: q.host.as_deref(),
                store: q.store.as_deref(),
            };
            write(q.level, q.target, format_args!("{}", q.line), &fields);
        }
    }
}

/// FNV-1a of the kind and the subject; never 0 (a free slot).
fn key(event: Event, subject: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in std::iter::once(event as u8).chain(subject.bytes()) {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h.max(1)
}

/// The monotonic clock in ms, never 0 (a slot that never logged).
fn now_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000).max(1)
}

static LIMITER: Limiter = Limiter::new(INTERVAL_MS);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_line_is_followed_by_a_recovery_line() {
        let limiter = Limiter::new(10_000);
        let (fail, back) = (
            key(Event::StoreFailed, "x"),
            key(Event::StoreRecovered, "x"),
        );
        assert!(!limiter.disarm(fail), "nothing logged yet");
        limiter.admit(fail, 1);
        limiter.arm(fail, 1);
        assert_eq!(limiter.admit(back, 2), Some(0));
        assert!(limiter.disarm(fail) && !limiter.disarm(fail), "once");
        // Flapping: the next failure is left out, and so is its recovery.
        assert_eq!(limiter.admit(fail, 3), None);
        assert!(!limiter.disarm(fail));
        assert_eq!(limiter.admit(back, 4), None);
        assert_eq!(limiter.force(back, 5), 1, "a forced line still counts");
    }

    #[test]
    fn lines_wait_for_the_last_defer() {
        let outer = defer();
        let inner = defer();
        let extra = Extra {
            dead_pid: Some(7),
            host: None,
        };
        emit(Event::NoReaper, "/t", extra, format_args!("deferred"), 3);
        drop(inner);
        let queued = QUEUE.with(|q| q.borrow().clone());
        assert_eq!(
            queued,
            [Queued {
                level: Level::Warn,
                target: TABLE,
                line: "deferred (and 3 more since)".to_string(),
                subject_key: "table",
                subject: "/t".to_string(),
                dead_pid: Some(7),
                host: None,
                store: None,
            }]
        );
        drop(outer);
        assert!(QUEUE.with(|q| q.borrow().is_empty()), "written at the last");
    }
}
