//! Real Redis servers for tests, on free loopback ports: a lone server
//! ([`RedisServer`]), a master with its replica and three sentinels
//! ([`Sentinels`]), a Redis Cluster of three masters ([`Cluster`]). Any of
//! them may speak TLS only and ask for a password: [`Redis`] names those
//! options, then starts the setup. Every process is stopped by its pid when
//! its setup is dropped; files live in a scratch directory. Tests that need
//! one fail with a clear message when `redis-server` is missing
//! (scripts/setup.sh installs it).

use std::net::TcpListener;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Scratch;
use super::tls::Tls;

/// A loopback port nobody listens on now, below the kernel's ephemeral
/// range: a port from that range (what binding port 0 gives) may be taken
/// meanwhile as the local port of any outgoing connection, and the tests'
/// processes open thousands side by side. Tried from a point that differs
/// by process and by call, so two processes rarely try the same port.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u64, ephemeral.min(65_536));
    if high > low + 1000 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() as u64);
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        let seed = (std::process::id() as u64 * 7919 + nanos + call * 104_729) % (high - low);
        for i in 0..(high - low) {
            let port = (low + (seed + i) % (high - low)) as u16;
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// How a setup's servers are reached, and what starts one:
/// `Redis::new().tls(&tls).password("s3cret").server()`.
#[derive(Clone, Copy, Default)]
pub struct Redis<'a> {
    tls: Option<&'a Tls>,
    password: Option<&'a str>,
    unix_socket: Option<&'a Path>,
}

impl<'a> Redis<'a> {
    /// Plain TCP, no password.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every server (and sentinel) on a TLS port only, with `tls`'s
    /// certificate; replication, sentinels' connections and a cluster's
    /// bus over TLS too.
    pub fn tls(mut self, tls: &'a Tls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Every server asks for `password` (`requirepass`), replicas and
    /// sentinels give it to their masters; sentinels ask for none.
    pub fn password(mut self, password: &'a str) -> Self {
        self.password = Some(password);
        self
    }

    /// A lone server listens on this unix socket too.
    pub fn unix_socket(mut self, path: &'a Path) -> Self {
        self.unix_socket = Some(path);
        self
    }

    /// The `:password@` of a URL, or nothing.
    fn auth(&self) -> String {
        self.password.map_or(String::new(), |p| format!(":{p}@"))
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        }
    }

    /// A lone server.
    pub fn server(self) -> RedisServer {
        let scratch = Scratch::in_memory("redis");
        let port = free_port();
        let lines: Vec<String> = self
            .unix_socket
            .map(|s| format!("unixsocket {}", s.display()))
            .into_iter()
            .collect();
        let conf = write_conf(&scratch, "server", port, &lines, self);
        let node = Node::start(conf, port, &[], self, Duration::from_secs(5));
        RedisServer {
            node,
            _scratch: scratch,
        }
    }

    /// A master, its replica and three sentinels.
    pub fn sentinels(self, down_ms: u64) -> Sentinels {
        Sentinels::start_with(down_ms, self)
    }

    /// Three masters with `replicas` each.
    pub fn cluster(self, node_timeout_ms: u64, replicas: usize) -> Cluster {
        Cluster::start_with(node_timeout_ms, replicas, self)
    }
}

/// One `redis-server` process (a server or a sentinel).
pub struct Node {
    pub port: u16,
    child: Option<Child>,
    conf: PathBuf,
    extra: Vec<String>,
    /// `redis://...` or `rediss://...` with the password, if any.
    base_url: String,
    /// A TLS node: the CA its certificate is checked against.
    ca: Option<Vec<u8>>,
    /// How long the test's own connections may take to connect.
    connect_timeout: Duration,
}

impl Node {
    fn start(
        conf: PathBuf,
        port: u16,
        extra: &[&str],
        access: Redis,
        connect_timeout: Duration,
    ) -> Self {
        let mut node = Self {
            port,
            child: None,
            conf,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            base_url: format!("{}://{}127.0.0.1:{port}", access.scheme(), access.auth()),
            ca: access.tls.map(Tls::ca_pem),
            connect_timeout,
        };
        node.restart();
        node
    }

