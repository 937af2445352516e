//! The Redis store's settings: timeouts and the key prefix from the table
//! options, overridden by flowctrl's own parameters in the store URL's query
//! (which are taken off the URL the client connects with).

use std::time::Duration;

use super::redact::redact;
use crate::error::{Error, Result};
use crate::words::echo;

/// Timeouts and naming, from the table options and the URL's query
/// (`?timeout_ms=5&connect_timeout_ms=20&prefix=app:`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RedisSettings {
    pub url: String,
    pub prefix: String,
    pub timeout: Duration,
    pub connect_timeout: Duration,
}

/// Splits flowctrl's own query parameters off a store URL.
pub(crate) fn parse(url: &str, mut base: RedisSettings) -> Result<RedisSettings> {
    let (head, query) = url.split_once('?').unwrap_or((url, ""));
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let ms = || {
            value
                .parse::<u64>()
                .ok()
                .filter(|ms| (1..=60_000).contains(ms))
                .map(Duration::from_millis)
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "store URL {}: {} must be 1..=60000 ms, not {}",
                        redact(url),
                        echo(name),
                        echo(value)
                    ))
                })
        };
        match name {
            "timeout_ms" => base.timeout = ms()?,
            "connect_timeout_ms" => base.connect_timeout = ms()?,
            "prefix" => {
                crate::words::validate_key_prefix(value)?;
                base.prefix = value.to_string();
            }
            _ => rest.push(pair),
        }
    }
    if ![
        "redis://",
        "rediss://",
        "redis+unix://",
        "unix://",
        "redis+sentinel://",
        "rediss+sentinel://",
        "redis+cluster://",
        "rediss+cluster://",
    ]
    .iter()
    .any(|scheme| head.starts_with(scheme))
    {
        return Err(Error::invalid(format!(
            "store URL {} must start with redis://, rediss://, unix://, redis+sentinel://, \
             rediss+sentinel://, redis+cluster:// or rediss+cluster://",
            redact(url)
        )));
    }
    base.url = if rest.is_empty() {
        head.to_string()
    } else {
        format!("{head}?{}", rest.join("&"))
    };
    Ok(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> RedisSettings {
        RedisSettings {
            url: String::new(),
            prefix: "flowctrl:".into(),
            timeout: Duration::from_millis(5),
            connect_timeout: Duration::from_millis(20),
        }
    }

    #[test]
    fn urls_carry_timeouts_and_prefix() {
        let s = parse(
            "redis://:pw@127.0.0.1:7000/2?timeout_ms=9&prefix=app:&protocol=resp2",
            base(),
        )
        .unwrap();
        assert_eq!(s.timeout, Duration::from_millis(9));
        assert_eq!(s.prefix, "app:");
        assert_eq!(s.url, "redis://:pw@127.0.0.1:7000/2?protocol=resp2");
        assert_eq!(
            redact("rediss://user:secret@host:1/0"),
            "rediss://user:***@host:1/0"
        );
        for (url, shown) in [
            ("redis://:pw@h:1/0", "redis://:***@h:1/0"),
            ("redis://secretpw@h:1", "redis://***@h:1"),
            ("redis://u:a/b@c:d@h:1/0", "redis://u:***@h:1/0"),
            (
                "unix:///tmp/no.sock?pass=secretpw",
                "unix:///tmp/no.sock?pass=***",
            ),
            (
                "redis+unix:///s?db=1&password=se&cret&timeout_ms=5",
                "redis+unix:///s?db=1&password=***&***&timeout_ms=5",
            ),
            (
                "redis+sentinel://:se/cret@h:1,h:2/master",
                "redis+sentinel://:***@h:1,h:2/master",
            ),
            (
                "rediss+cluster://user:s@c/r:et@h:1,h:2",
                "rediss+cluster://user:***@h:1,h:2",
            ),
            ("redis://h:1/0", "redis://h:1/0"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
        assert!(parse("redis://x?prefix={app}", base()).is_err());
        for bad in [
            "http://x",
            "redis://x?timeout_ms=0",
            "redis://x?timeout_ms=abc",
            "",
        ] {
            assert!(parse(bad, base()).is_err(), "{bad}");
        }
    }
}
