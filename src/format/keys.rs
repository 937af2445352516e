//! A keyed task's key file: the per-key states of one task, shared by every
//! process of the host, in a file of its own beside the table (a table
//! without keyed tasks is no larger for them).
//!
//! ```text
//! [ KeysHeader                          identity, geometry, counters  4 KiB
//! | KeyConfig × 2                       double-buffered limits        8 KiB each
//! | KeyRecord × processes × records     what each process holds       32 B
//! | NameSlot × names                    display names of keys         64 B
//! | Bucket × buckets                    8 keys each                   512 B
//! | GlobalWords × keys ]                a key's global rate on the host 32 B
//! ```
//!
//! A bucket is one line of eight identities (a key's keyed hash) and eight
//! 56-byte entries: 64 bytes a key, and 32 more for its global rate (see
//! `keyed::global`). The identity words sit together so a lookup reads one
//! line to find its key among eight.

use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) const KEYS_MAGIC: u64 = u64::from_le_bytes(*b"FCKEYS01");
pub(crate) const KEYS_VERSION: u32 = 2;
pub(crate) const KEYS_HEADER_SIZE: usize = 4096;
/// Keys in a bucket.
pub(crate) const BUCKET_KEYS: usize = 8;
/// Rates a key may carry at once (e.g. per second and per hour).
pub(crate) const MAX_KEY_RATES: usize = 3;
/// Named keys with limits of their own.
pub(crate) const MAX_OVERRIDES: usize = 64;
/// Slots of the overrides' index: a power of two, twice the overrides, so
/// a key without one is told so by its first probe almost always.
pub(crate) const OVERRIDE_INDEX: usize = 128;

/// An identity word: 0 is an empty entry; with the top bit set, an entry
/// locked while a key moves in (the low 32 bits name the mover,
/// `Owner::compact`); otherwise a key's hash (never 0, top bit clear).
pub(crate) const IDENT_LOCK: u64 = 1 << 63;

/// The first page of a key file. Written by its creator before the file is
/// published, never after, but for the counters, the config lock, and the
/// words of the keys' global rates (`global`, `record`, `fleet`).
#[repr(C, align(64))]
pub(crate) struct KeysHeader {
    pub magic: AtomicU64,
    /// [`KEYS_VERSION`] (low 32 bits) | header size (high 32 bits).
    pub version: AtomicU64,
    /// The table's `table_id` and the task's slot: a key file is only
    /// ever read for the table and task it was made for.
    pub table_id: AtomicU64,
    pub task: AtomicU64,
    /// Buckets (low 32) | records per process (high 32).
    pub geometry: AtomicU64,
    /// The table's attachment capacity (low 32) | name slots (high 32).
    pub geometry2: AtomicU64,
    pub total_size: AtomicU64,
    /// The SipHash key of the identities: random per file, so a caller
    /// cannot choose keys that share a bucket.
    pub hash_key: [AtomicU64; 2],
    /// Version of the limits: copy `version & 1` is current.
    pub config_version: AtomicU64,
    /// Writer lock of the limits: 0 or the writer's `Owner`.
    pub config_lock: AtomicU64,
    /// What the keys' global rates share on the host (see `keyed::global`).
    pub global: GlobalHeader,
    /// 1 while some copy of the limits (the default or an override) has a
    /// global rate: a decision of a task with none takes a path without
    /// the global step.
    pub any_global: AtomicU64,
    /// Counters, each on the line of the rare event it counts.
    pub counters: [AtomicU64; KEY_COUNTERS],
    /// The overflow state's global words.
    pub overflow_global: GlobalWords,
    /// The store's record of the keys' global rates, as the host knows it.
    pub record: RecordWords,
    _pad1: [AtomicU64; 16 - KEY_COUNTERS - 4 - 4],
    /// The state every key shares that found no entry (the region full of
    /// live keys): limited as one key, never refusing every new caller.
    pub overflow: KeyEntry,
    _pad2: AtomicU64,
    /// The fleet's spread keys, as the store last listed them (zero in a
    /// file of a release without them: no list).
    pub fleet: FleetWords,
}

/// What [`KeysHeader::counters`] count.
#[derive(Clone, Copy, Debug)]
pub(crate) enum KeyCounter {
    /// Keys given an empty entry.
    Inserted,
    /// Keys given the entry of a key whose state carried nothing.
    Reused,
    /// Decisions taken on the shared overflow state.
    Overflowed,
    /// Requests a key limit in shadow mode would have refused.
    ShadowRefused,
    /// Requests refused by a key's rate.
    RefusedRate,
    /// Requests refused by a key's concurrency cap.
    RefusedConcurrency,
    /// Keyed permits refused for want of a record in their process.
    RecordsFull,
    /// Requests refused by a key's global rate.
    RefusedGlobal,
}

