//! The census: what every host asked, was granted and claimed in each slice,
//! recorded by the pull script in the slice's key (no extra round trip), and
//! read back here for operators and the manager. A [`Store`] is a handle on
//! a fleet's store, apart from any table.

use super::StoreOptions;
use super::keys::slice_key;
use super::redis::RedisStore;
use crate::error::{Error, ErrorKind, Result};
use crate::events::{self, Event};
use crate::format::MAX_SHARDS;

/// Full slices the census looks back over: a host that pulled in none of
/// them is not live.
const SLICES: u64 = 3;

/// A fleet's quota store, for reading what the fleet shares there (the
/// census) and writing the tasks' records (see [`Store::set_task_config`]).
pub struct Store {
    pub(super) redis: RedisStore,
}

/// One host's record in one slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRecord {
    /// Its id (`StoreOptions::host_id`).
    pub host: String,
    /// The slice the record is of (the newest of the last full slices in
    /// which the host pulled).
    pub slice: u64,
    /// Permits it asked for, and was granted, from the slice's key.
    pub asked: u64,
    pub granted: u64,
    /// All it had taken of the slice at its last pull: grants, also of a key
    /// the store lost, and fallback admissions.
    pub claimed: u64,
    /// Its clock's offset to the store's, µs, as it last measured.
    pub offset_us: i64,
    /// Requests per slice it said it is asked for (admitted and refused),
    /// which fair tails divide the slice by.
    pub demand: u64,
    /// What its releases reported over the slice up to its last pull:
    /// permits released as success and as dropped, and the mean and 99th
    /// percentile of their round-trip times (0 without samples).
    pub health: HostHealth,
    /// The threshold per slice of the host's own configuration when it
    /// spends by it rather than by the task's store record: `Some(0)` when
    /// by the record, `None` from a host that does not say.
    pub own_quota: Option<u64>,
}

/// A host's releases over one slice, as its pulls reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostHealth {
    pub success: u64,
    pub dropped: u64,
    pub mean_us: u64,
    pub p99_us: u64,
}

/// The live hosts of a task: those that pulled in the last full slices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fleet {
    pub task: String,
    pub slice_ms: u32,
    /// The store's current slice (the census covers the ones before it).
    pub slice: u64,
    /// The quota the newest of those slices' keys was created with.
    pub quota: Option<u64>,
    /// One record per host, newest first by slice then by id.
    pub hosts: Vec<HostRecord>,
}

impl Store {
    /// The Redis connection behind the handle (the manager's writes).
    pub(crate) fn redis(&self) -> &RedisStore {
        &self.redis
    }

    /// A handle on the store the options name; a Redis URL is required
    /// (the embedded store lives in one table and has no fleet).
    pub fn open(options: &StoreOptions) -> Result<Self> {
        let Some(url) = &options.url else {
            return Err(Error::invalid(
                "a fleet's store needs a Redis URL: the embedded store is one table's",
            ));
        };
        options.check()?;
        Ok(Self {
            redis: RedisStore::open(url, options)?,
        })
    }

