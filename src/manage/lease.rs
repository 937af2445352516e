//! One active manager: a lease in the store with a fencing token.
//!
//! The lease is a key `<prefix>{manager}:lease` holding "<id> <token>",
//! set with `NX PX` by whoever finds it free and renewed by its holder at a
//! third of its TTL. Each acquisition takes a new token from
//! `<prefix>{manager}:fence`: one more than the last, and at least the
//! store's clock in ms, so tokens keep growing across a store that lost its
//! keys. A lease can lapse while its holder
//! is paused (a stop, a long GC, a partition): the holder does not know it
//! lost it. So every write a manager makes carries its token, and each
//! task's keys keep the highest token that wrote them (`write`): a write
//! with an older one is refused, whatever its sender believes.

use std::time::{Duration, Instant};

use crate::error::Result;
use crate::quota::RedisStore;

/// Takes the lease if free, renews it if ours; else names the holder.
/// KEYS: lease, token counter. ARGV: id, TTL ms, our token (0: none).
const ACQUIRE: &str = r#"
local held = redis.call('GET', KEYS[1])
if held then
  local id, token = string.match(held, '^(%S+) (%d+)$')
  if id == ARGV[1] and token == ARGV[3] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(token), held}
  end
  return {0, tonumber(token) or 0, held}
end
-- The next token: above the last one, and at least the store's clock in
-- ms, so tokens still grow after the store lost its keys (a restart): a
-- token issued then is never below one the tasks' fences kept.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token = math.max((tonumber(redis.call('GET', KEYS[2])) or 0) + 1, now)
redis.call('SET', KEYS[2], string.format('%.0f', token))
token = string.format('%.0f', token)
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. token, 'NX', 'PX', ARGV[2])
return {1, tonumber(token), ''}
"#;

/// Gives the lease up if ours. KEYS: lease. ARGV: "<id> <token>".
const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

/// This instance's view of the lease.
pub(crate) struct Lease {
    id: String,
    ttl: Duration,
    keys: [String; 2],
    acquire: redis::Script,
    /// Our token while we hold the lease (by our last successful renewal).
    token: u64,
    /// When the lease we hold lapses at the latest, by our clock: measured
    /// from before the request that renewed it.
    until: Option<Instant>,
    /// Who holds it, as last read ("<id> <token>").
    pub holder: String,
}

/// What a renewal found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Held {
    /// We hold it, with this token; `new` at an acquisition.
    Ours { token: u64, new: bool },
    /// Another instance does (or we lost it: then `lost`).
    Theirs { lost: bool },
}

impl Lease {
    pub fn new(prefix: &str, id: &str, ttl: Duration) -> Self {
        Self {
            id: id.to_string(),
            ttl,
            keys: [
                format!("{prefix}{{manager}}:lease"),
                format!("{prefix}{{manager}}:fence"),
            ],
            acquire: redis::Script::new(ACQUIRE),
            token: 0,
            until: None,
            holder: String::new(),
        }
    }

    /// Acquires or renews; an error (the store failing) leaves us holding
    /// the lease only until it would lapse.
    pub fn renew(&mut self, store: &RedisStore) -> Result<Held> {
        let sent = Instant::now();
        let (ours, token, holder): (i64, u64, String) =
            store.round_trip("renew the manager's lease", |conn| {
                self.acquire
                    .key(&self.keys[0])
                    .key(&self.keys[1])
                    .arg(&self.id)
                    .arg(self.ttl.as_millis() as u64)
                    .arg(self.token)
                    .invoke(conn)
            })?;
        if ours == 1 {
            let new = token != self.token;
            self.token = token;
            self.until = Some(sent + self.ttl);
            self.holder = format!("{} {token}", self.id);
            return Ok(Held::Ours { token, new });
        }
        let lost = self.token != 0;
        self.token = 0;
        self.until = None;
        self.holder = holder;
        Ok(Held::Theirs { lost })
    }

    /// Our token if the lease cannot have lapsed yet by our clock.
    pub fn token(&self) -> Option<u64> {
        self.until
            .filter(|until| Instant::now() < *until)
            .map(|_| self.token)
    }

    /// Gives the lease up (a clean stop: the standby need not wait).
    pub fn release(&mut self, store: &RedisStore) -> Result<()> {
        if self.token == 0 {
            return Ok(());
        }
        let mine = format!("{} {}", self.id, self.token);
        let script = redis::Script::new(RELEASE);
        let _: i64 = store.round_trip("release the manager's lease", |conn| {
            script.key(&self.keys[0]).arg(&mine).invoke(conn)
        })?;
        self.token = 0;
        self.until = None;
        Ok(())
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}
