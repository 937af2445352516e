//! Where a table's quota store is and how it is spoken to: the options
//! every process of a host must agree on.

use std::time::Duration;

use crate::error::Result;

/// The store options of a table handle (process-local: every process of a
/// host must name the same store).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// `redis://[user:password@]host:port/db` or `rediss://...` (TLS),
    /// `unix:///path`, `redis+sentinel://...` / `rediss+sentinel://...`,
    /// `redis+cluster://...` / `rediss+cluster://...` (see
    /// docs/guide/high-availability.md); `None` = the embedded store (the
    /// table itself: one host, no server). The query may carry
    /// `timeout_ms`, `connect_timeout_ms` and `prefix`.
    pub url: Option<String>,
    /// Prefix of every store key (default `flowctrl:`; at most 128
    /// printable bytes, no spaces, `{` or `}`); keys are
    /// `<prefix>{<task>}:<slice>`.
    pub key_prefix: String,
    /// How long one command may take (default 5 ms): all of it, writing it
    /// and reading every byte of its reply, however the server spreads
    /// them. A pull that takes longer fails, and the task falls back to
    /// its local limits. A request that connects first (a TLS handshake,
    /// AUTH and SELECT included) ends within `connect_timeout + timeout`
    /// of its start; through Sentinel, each sentinel asked adds one
    /// `connect_timeout` (see docs/guide/high-availability.md).
    pub timeout: Duration,
    /// How long connecting may take (default 20 ms); see `timeout`.
    pub connect_timeout: Duration,
    /// How long a failed store is left alone before one process probes it
    /// again (default 3 s, ±20 % jitter so hosts do not probe in step).
    pub probe_interval: Duration,
    /// This host's id in the store's census of each slice (1–63 printable
    /// bytes, no spaces, `{` or `}`, none of `left`, `quota`, `demand`,
    /// `fair`, `back`). `None` (the default): derived from
    /// `/etc/machine-id` and the table's path, so every process of a host's
    /// table shares it and two tables on one machine are two hosts.
    pub host_id: Option<String>,
    /// Milliseconds added to this host's wall clock (tests of clock
    /// alignment).
    #[doc(hidden)]
    pub clock_skew_ms: i64,
}

impl StoreOptions {
    /// Refuses durations no store can use, and a key prefix or host id
    /// that would break the store's keys.
    pub(crate) fn check(&self) -> Result<()> {
        self.check_fields().map_err(|(_, e)| e)
    }

    /// [`StoreOptions::check`], naming the option as a config file's
    /// `[table]` spells it.
    pub(crate) fn check_fields(&self) -> std::result::Result<(), (&'static str, crate::Error)> {
        crate::words::validate_key_prefix(&self.key_prefix).map_err(|e| ("key_prefix", e))?;
        if let Some(id) = &self.host_id {
            crate::words::validate_host_id(id).map_err(|e| ("host_id", e))?;
        }
        for (field, name, d) in [
            ("store_timeout_ms", "timeout", self.timeout),
            (
                "connect_timeout_ms",
                "connect_timeout",
                self.connect_timeout,
            ),
            ("probe_interval_ms", "probe_interval", self.probe_interval),
        ] {
            if d.is_zero() || d > Duration::from_secs(600) {
                return Err((
                    field,
                    crate::Error::invalid(format!(
                        "store {name} must be between 1 ms and 600 s, not {d:?}"
                    )),
                ));
            }
        }
        Ok(())
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            url: None,
            key_prefix: "flowctrl:".into(),
            timeout: Duration::from_millis(5),
            connect_timeout: Duration::from_millis(20),
            probe_interval: Duration::from_secs(3),
            host_id: None,
            clock_skew_ms: 0,
        }
    }
}
