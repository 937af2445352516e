//! Where a cluster's quota lives: one counter per task per slice, from which
//! hosts pull chunks. Two stores: the table itself (one host, no server) and
//! Redis.

use std::sync::atomic::{AtomicU64, Ordering};

use super::keyed::{KeyBatch, KeyReply};
use super::record::Refresh;
use crate::error::Result;

/// One pull: up to `want` permits of `slice` of the task's key.
#[derive(Clone, Copy)]
pub(crate) struct Ask<'a> {
    /// The task's name (the store key is derived from it, the shard and
    /// the slice).
    pub task: &'a str,
    /// Which of the task's keys of the slice (0 unless the task is spread
    /// over several, see `shard`); `quota`, `burst`, `want` and `claimed`
    /// are this shard's.
    pub shard: u32,
    /// The shards the task is spread over (1: one key).
    pub shards: u32,
    /// The slice this host believes is current (low 32 bits of the id).
    pub slice: u32,
    pub slice_ms: u32,
    /// The slice's threshold: a key that does not exist yet starts here.
    pub quota: u64,
    /// Permits the slice releases at once; the rest evenly over the slice.
    pub burst: u64,
    pub want: u64,
    /// This host's id in the store's census.
    pub host: &'a str,
    /// What this host took of the slice so far: every grant it received
    /// (from this key and from an earlier one the store lost) and every
    /// permit its fallback admitted. A key that does not know this much of
    /// the host deducts the difference once.
    pub claimed: u64,
    /// Of `claimed`, what the host gave back while idle (see `give_back`): the
    /// key puts back what it was not told of before.
    pub given: u64,
    /// The host gives back idle quota (a single key on a store with other
    /// hosts): `given` is sent, and a used-up key may tell it to ask again.
    pub gives_back: bool,
    /// A pull lock was taken from a dead holder: hand back what the key
    /// charged the host with beyond its claim (a grant that never arrived).
    pub redeem: bool,
    /// This host's measured clock offset to the store, µs (for the census).
    pub offset_us: i64,
    /// The version of the task's store record this host last saw (0: none).
    pub record_version: u64,
    /// The numbers sent are the record's: the record, not the first host's
    /// slicing, decides how slices are cut.
    pub spends_record: bool,
    /// This host's own `slice_ms` (`slice_ms` may be another host's).
    pub own_slice_ms: u32,
    /// Requests per slice this host is asked for (admitted and refused):
    /// while the hosts' demands exceed the slice, each is owed at least
    /// min(its demand, an equal share) of it.
    pub demand: u64,
    /// What the task's releases reported in the slice so far (the census
    /// carries it to a manager).
    pub health: super::health::Health,
    /// The embedded store's key in the task's slot.
    pub embedded: &'a AtomicU64,
    /// The host can keep a reservation (see `account::deposit`): one key, not a
    /// task spread over shards.
    pub reserve: bool,
}

impl<'a> Ask<'a> {
    /// An ask of task `t` by host `h` for nothing, one unsharded slice 0 of
    /// 1,000 ms and 1,000 permits, every other word plain: what decoders
    /// and tests change a few fields of.
    pub(crate) fn plain(embedded: &'a AtomicU64) -> Self {
        Ask {
            task: "t",
            shard: 0,
            shards: 1,
            slice: 0,
            slice_ms: 1000,
            quota: 1000,
            burst: 1000,
            want: 0,
            host: "h",
            claimed: 0,
            given: 0,
            gives_back: false,
            redeem: false,
            offset_us: 0,
            record_version: 0,
            spends_record: false,
            own_slice_ms: 1000,
            demand: 0,
            health: Default::default(),
            embedded,
            reserve: false,
        }
    }
}

/// What a store answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    /// The slice the store is in (by its own clock).
    pub slice: u32,
    /// Permits granted; 0 when the store is in another slice than asked.
    pub granted: u64,
    /// What is left in the key after this pull.
    pub left: u64,
    /// The store's wall clock when it answered, µs since the Unix epoch.
    pub store_us: i64,
    /// Hosts the key has a census record of (0 when unknown).
    pub hosts: u64,
    /// Another table pulled under this host's id in the slice.
    pub host_conflict: bool,
    /// When less was granted than asked because the slice has not released
    /// more yet: ms until the asked chunk will have been released.
    pub wait_ms: u64,
    /// The key was created with another threshold than this host's, or
    /// this host spends by another host's slicing.
    pub config_conflict: bool,
    /// The task's numbers in the store are not the ones sent (see
    /// `record`): nothing was granted, unless `went_on`.
    pub refresh: Option<Refresh>,
    /// This pull created the slice's key (no manager wrote it ahead).
    pub created: bool,
    /// The grant is a reservation: usable only this many ms from now, when
    /// the slice will have released it (0: at once). See `account::deposit`.
    pub usable_ms: u64,
    /// Granted across a change of the task's record: the grant is the
    /// slice key's, and `refresh` names the record to adopt after it.
    pub went_on: bool,
}

