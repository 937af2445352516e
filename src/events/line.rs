//! A log line as the C library writes it to stderr, in the format
//! `FLOWCTRL_LOG_FORMAT` names (the C face only chooses where it goes):
//!
//! - `text` (the default): `flowctrl[PID] LEVEL TARGET: MESSAGE`, then the
//!   line's fields but `pid` (already there) in logfmt, ` task=api host=…`;
//! - `logfmt`: `time=… level=warn target=… message="…" task=api pid=…`;
//! - `json`: one object a line with the same keys, numbers as numbers.
//!
//! Every line ends with one newline and holds none inside: a message's
//! newline is escaped in `json` and `logfmt`, and so is any in `text`.

use std::fmt::Write as _;

use log::Record;
use log::kv::{Key, Value, VisitSource};

/// How the C library writes lines to stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Text = 0,
    Logfmt = 1,
    Json = 2,
}

impl Format {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "text" => Some(Format::Text),
            "logfmt" => Some(Format::Logfmt),
            "json" => Some(Format::Json),
            _ => None,
        }
    }

    pub(crate) fn from_u8(n: u8) -> Self {
        match n {
            1 => Format::Logfmt,
            2 => Format::Json,
            _ => Format::Text,
        }
    }
}

/// A field's value: numbers stay numbers in `json`.
enum Field {
    Number(u64),
    Text(String),
}

/// A record's key-values, in their order.
struct Fields(Vec<(String, Field)>);

impl<'kvs> VisitSource<'kvs> for Fields {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), log::kv::Error> {
        let field = match value.to_u64() {
            Some(n) => Field::Number(n),
            None => Field::Text(value.to_string()),
        };
        self.0.push((key.as_str().to_string(), field));
        Ok(())
    }
}

/// `record` as one line of `format` (with `message`, its text), ending in a
/// newline; `time` is its RFC 3339 time.
pub(crate) fn line(format: Format, record: &Record<'_>, message: &str, time: &str) -> String {
    let mut fields = Fields(Vec::new());
    let _ = record.key_values().visit(&mut fields);
    let level = record.level();
    let mut out = String::with_capacity(96 + message.len());
    match format {
        Format::Text => {
            let _ = write!(
                out,
                "flowctrl[{}] {level} {}: ",
                std::process::id(),
                record.target()
            );
            escape_newlines(&mut out, message);
            for (key, value) in fields.0.iter().filter(|(k, _)| k != "pid") {
                out.push(' ');
                logfmt_pair(&mut out, key, value);
            }
        }
        Format::Logfmt => {
            let lower = level.as_str().to_ascii_lowercase();
            let head = [
                ("time", time),
                ("level", &lower),
                ("target", record.target()),
                ("message", message),
            ];
            for (i, (key, value)) in head.into_iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                logfmt_pair(&mut out, key, &Field::Text(value.to_string()));
            }
            for (key, value) in &fields.0 {
                out.push(' ');
                logfmt_pair(&mut out, key, value);
            }
        }
        Format::Json => {
            let lower = level.as_str().to_ascii_lowercase();
            out.push('{');
            let head = [
                ("time", time),
                ("level", &lower),
                ("target", record.target()),
                ("message", message),
            ];
            let head = head.map(|(k, v)| (k, Field::Text(v.to_string())));
            let all = head.iter().map(|(k, v)| (*k, v));
            let all = all.chain(fields.0.iter().map(|(k, v)| (k.as_str(), v)));
            for (i, (key, value)) in all.enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_string(&mut out, key);
                out.push(':');
                match value {
                    Field::Number(n) => {
                        let _ = write!(out, "{n}");
                    }
                    Field::Text(t) => json_string(&mut out, t),
                }
            }
            out.push('}');
        }
    }
    out.push('\n');
    out
}

/// `text` with `\n` and `\r` written as such: one line stays one line.
fn escape_newlines(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
}

/// `key=value`, the value quoted when empty or holding a space, `=`, `"`,
/// `\` or a control character, as a JSON string (`"` and `\` escaped,
/// a newline as `\n`).
fn logfmt_pair(out: &mut String, key: &str, value: &Field) {
    out.push_str(key);
    out.push('=');
    match value {
        Field::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Field::Text(t)
            if !t.is_empty()
                && !t
                    .chars()
                    .any(|c| c == ' ' || c == '=' || c == '"' || c == '\\' || c.is_control()) =>
        {
            out.push_str(t)
        }
        Field::Text(t) => json_string(out, t),
    }
}

/// `text` as a JSON string (RFC 8259: `"`, `\` and the control characters
/// escaped; everything else is valid UTF-8 as it is).
fn json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_line(format: Format, message: &str) -> String {
        let fields: [(&str, Value<'_>); 4] = [
            ("task", Value::from("a \"b\"")),
            ("pid", Value::from(42u32)),
            ("host", Value::from("h1")),
            ("store", Value::from("Redis at redis://127.0.0.1:1/0")),
        ];
        // The text is `message`, passed as such: the record's args unused.
        let record = Record::builder()
            .level(log::Level::Warn)
            .target("flowctrl::store")
            .key_values(&fields)
            .build();
        line(format, &record, message, "1970-01-01T00:00:00.000Z")
    }

    #[test]
    fn text_appends_the_fields_in_logfmt() {
        let text = record_line(Format::Text, "two\nlines");
        let want = format!(
            "flowctrl[{}] WARN flowctrl::store: two\\nlines task=\"a \\\"b\\\"\" host=h1 \
             store=\"Redis at redis://127.0.0.1:1/0\"\n",
            std::process::id()
        );
        assert_eq!(text, want);
    }

    #[test]
    fn logfmt_quotes_what_needs_it() {
        let text = record_line(Format::Logfmt, "x=1\t\u{1}");
        assert_eq!(
            text,
            "time=1970-01-01T00:00:00.000Z level=warn target=flowctrl::store \
             message=\"x=1\\t\\u0001\" task=\"a \\\"b\\\"\" pid=42 host=h1 \
             store=\"Redis at redis://127.0.0.1:1/0\"\n"
        );
    }

    #[test]
    fn json_escapes_quotes_backslashes_and_controls() {
        let text = record_line(Format::Json, "q\"\\\n\u{1f}\u{7f}é");
        assert_eq!(
            text,
            "{\"time\":\"1970-01-01T00:00:00.000Z\",\"level\":\"warn\",\
             \"target\":\"flowctrl::store\",\"message\":\"q\\\"\\\\\\n\\u001f\\u007fé\",\
             \"task\":\"a \\\"b\\\"\",\"pid\":42,\"host\":\"h1\",\
             \"store\":\"Redis at redis://127.0.0.1:1/0\"}\n"
        );
        // A parser reads back every character, controls and all.
        let nasty: String = (0u8..0x80).map(char::from).chain("é€😀".chars()).collect();
        let doc: serde_json::Value =
            serde_json::from_str(&record_line(Format::Json, &nasty)).unwrap();
        assert_eq!(doc["message"], nasty.as_str());
        assert_eq!(doc["pid"], 42);
        assert_eq!(Format::parse("JSON"), Some(Format::Json));
        assert_eq!(Format::parse("yaml"), None);
    }
}
