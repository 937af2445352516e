//! The fuzzers' seam (`tests/fuzz_store.rs`): every decoder of what the
//! store answers, as hosts, the manager and `flowctrl` run them. Doc-hidden,
//! not an API: a store key is written by whoever can write the store, and
//! each of these must refuse what flowctrl never writes, never panic, and
//! never hand on a value it would refuse from a config file.

use std::sync::atomic::AtomicU64;

use super::record::{self, StoredConfig};
use super::script::pull_reply;
use super::store::Ask;
use super::{GlobalSettings, HostRecord};
use crate::error::{Error, Result};

/// A census record (`<host id>` → "accounted asked granted ..."), as
/// `Store::fleet` and the manager read it.
pub fn host_record(host: &str, slice: u64, value: &str) -> Option<HostRecord> {
    super::census::parse_record(host, slice, value)
}

/// Adds `record` to `hosts` as a census of several shards does.
pub fn merge_record(hosts: &mut Vec<HostRecord>, record: HostRecord) {
    super::census::merge(hosts, record)
}

/// A task's record (the fields of its hash), as `Store::task_config` and a
/// host's refresh read it: its version and settings, or why it is refused.
pub fn stored_config(fields: &[(String, String)]) -> Result<StoredConfig> {
    let version = record::version_of(fields)
        .ok_or_else(|| Error::invalid("its version is no whole number 1..=2^53"))?;
    let settings: GlobalSettings = record::parse(fields)?;
    Ok(StoredConfig { version, settings })
}

/// What a host reads of the pull script's ten integers for an ask of
/// `want` permits of a `quota` slice (`redeem`: after a dead puller):
/// (granted, left, the slicing a refresh asks for, the record version a
/// refresh names).
pub fn pull_reply_of(
    want: u64,
    quota: u64,
    redeem: bool,
    reply: [i64; 10],
) -> Result<(u64, u64, Option<u32>, Option<u64>)> {
    let word = AtomicU64::new(0);
    let ask = Ask {
        quota,
        burst: quota,
        want,
        redeem,
        ..Ask::plain(&word)
    };
    let values = reply.map(super::script::ScriptValue::Int);
    let (reply, _) = pull_reply(&ask, &values)?;
    let (slicing, version) = match reply.refresh {
        Some(record::Refresh::Reslice(ms)) => (Some(ms), None),
        Some(record::Refresh::Record(v)) => (None, Some(v)),
        None => (None, None),
    };
    Ok((reply.granted, reply.left, slicing, version))
}
