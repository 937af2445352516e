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

use super::connect::{Budget, Conn, Target};
use super::keys::{record_key, shape_key, slice_key};
use super::link;
use super::record::MAX_VERSION;
use super::record::Refresh;
use super::store::{Ask, QuotaStore, Reply};
use crate::error::{Error, ErrorKind, Result};
use crate::format::{MAX_SHARDS, MAX_SLICE_MS, MIN_SLICE_MS};
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

/// One pull. The slice's key KEYS[1] is a hash: `left` (permits left),
/// `quota` (the threshold it was created with) and one census record per
/// host, `<host id>` → "accounted asked granted claimed offset_us":
/// accounted is what the key has charged the host with (its grants and the
/// deductions below), so the key can tell what the host took outside it.
///
/// ARGV: 1 quota (a new key starts here), 2 want, 3 slice_ms, 4 slice,
/// 5 TTL ms, 6 host id, 7 claimed (all the host took of the slice so far:
/// grants from this key or an earlier one, fallback admissions), 8 the
/// host's clock offset µs, 9 redeem ("1": a puller of this host died; a
/// charge beyond the claim is a grant it never received, handed back), 10
/// the slice's burst: a slice releases its burst at once and the rest
/// evenly (cluster-wide), so a grant is no more than what has been released
/// and not yet given; with less than asked comes the wait until the ask
/// will have been; 11 the version of the task's record KEYS[2] the host
/// last saw, 12 the host's own slice_ms (ARGV 3 may be another host's), 13
/// "1" when the numbers sent are the record's, 14 the host's demand, 15–18
/// what its releases reported in the slice so far (success, dropped, mean
/// µs, p99 µs), kept in its census record for a manager, 19 "1" when the
/// host can keep a reservation (a grant usable only after the wait: see the
/// script), 20 (only from a host that gives back idle quota) what the host
/// gave back of the slice while idle (of its claim: the key puts back what
/// it was not told of). A key a manager
/// wrote ahead holds `left` and `quota` only: its first pull carries the
/// census in as a host's creation does, and only a creation is reported
/// (the 9th answer) and given a TTL.
///
/// First the numbers: a record whose version is not the one sent answers
/// {-2, version} (the host fetches it and asks again); without a record
/// (or spending by its own numbers), the task's shape key KEYS[3] holds the
/// slice_ms of the host that cut its keys first, and a host cut otherwise
/// is answered {-3, slice_ms} to cut its slices the same way. Only the
/// first host's pulls keep the shape alive: when it stops, the shape
/// expires with its keys and the others return to their own.
///
/// A host that claims more than the key charged it with took the rest from
/// a key the store lost (a restart, a failover) or in fallback: the key
/// deducts the difference once, since it then charges it. A repeated request
/// claims no more than the first, and a lost reply leaves the key charging a
/// grant the host never got (less admitted, never more): neither can deduct
/// twice. A claim smaller than the host's last one in the key is another
/// table using the same host id: reported as a conflict. Returns {granted,
/// left, server seconds, server µs, hosts, conflict, wait ms, mismatch,
/// created, usable ms}:
/// mismatch = 1 when the key was created with another quota than this
/// host's, or the host spends by another's slicing (it spends by the key's).
/// granted = -1 when the server is in another slice (nothing taken), -2 and
/// -3 as above. The grant rule is `store::grant`.
pub(crate) const PULL: &str = include_str!("pull.lua");

/// Replaces a shard's copy of a task's record with ARGV's fields (none:
/// removes it).
const COPY_RECORD: &str = r#"
redis.call('DEL', KEYS[1])
if #ARGV > 0 then redis.call('HSET', KEYS[1], unpack(ARGV)) end
"#;

/// What [`PULL`] returns: granted, left, server seconds, server µs, hosts,
/// host-id conflict, wait ms, threshold mismatch, key created, ms until a
/// reserved grant is usable (0: at once).
pub(crate) type ScriptReply = (i64, i64, i64, i64, i64, i64, i64, i64, i64, i64);

/// The KEYS and ARGV of one pull (see [`PULL`]); the simulator's store
/// (`sim`) sends the same to the same script.
pub(crate) fn pull_call(prefix: &str, ask: &Ask<'_>) -> (Vec<String>, Vec<String>) {
    let (task, shard) = (ask.task, ask.shard);
    let keys = vec![
        slice_key(prefix, task, shard, ask.slice),
        record_key(prefix, task, shard),
        shape_key(prefix, task, shard),
        slice_key(prefix, task, shard, ask.slice.wrapping_sub(1)),
    ];
    let flag = |on: bool| if on { "1" } else { "0" }.to_string();
    let mut args = vec![
        ask.quota.to_string(),
        ask.want.to_string(),
        ask.slice_ms.to_string(),
        ask.slice.to_string(),
        (2 * ask.slice_ms as u64 + 2000).to_string(),
        ask.host.to_string(),
        ask.claimed.to_string(),
        ask.offset_us.to_string(),
        flag(ask.redeem),
        ask.burst.to_string(),
        ask.record_version.to_string(),
        ask.own_slice_ms.to_string(),
        flag(ask.spends_record),
        ask.demand.to_string(),
        ask.health.success.to_string(),
        ask.health.dropped.to_string(),
        ask.health.mean_us.to_string(),
        ask.health.p99_us.to_string(),
        flag(ask.reserve),
    ];
    if ask.gives_back {
        args.push(ask.given.to_string());
    }
    (keys, args)
}

