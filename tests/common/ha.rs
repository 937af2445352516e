//! Real highly available Redis setups for tests, on free loopback ports:
//! a master, its replica and three sentinels; a Redis Cluster of three
//! masters, each with a replica. Either may speak TLS only (see `tls`).
//! Every process is stopped by its pid when the setup is dropped; files
//! live in a scratch directory.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Scratch;
use super::tls::Tls;

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One `redis-server` process (a server or a sentinel).
pub struct Node {
    pub port: u16,
    child: Option<Child>,
    /// A TLS node: the CA its certificate is checked against.
    ca: Option<Vec<u8>>,
}

impl Node {
    fn start(conf: PathBuf, port: u16, extra: &[&str], tls: Option<&Tls>) -> Self {
        let child = Command::new("redis-server")
            .arg(&conf)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/setup.sh installs it)");
        let node = Self {
            port,
            child: Some(child),
            ca: tls.map(Tls::ca_pem),
        };
        let began = Instant::now();
        while node.try_command::<String>(&["PING"]).is_err() {
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "port {port} did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        node
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn try_command<T: redis::FromRedisValue>(&self, args: &[&str]) -> redis::RedisResult<T> {
        let client = match &self.ca {
            None => redis::Client::open(format!("redis://127.0.0.1:{}", self.port))?,
            Some(ca) => redis::Client::build_with_tls(
                format!("rediss://127.0.0.1:{}", self.port),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca.clone()),
                },
            )?,
        };
        let mut conn = client.get_connection_with_timeout(Duration::from_millis(500))?;
        conn.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut conn)
    }

    pub fn command<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        self.try_command(args)
            .unwrap_or_else(|e| panic!("port {}: {args:?}: {e}", self.port))
    }

    /// Script calls clients made (`EVALSHA` and script loads) on this node.
    pub fn script_calls(&self) -> u64 {
        super::redis::command_calls(
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

/// A server's configuration file; with `tls`, TLS on `port` only, and TLS
/// for its replication (and a sentinel's connections, a cluster's bus).
fn write_conf(
    scratch: &Scratch,
    name: &str,
    port: u16,
    lines: &[String],
    tls: Option<&Tls>,
) -> PathBuf {
    let dir = scratch.path(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = format!(
        "bind 127.0.0.1\nport {port}\ndir {}\nsave \"\"\nappendonly no\n",
        dir.display()
    );
    let tls_lines = tls.map_or(Vec::new(), |tls| {
        let mut l = tls.server_lines(port);
        l.push("tls-replication yes".into());
        l
    });
    for l in lines.iter().chain(&tls_lines) {
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
    tls: bool,
    _scratch: Scratch,
}

pub const MASTER_NAME: &str = "flowctrl-test";

impl Sentinels {
    pub fn start(down_ms: u64) -> Self {
        Self::start_with(down_ms, None)
    }

    /// With `tls`: every server and sentinel on a TLS port only.
    pub fn start_with(down_ms: u64, tls: Option<&Tls>) -> Self {
        let scratch = Scratch::new("sentinels");
        let (mport, rport) = (free_port(), free_port());
        let master = Node::start(
            write_conf(&scratch, "master", mport, &[], tls),
            mport,
            &[],
            tls,
        );
        let replica = Node::start(
            write_conf(
                &scratch,
                "replica",
                rport,
                &[format!("replicaof 127.0.0.1 {mport}")],
                tls,
            ),
            rport,
            &[],
            tls,
        );
        let sentinels = (0..3)
            .map(|i| {
                let port = free_port();
                let conf = write_conf(
                    &scratch,
                    &format!("sentinel{i}"),
                    port,
                    &[
                        format!("sentinel monitor {MASTER_NAME} 127.0.0.1 {mport} 2"),
                        format!("sentinel down-after-milliseconds {MASTER_NAME} {down_ms}"),
                        format!("sentinel failover-timeout {MASTER_NAME} 10000"),
                    ],
                    tls,
                );
                Node::start(conf, port, &["--sentinel"], tls)
            })
            .collect();
        let s = Self {
            master,
            replica,
            sentinels,
            tls: tls.is_some(),
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
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}+sentinel://{}/{MASTER_NAME}/0", hosts.join(","))
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
            None,
        );
        Node::start(conf, port, &["--sentinel"], None)
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
    tls: bool,
    _scratch: Scratch,
}

impl Cluster {
    pub fn start(node_timeout_ms: u64) -> Self {
        Self::start_with(node_timeout_ms, 1, None)
    }

    /// Three masters with `replicas` each; with `tls`, every node on a TLS
    /// port only, its cluster bus over TLS too.
    pub fn start_with(node_timeout_ms: u64, replicas: usize, tls: Option<&Tls>) -> Self {
        let scratch = Scratch::new("cluster");
        let tls_bus: &[String] = if tls.is_some() {
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
                    tls,
                );
                Node::start(conf, port, &[], tls)
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let tls_args: Vec<String> = tls.map_or(Vec::new(), |tls| {
            vec![
                "--tls".into(),
                "--cacert".into(),
                tls.ca.display().to_string(),
            ]
        });
        let out = Command::new("redis-cli")
            .args(&tls_args)
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli must be installed (scripts/setup.sh installs it)");
        assert!(out.status.success(), "cluster create: {out:?}");
        let cluster = Self {
            nodes,
            tls: tls.is_some(),
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
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}+cluster://{}", hosts.join(","))
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