pub(crate) const KEY_COUNTERS: usize = 8;

/// The host-wide words of the keys' global rates.
#[repr(C)]
pub(crate) struct GlobalHeader {
    /// When the host's next call for keys is due (store ms; see
    /// `keyed::fleet`).
    pub ahead: AtomicU64,
    /// The store's clock minus this host's, µs (i64 bits), as measured
    /// and smoothed.
    pub offset_us: AtomicU64,
    /// Hosts the store counted pulling keys, at the last pull.
    pub hosts: AtomicU64,
    /// Until when (store ms) the store is taken as down: no pull is tried.
    pub failed_until_ms: AtomicU64,
}

/// Keys the fleet's spread-key list holds at most (see `keyed::fleet`).
pub(crate) const FLEET_LISTED: usize = 32;

/// The keys the store lists as asked for by many hosts, as the host's last
/// call learnt them. Written by whichever process made the call, read at
/// each key's first request of a slice; a reader racing a writer may see a
/// mix of two lists, which moves only which keys keep their allowance for
/// a slice.
#[repr(C)]
pub(crate) struct FleetWords {
    /// When the host last sent a call for keys (store ms, as the sender
    /// estimated it): the keeper's call with nothing to ask is made only
    /// if none was sent since the window's call point.
    pub called: AtomicU64,
    /// The store slice the list is of, plus one (0: no list), and the
    /// slice length it counts in.
    pub slice: AtomicU64,
    pub slice_ms: AtomicU64,
    /// The listed keys' store ids (0: unused).
    pub ids: [AtomicU64; FLEET_LISTED],
}

/// What the host knows of the store's record of its keys' global rates
/// (see `keyed::record`). Zero in a file of a release without records.
#[repr(C)]
pub(crate) struct RecordWords {
    /// The version the store holds (0: none), as the last call answered.
    pub wanted: AtomicU64,
    /// The version adopted (top bit set) or refused; 0 after the host's
    /// own limits are written.
    pub seen: AtomicU64,
    /// When the host makes a call for keys if none is made before (ms of
    /// its clock).
    pub due: AtomicU64,
    /// The version of the last record refused (0: none).
    pub refused: AtomicU64,
}

/// One key's global rate on the host: its state in the current slice, the
/// chunk asked ahead for the next, and what the host saw of it (bit layouts
/// in `keyed::global`).
#[repr(C)]
pub(crate) struct GlobalWords {
    pub now: AtomicU64,
    pub next: AtomicU64,
    pub seen: AtomicU64,
    /// The key's id in the store (the same on every host), written with
    /// each new slice of `now`.
    pub id: AtomicU64,
}

/// One key's state: 56 bytes. `W` is the word: the file's atomics, or
/// loom's in a model of key placement (`scripts/loom.sh`).
#[repr(C)]
pub(crate) struct KeyEntry<W = AtomicU64> {
    /// The key's identity, copied: what a mover puts back if it cannot
    /// take the entry (its identity word then holds the lock).
    pub key: W,
    /// GCRA theoretical arrival times, one per rate, in clock ticks.
    pub tat: [W; MAX_KEY_RATES],
    /// Permits in flight (the ledger's shared word, see `limit::ledger`).
    pub held: W,
    /// Requests admitted and refused (for the views: the hottest keys).
    pub admitted: W,
    pub refused: W,
}

#[repr(C, align(64))]
pub(crate) struct Bucket<W = AtomicU64> {
    pub ident: [W; BUCKET_KEYS],
    pub entries: [KeyEntry<W>; BUCKET_KEYS],
}

/// One process's hold of one key's permits: the lane of `limit::ledger`
/// for that key's `held` word.
#[repr(C)]
pub(crate) struct KeyRecord {
    /// The entry held (index + 1; `u32::MAX` is the overflow state), 0:
    /// free.
    pub entry: AtomicU64,
    pub ledger: AtomicU64,
    pub intent: AtomicU64,
    _pad: AtomicU64,
}

/// A key's display name, kept for the views (an entry holds a hash only).
/// Written under a seqlock; a reader checks the name against the hash.
#[repr(C)]
pub(crate) struct NameSlot {
    pub version: AtomicU64,
    pub hash: AtomicU64,
    /// Bytes of the key (its full length; only `NAME_BYTES` are kept).
    pub len: AtomicU64,
    pub bytes: [AtomicU64; NAME_BYTES / 8],
}

