//! The store's side of keys' global rates: one call grants a host chunks of
//! many keys' slices (see `keyed::global` for the host's side). The store
//! keeps, per task and slice, one hash of what each key was given — only
//! keys some host pulled — and a census of the hosts that pull keys.

use super::keys::manager_key;
use crate::error::{Error, ErrorKind, Result};
use crate::format::FLEET_LISTED;

/// Grants chunks of keys' slices to one host.
///
/// KEYS: 1 the task's key counts (the slice's hash is `KEYS[1]:<slice>`,
/// field: a key's id, value: what was given of it in the slice and how
/// many asks it had, lasting to the slice's end), 2 the
/// census (host → ms of its last call), 3 the keys' record (see
/// `keyed::record`). ARGV: 1 slice_ms, 2 the slice the
/// host takes as current, 3 the host id, 4 the keys asked for, then five
/// per key: its id, its
/// permits per slice, the chunk wanted, what the host admitted of it on its
/// own and has not reported yet (the charge, counted before the grant), and
/// 0 for the current slice or 1 for the next; then id, 0 or 1 (the same)
/// and name of the host's most asked keys (kept in `KEYS[1]:n:<slice>`,
/// 64 bytes at most, for the fleet's view of its hot keys). A store that
/// finds no mark
/// of its own (`<KEYS[1]>:born-ms`: a restart or a failover lost its counts)
/// grants nothing of the slice it is in, only of the next ones: what the
/// hosts took of it is unknown. Answers the store's ms, its
/// current slice, the hosts in the census, 1 (or 0: the store is in
/// another slice, nothing granted), the record's version (0: none), then
/// granted and left for each key, then (when 1) the spread keys of the
/// current slice and the last, most asked first, each id as two 32-bit
/// halves (kept in `KEYS[1]:h:<slice>`: keys asked at least twice per
/// permit in a slice and refused in it; at most [`FLEET_LISTED`]).
pub(crate) const KEYED: &str = include_str!("keyed.lua");

/// The keys' record of `task` (see `keyed::record`).
pub(crate) fn key_record_key(prefix: &str, task: &str) -> String {
    manager_key(prefix, task, 0, 1, "k-cfg")
}

/// Keys one call carries at most.
pub(crate) const MAX_BATCH: usize = 1024;

/// One key of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyAsk {
    /// The key's id in the store (the same on every host).
    pub id: u64,
    /// Its permits per slice, fleet-wide.
    pub permits: u64,
    pub want: u64,
    /// Admitted on the host's own and not yet counted in the store.
    pub charge: u64,
    /// For the next slice (asked ahead), not the current one.
    pub next: bool,
}

/// A key's name, sent with a call for the fleet's view of its hot keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyName {
    pub id: u64,
    /// For the next slice's ask, not the current one's.
    pub next: bool,
    pub name: Vec<u8>,
}

/// A host's asks for one slice.
pub(crate) struct KeyBatch<'a> {
    pub task: &'a str,
    pub host: &'a str,
    pub slice: u64,
    pub slice_ms: u32,
    pub asks: &'a [KeyAsk],
    /// Names of the most asked keys.
    pub names: &'a [KeyName],
}

/// What the store answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyReply {
    pub store_ms: i64,
    /// The store's current slice.
    pub slice: u64,
    pub hosts: u64,
    /// The version of the keys' record (0: none).
    pub record: u64,
    /// Granted and left of each ask, in order; empty when the store was in
    /// another slice than asked.
    pub grants: Vec<(u64, u64)>,
    /// The store ids of the spread keys of the current slice and the last,
    /// most asked first (at most [`FLEET_LISTED`]; empty when the store was
    /// in another slice).
    pub spread: Vec<u64>,
}

