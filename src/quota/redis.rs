//! The Redis store: one Lua script per pull, loaded once and called by its
//! SHA (the `redis` crate reloads it on NOSCRIPT), over a synchronous
//! connection; every request ends within connect_timeout + timeout (see
//! `connect` and `link`).
//!
//! The script reads the server's clock (`TIME`) and refuses a pull for a
//! slice the server is not in, answering its time instead: a host whose
//! clock is off corrects its offset and asks again, so every host spends
//! from the key the store's clock names.

use super::redact::redact;
use std::time::Duration;

use parking_lot::Mutex;

use super::connect::{Conn, Target};
use super::deadline::Budget;
use super::keyed::{KEYED, KeyBatch, KeyReply, key_call, key_record_key, key_reply};
use super::keys::{record_copies, record_key};
use super::redis_url::{RedisSettings, parse};
use super::script::{Carried, PULL, pull_call, script_values};
use super::store::{Ask, QuotaStore, Reply};
use crate::error::{Error, ErrorKind, Result};

/// Replaces a shard's copy of a task's record with ARGV's fields (none:
/// removes it).
const COPY_RECORD: &str = r#"
redis.call('DEL', KEYS[1])
if #ARGV > 0 then redis.call('HSET', KEYS[1], unpack(ARGV)) end
"#;

pub(crate) struct RedisStore {
    target: Target,
    settings: RedisSettings,
    script: redis::Script,
    keyed: redis::Script,
    /// Idle connections with the pid that opened them: a forked child never
    /// uses its parent's socket. Taken with `try_lock` only, so a fork while
    /// another thread held the lock cannot freeze the child.
    idle: Mutex<Vec<(u32, Conn)>>,
    /// The record the last pull's reply carried.
    carried: Carried,
}

impl RedisStore {
    /// The fields of the hash at `key` (a record).
    fn hash(&self, key: &str) -> Result<Vec<(String, String)>> {
        let read = |conn: &mut Conn| redis::cmd("HGETALL").arg(key).query(conn);
        self.round_trip("read a record", read)
    }

    /// The store at `url` with the options' prefix and timeouts (the URL's
    /// query overrides them).
    pub fn open(url: &str, options: &super::StoreOptions) -> Result<Self> {
        Self::new(parse(
            url,
            RedisSettings {
                url: String::new(),
                prefix: options.key_prefix.clone(),
                timeout: options.timeout,
                connect_timeout: options.connect_timeout,
            },
        )?)
    }