pub(crate) const NAME_BYTES: usize = 40;

/// A set of key limits, as stored: the task's default and each override.
#[repr(C)]
pub(crate) struct LimitsCopy {
    /// Emission interval of each rate, in ticks (0: no such rate).
    pub interval: [AtomicU64; MAX_KEY_RATES],
    /// Each rate in requests per second (f64 bits), for reports.
    pub rate_bits: [AtomicU64; MAX_KEY_RATES],
    /// Bursts of rates 0 and 1.
    pub bursts: AtomicU64,
    /// Burst of rate 2 (low 32) | concurrency cap (high 32).
    pub burst2_cap: AtomicU64,
    /// [`LIMITS_SHADOW`], [`LIMITS_UNLIMITED`], [`LIMITS_BLOCKED`].
    pub flags: AtomicU64,
    /// The period each rate was stated over, in ms (for reports).
    pub periods: AtomicU64,
    /// The key's global rate: permits per slice (low 32 bits; 0: none) |
    /// allowance per host and slice (bits 32..40) | fallback (bits 40..42).
    pub global: AtomicU64,
    /// The global rate's slice in ms (low 32) | its stated period in ms
    /// (high 32, for reports).
    pub global_ms: AtomicU64,
}

pub(crate) const LIMITS_SHADOW: u64 = 1;
pub(crate) const LIMITS_UNLIMITED: u64 = 2;
pub(crate) const LIMITS_BLOCKED: u64 = 4;
/// The task's keyed limits fall back to admitting a key that found no
/// entry, instead of the shared overflow state (only on the default).
pub(crate) const LIMITS_OVERFLOW_ADMIT: u64 = 8;

/// One copy of a keyed task's limits.
#[repr(C, align(64))]
pub(crate) struct KeyConfig {
    pub default: LimitsCopy,
    /// Overrides by index; the index table maps a key's hash to one.
    pub overrides: [LimitsCopy; MAX_OVERRIDES],
    /// Each override's key hash (0: unused).
    pub override_keys: [AtomicU64; MAX_OVERRIDES],
    /// Open addressing by hash: override index + 1, 0 = empty.
    pub index: [AtomicU64; OVERRIDE_INDEX],
}

const _: () = {
    assert!(size_of::<KeysHeader>() <= KEYS_HEADER_SIZE);
    assert!(size_of::<KeyEntry>() == 56);
    assert!(size_of::<Bucket>() == 512);
    assert!(size_of::<KeyRecord>() == 32);
    assert!(size_of::<NameSlot>() == 64);
    assert!(size_of::<LimitsCopy>() == 96);
    assert!(size_of::<GlobalWords>() == 32);
};

/// Where each region of a key file starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeysGeometry {
    pub buckets: u32,
    pub records: u32,
    pub processes: u32,
    pub names: u32,
}

impl KeysGeometry {
    pub fn config_offset(&self) -> usize {
        KEYS_HEADER_SIZE
    }
    pub fn records_offset(&self) -> usize {
        self.config_offset() + 2 * size_of::<KeyConfig>()
    }
    pub fn names_offset(&self) -> usize {
        self.records_offset()
            + self.processes as usize * self.records as usize * size_of::<KeyRecord>()
    }
    pub fn buckets_offset(&self) -> usize {
        (self.names_offset() + self.names as usize * size_of::<NameSlot>()).next_multiple_of(4096)
    }
    pub fn globals_offset(&self) -> usize {
        self.buckets_offset() + self.buckets as usize * size_of::<Bucket>()
    }
    pub fn total_size(&self) -> usize {
        self.globals_offset() + self.buckets as usize * BUCKET_KEYS * size_of::<GlobalWords>()
    }
}

impl LimitsCopy {
    pub(crate) fn flags(&self) -> u64 {
        self.flags.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figure docs/guide/limits-per-caller.md gives: a million keys of
    /// a table of 64 processes (256 records each), names cache included.
    #[test]
    fn a_million_keys_take_92_mib() {
        let geometry = KeysGeometry {
            buckets: 1_000_000 / BUCKET_KEYS as u32,
            records: 256,
            processes: 64,
            names: 4096,
        };
        let mib = geometry.total_size() as f64 / (1 << 20) as f64;
        assert!((92.0..92.7).contains(&mib), "{mib:.2} MiB");
        eprintln!("{mib:.2} MiB");
    }
}