    /// The live hosts of `task` (whose slices are `slice_ms` long; `None`:
    /// the task's store record's, else the default 1000): two round trips
    /// (the store's time, then the census of the slices before it), three
    /// to read the record. Records a host or a hand wrote in a shape the
    /// script never writes are skipped, with a log line.
    pub fn fleet(&self, task: &str, slice_ms: Option<u32>) -> Result<Fleet> {
        crate::words::validate_name(task, "task name")?;
        // The record's spread, when there is one; else every spread is
        // looked for (a shard's keys are named by the task's spread).
        let (slice_ms, spread) = match slice_ms {
            Some(0) => return Err(Error::invalid("slice_ms must be at least 1")),
            Some(ms) => (ms, None),
            None => match self.task_config(task) {
                Ok(record) => record
                    .map_or((super::GlobalSettings::default().slice_ms, None), |r| {
                        (r.settings.slice_ms, Some(r.settings.shards))
                    }),
                // A store that cannot be read has no census to read either:
                // one request's bound, not two.
                Err(e) if e.kind() == ErrorKind::Store => return Err(e),
                // A record the hosts refuse too: their slicing is their own.
                Err(_) => (super::GlobalSettings::default().slice_ms, None),
            },
        };
        let (sec, usec): (u64, u64) = self
            .redis
            .round_trip("read the time", |conn| redis::cmd("TIME").query(conn))?;
        let now_ms = sec * 1000 + usec / 1000;
        let current = now_ms / slice_ms as u64 % (1 << 32);
        let slices: Vec<u64> = (1..=SLICES)
            .filter_map(|back| current.checked_sub(back))
            .collect();
        let census = self.census(task, &slices, spread)?;
        let mut fleet = Fleet {
            task: task.to_string(),
            slice_ms,
            slice: current,
            quota: None,
            hosts: Vec::new(),
        };
        // A slice's quota: the shards' parts add up to it.
        let mut quotas = std::collections::BTreeMap::<u64, u64>::new();
        for (_, slice, fields) in census {
            for (field, value) in fields {
                match field.as_str() {
                    "quota" => {
                        let q = quotas.entry(slice).or_default();
                        *q = q.saturating_add(value.parse::<u64>().unwrap_or(0));
                    }
                    "left" | "demand" | "fair" | "back" => {}
                    host => match parse_record(host, slice, &value) {
                        // Carried from the slice before, never pulled in
                        // this one: not a sign of life.
                        Some(record) if record.asked == 0 => {}
                        Some(record) => merge(&mut fleet.hosts, record),
                        None => events::report(
                            Event::CensusSkipped,
                            task,
                            format_args!(
                                "census of task {task:?}, slice {slice}: record {} = {} is \
                                 not one flowctrl writes; skipped",
                                crate::words::echo(host),
                                crate::words::echo(&value)
                            ),
                        ),
                    },
                }
            }
        }
        fleet.quota = quotas.last_key_value().map(|(_, q)| *q);
        fleet
            .hosts
            .sort_by(|a, b| b.slice.cmp(&a.slice).then(a.host.cmp(&b.host)));
        Ok(fleet)
    }
}

impl Store {
    /// The census hashes of `slices` (newest first), shard by shard, of
    /// the task spread over `spread` keys (`None`: any spread): every
    /// shard's in one pipeline on one server; on a cluster one pipeline per
    /// shard (each has its own slot), a spread's shards up to the first
    /// with no key in them.
    #[allow(clippy::type_complexity)]
    fn census(
        &self,
        task: &str,
        slices: &[u64],
        spread: Option<u32>,
    ) -> Result<Vec<(u32, u64, Vec<(String, String)>)>> {
        let prefix = self.redis.prefix().to_string();
        let keys = |(shard, shards): (u32, u32)| -> Vec<(u32, u64, String)> {
            slices
                .iter()
                .map(|s| {
                    (
                        shard,
                        *s,
                        slice_key(&prefix, task, shard, shards, *s as u32),
                    )
                })
                .collect()
        };
        let read = |keys: &[(u32, u64, String)]| -> Result<Vec<(u32, u64, Vec<(String, String)>)>> {
            let hashes: Vec<Vec<(String, String)>> =
                self.redis.round_trip("read the census", |conn| {
                    let mut pipe = redis::pipe();
                    for (_, _, key) in keys {
                        pipe.hgetall(key);
                    }
                    pipe.query(conn)
                })?;
            Ok(keys
                .iter()
                .zip(hashes)
                .map(|((shard, slice, _), h)| (*shard, *slice, h))
                .collect())
        };
        let spreads: Vec<u32> = match spread {
            Some(shards) => vec![shards.clamp(1, MAX_SHARDS)],
            None => (2..=MAX_SHARDS).collect(),
        };
        if !self.redis.is_cluster() {
            let all: Vec<_> = std::iter::once((0, 1))
                .chain(spreads.iter().flat_map(|&n| (1..n).map(move |i| (i, n))))
                .flat_map(keys)
                .collect();
            return read(&all);
        }
        let mut census = read(&keys((0, 1)))?;
        for &shards in &spreads {
            for shard in 1..shards {
                let more = read(&keys((shard, shards)))?;
                if more.iter().all(|(_, _, h)| h.is_empty()) {
                    break;
                }
                census.extend(more);
            }
        }
        Ok(census)
    }
}

/// Adds a host's record to the fleet: a newer slice's record wins over an
/// older one's; records of one slice (one per shard it pulled from) add up,
/// since each shard counts what it granted and is claimed.
pub(crate) fn merge(hosts: &mut Vec<HostRecord>, record: HostRecord) {
    match hosts.iter_mut().find(|h| h.host == record.host) {
        None => hosts.push(record),
        Some(h) if h.slice < record.slice => *h = record,
        Some(h) if h.slice == record.slice => {
            h.asked = h.asked.saturating_add(record.asked);
            h.granted = h.granted.saturating_add(record.granted);
            h.claimed = h.claimed.saturating_add(record.claimed);
            h.demand = h.demand.max(record.demand);
            // Each pull reports the host's releases over the slice so far,
            // whichever shard it pulls from: the latest report is the most.
            let samples = |h: &HostHealth| h.success.saturating_add(h.dropped);
            if samples(&record.health) > samples(&h.health) {
                h.health = record.health;
            }
            h.own_quota = h.own_quota.max(record.own_quota);
        }
        Some(_) => {}
    }
}

