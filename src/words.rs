//! The crate's vocabulary: the words every feature and face speaks —
//! which limit refused, how a request ended, what a name may be. They live
//! here, at the root, so no feature imports another one for a word.

use crate::error::{Error, ErrorKind, Result};

/// The longest name (of a task, a balancer, a backend address) in bytes.
pub const NAME_MAX: usize = 63;

/// Which limit turned a request away.
/// Exhaustive on purpose: each face maps every variant, so a new one is a
/// compile error there rather than a silent fallback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limited {
    /// The host's local rate for the task is used up.
    Local,
    /// The host's concurrency cap for the task is reached.
    Concurrency,
    /// The cluster's quota for the current slice is used up (or, while the
    /// store fails, the fallback rate).
    Global,
}

/// How a request ended; reported at release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// It completed; its round-trip time is a latency sample.
    Success,
    /// It timed out or was shed: a sign the backend is struggling.
    Dropped,
    /// It ended before a meaningful round-trip time existed (no sample).
    Ignored,
}

impl Outcome {
    /// The outcome named `"success"`, `"dropped"` or `"ignored"`, as the
    /// faces spell it.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "success" => Ok(Self::Success),
            "dropped" => Ok(Self::Dropped),
            "ignored" => Ok(Self::Ignored),
            other => Err(Error::invalid(format!(
                "outcome must be 'success', 'dropped' or 'ignored', not {}",
                echo(other)
            ))),
        }
    }
}

/// In which order waiting acquires of a task are admitted, host-wide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WaitOrder {
    /// First come, first served.
    #[default]
    Fifo,
    /// The newest waiter first: under overload the requests served are the
    /// fresh ones, and the old ones time out.
    Lifo,
}

impl WaitOrder {
    /// The order named `"fifo"` or `"lifo"`, as the faces spell it.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "fifo" => Ok(Self::Fifo),
            "lifo" => Ok(Self::Lifo),
            other => Err(Error::invalid(format!(
                "wait_order must be 'fifo' or 'lifo', not {}",
                echo(other)
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Fifo => "fifo",
            Self::Lifo => "lifo",
        }
    }
}

/// Checks a name (`what` says whose: "task name", "balancer name"): 1–63
/// bytes of UTF-8, not blank, with no control, format or invisible
/// characters (bidi overrides, zero-width characters, BOM): two names that
/// print the same must be the same name. Nor `{` or `}`: a task's name is
/// the Redis Cluster hash tag of its keys (`{<task>}`), and a brace in it
/// ends the tag early or opens another, putting a task's keys in slots
/// that one script call cannot span (CROSSSLOT on every pull).
pub fn validate_name(name: &str, what: &str) -> Result<()> {
    let invalid = |why: String| Err(Error::new(ErrorKind::InvalidName, why));
    if name.is_empty() || name.len() > NAME_MAX {
        return invalid(format!(
            "{what} must be 1..={NAME_MAX} bytes, not {} ({})",
            name.len(),
            echo(name)
        ));
    }
    if let Some(c) = name.chars().find(|c| c.is_control() || is_invisible(*c)) {
        return invalid(format!(
            "{what} must be printable, found U+{:04X} in {}",
            c as u32,
            echo(name)
        ));
    }
    if let Some(c) = name.chars().find(|c| matches!(c, '{' | '}')) {
        return invalid(format!(
            "{what} must not hold {c:?} (it would break the Redis Cluster hash tag of its \
             keys): {}",
            echo(name)
        ));
    }
    if name.chars().all(char::is_whitespace) {
        return invalid(format!("{what} must not be blank"));
    }
    Ok(())
}

/// The fields of a slice's key that are not a host's census record: a host
/// id spelt like one would overwrite the key's own.
pub(crate) const SLICE_FIELDS: [&str; 5] = ["left", "quota", "demand", "fair", "back"];

/// Checks a host id (`StoreOptions::host_id`): 1–63 bytes, printable, no
/// whitespace, no `{` or `}`, and none of the slice key's own field names
/// ([`SLICE_FIELDS`]): it is a field of every slice key it pulls from and
/// a word of the census.
pub(crate) fn validate_host_id(id: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::invalid(format!(
            "host_id must be {why}, not {} ({} bytes)",
            echo(id),
            id.len()
        )))
    };
    if id.is_empty() || id.len() > NAME_MAX {
        return bad(&format!("1..={NAME_MAX} bytes"));
    }
    if id
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || is_invisible(c) || matches!(c, '{' | '}'))
    {
        return bad("printable, without spaces, `{` or `}`");
    }
    if SLICE_FIELDS.contains(&id) {
        return bad(&format!("none of the slice key's fields {SLICE_FIELDS:?}"));
    }
    Ok(())
}

