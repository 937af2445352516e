//! How the Redis store reaches its server: one server (`redis://`,
//! `rediss://`, `unix://`), the master a set of Sentinels names
//! (`redis+sentinel://`), or a Redis Cluster (`redis+cluster://`), every
//! kind over flowctrl's own connections (`link`), which bound a request as
//! a whole.
//!
//! A request — connecting if it has no connection (TLS handshake, AUTH and
//! SELECT included), writing its command, reading every byte of the reply
//! — ends within connect_timeout + timeout of its start: connecting within
//! connect_timeout, the command within timeout, and a reconnect after an
//! idle connection that died within what is left of the sum ([`Budget`]).
//! Through Sentinel, each sentinel asked (connecting to it and asking it
//! for the master) is given a connect_timeout of its own and adds it to the
//! bound: a request that asks k sentinels ends within (k + 1) ×
//! connect_timeout + timeout (connecting to the master they name and
//! checking its role are the connect_timeout of the sum). On a Cluster, the
//! cluster client's connect (to every node it starts with, and its slot
//! map) is the connect step, a command with the redirects and retries it
//! takes the command step.
//!
//! TLS is the `rediss` of each form: `rediss+sentinel://` speaks TLS to
//! the sentinels and to the master they name, `rediss+cluster://` to every
//! node (the `redis` crate's cluster client takes TLS from the URLs of its
//! first nodes and uses it for the nodes it discovers). Certificates are
//! checked against the system's CA store (`SSL_CERT_FILE` points
//! elsewhere) and must name the addresses the sentinels and the cluster
//! announce. Not offered, and refused when asked for: `#insecure` (no
//! certificate check: flowctrl's `redis` is built without it, and a URL
//! that asked for it would fail at every connect instead of at open), and
//! TLS to the sentinels but not to the master or the other way round.
//!
//! The Sentinel lookup is done here rather than by the `redis` crate's
//! sentinel client: that one connects to the sentinels without timeouts, so
//! a sentinel that hangs would hang the pull past the store timeout.

use std::time::Duration;

use redis::{ConnectionInfo, IntoConnectionInfo};

use super::deadline::{Budget, within};
use super::link::Link;
use super::sentinel::find_master;
use crate::error::{Error, Result};

/// Where connections go.
pub(crate) enum Target {
    Single(ConnectionInfo),
    /// The master named `master`, looked up through `sentinels` at every
    /// new connection: the store drops a connection on any error (READONLY
    /// after a failover, a dropped socket), so the next one follows the
    /// failover. Each sentinel with the URL's credentials (as the Python
    /// `limits` package sends them), and without, for a sentinel that has
    /// no password set.
    Sentinel {
        sentinels: Vec<(ConnectionInfo, ConnectionInfo)>,
        master: String,
        /// `:password@` or `user:password@`, for the master.
        auth: String,
        db: i64,
        /// `rediss+sentinel://`: the master is reached over TLS too.
        tls: bool,
    },
    Cluster(redis::cluster::ClusterClient),
}

/// One connection of any kind.
pub(crate) enum Conn {
    Single(Link),
    Cluster(Box<redis::cluster::ClusterConnection<Link>>),
}

impl redis::ConnectionLike for Conn {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }

    fn check_connection(&mut self) -> bool {
        match self {
            Self::Single(c) => c.check_connection(),
            Self::Cluster(c) => c.check_connection(),
        }
    }

    fn is_open(&self) -> bool {
        match self {
            Self::Single(c) => c.is_open(),
            Self::Cluster(c) => c.is_open(),
        }
    }
}

/// The hosts of a multi-host URL's authority: `[userinfo@]h1:p1,h2:p2`,
/// and the path after it.
fn split_hosts<'a>(rest: &'a str, what: &str) -> Result<(String, Vec<&'a str>, &'a str)> {
    // The userinfo first, up to the last `@`: a password may hold `/`.
    let (auth, rest) = match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    };
    let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
    let hosts: Vec<&str> = hosts.split(',').collect();
    if hosts.iter().any(|h| {
        h.rsplit_once(':')
            .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
    }) {
        return Err(Error::invalid(format!(
            "{what} needs host:port[,host:port...], not {}",
            crate::words::cut(&format!("{hosts:?}"), 120)
        )));
    }
    Ok((escape_auth(auth), hosts, path))
}

