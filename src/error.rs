//! The one error type of the crate. Each face (C, Python) maps it exactly once.

use std::fmt;

/// What kind of failure an [`Error`] is. The C face turns each kind into one
/// `fc_status`, the Python face into one exception class. Exhaustive on
/// purpose: both faces match every kind, so a new kind cannot silently
/// become an internal error there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// An argument is out of range or does not fit the task (n = 0, n above the burst, ...).
    InvalidArgument,
    /// A task name is empty, longer than 63 bytes, or not printable UTF-8.
    InvalidName,
    /// Every task slot of the table is taken.
    TableFull,
    /// Every attachment slot of the table is taken by a live process.
    TooManyProcesses,
    /// The task exists with a different configuration than the one asked for.
    ConfigMismatch,
    /// The file is a flowctrl table of another layout version or geometry.
    Incompatible,
    /// The file is not a flowctrl table, or is truncated or damaged.
    Corrupt,
    /// The operating system refused access to the file.
    Permission,
    /// Any other I/O failure.
    Io,
    /// Another process held a claim (a task slot being registered, a
    /// configuration being written) past the documented deadline.
    Timeout,
    /// The quota store (Redis) could not be reached, timed out, or answered
    /// with something that is not quota. Decisions never fail for this
    /// reason (they fall back to local limits); only an explicit pull does.
    Store,
    /// A bug in flowctrl (a caught panic, a broken invariant).
    Internal,
}

/// The longest message, in characters.
const MESSAGE_MAX: usize = 1000;

/// An error with its kind and a human-readable reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error of `kind`; its message is one line of printable text: a
    /// line break or tab a library's or the store's text holds becomes a
    /// space, any other control character its escape (`\u{1b}`), so every
    /// face prints it as one line of a log, and a terminal showing it runs
    /// no escape sequence whatever value it echoes. Past 1,000 characters
    /// it is cut (its length said): values are echoed cut already, this
    /// bounds what a message may grow to.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.len() > MESSAGE_MAX {
            message = cut(&message, MESSAGE_MAX);
        }
        if message.contains(char::is_control) {
            message = message
                .replace("\r\n", " ")
                .chars()
                .map(|c| match c {
                    '\n' | '\r' | '\t' => " ".to_string(),
                    c if c.is_control() => c.escape_unicode().to_string(),
                    c => c.to_string(),
                })
                .collect();
        }
        Self { kind, message }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    pub(crate) fn corrupt(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Corrupt, message)
    }

    /// Wraps an OS error, naming what was being done, and telling a permission
    /// problem apart from other I/O failures.
    pub(crate) fn io(context: impl fmt::Display, err: std::io::Error) -> Self {
        let kind = match err.kind() {
            std::io::ErrorKind::PermissionDenied => ErrorKind::Permission,
            _ => ErrorKind::Io,
        };
        Self::new(kind, format!("{context}: {err}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A message part cut at `max` characters, its length in bytes said when
/// it was.
pub(crate) fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max).collect();
    format!("{head}… ({} bytes)", text.len())
}