    /// Starts the process again on the same port, with the same
    /// configuration (after [`Node::kill`]).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new("redis-server")
            .arg(&self.conf)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/setup.sh installs it)");
        // The store runs ahead of the test's own processes, as on a machine
        // of its own: on a loaded machine a starved sentinel's timer falls
        // seconds behind, it enters TILT (no failover for 30 s) or an
        // election times out. What the tests prove is the hosts' conduct,
        // not the store's under starvation. Needs root or CAP_SYS_NICE:
        // without either the priority stays as it was.
        // SAFETY: setpriority on our own child's pid.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, child.id(), -10) };
        self.child = Some(child);
        let began = Instant::now();
        while self.try_command::<String>(&["PING"]).is_err() {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "redis-server on port {} exited ({status}) before answering: the port \
                     taken meanwhile?",
                    self.port
                );
            }
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "port {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The URL of database 0, with the password if any.
    pub fn url(&self) -> String {
        format!("{}/0", self.base_url)
    }

    /// A connection of the test's own.
    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = match &self.ca {
            None => redis::Client::open(self.url())?,
            Some(ca) => redis::Client::build_with_tls(
                self.url(),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca.clone()),
                },
            )?,
        };
        let conn = client.get_connection_with_timeout(self.connect_timeout)?;
        conn.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(conn)
    }

    pub fn try_command<T: redis::FromRedisValue>(&self, args: &[&str]) -> redis::RedisResult<T> {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut self.connection()?)
    }

    /// Runs one command and returns its answer.
    pub fn command<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        self.try_command(args)
            .unwrap_or_else(|e| panic!("port {}: {args:?}: {e}", self.port))
    }

    /// Round trips clients made to pull quota so far: script calls and
    /// loads (the commands a script runs inside the server are not round
    /// trips).
    pub fn pull_round_trips(&self) -> u64 {
        command_calls(
            &self.command::<String>(&["INFO", "commandstats"]),
            &["evalsha", "script|load"],
        )
    }

    /// Every command the server ran so far, by name, with its calls (see
    /// [`commands_in`]).
    pub fn commands(&self) -> std::collections::BTreeMap<String, u64> {
        commands_in(&self.command::<String>(&["INFO", "commandstats"]))
    }

    /// Script calls clients made (`EVALSHA` and script loads) on this node.
    pub fn script_calls(&self) -> u64 {
        command_calls(
            &self.command::<String>(&["INFO", "commandstats"]),
            &["evalsha", "eval"],
        )
    }

    /// SIGKILLs the process (by its pid) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A lone server: a [`Node`] (its port, commands, kill and restart) with
/// its scratch directory. The test's own connections may take 5 s to
/// connect: a loaded 2-core machine may take more than the library's short
/// timeouts to accept them.
pub struct RedisServer {
    node: Node,
    _scratch: Scratch,
}

impl RedisServer {
    /// Plain TCP, no password: `Redis::new().server()`.
    pub fn start() -> Self {
        Redis::new().server()
    }
}

impl Deref for RedisServer {
    type Target = Node;

    fn deref(&self) -> &Node {
        &self.node
    }
}

impl DerefMut for RedisServer {
    fn deref_mut(&mut self) -> &mut Node {
        &mut self.node
    }
}