/// A userinfo (`user:password@`) as a URL of one node can carry it: the
/// characters that end a URL's authority (`/`, `?`, `#`) and an `@` before
/// the last are percent-encoded (the `redis` crate decodes them), so a
/// password holding them is the password, not the start of a path.
fn escape_auth(auth: &str) -> String {
    let Some(inner) = auth.strip_suffix('@') else {
        return auth.to_string();
    };
    let mut out = String::with_capacity(auth.len() + 8);
    for c in inner.chars() {
        match c {
            '/' => out.push_str("%2F"),
            '?' => out.push_str("%3F"),
            '#' => out.push_str("%23"),
            '@' => out.push_str("%40"),
            c => out.push(c),
        }
    }
    out.push('@');
    out
}

impl Target {
    /// The target a store URL (without flowctrl's own query) names.
    pub fn open(url: &str) -> Result<Self> {
        let bad = |e: &dyn std::fmt::Display| {
            Error::invalid(format!("store URL {}: {e}", super::redact::redact(url)))
        };
        // A `#` in the password is the password's.
        if url[url.rfind('@').map_or(0, |at| at + 1)..].contains('#') {
            return Err(bad(
                &"a URL fragment (`#insecure`: no certificate check) is not supported; trust \
                  the server's CA through SSL_CERT_FILE instead",
            ));
        }
        let (sentinel, cluster) = match url.split_once("://") {
            Some(("redis+sentinel", rest)) => (Some((rest, "redis")), None),
            Some(("rediss+sentinel", rest)) => (Some((rest, "rediss")), None),
            Some(("redis+cluster", rest)) => (None, Some((rest, "redis"))),
            Some(("rediss+cluster", rest)) => (None, Some((rest, "rediss"))),
            _ => (None, None),
        };
        if let Some((rest, scheme)) = sentinel {
            let (auth, hosts, path) = split_hosts(rest, "a Sentinel URL").map_err(|e| bad(&e))?;
            let mut parts = path.split('/');
            let master = parts.next().unwrap_or("");
            let db = match parts.next() {
                None | Some("") => 0,
                Some(db) => db
                    .parse::<i64>()
                    .map_err(|_| bad(&"the db must be a number"))?,
            };
            if master.is_empty() || parts.next().is_some() || master.contains('?') {
                return Err(bad(&format_args!(
                    "the form is {scheme}+sentinel://[:password@]host:port[,host:port...]/master-name[/db]"
                )));
            }
            let client = |url: String| url.into_connection_info().map_err(|e| bad(&e));
            let sentinels = hosts
                .iter()
                .map(|h| {
                    Ok((
                        client(format!("{scheme}://{auth}{h}"))?,
                        client(format!("{scheme}://{h}"))?,
                    ))
                })
                .collect::<Result<_>>()?;
            warm_tls(scheme);
            return Ok(Self::Sentinel {
                sentinels,
                master: master.to_string(),
                auth,
                db,
                tls: scheme == "rediss",
            });
        }
        if let Some((rest, scheme)) = cluster {
            let (auth, hosts, path) = split_hosts(rest, "a Cluster URL").map_err(|e| bad(&e))?;
            if !(path.is_empty() || path == "0") || rest.contains('?') {
                return Err(bad(&format_args!(
                    "a Cluster URL is {scheme}+cluster://[:password@]host:port[,host:port...] (db 0 only)"
                )));
            }
            let nodes: Vec<String> = hosts
                .iter()
                .map(|h| format!("{scheme}://{auth}{h}"))
                .collect();
            // One retry, at once: a MOVED after a failover is followed, and
            // nothing waits past the store timeouts (the crate's default is
            // 16 retries over seconds).
            warm_tls(scheme);
            let client = redis::cluster::ClusterClientBuilder::new(nodes)
                .retries(1)
                .min_retry_wait(0)
                .max_retry_wait(1)
                .build()
                .map_err(|e| bad(&e))?;
            return Ok(Self::Cluster(client));
        }
        let single = match url.split_once("://") {
            Some((scheme @ ("redis" | "rediss"), rest)) if rest.contains('@') => {
                let at = rest.rfind('@').unwrap_or(0);
                let (auth, host) = rest.split_at(at + 1);
                format!("{scheme}://{}{host}", escape_auth(auth))
            }
            _ => url.to_string(),
        };
        warm_tls(url.split_once("://").map_or("", |(scheme, _)| scheme));
        single
            .into_connection_info()
            .map(Self::Single)
            .map_err(|e| bad(&e))
    }

