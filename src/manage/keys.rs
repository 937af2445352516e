//! Keyed tasks' records: the manager owns the global rates of their keys
//! (see `keyed::record` for what hosts do with a record). Each write
//! carries the lease's fencing token, checked against the task's fence as
//! the task's own writes are, and rewrites the record only when its fields
//! changed, so hosts refetch only on a change. Written every
//! [`REWRITE_EVERY`]: a store that lost the record (a restart, a failover
//! to an empty replica) has it back within that.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::keyed::KeyRecord;
use crate::quota::{RedisStore, key_record_key, manager_key};

/// How often a keyed task's record is written (a no-op when unchanged).
pub(super) const REWRITE_EVERY: Duration = Duration::from_secs(1);

/// KEYS: 1 the task's fence, 2 its keys' record. ARGV: 1 the token, then
/// the record's fields as name/value pairs. Returns {1, version, 1 if
/// written} or {-1, fence, 0} when a newer token wrote the task. A version
/// is the store's clock in µs or the previous one + 1, whichever is larger.
const WRITE_KEYS: &str = r#"
if redis.replicate_commands then redis.replicate_commands() end
local token = tonumber(ARGV[1])
local fence = tonumber(redis.call('GET', KEYS[1])) or 0
if token < fence then return {-1, fence, 0} end
if token > fence then redis.call('SET', KEYS[1], token) end
local held = redis.call('HGETALL', KEYS[2])
local have = {}
for i = 1, #held, 2 do have[held[i]] = held[i + 1] end
local old = tonumber(have['version']) or 0
local same = old > 0 and #held == #ARGV + 1
if same then
  for i = 2, #ARGV, 2 do
    if have[ARGV[i]] ~= ARGV[i + 1] then same = false end
  end
end
if same then return {1, old, 0} end
if old ~= math.floor(old) or old > 9007199254740990 then old = 0 end
local t = redis.call('TIME')
local version = math.max(tonumber(t[1]) * 1000000 + tonumber(t[2]), old + 1)
local fields = {}
for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'version', string.format('%.0f', version), unpack(fields))
return {1, version, 1}
"#;

/// What the manager knows of the keyed tasks' records.
#[derive(Default)]
pub(super) struct KeyWrites {
    /// Per task: the version last written or found, and when to write next.
    state: BTreeMap<String, (u64, Option<Instant>)>,
}

impl KeyWrites {
    /// Forgets when each record was written: the next step writes them all
    /// (a new token, a new configuration).
    pub fn rewrite(&mut self) {
        self.state.values_mut().for_each(|s| s.1 = None);
    }

    /// Writes the records of `records` that are due, in one pipeline, under
    /// `token`: the tasks written, or `Err` fenced (a newer token wrote one).
    pub fn write(
        &mut self,
        store: &RedisStore,
        prefix: &str,
        token: u64,
        records: &BTreeMap<String, KeyRecord>,
    ) -> Result<std::result::Result<u64, ()>> {
        let now = Instant::now();
        self.state.retain(|task, _| records.contains_key(task));
        let due: Vec<(&String, &KeyRecord)> = records
            .iter()
            .filter(|(task, _)| {
                self.state
                    .get(*task)
                    .and_then(|s| s.1)
                    .is_none_or(|at| now >= at)
            })
            .collect();
        if due.is_empty() {
            return Ok(Ok(0));
        }
        let script = redis::Script::new(WRITE_KEYS);
        let replies: Vec<(i64, u64, u64)> =
            store.round_trip("write the keys' records", |conn| {
                let mut pipe = redis::pipe();
                pipe.load_script(&script).ignore();
                for (task, record) in &due {
                    let mut call = script.prepare_invoke();
                    call.key(manager_key(prefix, task, 0, 1, "fence"))
                        .key(key_record_key(prefix, task))
                        .arg(token);
                    for (name, value) in record.fields() {
                        call.arg(name).arg(value);
                    }
                    pipe.invoke_script(&call);
                }
                pipe.query(conn)
            })?;
        if replies.len() != due.len() {
            return Err(Error::new(
                ErrorKind::Store,
                format!(
                    "{} answers to {} writes of keys' records",
                    replies.len(),
                    due.len()
                ),
            ));
        }
        let mut written = 0;
        for ((task, _), (ok, version, wrote)) in due.into_iter().zip(replies) {
            if ok == -1 {
                return Ok(Err(()));
            }
            written += wrote;
            if wrote == 1 {
                log::info!(task = task.as_str(); "task {task:?}: keys' record written (version {version})");
            }
            self.state
                .insert(task.clone(), (version, Some(now + REWRITE_EVERY)));
        }
        Ok(Ok(written))
    }
}
