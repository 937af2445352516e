//! Driving the real `flowctrl` binary: running a command against a table,
//! reading the key/value lines of its text, and its metrics endpoint over
//! real HTTP. Included by the CLI tests only (`#[path]`): the binary exists
//! only with the `cli` feature.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How a command ended and what it wrote.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn command(table: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flowctrl"));
    c.env_remove("FLOWCTRL_TABLE")
        .env_remove("FLOWCTRL_STORE")
        .env_remove("RUST_BACKTRACE")
        .env_remove("FLOWCTRL_LOG")
        .arg("--table")
        .arg(table);
    c
}

fn finish(mut c: Command, args: &[&str]) -> Run {
    let out = c.args(args).output().expect("the flowctrl binary runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).expect("UTF-8 output"),
        stderr: String::from_utf8(out.stderr).expect("UTF-8 errors"),
    }
}

/// `flowctrl --table TABLE ARGS...`.
pub fn flowctrl(table: &Path, args: &[&str]) -> Run {
    finish(command(table), args)
}

/// The same, as user `uid` (the test runs as root).
pub fn flowctrl_as(uid: u32, table: &Path, args: &[&str]) -> Run {
    let mut c = command(table);
    c.uid(uid).gid(uid);
    finish(c, args)
}

/// A command that must succeed silently on stderr; its stdout.
pub fn ok(table: &Path, args: &[&str]) -> String {
    let run = flowctrl(table, args);
    assert_eq!(
        (run.code, run.stderr.as_str()),
        (0, ""),
        "flowctrl {args:?}: {run:?}"
    );
    run.stdout
}

/// A command that must fail with one line on stderr; that line.
pub fn fails(run: Run) -> String {
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.starts_with("flowctrl: ") && run.stderr.lines().count() == 1,
        "one line on stderr: {run:?}"
    );
    assert!(
        !run.stderr.contains("panicked") && !run.stderr.contains("RUST_BACKTRACE"),
        "{run:?}"
    );
    run.stderr.trim_end().to_string()
}

/// The value of the `  key   value` line of a task's `stats` text.
pub fn field(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| {
            let rest = l.strip_prefix("  ")?.strip_prefix(key)?;
            rest.starts_with("  ").then(|| rest.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no {key:?} line in:\n{text}"))
}

/// `flowctrl metrics` on a free loopback port; killed (by its pid) when
/// dropped.
pub struct Server {
    child: Child,
    pub port: u16,
}

impl Server {
    pub fn start(table: &Path) -> Self {
        let mut child = command(table)
            .args(["metrics", "--listen", "127.0.0.1:0"])
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("flowctrl metrics starts");
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .split("http://127.0.0.1:")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no address announced: {line:?}"));
        Self { child, port }
    }

    /// `METHOD PATH` over a fresh connection: (status code, body).
    pub fn request(&self, method: &str, path: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").expect("a response head");
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .expect("a Content-Length")
            .parse()
            .unwrap();
        if method != "HEAD" {
            assert_eq!(body.len(), length, "the body is as long as announced");
        }
        (status, body.to_string())
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        self.request("GET", path)
    }

    /// How the server ended, if it did.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("the server's status")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `METHOD PATH` to the server on loopback `port`, over a fresh
/// connection: (status, body), or why there was no answer.
pub fn http(port: u16, method: &str, path: &str) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .map_err(|e| format!("send: {e}"))?;
    let mut response = String::new();
    s.read_to_string(&mut response)
        .map_err(|e| format!("read: {e} after {response:?}"))?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no response head: {response:?}"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status: {head:?}"))?;
    Ok((status, body.to_string()))
}

/// Clients that hold an HTTP server's connections without finishing a
/// request, each reconnecting when the server closes it, until stopped:
/// `slow` ones send a request one byte at a time, `half` ones send half a
/// request head and wait.
#[derive(Default)]
pub struct Hogs {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

const REQUEST: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

impl Hogs {
    /// `n` clients sending a byte every `every`.
    pub fn slow(mut self, port: u16, n: usize, every: Duration) -> Self {
        for _ in 0..n {
            let stop = self.stop.clone();
            self.threads.push(std::thread::spawn(move || {
                let mut connections = 0;
                let stopped = || stop.load(std::sync::atomic::Ordering::Relaxed);
                while !stopped() {
                    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    };
                    connections += 1;
                    for byte in REQUEST {
                        if stopped() || s.write_all(&[*byte]).is_err() {
                            break;
                        }
                        let began = std::time::Instant::now();
                        while !stopped() && began.elapsed() < every {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
                connections
            }));
        }
        self
    }

    /// `n` connections holding half a request head each.
    pub fn half(mut self, port: u16, n: usize) -> Self {
        let stop = self.stop.clone();
        let open = move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
            s.write_all(&REQUEST[..REQUEST.len() / 2]).ok()?;
            s.set_nonblocking(true).ok()?;
            Some(s)
        };
        self.threads.push(std::thread::spawn(move || {
            let mut held: Vec<Option<TcpStream>> = (0..n).map(|_| open()).collect();
            let mut connections = n as u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                for c in &mut held {
                    let closed = match c {
                        None => true,
                        Some(s) => !matches!(
                            s.read(&mut [0u8; 64]),
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
                        ),
                    };
                    if closed {
                        *c = open();
                        connections += 1;
                    }
                }
            }
            connections
        }));
        self
    }

    /// Stops them all: the connections they opened.
    pub fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.threads.into_iter().map(|t| t.join().unwrap()).sum()
    }
}