    /// Parses the URL and prepares the client; does not connect (a store
    /// that is down at open is a failed store, not a failed open).
    pub fn new(settings: RedisSettings) -> Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let target = Target::open(&settings.url)?;
        Ok(Self {
            target,
            settings,
            script: redis::Script::new(PULL),
            keyed: redis::Script::new(KEYED),
            idle: Mutex::new(Vec::new()),
            carried: Carried::default(),
        })
    }

    /// An idle connection of this process, if there is one.
    fn idle(&self) -> Option<Conn> {
        let pid = std::process::id();
        let mut idle = self.idle.try_lock()?;
        while let Some((owner, conn)) = idle.pop() {
            if owner == pid {
                return Some(conn);
            }
            // The parent's socket: closing our copy leaves it alone.
        }
        None
    }

    fn connect(&self, budget: &mut Budget) -> Result<Conn> {
        self.target
            .connect(self.settings.connect_timeout, budget)
            .map_err(|e| self.error("connect", &e, budget))
    }

    /// One request on an idle connection of this process or a new one,
    /// within its bound (connect_timeout + timeout, see `connect`).
    /// Any error may leave a reply in flight or a node that is now a
    /// replica (READONLY after a failover): the connection is dropped, so
    /// the next request connects afresh. An idle connection may have died
    /// with a server since restarted: one that fails other than by a
    /// timeout is replaced once at once (within what is left of the
    /// bound), not counted as an outage.
    /// One run of `script` with these KEYS and ARGV.
    fn run<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        doing: &str,
        keys: &[String],
        args: &[String],
    ) -> Result<T> {
        self.round_trip(doing, |conn| {
            let mut invocation = script.prepare_invoke();
            for key in keys {
                invocation.key(key);
            }
            for arg in args {
                invocation.arg(arg);
            }
            invocation.invoke(conn)
        })
    }

    pub(crate) fn round_trip<T>(
        &self,
        doing: &str,
        call: impl Fn(&mut Conn) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let timeout = self.settings.timeout;
        let mut budget = Budget::new(self.settings.connect_timeout + timeout);
        super::deadline::clear_timed_out();
        let command = |conn: &mut Conn, budget: &Budget| {
            super::deadline::within(budget.step(timeout), || call(conn))
        };
        let (conn, answer) = match self.idle() {
            Some(mut conn) => match command(&mut conn, &budget) {
                Err(e) if !e.is_timeout() && !super::deadline::timed_out_since_clear() => {
                    let mut fresh = self.connect(&mut budget)?;
                    let answer = command(&mut fresh, &budget);
                    (fresh, answer)
                }
                answer => (conn, answer),
            },
            None => {
                let mut conn = self.connect(&mut budget)?;
                let answer = command(&mut conn, &budget);
                (conn, answer)
            }
        };
        let value = answer.map_err(|e| self.error(doing, &e, &budget))?;
        if let Some(mut idle) = self.idle.try_lock() {
            idle.push((std::process::id(), conn));
        }
        Ok(value)
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.settings.prefix
    }

    /// Writes shard `shard`'s copy of `task`'s record: `fields` (the
    /// version among them), none = no copy. One round trip (atomic: a pull
    /// never sees half a copy).
    pub(crate) fn write_copy(
        &self,
        task: &str,
        (shard, shards): (u32, u32),
        fields: &[(String, String)],
    ) -> Result<()> {
        let key = record_key(&self.settings.prefix, task, shard, shards);
        let script = redis::Script::new(COPY_RECORD);
        self.round_trip("write a shard's copy of the task's record", |conn| {
            let mut call = script.key(&key);
            for (field, value) in fields {
                call.arg(field).arg(value);
            }
            call.invoke::<()>(conn)
        })
    }

    /// Removes every shard's copy of `task`'s record: one round trip, one
    /// per shard on a cluster (each copy has its own slot).
    pub(crate) fn remove_copies(&self, task: &str) -> Result<()> {
        let keys = record_copies(&self.settings.prefix, task);
        let groups: Vec<&[String]> = if self.is_cluster() {
            keys.chunks(1).collect()
        } else {
            vec![&keys[..]]
        };
        for group in groups {
            self.round_trip("remove the shards' copies of the task's record", |conn| {
                redis::cmd("DEL").arg(group).query::<()>(conn)
            })?;
        }
        Ok(())
    }

    /// Keys of different hash tags cannot share a command or a pipeline.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster(_))
    }

    /// A request's error; a timeout says how long the request took and
    /// what its bound was (not the socket's "Resource temporarily
    /// unavailable").
    fn error(&self, doing: &str, e: &redis::RedisError, budget: &Budget) -> Error {
        let what = if e.is_timeout() || super::deadline::timed_out_since_clear() {
            format!(
                "the store timed out after {} (a request's bound: {})",
                ms(budget.began.elapsed()),
                ms(budget.bound)
            )
        } else {
            e.to_string()
        };
        Error::new(
            ErrorKind::Store,
            format!("{}: {doing}: {what}", self.describe()),
        )
    }
}

impl QuotaStore for RedisStore {
    fn pull(&self, ask: &Ask<'_>) -> Result<Reply> {
        let (keys, args) = pull_call(&self.settings.prefix, ask);
        let values = script_values(ask.task, self.run(&self.script, "pull", &keys, &args)?)?;
        self.carried.reply(ask, &values)
    }

    fn pull_keys(&self, batch: &KeyBatch<'_>) -> Option<Result<KeyReply>> {
        let (keys, args) = key_call(&self.settings.prefix, batch);
        let run = self.run::<Vec<i64>>(&self.keyed, "pull keys' quota", &keys, &args);
        Some(run.and_then(|r| key_reply(batch, &r)))
    }

    fn describe(&self) -> String {
        format!("Redis at {}", redact(&self.settings.url))
    }

    fn repair_copy(&self, task: &str, at: (u32, u32), fields: &[(String, String)]) -> Result<()> {
        self.write_copy(task, at, fields)
    }

    fn record(&self, task: &str) -> Result<Option<Vec<(String, String)>>> {
        let fields = self.hash(&record_key(&self.settings.prefix, task, 0, 1))?;
        Ok((!fields.is_empty()).then_some(fields))
    }

    fn record_at(&self, task: &str, version: u64) -> Result<Option<Vec<(String, String)>>> {
        self.carried.record_at(task, version, || self.record(task))
    }

    fn key_record(&self, task: &str) -> Result<Option<Vec<(String, String)>>> {
        self.hash(&key_record_key(&self.settings.prefix, task))
            .map(Some)
    }
}

/// `d` in ms: whole, or to a tenth.
fn ms(d: Duration) -> String {
    if d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    }
}
