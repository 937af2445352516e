//! The manager's writes: per task, one script call that checks the fencing
//! token, writes the task's record if its numbers changed, writes the next
//! slices' keys with the threshold in force, and records a threshold
//! change with its reason. Calls for many tasks go in one pipeline.
//!
//! A key written ahead holds `left` and `quota` only and is rewritten while
//! no host has pulled from it (the pull script refuses every slice but the
//! store's current one, and its first pull adds the census): a threshold
//! change reaches the next slice, and a live slice is never touched. The
//! current slice is written only if it has no key yet (a manager's first
//! step), atomically with the hosts' pulls.

use crate::error::{Error, ErrorKind, Result};
use crate::quota::{RedisStore, manager_key, record_fields, record_key, shard_part, slice_key};

/// KEYS: 1 the task's fence, 2 its record, 3 its decision, 4 its change
/// log, 5.. the slices' keys from ARGV[3] on. ARGV: 1 token, 2 slice_ms, 3
/// the first slice, 4 the threshold per slice, 5 the keys' TTL ms, 6 the
/// record's field count n (-1: leave the record alone, a shard past the
/// first), then n name/value pairs, then the decision's
/// "threshold reason at_ms manager" or "" for no change, then the record
/// version this manager last wrote (its fields are not compared then).
///
/// Returns {1, keys written, slices begun before their key, record version,
/// 1 if the task had no fence (new to the store, or the store lost it)},
/// or {-1, fence, ...} when a newer token wrote the task.
const WRITE: &str = r#"
if redis.replicate_commands then redis.replicate_commands() end
local token = tonumber(ARGV[1])
local fence = tonumber(redis.call('GET', KEYS[1])) or 0
if token < fence then return {-1, fence, 0, 0, 0} end
-- No fence: the task is new to the store, or the store lost its keys (a
-- restart, a failover to an empty replica): the manager writes it anew.
local lost = 0
if fence == 0 then lost = 1 end
if token > fence then redis.call('SET', KEYS[1], token) end
local t = redis.call('TIME')
local slice_ms = tonumber(ARGV[2])
local now = math.floor((tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) / slice_ms)
now = now % 4294967296
local n, version = tonumber(ARGV[6]), 0
-- The version this manager last wrote still there: the record is ours.
-- n = -1: a shard past the first, whose record copy the hosts keep.
local held = redis.call('HGET', KEYS[2], 'version')
local same = held ~= false or n < 0
if n < 0 then n = 0 end
if not (same and held == ARGV[8 + 2 * n]) then
for i = 0, n - 1 do
  if not same then break end
  if redis.call('HGET', KEYS[2], ARGV[7 + 2 * i]) ~= ARGV[8 + 2 * i] then same = false end
end
end
if not same then
  local old = tonumber(redis.call('HGET', KEYS[2], 'version')) or 0
  if old ~= math.floor(old) or old > 9007199254740990 then old = 0 end
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  version = math.max(us, old + 1)
  local fields = {}
  for i = 7, 6 + 2 * n do fields[#fields + 1] = ARGV[i] end
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'version', string.format('%.0f', version), unpack(fields))
else
  version = tonumber(held) or 0
end
local decision = ARGV[7 + 2 * n]
if decision ~= '' then
  local th, reason, at, by = string.match(decision, '^(%S+) (%S+) (%S+) (%S+)$')
  redis.call('HSET', KEYS[3], 'threshold', th, 'reason', reason, 'at_ms', at, 'manager', by,
    'token', token)
  redis.call('LPUSH', KEYS[4], decision)
  redis.call('LTRIM', KEYS[4], 0, 49)
end
local quota, written, late = tonumber(ARGV[4]), 0, 0
local first = tonumber(ARGV[3])
for k = 5, #KEYS do
  local slice = (first + k - 5) % 4294967296
  local ahead = (slice - now) % 4294967296
  if ahead >= 2147483648 or (ahead == 0 and redis.call('EXISTS', KEYS[k]) == 1) then
    late = late + 1
  else
    local got = redis.call('HMGET', KEYS[k], 'quota', 'demand')
    if got[2] == false and tonumber(got[1]) ~= quota then
      redis.call('HSET', KEYS[k], 'left', quota, 'quota', quota)
      redis.call('PEXPIRE', KEYS[k], ARGV[5])
      written = written + 1
    end
  end
end
return {1, written, late, version, lost}
"#;

/// Removes records of a task no longer managed. KEYS: 1 the task's fence,
/// 2.. the records. ARGV: 1 the token. Returns the records removed, or -1
/// when a newer token wrote the task.
const REMOVE: &str = r#"
if redis.replicate_commands then redis.replicate_commands() end
local token = tonumber(ARGV[1])
local fence = tonumber(redis.call('GET', KEYS[1])) or 0
if token < fence then return -1 end
if token > fence then redis.call('SET', KEYS[1], token) end
local removed = 0
for k = 2, #KEYS do removed = removed + redis.call('DEL', KEYS[k]) end
return removed
"#;