/// The longest key prefix, in bytes.
pub const PREFIX_MAX: usize = 128;

/// Checks a key prefix (`StoreOptions::key_prefix`): up to 128 bytes,
/// printable, no whitespace, no `{` or `}`. Every key is
/// `<prefix>{<task>}...`: Redis Cluster hashes the first `{...}` of a key,
/// so a brace in the prefix makes the prefix (or part of it) the tag and
/// puts every task in one slot, or splits one task's keys over slots.
pub(crate) fn validate_key_prefix(prefix: &str) -> Result<()> {
    if prefix.len() > PREFIX_MAX
        || prefix.chars().any(|c| {
            c.is_control() || c.is_whitespace() || is_invisible(c) || matches!(c, '{' | '}')
        })
    {
        return Err(Error::invalid(format!(
            "key_prefix must be at most {PREFIX_MAX} printable bytes without spaces, `{{` or \
             `}}` (a brace breaks the Redis Cluster hash tags of the keys), not {} ({} bytes)",
            echo(prefix),
            prefix.len()
        )));
    }
    Ok(())
}

/// The most of a value an error message echoes, in characters.
const ECHO_MAX: usize = 40;

/// A value for an error message or a log line: quoted with every control
/// character escaped (a message is one line, and a terminal showing it
/// runs no escape sequence), and cut at 40 characters with its length in
/// bytes said, so a hostile 100,000-character value cannot flood a log.
pub(crate) fn echo(value: &str) -> String {
    let chars = value.chars().count();
    if chars <= ECHO_MAX {
        return format!("{value:?}");
    }
    let head: String = value.chars().take(ECHO_MAX).collect();
    format!("{head:?}… ({} bytes)", value.len())
}

pub(crate) use crate::error::cut;

/// A number for a message: as written below 10^15, else in scientific
/// notation (`1e300`, not 301 digits).
pub(crate) fn num(v: f64) -> String {
    if v.is_finite() && v.abs() >= 1e15 {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// Unicode format (Cf) and other invisible characters that make two
/// different names look the same.
fn is_invisible(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x034F | 0x061C | 0x115F | 0x1160 | 0x17B4 | 0x17B5 | 0x180B..=0x180F
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F
        | 0xFEFF | 0xFFA0 | 0xFFF0..=0xFFFB | 0x0600..=0x0605 | 0x06DD | 0x070F | 0x0890 | 0x0891
        | 0x08E2 | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A | 0xE0000..=0xE0FFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_print_alike_or_blank_are_refused() {
        for good in ["backend", "db-1", "ключ", "a b", "名前"] {
            assert!(validate_name(good, "task name").is_ok(), "{good}");
        }
        for bad in [
            "",
            " ",
            "\u{3000}",
            "a\u{202E}b",
            "a\u{200B}",
            "\u{FEFF}x",
            "x\ny",
            "x\u{7f}",
            "x\u{2066}",
            "x\u{E0041}",
        ] {
            let err = validate_name(bad, "task name").unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidName, "{bad:?}");
        }
        assert!(validate_name(&"x".repeat(63), "task name").is_ok());
        assert!(validate_name(&"x".repeat(64), "task name").is_err());
        for tag in ["}x", "x{", "{app}", "a{b}c"] {
            let err = validate_name(tag, "task name").unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidName, "{tag:?}");
            assert!(err.message().contains("hash tag"), "{err}");
        }
    }

    #[test]
    fn echoes_are_short_and_one_line() {
        let long = "y".repeat(100_000);
        let err = validate_name(&long, "task name").unwrap_err().to_string();
        assert!(err.len() < 200, "{err}");
        assert!(err.contains("100000 bytes"), "{err}");
        assert_eq!(echo("a\u{1b}[2J\nb"), r#""a\u{1b}[2J\nb""#);
        assert_eq!(num(1e300), "1e300");
        assert_eq!(num(1500.5), "1500.5");
    }
}
