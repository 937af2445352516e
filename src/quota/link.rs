//! The store's connections, each request bounded as a whole.
//!
//! The `redis` crate applies its timeouts as socket timeouts: each read and
//! each write may take that long, and a reply may need any number of reads.
//! A server that trickles its reply (a byte every 20 ms) satisfies every
//! read and holds the caller as long as it likes (2.2 s for one acquire
//! with 50 ms / 100 ms timeouts, in `tests/quota.rs`; the time its reply
//! takes, whatever the timeouts). Its synchronous `Connection`
//! cannot be built over a stream of ours, so flowctrl speaks to the store
//! over a [`Link`] of its own: commands are the crate's own encoding (the
//! packed bytes [`redis::ConnectionLike`] is handed), replies are parsed by
//! the crate's [`redis::Parser`], and before every connect, read and write
//! the socket's timeout is set to the time LEFT before the deadline in
//! force on the thread ([`within`]). A reply that trickles fails at the
//! deadline however its bytes are spread; a TLS handshake (rustls, over the
//! same socket) and the AUTH / SELECT after connecting are bounded the same
//! way. A setsockopt per read and write is the whole cost: no thread, no
//! timer, no non-blocking machinery.
//!
//! A Redis Cluster is the crate's own cluster client (slots, redirects,
//! retries) run over links (`ClusterClient::get_generic_connection`): its
//! connections to the nodes and every command it sends are bounded by the
//! same deadline.
//!
//! Not bounded: resolving a host name (the system's `getaddrinfo`, as in
//! the crate). Stores named by address, or in `/etc/hosts`, never wait on
//! it.

use std::io::Write;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, RedisResult, Value};

use super::deadline::{Sock, Stream, Timed, deadline_in_force, tcp, unix, within};

/// One connection to one server: TCP, TLS over TCP, or a unix socket.
pub(crate) struct Link {
    stream: Stream,
    parser: redis::Parser,
    db: i64,
    /// False after any error of the socket or the reply's syntax: what is
    /// left in flight is unknown.
    open: bool,
}

impl Link {
    /// Connects to `info` and authenticates and selects its db, all before
    /// the deadline in force (and within `timeout`, if given).
    pub(crate) fn connect(info: &ConnectionInfo, timeout: Option<Duration>) -> RedisResult<Self> {
        let deadline = match timeout {
            Some(t) => Instant::now() + t,
            None => deadline_in_force().ok_or_else(|| {
                RedisError::from((ErrorKind::Client, "a store connection needs a deadline"))
            })?,
        };
        within(deadline, || {
            let stream = match info.addr() {
                ConnectionAddr::Tcp(host, port) => {
                    Stream::Plain(Timed::new(Sock::Tcp(tcp(host, *port)?)))
                }
                ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: false,
                    tls_params: None,
                } => {
                    let name =
                        rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| {
                            RedisError::from((
                                ErrorKind::InvalidClientConfig,
                                "not a TLS server name",
                                e.to_string(),
                            ))
                        })?;
                    let tls = rustls::ClientConnection::new(tls_config()?, name)
                        .map_err(|e| RedisError::from((ErrorKind::Io, "TLS", e.to_string())))?;
                    let mut stream =
                        rustls::StreamOwned::new(tls, Timed::new(Sock::Tcp(tcp(host, *port)?)));
                    while stream.conn.is_handshaking() {
                        stream.conn.complete_io(&mut stream.sock)?;
                    }
                    Stream::Tls(Box::new(stream))
                }
                ConnectionAddr::Unix(path) => Stream::Plain(Timed::new(Sock::Unix(unix(path)?))),
                // `#insecure` and client certificates: refused at open.
                _ => {
                    return Err(RedisError::from((
                        ErrorKind::InvalidClientConfig,
                        "not a store address flowctrl connects to",
                    )));
                }
            };
            let redis = info.redis_settings();
            let mut link = Self {
                stream,
                parser: redis::Parser::new(),
                db: redis.db(),
                open: true,
            };
            link.setup(redis, true)?;
            Ok(link)
        })
    }

    /// AUTH (HELLO 3 with RESP3) and SELECT, pipelined: one round trip, none
    /// when there is neither. A server older than Redis 6 refuses a user
    /// name: asked again with the password alone, as the `redis` crate does.
    fn setup(&mut self, info: &redis::RedisConnectionInfo, with_user: bool) -> RedisResult<()> {
        let user = info.username().filter(|_| with_user);
        let mut cmds = Vec::new();
        if info.protocol().supports_resp3() {
            let mut hello = redis::cmd("HELLO");
            hello.arg(3);
            if let Some(password) = info.password() {
                hello
                    .arg("AUTH")
                    .arg(user.unwrap_or("default"))
                    .arg(password);
            }
            cmds.push(hello);
        } else if let Some(password) = info.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = user {
                auth.arg(user);
            }
            auth.arg(password);
            cmds.push(auth);
        }
        if info.db() != 0 {
            let mut select = redis::cmd("SELECT");
            select.arg(info.db());
            cmds.push(select);
        }
        if cmds.is_empty() {
            return Ok(());
        }
        let packed: Vec<u8> = cmds.iter().flat_map(|c| c.get_packed_command()).collect();
        self.send(&packed)?;
        let mut first_error = None;
        for _ in &cmds {
            if let Err(e) = self.recv()?.extract_error() {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            None => Ok(()),
            Some(e)
                if user.is_some()
                    && !info.protocol().supports_resp3()
                    && e.to_string().contains("wrong number of arguments") =>
            {
                self.setup(info, false)
            }
            Some(e) => Err(e),
        }
    }

    fn send(&mut self, bytes: &[u8]) -> RedisResult<()> {
        let sent = self
            .stream
            .write_all(bytes)
            .and_then(|()| self.stream.flush());
        if sent.is_err() {
            self.open = false;
        }
        Ok(sent?)
    }

    /// The next reply (push messages are skipped: none are asked for).
    fn recv(&mut self) -> RedisResult<Value> {
        loop {
            match self.parser.parse_value(&mut self.stream) {
                Ok(Value::Push { .. }) => continue,
                Ok(value) => return Ok(value),
                Err(e) => {
                    self.open = false;
                    return Err(e);
                }
            }
        }
    }
}

