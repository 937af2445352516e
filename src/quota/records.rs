//! Tasks' records in the store, as the manager and the CLI write, read and
//! remove them (a [`Store`] handle, apart from any table). What a host does
//! with a record is `record`'s.

use super::census::Store;
use super::keys::record_key;
use super::record::{MAX_VERSION, check, fields, parse, version_of};
use super::{GlobalConfig, GlobalSettings, StoredConfig};
use crate::error::{Error, Result};

impl Store {
    /// Writes `task`'s record: the global fields set in `config` over the
    /// defaults (a `global_rate` above 0 is required). Every host of the
    /// fleet spends by it from its next pull — within one slice — whatever
    /// its own configuration says, until [`Store::remove_task_config`].
    /// Returns the record's version. One round trip.
    ///
    /// [`Store::remove_task_config`]: Store::remove_task_config
    pub fn set_task_config(&self, task: &str, config: &GlobalConfig) -> Result<u64> {
        crate::words::validate_name(task, "task name")?;
        let settings = config.over(GlobalSettings::default());
        check(&settings)?;
        let key = record_key(self.redis.prefix(), task, 0, 1);
        let script = redis::Script::new(SET_RECORD);
        let version: String = self.redis.round_trip("write the task's record", |conn| {
            let mut call = script.key(&key);
            for (field, value) in fields(&settings) {
                call.arg(field).arg(value);
            }
            call.invoke(conn)
        })?;
        let parsed = version.parse().map_err(|_| {
            Error::new(
                crate::ErrorKind::Store,
                format!(
                    "the store answered version {} for {key}",
                    crate::words::echo(&version)
                ),
            )
        })?;
        // Each shard's pulls read the record in their own slot: copies,
        // written after the record (a pull that meets an older copy gets
        // the record's version from it, then the copy's numbers).
        let copy: Vec<(String, String)> = std::iter::once(("version".to_string(), version))
            .chain(
                fields(&settings)
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v)),
            )
            .collect();
        for shard in 1..settings.shards {
            self.redis
                .write_copy(task, (shard, settings.shards), &copy)?;
        }
        Ok(parsed)
    }

    /// `task`'s record, `None` if it has none; an error names what a
    /// record written by hand gets wrong (the hosts refuse it too, with a
    /// log line, and keep the numbers they have).
    pub fn task_config(&self, task: &str) -> Result<Option<StoredConfig>> {
        crate::words::validate_name(task, "task name")?;
        let key = record_key(self.redis.prefix(), task, 0, 1);
        let fields: Vec<(String, String)> =
            self.redis.round_trip("read the task's record", |conn| {
                redis::cmd("HGETALL").arg(&key).query(conn)
            })?;
        if fields.is_empty() {
            return Ok(None);
        }
        let refused = |why: String| Error::invalid(format!("the store's record {key}: {why}"));
        let Some(version) = version_of(&fields) else {
            return Err(refused(format!(
                "its version is not a whole number 1..={MAX_VERSION}, so hosts take it for \
                 no record"
            )));
        };
        let settings = parse(&fields).map_err(|e| refused(e.to_string()))?;
        Ok(Some(StoredConfig { version, settings }))
    }

    /// Removes `task`'s record: hosts return to their own configuration at
    /// their next pull. Whether there was one.
    pub fn remove_task_config(&self, task: &str) -> Result<bool> {
        crate::words::validate_name(task, "task name")?;
        let key = record_key(self.redis.prefix(), task, 0, 1);
        let removed: u64 = self.redis.round_trip("remove the task's record", |conn| {
            redis::cmd("DEL").arg(&key).query(conn)
        })?;
        self.redis.remove_copies(task)?;
        Ok(removed > 0)
    }
}

impl Store {
    /// Writes `fields` as the record at `key`, with a new version (see
    /// [`SET_RECORD`]): one round trip.
    pub(crate) fn write_record(&self, key: &str, fields: &[(String, String)]) -> Result<u64> {
        let script = redis::Script::new(SET_RECORD);
        let version: String = self.redis.round_trip("write a record", |conn| {
            let mut call = script.key(key);
            for (field, value) in fields {
                call.arg(field).arg(value);
            }
            call.invoke(conn)
        })?;
        version.parse().map_err(|_| {
            Error::new(
                crate::ErrorKind::Store,
                format!(
                    "the store answered version {} for {key}",
                    crate::words::echo(&version)
                ),
            )
        })
    }

    /// The fields of the record at `key` (empty: none).
    pub(crate) fn read_record(&self, key: &str) -> Result<Vec<(String, String)>> {
        self.redis.round_trip("read a record", |conn| {
            redis::cmd("HGETALL").arg(key).query(conn)
        })
    }

    /// Removes the record at `key`: whether there was one.
    pub(crate) fn remove_record(&self, key: &str) -> Result<bool> {
        let removed: u64 = self.redis.round_trip("remove a record", |conn| {
            redis::cmd("DEL").arg(key).query(conn)
        })?;
        Ok(removed > 0)
    }
}

/// Writes a record: the fields in ARGV (name, value pairs), the version the
/// store's clock in µs or the previous version + 1, whichever is larger, so
/// a record removed and written again never repeats a version a host saw.
const SET_RECORD: &str = r#"
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local old = tonumber(redis.call('HGET', KEYS[1], 'version')) or 0
if old ~= math.floor(old) or old > 9007199254740990 then old = 0 end
local version = string.format('%.0f', math.max(now, old + 1))
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'version', version, unpack(ARGV))
return version
"#;
