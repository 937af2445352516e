//! The C face of logging: `fc_set_log_callback`, and stderr for programs
//! that set nothing. One `log::Log` for the process, installed on first
//! use, hands flowctrl's lines (targets `flowctrl::…`) to the callback, or
//! else writes them to stderr: warnings and errors unless `FLOWCTRL_LOG`
//! names another level (`off`: nothing), in the format
//! `FLOWCTRL_LOG_FORMAT` names (see `events::line`). The Rust crate's own face
//! installs nothing: a Rust program's logger is its own.
//!
//! The callback is read without a lock (an atomic pointer) and no lock is
//! held while it runs, so it may call any `fc_*` function, this one too.
//! Replacing it waits until the calls of the old one have returned (two
//! counters by epoch, as in RCU), so the caller may free its `user_data`
//! once `fc_set_log_callback` returns — except when called from the
//! callback itself, which cannot wait for its own call: the old sink then
//! waits in a graveyard for the next replacement that does wait.

use std::cell::Cell;
use std::ffi::{c_char, c_void};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use log::{Level, LevelFilter, Log, Metadata, Record};

use super::status::{boundary, fc_status};
use crate::events::line::{Format, line};
use crate::{Error, ErrorKind};

/// Log levels: a callback's `level` delivers that level and the more
/// severe ones (`FC_LOG_INFO` delivers errors, warnings and information).
pub const FC_LOG_OFF: u32 = 0;
/// Not used by flowctrl today; delivered with every level but `FC_LOG_OFF`.
pub const FC_LOG_ERROR: u32 = 1;
/// Something is wrong and limits are degraded: the quota store fails,
/// hosts disagree on a task's numbers, the table file was replaced.
pub const FC_LOG_WARN: u32 = 2;
/// Worth knowing: the store answers again, a store record was adopted or
/// removed, permits of a dead process were given back.
pub const FC_LOG_INFO: u32 = 3;
/// Not used by flowctrl today.
pub const FC_LOG_DEBUG: u32 = 4;
/// Not used by flowctrl today.
pub const FC_LOG_TRACE: u32 = 5;

/// One log line, as the callback receives it. Valid only during the call:
/// copy what you keep. The library may add fields at the end: `size` is
/// the struct's size as the library filled it, so a program built against
/// a newer header reads a newer field only if it lies within `size`.
#[repr(C)]
pub struct fc_log_params {
    /// `sizeof(fc_log_params)` of the library that filled it.
    pub size: u32,
    /// `FC_LOG_ERROR` … `FC_LOG_TRACE`.
    pub level: u32,
    /// What the line is about: `"flowctrl::store"` (the quota store: pulls,
    /// records, the census) or `"flowctrl::table"` (the table file, the
    /// reaper). NUL-terminated.
    pub target: *const c_char,
    /// `strlen(target)`.
    pub target_len: usize,
    /// The line, UTF-8 and NUL-terminated, without a newline (a NUL inside
    /// is shown as `\0`). Repeats are rate-limited: one line per kind of
    /// event and task (or table) per 10 s, the next one ending with
    /// "(and N more since)".
    pub message: *const c_char,
    /// `strlen(message)`.
    pub message_len: usize,
}

/// A log callback: `user_data` as given to `fc_set_log_callback`, and the
/// line. Called from any thread, flowctrl's own reaper thread included, and
/// possibly from several at once; never with a flowctrl lock held. It must
/// not unwind (a C++ exception ends the process) nor `longjmp` out.
pub type fc_log_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, params: *const fc_log_params)>;