    /// A new connection, made within `connect` and what is left of the
    /// request's `budget` (see the module's doc).
    pub fn connect(&self, connect: Duration, budget: &mut Budget) -> redis::RedisResult<Conn> {
        match self {
            Self::Single(info) => {
                within(budget.step(connect), || Link::connect(info, None)).map(Conn::Single)
            }
            Self::Sentinel {
                sentinels,
                master,
                auth,
                db,
                tls,
            } => {
                let scheme = if *tls { "rediss" } else { "redis" };
                let master = (master.as_str(), scheme, auth.as_str(), *db);
                find_master(sentinels, master, connect, budget).map(Conn::Single)
            }
            // `get_generic_connection` (doc-hidden in the crate, for its
            // own tests of other connection types) is the cluster client
            // over links: there is no other way to bound what its
            // connections wait for.
            Self::Cluster(client) => within(budget.step(connect), || {
                client.get_generic_connection::<Link>()
            })
            .map(|c| Conn::Cluster(Box::new(c))),
        }
    }
}

/// The system's CA store, read at open rather than within a request's
/// connect timeout (an error is met again, and reported, at connect).
fn warm_tls(scheme: &str) {
    if scheme.starts_with("rediss") {
        let _ = super::link::tls_config();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_and_cluster_urls_parse_and_bad_ones_are_refused() {
        match Target::open("redis+sentinel://:pw@127.0.0.1:1,127.0.0.1:2/mymaster/3").unwrap() {
            Target::Sentinel {
                sentinels,
                master,
                auth,
                db,
                tls,
            } => assert_eq!(
                (sentinels.len(), &*master, &*auth, db, tls),
                (2, "mymaster", ":pw@", 3, false)
            ),
            _ => panic!("not a sentinel target"),
        }
        match Target::open("rediss+sentinel://127.0.0.1:1/m").unwrap() {
            Target::Sentinel { sentinels, tls, .. } => {
                assert!(tls);
                let addr = sentinels[0].0.addr();
                assert!(
                    matches!(
                        addr,
                        redis::ConnectionAddr::TcpTls {
                            insecure: false,
                            ..
                        }
                    ),
                    "{addr:?}"
                );
            }
            _ => panic!("not a sentinel target"),
        }
        assert!(matches!(
            Target::open("rediss+cluster://:pw@127.0.0.1:1,127.0.0.1:2").unwrap(),
            Target::Cluster(_)
        ));
        assert!(matches!(
            Target::open("redis+cluster://127.0.0.1:1,127.0.0.1:2").unwrap(),
            Target::Cluster(_)
        ));
        for bad in [
            "redis+sentinel://127.0.0.1:1",
            "redis+sentinel://127.0.0.1:1/",
            "redis+sentinel://127.0.0.1/m",
            "redis+sentinel://127.0.0.1:1/m/x",
            "redis+cluster://127.0.0.1:1/3",
            "redis+cluster://h:x",
            "rediss+cluster://127.0.0.1:1/3",
            "rediss+sentinel://127.0.0.1:1",
        ] {
            assert!(Target::open(bad).is_err(), "{bad}");
        }
        for insecure in [
            "rediss://127.0.0.1:1/#insecure",
            "rediss+cluster://127.0.0.1:1/#insecure",
            "rediss+sentinel://127.0.0.1:1/m#insecure",
        ] {
            let err = Target::open(insecure).err().expect(insecure).to_string();
            assert!(err.contains("SSL_CERT_FILE"), "{err}");
        }
        let err = Target::open("rediss+cluster://127.0.0.1:1/3")
            .err()
            .unwrap();
        assert!(err.to_string().contains("rediss+cluster://"), "{err}");
    }
}