/// The calls an `INFO commandstats` answer counts of `commands` (e.g.
/// `evalsha`, `script|load`), summed.
pub fn command_calls(info: &str, commands: &[&str]) -> u64 {
    info.lines()
        .filter(|l| {
            commands.iter().any(|c| {
                l.strip_prefix("cmdstat_")
                    .and_then(|r| r.strip_prefix(c))
                    .is_some_and(|r| r.starts_with(':'))
            })
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The commands an `INFO commandstats` answer counts, by name, with their
/// calls (the commands a script runs inside the server count), less the
/// `INFO` and `CONFIG` calls of the test reading them.
pub fn commands_in(info: &str) -> std::collections::BTreeMap<String, u64> {
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .filter(|(name, _): &(String, u64)| name != "info" && !name.starts_with("config"))
        .collect()
}

/// The nodes' `host:port`s.
fn addresses(nodes: &[Node]) -> Vec<String> {
    nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect()
}

/// A server's configuration file; with TLS, TLS on `port` only, and TLS
/// for its replication (and a sentinel's connections, a cluster's bus);
/// with a password, asked for and given to a master.
fn write_conf(
    scratch: &Scratch,
    name: &str,
    port: u16,
    lines: &[String],
    access: Redis,
) -> PathBuf {
    let dir = scratch.path(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = format!(
        "bind 127.0.0.1\nport {port}\ndir {}\nsave \"\"\nappendonly no\n",
        dir.display()
    );
    let mut access_lines = access.tls.map_or(Vec::new(), |tls| {
        let mut l = tls.server_lines(port);
        l.push("tls-replication yes".into());
        l
    });
    if let Some(password) = access.password {
        access_lines.push(format!("requirepass {password}"));
        access_lines.push(format!("masterauth {password}"));
    }
    for l in lines.iter().chain(&access_lines) {
        text.push_str(l);
        text.push('\n');
    }
    let path = dir.join("redis.conf");
    std::fs::write(&path, text).unwrap();
    path
}

/// A master, its replica and three sentinels watching it (quorum 2), with
/// `down_ms` as the sentinels' down-after-milliseconds.
pub struct Sentinels {
    pub master: Node,
    pub replica: Node,
    pub sentinels: Vec<Node>,
    /// The URL's scheme and `:password@`.
    access: (&'static str, String),
    _scratch: Scratch,
}

pub const MASTER_NAME: &str = "flowctrl-test";

/// The test's own connections to an HA node may take 500 ms to connect.
const HA_CONNECT: Duration = Duration::from_millis(500);

impl Sentinels {
    /// Plain TCP, no password: `Redis::new().sentinels(down_ms)`.
    pub fn start(down_ms: u64) -> Self {
        Redis::new().sentinels(down_ms)
    }

    fn start_with(down_ms: u64, access: Redis) -> Self {
        let scratch = Scratch::in_memory("sentinels");
        let (mport, rport) = (free_port(), free_port());
        let master = Node::start(
            write_conf(&scratch, "master", mport, &[], access),
            mport,
            &[],
            access,
            HA_CONNECT,
        );
        let replica = Node::start(
            write_conf(
                &scratch,
                "replica",
                rport,
                &[format!("replicaof 127.0.0.1 {mport}")],
                access,
            ),
            rport,
            &[],
            access,
            HA_CONNECT,
        );
        // Sentinels give the master's password and ask for none.
        let sentinel_access = Redis {
            password: None,
            ..access
        };
        let sentinels = (0..3)
            .map(|i| {
                let port = free_port();
                let mut lines = vec![
                    format!("sentinel monitor {MASTER_NAME} 127.0.0.1 {mport} 2"),
                    format!("sentinel down-after-milliseconds {MASTER_NAME} {down_ms}"),
                    // A sentinel retries a failover that did not complete
                    // after twice this: under a CPU hog the first election
                    // can split (seen: promoted 7.2 s after the kill at
                    // 2000), and a retry 20 s later outlasts the tests.
                    format!("sentinel failover-timeout {MASTER_NAME} 1000"),
                ];
                if let Some(password) = access.password {
                    lines.push(format!("sentinel auth-pass {MASTER_NAME} {password}"));
                }
                let conf = write_conf(
                    &scratch,
                    &format!("sentinel{i}"),
                    port,
                    &lines,
                    sentinel_access,
                );
                Node::start(conf, port, &["--sentinel"], sentinel_access, HA_CONNECT)
            })
            .collect();
        let s = Self {
            master,
            replica,
            sentinels,
            access: (access.scheme(), access.auth()),
            _scratch: scratch,
        };
        // Ready: the replica in sync, and every sentinel knows the others
        // and the replica (a failover needs both).
        let began = Instant::now();
        loop {
            let synced = s
                .replica
                .try_command::<String>(&["INFO", "replication"])
                .is_ok_and(|i| i.contains("master_link_status:up"));
            let known = s.sentinels.iter().all(|n| {
                let others: redis::RedisResult<Vec<redis::Value>> =
                    n.try_command(&["SENTINEL", "sentinels", MASTER_NAME]);
                let replicas: redis::RedisResult<Vec<redis::Value>> =
                    n.try_command(&["SENTINEL", "replicas", MASTER_NAME]);
                others.is_ok_and(|o| o.len() == 2) && replicas.is_ok_and(|r| r.len() == 1)
            });
            if synced && known {
                break;
            }
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "the sentinels did not form"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }

    pub fn url(&self) -> String {
        let (scheme, auth) = &self.access;
        let hosts = addresses(&self.sentinels).join(",");
        format!("{scheme}+sentinel://{auth}{hosts}/{MASTER_NAME}/0")
    }

    /// A lone sentinel that names a master on a port nobody serves, as a
    /// sentinel that has not heard of a failover yet names the dead one.
    pub fn stale_sentinel(scratch: &Scratch) -> Node {
        let (port, dead) = (free_port(), free_port());
        let conf = write_conf(
            scratch,
            "stale-sentinel",
            port,
            &[format!("sentinel monitor {MASTER_NAME} 127.0.0.1 {dead} 2")],
            Redis::new(),
        );
        Node::start(conf, port, &["--sentinel"], Redis::new(), HA_CONNECT)
    }

    /// What each sentinel says of itself and the master (tilt, flags,
    /// failover state, the last vote): for a failover that did not come.
    pub fn state(&self) -> String {
        self.sentinels
            .iter()
            .map(|n| {
                let info: String = n
                    .try_command(&["INFO", "sentinel"])
                    .unwrap_or_else(|e| e.to_string());
                let tilt = info.lines().find(|l| l.starts_with("sentinel_tilt"));
                let master: Vec<String> = n
                    .try_command(&["SENTINEL", "master", MASTER_NAME])
                    .unwrap_or_default();
                let wanted = [
                    "flags",
                    "failover-state",
                    "leader",
                    "leader-epoch",
                    "config-epoch",
                ];
                let fields: Vec<String> = master
                    .chunks(2)
                    .filter(|kv| kv.len() == 2 && wanted.contains(&kv[0].as_str()))
                    .map(|kv| format!("{}={}", kv[0], kv[1]))
                    .collect();
                format!("sentinel {}: {tilt:?} {}", n.port, fields.join(" "))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The master's port, as the first sentinel that answers names it.
    pub fn named_master(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|n| {
            let addr: Option<(String, u16)> = n
                .try_command(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME])
                .ok()?;
            addr.map(|(_, port)| port)
        })
    }
}

/// A Redis Cluster: three masters, each with one replica, with
/// `node_timeout_ms` as cluster-node-timeout.
pub struct Cluster {
    pub nodes: Vec<Node>,
    /// The URL's scheme and `:password@`.
    access: (&'static str, String),
    _scratch: Scratch,
}

impl Cluster {
    /// Plain TCP, no password, a replica each:
    /// `Redis::new().cluster(node_timeout_ms, 1)`.
    pub fn start(node_timeout_ms: u64) -> Self {
        Redis::new().cluster(node_timeout_ms, 1)
    }

    fn start_with(node_timeout_ms: u64, replicas: usize, access: Redis) -> Self {
        let scratch = Scratch::in_memory("cluster");
        let tls_bus: &[String] = if access.tls.is_some() {
            &["tls-cluster yes".to_string()]
        } else {
            &[]
        };
        let nodes: Vec<Node> = (0..3 * (1 + replicas))
            .map(|i| {
                let port = free_port();
                let conf = write_conf(
                    &scratch,
                    &format!("node{i}"),
                    port,
                    &[
                        "cluster-enabled yes".into(),
                        format!("cluster-node-timeout {node_timeout_ms}"),
                        // A replica of an idle master hears from it only
                        // at each ping: without these it may refuse to
                        // take over, its data "too old".
                        "cluster-replica-validity-factor 0".into(),
                        "repl-ping-replica-period 1".into(),
                        "cluster-config-file nodes.conf".into(),
                        // Named: the default, port + 10000, may be past 65535.
                        format!("cluster-port {}", free_port()),
                    ]
                    .iter()
                    .chain(tls_bus)
                    .cloned()
                    .collect::<Vec<_>>(),
                    access,
                );
                Node::start(conf, port, &[], access, HA_CONNECT)
            })
            .collect();
        let addrs = addresses(&nodes);
        let mut cli_args: Vec<String> = access.tls.map_or(Vec::new(), |tls| {
            vec![
                "--tls".into(),
                "--cacert".into(),
                tls.ca.display().to_string(),
            ]
        });
        if let Some(password) = access.password {
            cli_args.extend(["-a".into(), password.into(), "--no-auth-warning".into()]);
        }
        let out = Command::new("redis-cli")
            .args(&cli_args)
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli must be installed (scripts/setup.sh installs it)");
        assert!(out.status.success(), "cluster create: {out:?}");
        let cluster = Self {
            nodes,
            access: (access.scheme(), access.auth()),
            _scratch: scratch,
        };
        let began = Instant::now();
        while !cluster.nodes.iter().all(|n| {
            n.try_command::<String>(&["CLUSTER", "INFO"])
                .is_ok_and(|i| i.contains("cluster_state:ok"))
        }) || cluster.masters().len() != 3
        {
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "the cluster did not form"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    pub fn url(&self) -> String {
        let (scheme, auth) = &self.access;
        let hosts = addresses(&self.nodes).join(",");
        format!("{scheme}+cluster://{auth}{hosts}")
    }

    /// The indexes of the nodes that are masters now, as they say.
    pub fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                self.nodes[i].pid().is_some()
                    && self.nodes[i]
                        .try_command::<Vec<redis::Value>>(&["ROLE"])
                        .is_ok_and(|r| {
                            matches!(r.first(), Some(redis::Value::BulkString(b)) if b == b"master")
                        })
            })
            .collect()
    }

    /// The index of the master serving `key`'s slot now, as the first live
    /// node that answers says (`CLUSTER SLOTS`).
    pub fn master_of(&self, key: &str) -> Option<usize> {
        let slot = key_slot(key) as i64;
        let port = self
            .nodes
            .iter()
            .filter(|n| n.pid().is_some())
            .find_map(|n| {
                let ranges: Vec<Vec<redis::Value>> = n.try_command(&["CLUSTER", "SLOTS"]).ok()?;
                ranges.iter().find_map(|r| match r.as_slice() {
                    [
                        redis::Value::Int(a),
                        redis::Value::Int(b),
                        redis::Value::Array(master),
                        ..,
                    ] if (*a..=*b).contains(&slot) => match master.get(1) {
                        Some(redis::Value::Int(port)) => Some(*port as u16),
                        _ => None,
                    },
                    _ => None,
                })
            })?;
        self.nodes.iter().position(|n| n.port == port)
    }
}

/// A key's cluster slot: CRC16 (XMODEM) of its hash tag, mod 16384.
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tag = match (
        key.find('{'),
        key.find('{').and_then(|o| key[o + 1..].find('}')),
    ) {
        (Some(open), Some(len)) if len > 0 => &bytes[open + 1..open + 1 + len],
        _ => bytes,
    };
    let mut crc: u16 = 0;
    for b in tag {
        crc ^= (*b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                crc << 1 ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}