/// What the host reads of the script's reply, range-checked as strictly as
/// the same numbers from a config file: a slicing from the task's shape key
/// outside `slice_ms`'s range (a key set by hand, or corrupted), a record
/// version past what the script compares, or a grant above the ask is
/// refused as a store error (a redeem's lost grant counts as a slice's
/// quota at most). The pull then counts as failed and is logged,
/// and the task decides by its fallback policy, probing the store once per
/// probe interval: a hostile key never makes the host cut 1 ms slices (and
/// refuse everything while it pulls for each) nor pull again at once.
pub(crate) fn pull_reply(ask: &Ask<'_>, reply: ScriptReply) -> Result<Reply> {
    let (granted, left, sec, usec, hosts, conflict, wait, mismatch, created, usable) = reply;
    let refused = |why: String| {
        Err(Error::new(
            ErrorKind::Store,
            format!("task {}: the store answered {why}: refused", echo(ask.task)),
        ))
    };
    let store_us = sec.saturating_mul(1_000_000).saturating_add(usec);
    let refresh = match granted {
        -2 if !(0..=MAX_VERSION as i64).contains(&left) => {
            return refused(format!("record version {left}, not 0..={MAX_VERSION}"));
        }
        -2 => Some(Refresh::Record(left as u64)),
        -3 if !(MIN_SLICE_MS as i64..=MAX_SLICE_MS as i64).contains(&left) => {
            return refused(format!(
                "slice_ms {left} from its shape key {}, not {MIN_SLICE_MS}..={MAX_SLICE_MS}",
                echo(&shape_key("", ask.task, ask.shard))
            ));
        }
        -3 => Some(Refresh::Reslice(left as u32)),
        // A redeem may hand back a lost grant beside the ask: at most a
        // slice's quota.
        _ if granted > 0
            && granted as u64 > ask.want.saturating_add(ask.redeem as u64 * ask.quota) =>
        {
            return refused(format!("a grant of {granted} for an ask of {}", ask.want));
        }
        _ => None,
    };
    Ok(Reply {
        slice: super::store::slice_of(store_us, ask.slice_ms),
        granted: granted.max(0) as u64,
        left: left.max(0) as u64,
        store_us,
        hosts: hosts.max(0) as u64,
        host_conflict: conflict != 0,
        wait_ms: wait.max(0) as u64,
        config_conflict: mismatch != 0,
        refresh,
        created: created == 1,
        usable_ms: usable.max(0) as u64,
    })
}

pub(crate) struct RedisStore {
    target: Target,
    settings: RedisSettings,
    script: redis::Script,
    /// Idle connections with the pid that opened them: a forked child never
    /// uses its parent's socket. Taken with `try_lock` only, so a fork while
    /// another thread held the lock cannot freeze the child.
    idle: Mutex<Vec<(u32, Conn)>>,
}

impl RedisStore {
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
            idle: Mutex::new(Vec::new()),
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
    pub(crate) fn round_trip<T>(
        &self,
        doing: &str,
        call: impl Fn(&mut Conn) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let timeout = self.settings.timeout;
        let mut budget = Budget::new(self.settings.connect_timeout + timeout);
        link::clear_timed_out();
        let command =
            |conn: &mut Conn, budget: &Budget| link::within(budget.step(timeout), || call(conn));
        let (conn, answer) = match self.idle() {
            Some(mut conn) => match command(&mut conn, &budget) {
                Err(e) if !e.is_timeout() && !link::timed_out_since_clear() => {
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
        shard: u32,
        fields: &[(String, String)],
    ) -> Result<()> {
        let key = record_key(&self.settings.prefix, task, shard);
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
        let keys: Vec<String> = (1..MAX_SHARDS)
            .map(|i| record_key(&self.settings.prefix, task, i))
            .collect();
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
        let what = if e.is_timeout() || link::timed_out_since_clear() {
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
        let call = |conn: &mut Conn| -> redis::RedisResult<ScriptReply> {
            let mut invocation = self.script.prepare_invoke();
            for key in &keys {
                invocation.key(key);
            }
            for arg in &args {
                invocation.arg(arg);
            }
            invocation.invoke(conn)
        };
        pull_reply(ask, self.round_trip("pull", call)?)
    }

    fn describe(&self) -> String {
        format!("Redis at {}", redact(&self.settings.url))
    }

    fn repair_copy(&self, task: &str, shard: u32, fields: &[(String, String)]) -> Result<()> {
        self.write_copy(task, shard, fields)
    }

    fn record(&self, task: &str) -> Result<Option<Vec<(String, String)>>> {
        let key = record_key(&self.settings.prefix, task, 0);
        let fields: Vec<(String, String)> = self.round_trip("read the task's record", |conn| {
            redis::cmd("HGETALL").arg(&key).query(conn)
        })?;
        Ok((!fields.is_empty()).then_some(fields))
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