impl super::Quota {
    /// One round trip granting `asks` of `slice`; `None` from the embedded
    /// store (its host is the fleet: it decides alone).
    pub(crate) fn pull_keys(
        &self,
        task: &str,
        (slice, slice_ms): (u64, u32),
        asks: &[KeyAsk],
        names: &[KeyName],
    ) -> Option<Result<KeyReply>> {
        self.store.pull_keys(&KeyBatch {
            task,
            host: &self.host,
            slice,
            slice_ms,
            asks,
            names,
        })
    }

    /// The fields of `task`'s keys' record; `None` from a store that keeps
    /// none, `Some(empty)` when there is no record.
    pub(crate) fn key_record(&self, task: &str) -> Result<Option<Vec<(String, String)>>> {
        self.store.key_record(task)
    }

    /// Whether the store keeps keys' global rates (the embedded one does
    /// not: its host is the fleet).
    pub(crate) fn keeps_keys(&self) -> bool {
        self.store.keeps_keys()
    }

    /// This host's wall clock (with the table's test skew), ms.
    pub(crate) fn host_ms(&self) -> i64 {
        self.host_us() / 1000
    }

    /// The same in µs.
    pub(crate) fn host_us(&self) -> i64 {
        super::wall_us() + self.skew_us
    }
}

/// The script's keys and arguments for `batch`.
pub(crate) fn key_call(prefix: &str, batch: &KeyBatch<'_>) -> (Vec<String>, Vec<String>) {
    let keys = vec![
        manager_key(prefix, batch.task, 0, 1, "k"),
        manager_key(prefix, batch.task, 0, 1, "k-hosts"),
        key_record_key(prefix, batch.task),
    ];
    let mut args = Vec::with_capacity(4 + 5 * batch.asks.len() + 3 * batch.names.len());
    args.push(batch.slice_ms.to_string());
    args.push(batch.slice.to_string());
    args.push(batch.host.to_string());
    args.push(batch.asks.len().to_string());
    for a in batch.asks {
        args.push(format!("{:016x}", a.id));
        args.push(a.permits.to_string());
        args.push(a.want.to_string());
        args.push(a.charge.to_string());
        args.push((a.next as u8).to_string());
    }
    for n in batch.names {
        args.push(format!("{:016x}", n.id));
        args.push((n.next as u8).to_string());
        // For display: bytes that are not UTF-8 are shown replaced.
        args.push(String::from_utf8_lossy(&n.name).into_owned());
    }
    (keys, args)
}

/// The latest store clock a reply may name (ms since the epoch, about the
/// year 37,000): its µs still fit an `i64`.
const MAX_STORE_MS: i64 = 1 << 50;

