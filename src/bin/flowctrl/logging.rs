//! The log lines of every `flowctrl` command on stderr: theirs and the
//! library's (pulls, records, reaped processes, the config file).
//! `--log-format text` writes "TIME flowctrl COMMAND: LEVEL message", TIME
//! in RFC 3339 (UTC, milliseconds); `--log-format json` writes one object a
//! line: `time`, `level`, `message`, `target`, and the structured fields
//! the event carries (`task`, `pid`, `dead_pid`, `host`, `store`, `table`,
//! `file`). The library's own C callback and Python handlers are not
//! these: they are the library's.

use std::io::Write as _;
use std::time::SystemTime;

use flowctrl::rfc3339;

use log::kv::{Key, Value, VisitSource};
use serde_json::{Map, Value as Json};

/// How lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    Text,
    Json,
}

struct Logger {
    command: &'static str,
    level: log::LevelFilter,
    format: Format,
}

/// Installs the logger of `command` (once per process) at `level`.
pub(crate) fn init(command: &'static str, level: log::LevelFilter, format: Format) {
    let logger: &'static Logger = Box::leak(Box::new(Logger {
        command,
        level,
        format,
    }));
    if log::set_logger(logger).is_ok() {
        log::set_max_level(level);
    }
}

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= self.level
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let line = line(self.command, self.format, SystemTime::now(), r);
        // One write per line: lines of two threads do not interleave.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// A record as one line of `format`, ending in a newline.
fn line(command: &str, format: Format, now: SystemTime, r: &log::Record<'_>) -> String {
    let time = rfc3339(now);
    let message = r.args().to_string();
    match format {
        Format::Text => {
            let mut out = format!("{time} flowctrl {command}: {} {message}", r.level());
            out.push('\n');
            out
        }
        Format::Json => {
            let mut object = Map::new();
            object.insert("time".into(), Json::String(time));
            object.insert(
                "level".into(),
                Json::String(r.level().as_str().to_ascii_lowercase()),
            );
            object.insert("message".into(), Json::String(message));
            object.insert("target".into(), Json::String(r.target().to_string()));
            object.insert("command".into(), Json::String(command.to_string()));
            let mut fields = Fields(&mut object);
            let _ = r.key_values().visit(&mut fields);
            let mut out = Json::Object(object).to_string();
            out.push('\n');
            out
        }
    }
}

/// Copies a record's key-values into the JSON object (numbers as numbers).
struct Fields<'a>(&'a mut Map<String, Json>);

impl<'kvs> VisitSource<'kvs> for Fields<'_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), log::kv::Error> {
        let json = if let Some(n) = value.to_u64() {
            Json::from(n)
        } else if let Some(n) = value.to_i64() {
            Json::from(n)
        } else if let Some(b) = value.to_bool() {
            Json::from(b)
        } else {
            Json::String(value.to_string())
        };
        // The record's own fields stay theirs.
        if !self.0.contains_key(key.as_str()) {
            self.0.insert(key.as_str().to_string(), json);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn json_lines_carry_the_fields_of_the_event() {
        let fields: [(&str, Value<'_>); 2] =
            [("task", Value::from("api")), ("pid", Value::from(42u32))];
        let record = log::Record::builder()
            .args(format_args!("a \"quoted\" message"))
            .level(log::Level::Warn)
            .target("flowctrl::table")
            .key_values(&fields)
            .build();
        let text = line("manage", Format::Json, UNIX_EPOCH, &record);
        assert!(text.ends_with('\n') && text.lines().count() == 1, "{text}");
        let doc: Json = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["time"], "1970-01-01T00:00:00.000Z");
        assert_eq!(doc["level"], "warn");
        assert_eq!(doc["message"], "a \"quoted\" message");
        assert_eq!(doc["task"], "api");
        assert_eq!(doc["pid"], 42);
        let plain = line("manage", Format::Text, UNIX_EPOCH, &record);
        assert_eq!(
            plain,
            "1970-01-01T00:00:00.000Z flowctrl manage: WARN a \"quoted\" message\n"
        );
    }
}