/// "accounted asked granted claimed offset_us demand success dropped
/// mean_us p99_us own_quota given" → a record (written before fair tails:
/// no demand; before the health figures: none of them). Fields a later
/// build appends (numbers, a dozen at most) are read past: its hosts stay
/// in this build's census.
/// A host id no host can have (see `words::validate_host_id`) is no record:
/// it was written by hand, and its text could hold terminal escapes.
pub(crate) fn parse_record(host: &str, slice: u64, value: &str) -> Option<HostRecord> {
    crate::words::validate_host_id(host).ok()?;
    let fields: Vec<&str> = value.split(' ').collect();
    let known = [5, 6, 10, 11].contains(&fields.len())
        || (12..=24).contains(&fields.len())
            && fields[12..].iter().all(|f| f.parse::<i64>().is_ok());
    if !known {
        return None;
    }
    let number = |i: usize| fields.get(i).map_or(Some(0), |v| v.parse::<i64>().ok());
    let count = |i: usize| number(i).and_then(|v| u64::try_from(v).ok());
    Some(HostRecord {
        host: host.to_string(),
        slice,
        asked: count(1)?,
        granted: count(2)?,
        // What it holds: its claim less what it gave back while idle.
        claimed: count(3)?.saturating_sub(count(11)?),
        offset_us: number(4)?,
        demand: count(5)?,
        health: HostHealth {
            success: count(6)?,
            dropped: count(7)?,
            mean_us: count(8)?,
            p99_us: count(9)?,
        },
        own_quota: if fields.len() > 10 {
            Some(count(10)?)
        } else {
            None
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse_and_garbage_does_not() {
        assert_eq!(
            parse_record("h", 7, "10 12 10 10 -35 400"),
            Some(HostRecord {
                host: "h".into(),
                slice: 7,
                asked: 12,
                granted: 10,
                claimed: 10,
                offset_us: -35,
                demand: 400,
                health: HostHealth::default(),
                own_quota: None,
            })
        );
        let h = parse_record("h", 7, "10 12 10 10 -35 400 90 3 1500 9000").unwrap();
        assert_eq!(
            h.health,
            HostHealth {
                success: 90,
                dropped: 3,
                mean_us: 1500,
                p99_us: 9000
            }
        );
        assert_eq!(parse_record("h", 7, "10 12 10 10 -35").unwrap().demand, 0);
        // A host that gave quota back while idle: its claim less that.
        let given = parse_record("h", 7, "10 12 40 40 -35 400 0 0 0 0 0 30").unwrap();
        assert_eq!(given.claimed, 10);
        // A later build's record, with a field this one does not know.
        let later = parse_record("h", 7, "10 12 40 40 -35 400 0 0 0 0 0 30 7").unwrap();
        assert_eq!((later.claimed, later.demand), (10, 400));
        for bad in [
            "",
            "garbage",
            "1 2 3",
            "1 -2 3 4 5",
            "1 2 3 4 x",
            "1 2 3 4 5 -6",
            "1 2 3 4 5 6 7",
            "1 2 3 4 5 6 7 8 9 -1",
            "1 2 3 4 5 6 7 8 9 10 11 -12",
            "1 2 3 4 5 6 7 8 9 10 11 12 x",
            &["1"; 25].join(" "),
        ] {
            assert_eq!(parse_record("h", 7, bad), None, "{bad:?}");
        }
        for host in ["", "x\u{1b}[2J", "a b", "{h}", &"h".repeat(64)] {
            assert_eq!(
                parse_record(host, 7, "10 12 10 10 -35 400"),
                None,
                "{host:?}"
            );
        }
        // Numbers past what a slice holds add up without overflowing.
        let mut hosts = Vec::new();
        for _ in 0..3 {
            let big = format!("0 {m} {m} {m} 0 {m} {m} {m} 0 0", m = u64::MAX >> 1);
            merge(
                &mut hosts,
                parse_record("h", 7, &big).unwrap_or_else(|| panic!("{big}")),
            );
        }
        assert_eq!(hosts[0].asked, u64::MAX);
    }
}
