//! The pull script's interface: its keys and arguments from an [`Ask`],
//! and its reply read back into a [`Reply`], strictly (a store anyone can
//! write to may answer anything). The Redis store and the simulation's
//! store call the same script through these two functions.

use super::keys::{record_key, shape_key, slice_key};
use super::record::{MAX_VERSION, Refresh, version_of};
use super::store::{Ask, Reply};
use crate::error::{Error, ErrorKind, Result};
use crate::format::{MAX_SLICE_MS, MIN_SLICE_MS};
use crate::words::echo;

/// The pull script's section files, in the order Redis runs them, as one
/// text (`text`) or by name (`named`): one list for both.
macro_rules! sections {
    (@files $out:ident) => {
        sections!(@$out "00-common.lua", "10-read.lua", "15-shape.lua", "20-create.lua",
            "30-give-back.lua", "40-fair.lua", "50-reserve.lua", "60-wait.lua", "90-core.lua")
    };
    (@text $($f:literal),*) => { concat!($(include_str!(concat!("script/", $f))),*) };
    (@named $($f:literal),*) => { [$(($f, include_str!(concat!("script/", $f)))),*] };
    (text) => { sections!(@files text) };
    (named) => { sections!(@files named) };
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
/// flags: 1 when the numbers sent are the record's, + 2 when the task is
/// not spread over shards (it may be granted across a record change,
/// below), 14 the host's demand, 15–18
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
/// {-2, version} (the host adopts it and asks again). To a host that set
/// flag 2 the record's version and fields come after the ten integers (it
/// adopts them without reading the record itself), and where the record
/// keeps the slicing sent and the slice's key exists (the key's threshold
/// is the slice's, whatever the host sent), the pull is granted as usual
/// first: one round trip where a record change cost three. Without a record
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
///
/// The text is in sections (`script/`, run in the order of their names):
/// the core last, each rule beside it a function of plain values.
pub(crate) const PULL: &str = sections!(text);

/// The sections of [`PULL`] by file name, in order (their tests load them
/// one by one).
#[cfg(feature = "sim")]
pub(crate) const PULL_SECTIONS: &[(&str, &str)] = &sections!(named);

/// One element of [`PULL`]'s reply as the store hands it over: granted,
/// left, server seconds, server µs, hosts, host-id conflict, wait ms,
/// threshold mismatch, key created, ms until a reserved grant is usable
/// (0: at once), all integers; then, after a record change, the record's
/// version and its fields and values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScriptValue {
    Int(i64),
    Text(String),
}

/// A record's fields and values.
pub(crate) type Fields = Vec<(String, String)>;

