//! A real `redis-server` for tests: started on a free loopback port, stopped
//! (by its pid) when dropped. Tests that need one fail with a clear message
//! when `redis-server` is missing (the README's test command installs it).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
}

impl RedisServer {
    pub fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut server = Self { port, child: None };
        server.restart();
        server
    }

    /// Starts the server again on the same port (after [`RedisServer::kill`]).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "yes",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/setup.sh installs it)");
        self.child = Some(child);
        let began = Instant::now();
        while self.connection().is_err() {
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        // The test's own connection: a loaded 2-core machine may take more
        // than the library's short timeouts to accept it.
        let conn = client.get_connection_with_timeout(Duration::from_secs(5))?;
        conn.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(conn)
    }

    /// Runs one command and returns its answer.
    pub fn command<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut self.connection().expect("connected"))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
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

    /// SIGKILLs the server (by its pid) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
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