/// One task's write.
pub(crate) struct Write<'a> {
    pub task: &'a str,
    pub settings: &'a crate::quota::GlobalSettings,
    /// The first slice to write and how many.
    pub first: u32,
    pub count: u32,
    /// Permits per slice.
    pub quota: u64,
    /// "threshold reason at_ms manager" when the threshold changed.
    pub decision: Option<String>,
    /// The record version this manager last wrote (0: none yet).
    pub version: u64,
}

/// What the store did with a write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Written {
    /// A newer manager's token wrote the task: nothing was written.
    pub fenced: bool,
    pub keys: u64,
    /// Slices that had begun by the store's clock: left alone.
    pub late: u64,
    /// The record's version (rewritten or found).
    pub version: u64,
    /// The task had no fence: new to the store, or the store lost its keys.
    pub lost: bool,
}

pub(crate) struct Writer {
    script: redis::Script,
    prefix: String,
}

impl Writer {
    pub fn new(prefix: &str) -> Self {
        Self {
            script: redis::Script::new(WRITE),
            prefix: prefix.to_string(),
        }
    }

    /// Removes `task`'s `records` under `token`: how many there were, or
    /// `None` when a newer token wrote the task.
    pub fn remove(
        &self,
        store: &RedisStore,
        token: u64,
        task: &str,
        records: &[String],
    ) -> Result<Option<u64>> {
        let removed: i64 = store.round_trip("remove a task's records", |conn| {
            redis::Script::new(REMOVE)
                .key(manager_key(&self.prefix, task, 0, 1, "fence"))
                .key(records)
                .arg(token)
                .invoke(conn)
        })?;
        Ok(u64::try_from(removed).ok())
    }

    /// The `writes` under `token`, in one pipeline.
    pub fn write(
        &self,
        store: &RedisStore,
        token: u64,
        writes: &[Write<'_>],
    ) -> Result<Vec<Written>> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        let p = &self.prefix;
        // One call per shard of each task: a shard's keys share its hash
        // tag (one slot), shard 0 holds the record and the decision.
        let mut owners = Vec::new();
        let mut invocations: Vec<redis::ScriptInvocation<'_>> = Vec::new();
        for (at, w) in writes.iter().enumerate() {
            let shards = w.settings.shards.max(1);
            for shard in 0..shards {
                let mut call = self.script.prepare_invoke();
                let own = |what: &str| manager_key(p, w.task, shard, shards, what);
                call.key(own("fence"))
                    .key(record_key(p, w.task, shard, shards))
                    .key(own("manager"))
                    .key(own("changes"));
                for i in 0..w.count {
                    call.key(slice_key(p, w.task, shard, shards, w.first.wrapping_add(i)));
                }
                let ttl_ms = (w.count as u64 + 2) * w.settings.slice_ms as u64 + 2000;
                call.arg(token)
                    .arg(w.settings.slice_ms)
                    .arg(w.first)
                    .arg(shard_part(w.quota, shards, shard))
                    .arg(ttl_ms);
                if shard == 0 {
                    let fields = record_fields(w.settings);
                    call.arg(fields.len());
                    for (name, value) in fields {
                        call.arg(name).arg(value);
                    }
                    call.arg(w.decision.as_deref().unwrap_or(""));
                } else {
                    call.arg(-1).arg("");
                }
                call.arg(w.version.to_string());
                invocations.push(call);
                owners.push(at);
            }
        }
        let replies: Vec<(i64, u64, u64, u64, u64)> =
            store.round_trip("write the managed tasks", |conn| {
                let mut pipe = redis::pipe();
                pipe.load_script(&self.script).ignore();
                for call in &invocations {
                    pipe.invoke_script(call);
                }
                pipe.query(conn)
            })?;
        if replies.len() != invocations.len() {
            return Err(Error::new(
                ErrorKind::Store,
                format!("{} answers to {} writes", replies.len(), invocations.len()),
            ));
        }
        let mut written = vec![Written::default(); writes.len()];
        for (at, (ok, keys, late, version, lost)) in owners.into_iter().zip(replies) {
            let w = &mut written[at];
            w.fenced |= ok == -1;
            w.keys += if ok == 1 { keys } else { 0 };
            w.late += late;
            w.version = w.version.max(version);
            w.lost |= lost == 1;
        }
        Ok(written)
    }
}

/// The manager's last decision on a task's threshold (a hash).
pub(crate) fn decision_key(prefix: &str, task: &str) -> String {
    format!("{prefix}{{{task}}}:manager")
}

/// The task's last 50 threshold changes, newest first (a list).
pub(crate) fn changes_key(prefix: &str, task: &str) -> String {
    format!("{prefix}{{{task}}}:changes")
}