/// Redis' reply to [`PULL`] as [`ScriptValue`]s: integers, and strings
/// (a record's bytes that are not UTF-8 read lossily: the record's checks
/// refuse the value with a log line, and the grant the reply carries is
/// kept); anything else is refused.
pub(crate) fn script_values(task: &str, reply: Vec<redis::Value>) -> Result<Vec<ScriptValue>> {
    reply
        .into_iter()
        .map(|v| match v {
            redis::Value::Int(n) => Ok(ScriptValue::Int(n)),
            redis::Value::BulkString(b) => {
                Ok(ScriptValue::Text(String::from_utf8_lossy(&b).into_owned()))
            }
            other => Err(format!("{other:?}")),
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|what| {
            Error::new(
                ErrorKind::Store,
                format!("task {}: the pull script answered {what}", echo(task)),
            )
        })
}

/// The task record the last pull's reply carried, for the host's refresh
/// right after it (`QuotaStore::record_at`): one round trip fewer. Taken
/// once, and only by the refresh to the version it is: a refresh of
/// another task or version (pulls overlapping in one process) reads the
/// store.
#[derive(Default)]
pub(crate) struct Carried(parking_lot::Mutex<Option<(String, u64, Fields)>>);

impl Carried {
    /// Reads a pull's reply ([`pull_reply`]), keeping the record it carried.
    pub(crate) fn reply(&self, ask: &Ask<'_>, values: &[ScriptValue]) -> Result<Reply> {
        let (reply, record) = pull_reply(ask, values)?;
        if let Some((version, fields)) = record {
            *self.0.lock() = Some((ask.task.to_string(), version, fields));
        }
        Ok(reply)
    }

    /// `QuotaStore::record_at`: the record carried for `task` at
    /// `version`, else what `read` reads from the store.
    pub(crate) fn record_at(
        &self,
        task: &str,
        version: u64,
        read: impl FnOnce() -> Result<Option<Fields>>,
    ) -> Result<Option<Fields>> {
        match self.take(task, version) {
            Some(fields) => Ok(Some(fields)),
            None => read(),
        }
    }

    /// The record carried for `task` at `version` (its own `version` field
    /// says so too).
    fn take(&self, task: &str, version: u64) -> Option<Fields> {
        let mut last = self.0.lock();
        match last.take() {
            Some((t, v, fields))
                if t == task && v == version && version_of(&fields) == Some(version) =>
            {
                Some(fields)
            }
            other => {
                *last = other;
                None
            }
        }
    }
}

/// The KEYS and ARGV of one pull (see [`PULL`]); the simulator's store
/// (`sim`) sends the same to the same script.
pub(crate) fn pull_call(prefix: &str, ask: &Ask<'_>) -> (Vec<String>, Vec<String>) {
    let (task, shard) = (ask.task, ask.shard);
    let keys = vec![
        slice_key(prefix, task, shard, ask.shards, ask.slice),
        record_key(prefix, task, shard, ask.shards),
        shape_key(prefix, task, shard, ask.shards),
        slice_key(prefix, task, shard, ask.shards, ask.slice.wrapping_sub(1)),
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
        flags(ask).to_string(),
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

/// The pull's flags (ARGV 13): 1, the host spends by the record's numbers;
/// 2, the task is one key; a spread task's shards × 4 above those.
fn flags(ask: &Ask<'_>) -> u64 {
    let spread = if ask.shards > 1 {
        4 * ask.shards as u64
    } else {
        0
    };
    ask.spends_record as u64 + 2 * (ask.shards <= 1) as u64 + spread
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
///
/// Returns the reply and the task's record (its version and fields) when
/// the script sent it (a record change, to an unsharded task: see [`PULL`]).
pub(crate) fn pull_reply(
    ask: &Ask<'_>,
    reply: &[ScriptValue],
) -> Result<(Reply, Option<(u64, Fields)>)> {
    let refused = |why: String| {
        Err(Error::new(
            ErrorKind::Store,
            format!("task {}: the store answered {why}: refused", echo(ask.task)),
        ))
    };
    let int = |i: usize| match reply.get(i) {
        Some(ScriptValue::Int(n)) => Some(*n),
        _ => None,
    };
    let mut ints = [0i64; 10];
    for (i, n) in ints.iter_mut().enumerate() {
        let Some(v) = int(i) else {
            return refused(format!("{reply:?}, not ten integers first"));
        };
        *n = v;
    }
    let [
        granted,
        left,
        sec,
        usec,
        hosts,
        conflict,
        wait,
        mismatch,
        created,
        usable,
    ] = ints;
    let record = match reply.len() {
        10 => None,
        // Only to an unsharded task's pull: a version and whole pairs.
        n if ask.shards <= 1 && n % 2 == 1 => {
            let version = match int(10) {
                Some(v) if (1..=MAX_VERSION as i64).contains(&v) => v as u64,
                _ => return refused(format!("{:?} as a record version", reply[10])),
            };
            let mut fields = Vec::with_capacity((n - 11) / 2);
            for pair in reply[11..].chunks(2) {
                let [ScriptValue::Text(f), ScriptValue::Text(v)] = pair else {
                    return refused(format!("{pair:?} as a record's field"));
                };
                fields.push((f.clone(), v.clone()));
            }
            Some((version, fields))
        }
        n => return refused(format!("{n} values")),
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
                echo(&shape_key("", ask.task, ask.shard, ask.shards))
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
    let (refresh, went_on, record) = match (refresh, record) {
        (refresh, None) => (refresh, false, None),
        (Some(Refresh::Record(v)), Some((version, fields))) if v == version => {
            (Some(Refresh::Record(v)), false, Some((version, fields)))
        }
        // Granted across a change: the grant is the slice key's, and the
        // record comes with it.
        (None, Some((version, fields))) if granted >= 0 && version != ask.record_version => (
            Some(Refresh::Record(version)),
            true,
            Some((version, fields)),
        ),
        (_, Some((version, _))) => {
            return refused(format!(
                "record version {version} beside {granted} and {left}"
            ));
        }
    };
    let reply = Reply {
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
        went_on,
    };
    Ok((reply, record))
}

#[cfg(test)]
mod tests;