impl redis::ConnectionLike for Link {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.send(cmd)?;
        self.recv()
    }

    /// `offset` replies skipped (a transaction's MULTI and QUEUED: an error
    /// among them is the answer), `count` returned.
    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.send(cmd)?;
        let mut replies = Vec::with_capacity(count);
        let mut skipped_error = None;
        for i in 0..offset + count {
            let reply = self.recv()?;
            if i >= offset {
                replies.push(reply);
            } else if let Err(e) = reply.extract_error() {
                skipped_error.get_or_insert(e);
            }
        }
        skipped_error.map_or(Ok(replies), Err)
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.open
    }
}

/// What the cluster client needs of a node's connection.
impl redis::cluster::Connect for Link {
    fn connect<T>(info: T, timeout: Option<Duration>) -> RedisResult<Self>
    where
        T: redis::IntoConnectionInfo,
    {
        Self::connect(&info.into_connection_info()?, timeout)
    }

    fn send_packed_command(&mut self, cmd: &[u8]) -> RedisResult<()> {
        self.send(cmd)
    }

    fn set_write_timeout(&self, dur: Option<Duration>) -> RedisResult<()> {
        self.stream.timed().write_timeout.set(dur);
        Ok(())
    }

    fn set_read_timeout(&self, dur: Option<Duration>) -> RedisResult<()> {
        self.stream.timed().read_timeout.set(dur);
        Ok(())
    }

    fn recv_response(&mut self) -> RedisResult<Value> {
        self.recv()
    }
}

/// The TLS client configuration: the system's CA store (`SSL_CERT_FILE`
/// points elsewhere), read once per process, at the first TLS store opened
/// (not within a request's deadline); a failed read is tried again at the
/// next connect.
pub(crate) fn tls_config() -> RedisResult<Arc<rustls::ClientConfig>> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    if let Some(config) = CONFIG.get() {
        return Ok(config.clone());
    }
    let tls_error =
        |what: &str, e: String| RedisError::from((ErrorKind::Io, "TLS", format!("{what}: {e}")));
    let mut found = rustls_native_certs::load_native_certs();
    if let Some(e) = found.errors.pop() {
        return Err(tls_error("the system's CA certificates", e.to_string()));
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in found.certs {
        roots
            .add(cert)
            .map_err(|e| tls_error("a CA certificate", e.to_string()))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| tls_error("the protocol versions", e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(CONFIG.get_or_init(|| Arc::new(config)).clone())
}