/// Sends flowctrl's log lines of `level` and more severe ones
/// (`FC_LOG_WARN`: warnings and errors) to `callback`, called with
/// `user_data`; replaces the callback set before. `level` `FC_LOG_OFF`
/// turns every line off, stderr's included. `callback` NULL with another
/// level turns the callback off: lines then go where they go without a
/// callback — to stderr, warnings and errors, unless the environment
/// variable `FLOWCTRL_LOG` names another level (`off`, `error`, `warn`,
/// `info`, `debug` or `trace`), in the format `FLOWCTRL_LOG_FORMAT` names
/// (`text`, `logfmt` or `json`); both read once, at the first
/// `fc_table_open`, `fc_store_open` or `fc_set_log_callback`. While a
/// callback is set nothing goes to stderr.
///
/// When it returns, no call of the previous callback is running any more
/// and none will start: its `user_data` may be freed. Called from within a
/// callback it does not wait (it cannot wait for its own caller). Do not
/// call it while holding a lock your callback takes: it would wait for a
/// call that waits for you.
///
/// `FC_ERR_INVALID_ARGUMENT` for a level above `FC_LOG_TRACE`;
/// `FC_ERR_INTERNAL` when the process already has another logger of the
/// Rust `log` crate (a Rust program that links flowctrl statically and set
/// its own: its logger gets the lines). Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_set_log_callback(
    level: u32,
    callback: fc_log_callback,
    user_data: *mut c_void,
) -> fc_status {
    boundary(|| {
        let filter = filter_of(level)
            .ok_or_else(|| Error::invalid(format!("log level {level} is not one of FC_LOG_*")))?;
        from_env();
        SILENT.store(filter == LevelFilter::Off, SeqCst);
        if !install() {
            return Err(Error::new(
                ErrorKind::Internal,
                "this process has another logger of the log crate: it gets flowctrl's lines",
            ));
        }
        let new = match callback {
            Some(callback) if filter != LevelFilter::Off => Box::into_raw(Box::new(Sink {
                callback,
                user_data,
                filter,
                next: std::ptr::null_mut(),
            })),
            _ => std::ptr::null_mut(),
        };
        if DEPTH.try_with(Cell::get).unwrap_or(0) > 0 {
            // From a callback: a call of the old sink is running (ours).
            bury(SINK.swap(new, SeqCst));
        } else {
            let _writer = writer();
            let old = SINK.swap(new, SeqCst);
            // Swapped out before the flip: only readers of this epoch or
            // older (drained by earlier replacements) can have read them.
            let dead = GRAVEYARD.swap(std::ptr::null_mut(), SeqCst);
            let epoch = EPOCH.fetch_add(1, SeqCst);
            while RUNNING[epoch % 2].load(SeqCst) != 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
            // SAFETY: ours, swapped out, and every call that could have
            // read them has returned.
            unsafe {
                free_chain(old);
                free_chain(dead);
            }
        }
        update_max_level();
        Ok(fc_status::FC_OK)
    })
}

/// The name of a level ("WARN"; "unknown" for other values). Static; do
/// not free.
#[unsafe(no_mangle)]
pub extern "C" fn fc_log_level_str(level: u32) -> *const c_char {
    let name: &'static [u8] = match filter_of(level).and_then(|f| f.to_level()) {
        Some(Level::Error) => b"ERROR\0",
        Some(Level::Warn) => b"WARN\0",
        Some(Level::Info) => b"INFO\0",
        Some(Level::Debug) => b"DEBUG\0",
        Some(Level::Trace) => b"TRACE\0",
        None if level == FC_LOG_OFF => b"OFF\0",
        None => b"unknown\0",
    };
    name.as_ptr().cast()
}

fn filter_of(level: u32) -> Option<LevelFilter> {
    Some(match level {
        FC_LOG_OFF => LevelFilter::Off,
        FC_LOG_ERROR => LevelFilter::Error,
        FC_LOG_WARN => LevelFilter::Warn,
        FC_LOG_INFO => LevelFilter::Info,
        FC_LOG_DEBUG => LevelFilter::Debug,
        FC_LOG_TRACE => LevelFilter::Trace,
        _ => return None,
    })
}

/// Reads `FLOWCTRL_LOG` and `FLOWCTRL_LOG_FORMAT` once per process and
/// installs the logger (lines to stderr while no callback is set; warnings
/// and errors unless `FLOWCTRL_LOG` says otherwise). Called by the C
/// constructors: a C program that sets nothing gets its warnings. An
/// invalid value is one line on stderr and the default.
pub(super) fn from_env() {
    if ENV_READ.swap(true, SeqCst) {
        return;
    }
    if let Some(value) = std::env::var_os("FLOWCTRL_LOG_FORMAT") {
        let value = value.to_string_lossy();
        match Format::parse(&value) {
            Some(format) => FORMAT.store(format as u8, SeqCst),
            None => write_stderr(&format!(
                "flowctrl[{}]: FLOWCTRL_LOG_FORMAT={value:?} is not one of text, logfmt, \
                 json; writing text\n",
                std::process::id()
            )),
        }
    }
    let filter = match std::env::var_os("FLOWCTRL_LOG") {
        None => LevelFilter::Warn,
        Some(value) => {
            let value = value.to_string_lossy();
            value
                .to_ascii_lowercase()
                .parse::<LevelFilter>()
                .unwrap_or_else(|_| {
                    write_stderr(&format!(
                        "flowctrl[{}]: FLOWCTRL_LOG={value:?} is not one of off, error, warn, \
                         info, debug, trace; logging warnings and errors\n",
                        std::process::id()
                    ));
                    LevelFilter::Warn
                })
        }
    };
    ENV_FILTER.store(filter as usize, SeqCst);
    // Off needs no logger; a foreign logger keeps the lines.
    if filter != LevelFilter::Off && install() {
        update_max_level();
    }
}