/// The script's answer, checked as strictly as any value from the store.
pub(crate) fn key_reply(batch: &KeyBatch<'_>, r: &[i64]) -> Result<KeyReply> {
    let bad = |why: String| {
        Err(Error::new(
            ErrorKind::Store,
            format!("the store answered a key pull with {why}"),
        ))
    };
    let [store_ms, slice, hosts, granted, record, rest @ ..] = r else {
        return bad(format!("{} integers, fewer than 5", r.len()));
    };
    if !(1..=MAX_STORE_MS).contains(store_ms)
        || *slice < 0
        || *hosts < 0
        || !(0..=1).contains(granted)
        || !(0..=super::record::MAX_VERSION as i64).contains(record)
    {
        return bad(format!(
            "a header of {store_ms}, {slice}, {hosts}, {granted}, {record}"
        ));
    }
    let expected = if *granted == 1 {
        2 * batch.asks.len()
    } else {
        0
    };
    let listed = rest.len().saturating_sub(expected);
    if rest.len() < expected
        || listed % 2 != 0
        || listed > 2 * FLEET_LISTED
        || *granted == 0 && listed > 0
    {
        return bad(format!("{} grant values for {expected}", rest.len()));
    }
    let (rest, halves) = rest.split_at(expected);
    let mut spread = Vec::with_capacity(listed / 2);
    for pair in halves.chunks(2) {
        let (high, low) = (pair[0], pair[1]);
        if !(0..=u32::MAX as i64).contains(&high) || !(0..=u32::MAX as i64).contains(&low) {
            return bad(format!("a spread key's id of {high}, {low}"));
        }
        spread.push((high as u64) << 32 | low as u64);
    }
    let mut grants = Vec::with_capacity(batch.asks.len());
    for (ask, pair) in batch.asks.iter().zip(rest.chunks(2)) {
        let (g, left) = (pair[0], pair[1]);
        if g < 0 || g as u64 > ask.want || left < 0 || left as u64 > ask.permits {
            return bad(format!(
                "{g} granted and {left} left for {} wanted of {}",
                ask.want, ask.permits
            ));
        }
        grants.push((g as u64, left as u64));
    }
    Ok(KeyReply {
        store_ms: *store_ms,
        slice: *slice as u64,
        hosts: *hosts as u64,
        record: *record as u64,
        grants,
        spread,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(asks: &[KeyAsk]) -> KeyBatch<'_> {
        KeyBatch {
            task: "api",
            host: "h1",
            slice: 7,
            slice_ms: 1000,
            asks,
            names: &[],
        }
    }

    #[test]
    fn a_reply_is_read_only_when_every_value_fits_its_ask() {
        let asks = [KeyAsk {
            id: 0xab,
            permits: 10,
            want: 4,
            charge: 1,
            next: false,
        }];
        let b = batch(&asks);
        let (keys, args) = key_call("", &b);
        assert_eq!(keys, ["{api}:k", "{api}:k-hosts", "{api}:k-cfg"]);
        assert_eq!(
            args,
            [
                "1000",
                "7",
                "h1",
                "1",
                "00000000000000ab",
                "10",
                "4",
                "1",
                "0"
            ]
        );
        let ok = key_reply(&b, &[1_700_000_000_000, 7, 3, 1, 12, 4, 5]).unwrap();
        assert_eq!(ok.grants, [(4, 5)]);
        assert!(ok.spread.is_empty());
        let listed = key_reply(
            &b,
            &[1_700_000_000_000, 7, 3, 1, 12, 4, 5, 0xab, 0xcd, 0, 1],
        )
        .unwrap();
        assert_eq!(listed.spread, [0xab_0000_00cd, 1]);
        assert_eq!((ok.hosts, ok.record), (3, 12));
        let other = key_reply(&b, &[1_700_000_000_000, 9, 3, 0, 0]).unwrap();
        assert!(other.grants.is_empty());
        for hostile in [
            &[1, 7, 3, 1, 0, 5, 5][..],  // more than wanted
            &[1, 7, 3, 1, 0, 4, 11][..], // more left than a slice holds
            &[1, 7, 3, 1, 0, -1, 5][..],
            &[1, 7, 3, 1, 0, 4][..],
            &[1, 7, 3, 2, 0, 4, 5][..],
            &[0, 7, 3, 1, 0, 4, 5][..],
            &[i64::MAX / 1000 + 1, 7, 3, 1, 0, 4, 5][..], // its µs past an i64
            &[(1 << 50) + 1, 7, 3, 1, 0, 4, 5][..],
            &[1, 7, 3, 1, -1, 4, 5][..],      // a version below 0
            &[1, 7, 3, 1, 1 << 53, 4, 5][..], // past a Lua number's exact range
            &[1, 7, 3, 1][..],
            &[1, 7, 3, 1, 0, 4, 5, 1][..], // half a spread key's id
            &[1, 7, 3, 1, 0, 4, 5, 1 << 32, 0][..], // a half past 32 bits
            &[1, 7, 3, 1, 0, 4, 5, 0, -1][..],
            &[1, 9, 3, 0, 0, 0, 1][..], // a list from another slice
        ] {
            assert!(key_reply(&b, hostile).is_err(), "{hostile:?}");
        }
    }
}