/// What a slice has released `elapsed_ms` into it: the burst at once, the
/// rest evenly, the whole quota by the time only the burst is left to go.
/// The Redis script applies the same rule.
pub(crate) fn released(quota: u64, burst: u64, elapsed_ms: u64, slice_ms: u32) -> u64 {
    (quota.saturating_mul(elapsed_ms) / slice_ms.max(1) as u64)
        .saturating_add(burst)
        .min(quota)
}

/// Ms from `elapsed_ms` until a slice has released `target` (0 if it has).
pub(crate) fn wait_until_released(
    quota: u64,
    burst: u64,
    target: u64,
    elapsed_ms: u64,
    slice_ms: u32,
) -> u64 {
    if target <= released(quota, burst, elapsed_ms, slice_ms) || quota == 0 {
        return 0;
    }
    let at_ms = (target - burst.min(target))
        .saturating_mul(slice_ms as u64)
        .div_ceil(quota);
    at_ms.saturating_sub(elapsed_ms).max(1)
}

pub(crate) trait QuotaStore: Send + Sync {
    fn pull(&self, ask: &Ask<'_>) -> Result<Reply>;
    /// Grants chunks of keys' global rates (see `keyed`); `None` from a
    /// store that keeps none: the embedded store's host is the whole fleet.
    fn pull_keys(&self, _batch: &KeyBatch<'_>) -> Option<Result<KeyReply>> {
        None
    }
    /// Whether [`QuotaStore::pull_keys`] answers.
    fn keeps_keys(&self) -> bool {
        self.spreads()
    }
    /// The store's clock is this host's: there is no offset to measure (a
    /// measurement could only add the noise of a descheduled puller).
    fn shares_host_clock(&self) -> bool {
        false
    }
    /// Whether a table handle runs a keeper thread for this store (see
    /// `keeper`): the embedded store has no other host to give to.
    fn keeper(&self) -> bool {
        self.spreads()
    }
    /// For messages: which store this is (never with a password).
    fn describe(&self) -> String;
    /// The task's record of its global numbers, as stored (see `record`);
    /// `None` when the store keeps none.
    fn record(&self, _task: &str) -> Result<Option<Vec<(String, String)>>> {
        Ok(None)
    }
    /// The record a refresh to `version` adopts: the one the pull's reply
    /// carried when it is that version (no round trip), else [`record`].
    ///
    /// [`record`]: QuotaStore::record
    fn record_at(&self, task: &str, _version: u64) -> Result<Option<Vec<(String, String)>>> {
        self.record(task)
    }
    /// The fields of the task's keys' record (see `keyed::record`), empty
    /// without one; `None` when the store keeps none.
    fn key_record(&self, _task: &str) -> Result<Option<Vec<(String, String)>>> {
        Ok(None)
    }
    /// Whether a task's slice may be spread over several keys: the embedded
    /// store has one word per task (and one host, which no node limits).
    fn spreads(&self) -> bool {
        true
    }
    /// Writes the copy of the task's record of shard `at.0` of `at.1`
    /// (`fields`, the version included): a copy the store lost or missed a
    /// write of.
    fn repair_copy(
        &self,
        _task: &str,
        _at: (u32, u32),
        _fields: &[(String, String)],
    ) -> Result<()> {
        Ok(())
    }
}

/// How much of what is `left` in a key one pull may take: what it asks for,
/// up to what is left. The tail of a slice is divided by fair shares (see
/// `fair`), not by handing out ever smaller pieces: those cost a round trip
/// each. The Redis script applies the same rule (see `script/90-core.lua`).
pub(crate) fn grant(left: u64, want: u64) -> u64 {
    want.min(left)
}

/// The slice id of a wall-clock instant (µs since the Unix epoch), low 32
/// bits: slices of 100 ms wrap after 13 years.
pub(crate) fn slice_of(wall_us: i64, slice_ms: u32) -> u32 {
    (wall_us.max(0) as u64 / 1000 / slice_ms.max(1) as u64) as u32
}

/// This host's wall clock, µs since the Unix epoch (a vDSO read, no system
/// call).
pub(crate) fn wall_us() -> i64 {
    #[cfg(feature = "sim")]
    if let Some(us) = crate::clock::sim::now_us() {
        return us;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec * 1_000_000 + ts.tv_nsec / 1000
}

/// The embedded store: the slice counter is a word of the task's slot
/// (slice in the high 32 bits, permits left below), so a single host runs
/// global mode with no server. Its clock is this host's; it never fails nor
/// loses a key, so it has nothing to deduct and one host in its census.
pub(crate) struct Embedded;

impl QuotaStore for Embedded {
    fn pull(&self, ask: &Ask<'_>) -> Result<Reply> {
        let store_us = wall_us();
        let slice = slice_of(store_us, ask.slice_ms);
        if slice != ask.slice {
            return Ok(Reply {
                slice,
                granted: 0,
                left: 0,
                store_us,
                hosts: 1,
                host_conflict: false,
                wait_ms: 0,
                config_conflict: false,
                refresh: None,
                created: false,
                usable_ms: 0,
                went_on: false,
            });
        }
        let fresh = (slice as u64) << 32 | ask.quota.min(u32::MAX as u64);
        let mut word = ask.embedded.load(Ordering::Acquire);
        loop {
            let current = if (word >> 32) as u32 == slice {
                word
            } else {
                fresh
            };
            let left = current & 0xffff_ffff;
            let elapsed_ms = (store_us.max(0) as u64 / 1000) % ask.slice_ms.max(1) as u64;
            let given = ask.quota.saturating_sub(left);
            let room =
                released(ask.quota, ask.burst, elapsed_ms, ask.slice_ms).saturating_sub(given);
            // Less than the grant released: what is, if at least half, else
            // none.
            let full = grant(left, ask.want);
            let granted = if full <= room {
                full
            } else if 2 * room >= full {
                room
            } else {
                0
            };
            match ask.embedded.compare_exchange_weak(
                word,
                current - granted,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    // The wait until another full ask will have been
                    // released beyond what is given: no slivers.
                    let wait_ms = if left > granted {
                        wait_until_released(
                            ask.quota,
                            ask.burst,
                            given + granted + ask.want.min(left - granted),
                            elapsed_ms,
                            ask.slice_ms,
                        )
                    } else {
                        0
                    };
                    return Ok(Reply {
                        slice,
                        granted,
                        left: left - granted,
                        store_us,
                        hosts: 1,
                        host_conflict: false,
                        wait_ms,
                        config_conflict: false,
                        refresh: None,
                        created: false,
                        usable_ms: 0,
                        went_on: false,
                    });
                }
                Err(now) => word = now,
            }
        }
    }

    fn describe(&self) -> String {
        "the embedded store".into()
    }

    fn shares_host_clock(&self) -> bool {
        true
    }

    fn spreads(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_what_is_asked_up_to_what_is_left() {
        assert_eq!(grant(1000, 100), 100);
        assert_eq!(grant(150, 100), 100);
        assert_eq!(grant(40, 100), 40);
        assert_eq!(grant(0, 100), 0);
        assert_eq!(grant(5, 0), 0);
    }

    #[test]
    fn the_embedded_store_starts_each_slice_at_its_threshold() {
        let word = AtomicU64::new(0);
        let now = wall_us();
        let slice = slice_of(now, 60_000);
        let ask = |want| Ask {
            slice,
            slice_ms: 60_000,
            quota: 10,
            burst: 10,
            want,
            own_slice_ms: 60_000,
            ..Ask::plain(&word)
        };
        let mut total = 0;
        loop {
            let reply = Embedded.pull(&ask(4)).unwrap();
            if reply.slice != slice {
                return; // crossed a minute boundary: nothing to check
            }
            if reply.granted == 0 {
                break;
            }
            total += reply.granted;
        }
        assert_eq!(total, 10);
        let other = Embedded
            .pull(&Ask {
                slice: slice.wrapping_add(1),
                ..ask(4)
            })
            .unwrap();
        assert_eq!(other.granted, 0, "a slice the store is not in gets nothing");
    }
}