struct Sink {
    callback: unsafe extern "C" fn(*mut c_void, *const fc_log_params),
    user_data: *mut c_void,
    filter: LevelFilter,
    /// The next one in the graveyard.
    next: *mut Sink,
}

/// Sinks replaced from within a callback, freed by the next replacement
/// that waits out its readers (reachable meanwhile: no leak reported).
static GRAVEYARD: AtomicPtr<Sink> = AtomicPtr::new(std::ptr::null_mut());

/// # Safety
/// `sink` is NULL or a chain of sinks of `Box::into_raw` nobody can read.
unsafe fn free_chain(mut sink: *mut Sink) {
    while !sink.is_null() {
        // SAFETY: per the contract.
        let boxed = unsafe { Box::from_raw(sink) };
        sink = boxed.next;
    }
}

fn bury(sink: *mut Sink) {
    if sink.is_null() {
        return;
    }
    let mut top = GRAVEYARD.load(SeqCst);
    loop {
        // SAFETY: swapped out of SINK by us: nobody else writes it.
        unsafe { (*sink).next = top };
        match GRAVEYARD.compare_exchange(top, sink, SeqCst, SeqCst) {
            Ok(_) => return,
            Err(now) => top = now,
        }
    }
}

/// The callback in force (NULL: none). Replaced only under [`writer`].
static SINK: AtomicPtr<Sink> = AtomicPtr::new(std::ptr::null_mut());
/// Calls running per epoch parity: a replacement flips the epoch and waits
/// for the old parity to drain.
static EPOCH: AtomicUsize = AtomicUsize::new(0);
static RUNNING: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
/// Serialises replacements (a spin lock: nothing here may block in a child
/// after `fork`, see [`after_fork_in_child`]).
static WRITING: AtomicBool = AtomicBool::new(false);
/// The level of stderr lines (a `LevelFilter` as usize; 0 = off), set by
/// [`from_env`]: `FLOWCTRL_LOG`, else warn.
static ENV_FILTER: AtomicUsize = AtomicUsize::new(0);
/// The program set `FC_LOG_OFF`: no line goes to stderr either.
static SILENT: AtomicBool = AtomicBool::new(false);
/// `FLOWCTRL_LOG_FORMAT` (a [`Format`] as u8).
static FORMAT: AtomicU8 = AtomicU8::new(Format::Text as u8);
static ENV_READ: AtomicBool = AtomicBool::new(false);
/// 0 = not tried, 1 = installing, 2 = ours, 3 = another logger's.
static INSTALLED: AtomicU8 = AtomicU8::new(0);

thread_local! {
    /// Callbacks running on this thread.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

struct Writer;

fn writer() -> Writer {
    while WRITING
        .compare_exchange(false, true, SeqCst, SeqCst)
        .is_err()
    {
        std::thread::sleep(Duration::from_micros(50));
    }
    Writer
}

impl Drop for Writer {
    fn drop(&mut self) {
        WRITING.store(false, SeqCst);
    }
}

/// Whether the process's logger is ours (installing it if none is).
fn install() -> bool {
    loop {
        match INSTALLED.compare_exchange(0, 1, SeqCst, SeqCst) {
            Ok(_) => {
                let ours = log::set_logger(&LOGGER).is_ok();
                if ours {
                    // SAFETY: registers a handler that touches atomics only.
                    unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
                }
                INSTALLED.store(if ours { 2 } else { 3 }, SeqCst);
                return ours;
            }
            Err(1) => std::thread::yield_now(),
            Err(state) => return state == 2,
        }
    }
}

/// In a forked child only the forking thread lives: no other thread's call
/// is running and no replacement is half-way.
extern "C" fn after_fork_in_child() {
    for running in &RUNNING {
        running.store(0, SeqCst);
    }
    WRITING.store(false, SeqCst);
}

/// The most verbose level anyone wants: the `log` crate filters the rest
/// before formatting anything.
fn update_max_level() {
    loop {
        let reading = reading();
        let sink = SINK.load(SeqCst);
        // SAFETY: read while counted as reading (see `dispatch`).
        let callback = if sink.is_null() {
            LevelFilter::Off
        } else {
            unsafe { (*sink).filter }
        };
        drop(reading);
        log::set_max_level(callback.max(env_filter()));
        if SINK.load(SeqCst) == sink {
            return;
        }
    }
}

fn env_filter() -> LevelFilter {
    if SILENT.load(SeqCst) {
        return LevelFilter::Off;
    }
    match ENV_FILTER.load(SeqCst) {
        0 => LevelFilter::Off,
        1 => LevelFilter::Error,
        2 => LevelFilter::Warn,
        3 => LevelFilter::Info,
        4 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    }
}

struct CLogger;
static LOGGER: CLogger = CLogger;

fn ours(target: &str) -> bool {
    target == "flowctrl" || target.starts_with("flowctrl::")
}

impl Log for CLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        ours(metadata.target()) && metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        // A panic in a Display impl must not end the reaper thread or
        // reach the caller's frames.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dispatch(record)));
    }

    fn flush(&self) {}
}

/// Counts this thread in the current epoch's readers until dropped.
struct Reading(usize);

fn reading() -> Reading {
    loop {
        let epoch = EPOCH.load(SeqCst);
        RUNNING[epoch % 2].fetch_add(1, SeqCst);
        if EPOCH.load(SeqCst) == epoch {
            return Reading(epoch);
        }
        RUNNING[epoch % 2].fetch_sub(1, SeqCst);
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        RUNNING[self.0 % 2].fetch_sub(1, SeqCst);
    }
}

fn dispatch(record: &Record<'_>) {
    let level = record.level();
    // "target\0message\0" in one buffer.
    let mut text = String::with_capacity(160);
    text.push_str(record.target());
    text.push('\0');
    let _ = write!(NoNul(&mut text), "{}", record.args());
    let message_len = text.len() - record.target().len() - 1;
    text.push('\0');
    {
        let _reading = reading();
        let sink = SINK.load(SeqCst);
        if !sink.is_null() {
            // SAFETY: a sink read while counted as reading is freed only
            // after this reading ends (see `fc_set_log_callback`).
            let sink = unsafe { &*sink };
            if level <= sink.filter {
                let params = fc_log_params {
                    size: size_of::<fc_log_params>() as u32,
                    level: level as u32,
                    target: text.as_ptr().cast(),
                    target_len: record.target().len(),
                    message: text[record.target().len() + 1..].as_ptr().cast(),
                    message_len,
                };
                let _ = DEPTH.try_with(|d| d.set(d.get() + 1));
                // SAFETY: the caller's function, with its own user_data, and
                // params valid for the call.
                unsafe { (sink.callback)(sink.user_data, &params) };
                let _ = DEPTH.try_with(|d| d.set(d.get() - 1));
            }
            return;
        }
    }
    if level <= env_filter() {
        let message = &text[record.target().len() + 1..text.len() - 1];
        let time = crate::events::rfc3339(std::time::SystemTime::now());
        let format = Format::from_u8(FORMAT.load(SeqCst));
        write_stderr(&line(format, record, message, &time));
    }
}

/// Writes a NUL as `\0`: C reads the message up to its first NUL.
struct NoNul<'a>(&'a mut String);

impl std::fmt::Write for NoNul<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        for (i, part) in s.split('\0').enumerate() {
            if i > 0 {
                self.0.push_str("\\0");
            }
            self.0.push_str(part);
        }
        Ok(())
    }
}

/// One `write(2)` per line where the kernel takes it whole, so the lines
/// of processes sharing stderr do not interleave; no lock (after `fork`,
/// std's stderr lock could be held by a thread that is gone).
fn write_stderr(line: &str) {
    let mut rest = line.as_bytes();
    while !rest.is_empty() {
        // SAFETY: a valid buffer of `rest.len()` bytes.
        let n = unsafe { libc::write(2, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        rest = &rest[n as usize..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_convert_and_nuls_are_shown() {
        assert_eq!(filter_of(FC_LOG_WARN), Some(LevelFilter::Warn));
        assert_eq!(filter_of(6), None);
        assert_eq!(Level::Warn as u32, FC_LOG_WARN);
        assert_eq!(Level::Trace as u32, FC_LOG_TRACE);
        let name = |l| unsafe { std::ffi::CStr::from_ptr(fc_log_level_str(l)) };
        assert_eq!(name(FC_LOG_INFO).to_bytes(), b"INFO");
        assert_eq!(name(FC_LOG_OFF).to_bytes(), b"OFF");
        assert_eq!(name(77).to_bytes(), b"unknown");
        let mut s = String::new();
        write!(NoNul(&mut s), "a\0b").unwrap();
        assert_eq!(s, "a\\0b");
    }
}
