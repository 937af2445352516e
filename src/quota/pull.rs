//! Pulling: the per-task lock, the chunk size, depositing into the host's
//! quota, and the state transitions a pull's answer causes.
//!
//! **The lock** is one word: the holder's compact [`Owner`] and the table
//! clock in ms when it was taken. Whoever finds it held checks the holder:
//! a dead one (the kernel dropped its attachment lock) or one holding it
//! past `stale_after` (one connect plus four commands: a pull is at most a
//! connect, a script load and two calls) is broken at once. The reaper also
//! clears the locks of the processes it reaps.
//!
//! **While a pull is in flight** the other processes keep spending what is
//! left; one that finds nothing left waits for the pull, polling every
//! 20 µs, for at most one store command timeout, and is then refused as
//! `Global` (or decided by the fallback if the store has just failed). The
//! low-water mark makes that wait rare: the next chunk is pulled when a
//! quarter of the last one is left.
//!
//! **A process killed during a pull** leaves the lock to be broken as above.
//! If it died after the store granted a chunk and before the chunk reached
//! the table, the key charged the host with a grant the host never
//! received. Whoever takes the lock from a dead holder (or the reaper that
//! clears it) marks the task `redeem`; the next pull asks the store to hand
//! that difference back (the key's charge minus the host's claim) without
//! taking it from the slice again. A holder only stuck, not dead, may still
//! deposit its grant: its lock is broken without redeeming.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub(super) use super::deposit::deposit;
use super::store::{Ask, slice_of, wall_us};
use super::{Global, Quota, QuotaStats, TaskRef, notes, record};
use crate::error::Result;
use crate::events;
use crate::format::{QuotaSlot, TaskSlot};
use crate::shm::Shm;

/// Phases of [`QuotaSlot::phase`], in the top two bits; below, the host wall
/// clock in ms when the phase began.
const OPEN: u64 = 0;
const LIMITED: u64 = 1;
pub(super) const FAILED: u64 = 2;
pub(super) const SINCE: u64 = (1 << 62) - 1;
/// In [`QuotaSlot::exhausted`]: the key is used up, but idle hosts may give
/// quota back, so the host asks again when its pacing ends (see `idle`).
pub(super) const MAY_COME_BACK: u64 = 1 << 63;

pub(super) fn failed(q: &QuotaSlot) -> bool {
    q.phase.load(Ordering::Acquire) >> 62 == FAILED
}

/// Proof of holding a task's pull lock; releases it when dropped, and then
/// (its field dropped after) writes the lines logged meanwhile: a logger
/// that calls back into flowctrl finds the lock free.
pub(super) struct PullLock<'a> {
    word: &'a std::sync::atomic::AtomicU64,
    held: u64,
    _defer: events::Defer,
}

impl Drop for PullLock<'_> {
    fn drop(&mut self) {
        // Only our own claim: a lock broken as stale stays with its breaker.
        let _ = self
            .word
            .compare_exchange(self.held, 0, Ordering::Release, Ordering::Relaxed);
    }
}

/// While failed: whether the next probe is due (nothing claimed).
pub(super) fn probe_time(shm: &Shm, q: &QuotaSlot) -> bool {
    shm.clock.now() >= q.probe_at.load(Ordering::Acquire)
}

/// Whether the slice has released nothing more for this host to pull yet.
pub(super) fn paced(shm: &Shm, q: &QuotaSlot) -> bool {
    let until = q.paced_until.load(Ordering::Acquire);
    until != 0 && shm.clock.now() < until
}

/// [`paced`] in `slice`: a wait a used-up key of an earlier slice set (the
/// last reply's, marked so in `exhausted`) is over when that slice is (it ends with the slice by the store's clock,
/// and this host's rounding may carry it a millisecond past: a refusal
/// then counted in the new slice erased the old one's, and the host's
/// demand read as what it admitted alone).
pub(super) fn paced_in(shm: &Shm, q: &QuotaSlot, slice: u32) -> bool {
    paced(shm, q) && {
        let used_up = q.exhausted.load(Ordering::Acquire);
        !(used_up & MAY_COME_BACK != 0 && used_up & !MAY_COME_BACK != slice as u64 + 1)
    }
}

fn now_ms(shm: &Shm) -> u32 {
    (shm.clock.ticks_to_ns(shm.clock.now()) / 1_000_000) as u32
}

impl Quota {
    /// A lock older than this is broken even if its holder lives.
    pub(super) fn stale_after(&self) -> Duration {
        self.options.connect_timeout + 4 * self.options.timeout + Duration::from_millis(20)
    }

    /// Takes the task's pull lock if it is free, or held by a dead or stuck
    /// holder; `None` while a live holder is within its bound.
    pub(super) fn try_lock<'a>(&self, shm: &Shm, q: &'a QuotaSlot) -> Result<Option<PullLock<'a>>> {
        let me = shm.owner()?.compact() as u64;
        let now = now_ms(shm);
        let current = q.pull_lock.load(Ordering::Acquire);
        if current != 0 {
            let age = now.wrapping_sub((current >> 32) as u32);
            let stuck = age as u64 > self.stale_after().as_millis() as u64;
            let holder = current as u32;
            let alive = holder as u64 == me || shm.compact_owner_alive(holder);
            if !stuck && alive {
                return Ok(None);
            }
            if !alive {
                // Only a dead holder's grant is surely lost: a stuck one may
                // still deposit it.
                q.redeem.store(1, Ordering::Release);
            }
        }
        let held = me | (now as u64) << 32;
        Ok(q.pull_lock
            .compare_exchange(current, held, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
            .then(|| PullLock {
                word: &q.pull_lock,
                held,
                _defer: events::defer(),
            }))
    }

    /// Pulls the next chunk if the lock is free: never waits.
    #[cold]
    pub(super) fn pull_ahead(&self, t: TaskRef<'_>, slice: u32) {
        let q = &t.slot.quota;
        // While a shard is down the task pulls on, and a due probe of the
        // shard is not held back by the others being used up or paced.
        let partial = failed(q) && super::down::partial(t.slot, t.g);
        let idle = (q.exhausted.load(Ordering::Relaxed) == slice as u64 + 1
            && super::reserve::none(t.slot))
            || paced_in(t.shm, q, slice);
        if (failed(q) && !partial) || (idle && !(partial && probe_time(t.shm, q))) {
            return;
        }
        if let Ok(Some(lock)) = self.try_lock(t.shm, q) {
            let want = self.want(t.slot, t.g, 1);
            let _ = self.pull_locked(t, want, &lock);
        }
    }

    /// While failed: whether this caller is the one to probe the store now
    /// (it moves the next probe time forward first, so only one probes).
    pub(super) fn probe_due(&self, shm: &Shm, q: &QuotaSlot) -> bool {
        let at = q.probe_at.load(Ordering::Acquire);
        let now = shm.clock.now();
        now >= at
            && q.probe_at
                .compare_exchange(
                    at,
                    self.next_probe(shm, now),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    fn next_probe(&self, shm: &Shm, now: u64) -> u64 {
        // ±20 % jitter, from the clock's low bits: hosts that failed together
        // do not probe together.
        let base = self.options.probe_interval.as_nanos() as u64;
        let jitter = (now ^ (now >> 17)).wrapping_mul(0x9e37_79b9_7f4a_7c15) % (base / 5 * 2 + 1);
        let ns = base - base / 5 + jitter;
        now + ns * shm.clock.ticks_per_sec() / 1_000_000_000
    }

    /// One pull under the lock: asks the store for `want` permits of the
    /// current slice and deposits them. Corrects the clock offset with every
    /// answer, and asks once more when the store is in another slice than
    /// this host thought. Returns what was granted.
    pub(super) fn pull_locked(
        &self,
        t: TaskRef<'_>,
        want: u64,
        _lock: &PullLock<'_>,
    ) -> Result<u64> {
        let TaskRef {
            shm,
            index,
            slot,
            task,
            mut g,
        } = t;
        let q = &slot.quota;
        // A give-back its mover left half done comes first (see `idle`).
        super::idle::finish(slot);
        let mut slice = slice_of(self.store_now_us(q), g.slice_ms);
        // While failed every pull probes (the request path pulls then only
        // when a probe is due); while only some shards are down, one pull
        // per probe interval asks the down ones too.
        let probe = failed(q) && (!super::down::partial(slot, g) || self.probe_due(shm, q));
        // A reservation comes first: it is usable once the pacing it came
        // with is over, and the host asks for no more before.
        if !super::reserve::none(slot) {
            if paced(shm, q) {
                return Ok(0);
            }
            let failing = failed(q);
            let moved =
                super::reserve::move_in(slot, |s| failing || super::down::granted_self_in(slot, s));
            if tagged(q.host.load(Ordering::Acquire), slice) > 0 {
                return Ok(moved);
            }
        }
        // Two answers from another slice, two refreshes of the numbers.
        for _ in 0..4 {
            // Back from a fallback in this slice: no more than its share. A
            // probe asks for nothing then, but still asks: skipped, it left
            // the host failed for another probe interval (1.1 s after the
            // promotion in a run, while the other host took the keys).
            let want = match super::share_left(slot, g, slice) {
                Some(left) if left < want => {
                    if left == 0 && !probe {
                        return Ok(0);
                    }
                    left
                }
                _ => want,
            };
            let claimed = super::taken_in(slot, slice);
            let given = super::idle::given_in(slot, slice);
            let redeem = q.redeem.load(Ordering::Acquire) == 1;
            let (record_version, spends_record) = record::seen(q);
            let sent = wall_us() + self.skew_us;
            let began = Instant::now();
            let answer = self.pull_spread(
                slot,
                g,
                Ask {
                    task,
                    shard: 0,
                    slice,
                    slice_ms: g.slice_ms,
                    quota: g.quota as u64,
                    burst: g.burst() as u64,
                    want: want.min(g.quota as u64),
                    host: &self.host,
                    claimed,
                    given,
                    gives_back: self.gives_back(g),
                    redeem,
                    offset_us: q.offset_us.load(Ordering::Relaxed) as i64,
                    record_version,
                    spends_record,
                    own_slice_ms: record::own(slot).map_or(g.slice_ms, |own| own.slice_ms),
                    demand: self.demand(slot, g, slice),
                    health: super::health::of_slice(shm, index, slot, slice),
                    embedded: &q.embedded,
                    reserve: true,
                },
                probe,
            );
            let ns = began.elapsed().as_nanos() as u64;
            q.pulls.fetch_add(1, Ordering::Relaxed);
            q.pull_ns_sum.fetch_add(ns, Ordering::Relaxed);
            q.pull_ns_max.fetch_max(ns, Ordering::Relaxed);
            let reply = match answer {
                Ok(reply) => reply,
                Err(e) => {
                    q.failed_pulls.fetch_add(1, Ordering::Relaxed);
                    let first = !failed(q);
                    if first {
                        q.probe_at
                            .store(self.next_probe(shm, shm.clock.now()), Ordering::Release);
                        enter(q, FAILED);
                    }
                    notes::store_failed(task, &e, first, g, self.options.probe_interval);
                    return Err(e);
                }
            };
            let back = wall_us() + self.skew_us;
            if !self.store.shares_host_clock() {
                let offset = smooth_offset(q, reply.store_us - (sent + back) / 2, back - sent);
                q.offset_us.store(offset as u64, Ordering::Relaxed);
            }
            if let Some(refresh) = reply.refresh {
                self.refresh(TaskRef { g, ..t }, refresh)?;
                let Some(now) = slot.global() else {
                    return Ok(0);
                };
                g = now;
                slice = slice_of(self.store_now_us(q), g.slice_ms);
                continue;
            }
            if reply.slice != slice {
                slice = reply.slice;
                continue;
            }
            if redeem {
                let _ = q
                    .redeem
                    .compare_exchange(1, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
            if reply.granted > 0 && std::env::var_os("FLOWCTRL_TEST_DIE_AFTER_GRANT").is_some() {
                // Tests of the lost chunk: die between the grant and the
                // deposit, as a SIGKILL there would.
                std::process::abort();
            }
            q.hosts_seen.store(reply.hosts, Ordering::Relaxed);
            if reply.created {
                slot.keys_created.fetch_add(1, Ordering::Relaxed);
            }
            notes::conflicts(q, task, slice, g, &self.host, &reply);
            // The hosts' shares while a shard is down stay those of the
            // last slice before: every host's from the same slice, so they
            // add up to the quota (hosts notice a shard's or the cluster's
            // failure in different slices, and their split moves).
            let failing = failed(q);
            let kept = reply.usable_ms > 0 && reply.granted > 0;
            if kept {
                super::reserve::keep(slot, slice, reply.granted);
            } else {
                deposit(slot, slice, reply.granted, |s| {
                    failing || super::down::granted_self_in(slot, s)
                });
            }
            // A give-back's pull for nothing only tells the store: the
            // host's pacing and low water stay the last ask's.
            let telling = want == 0;
            // Nothing more released yet: no pull until it will have been (a
            // reservation: until it is usable).
            let paced = match reply.wait_ms.max(reply.usable_ms) {
                0 => 0,
                ms => shm.clock.now().saturating_add(
                    shm.clock
                        .duration_to_ticks(Duration::from_millis(ms.min(60_000))),
                ),
            };
            if !telling {
                q.paced_until.store(paced, Ordering::Release);
                // The next chunk is pulled when a quarter of this one is
                // left, unless what the host holds lasts it to the slice's
                // end, or to the end of a busy spell like its last (see
                // `spell`): a spell that runs longer pulls when the host
                // runs dry (measured in the simulation: pulled ahead, that
                // chunk went back at the spell's end, bursty demand 0.0107
                // store operations per admission).
                let pace = super::chunk::pace(self, slot, g);
                let covered = pace.last() && pace.held >= pace.to_end().max(1)
                    || super::spell::rest(slot, g, pace.slice)
                        .is_some_and(|rest| pace.held >= rest);
                q.low_water
                    .store(if covered { 0 } else { want / 4 }, Ordering::Relaxed);
            }
            // Before the state leaves "failed": whether this pull ended it.
            // A shard still down keeps it failed (see `down`).
            let partial = super::down::partial(slot, g);
            events::recovered(
                task,
                failed(q) && !partial,
                format_args!("task {task:?}: the quota store answers again"),
            );
            // Used up with a wait: what idle hosts give back is asked for
            // then (see `idle`); the pacing holds the host back meanwhile,
            // and the statistics still say limited. A host granted the last
            // permits asks once more when it has spent them: the store
            // tells it then whether any may come back.
            if reply.left == 0 && telling {
                // Says nothing of what the host may ask for.
            } else if reply.left == 0 && (reply.granted == 0 || !self.gives_back(g)) {
                let back = if reply.wait_ms > 0 { MAY_COME_BACK } else { 0 };
                q.exhausted
                    .store((slice as u64 + 1) | back, Ordering::Release);
            } else if q.exhausted.load(Ordering::Relaxed) != 0 {
                // The key holds quota again (given back), or the host took
                // its last and asks once more; the pacing this reply set is
                // not a used-up key's.
                q.exhausted.store(0, Ordering::Release);
            }
            if partial {
                if !failed(q) {
                    q.probe_at
                        .store(self.next_probe(shm, shm.clock.now()), Ordering::Release);
                }
                enter(q, FAILED);
            } else if reply.left == 0 && !kept && !telling {
                enter(q, LIMITED);
            } else {
                enter(q, OPEN);
            }
            return Ok(reply.granted);
        }
        Ok(0)
    }

    /// [`crate::Task::pull_quota`]: waits up to one command timeout for
    /// another process's pull, then pulls `want` permits.
    pub fn pull_now(&self, t: TaskRef<'_>, want: u64) -> Result<u64> {
        let (q, task) = (&t.slot.quota, t.task);

        let until = Instant::now() + self.options.timeout + self.stale_after();
        loop {
            if let Some(lock) = self.try_lock(t.shm, q)? {
                return self.pull_locked(t, want, &lock);
            }
            if Instant::now() >= until {
                return Err(crate::Error::new(
                    crate::ErrorKind::Timeout,
                    format!("task {task:?}: another process's pull did not finish"),
                ));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// The task's global-quota statistics.
    pub fn stats(&self, slot: &TaskSlot, g: Option<Global>) -> QuotaStats {
        super::stats::read(slot, g, self.skew_us)
    }
}

/// The offset to keep after measuring `measured` over a round trip of
/// `rtt_us` (the measurement is within ±rtt/2 of the truth). A first one is
/// taken as it is, and so is one that the kept offset contradicts by more
/// than its own error plus 20 ms (a clock was stepped, or the kept value
/// came from a puller descheduled mid-pull). Otherwise a fast answer moves
/// the offset by an eighth of the difference and a slow one (over 4 ms) not
/// at all, so noise does not move this host's slice edges.
fn smooth_offset(q: &QuotaSlot, measured: i64, rtt_us: i64) -> i64 {
    let old = q.offset_us.load(Ordering::Relaxed) as i64;
    if old == 0 || (measured - old).abs() > 20_000 + rtt_us / 2 {
        measured
    } else if rtt_us > 4_000 {
        old
    } else {
        old + (measured - old) / 8
    }
}

/// The count of a `slice | count` word if it is of `slice`, else 0.
pub(super) fn tagged(word: u64, slice: u32) -> u64 {
    if (word >> 32) as u32 == slice {
        word & 0xffff_ffff
    } else {
        0
    }
}

/// Whether slice `a` is one of the few just before `b` (ids wrap at 2^32):
/// a grant that arrives late. Any other slice id is newer, or of another
/// slicing (`slice_ms` changed): it replaces `b`.
pub(super) fn just_before(a: u32, b: u32) -> bool {
    (1..=4).contains(&b.wrapping_sub(a))
}

/// Moves the state machine to `kind` (under the pull lock), adding the time
/// spent in the phase it leaves to that phase's total.
fn enter(q: &QuotaSlot, kind: u64) {
    let phase = q.phase.load(Ordering::Acquire);
    let now = (wall_us() / 1000) as u64 & SINCE;
    let old = (phase >> 62) as usize;
    if phase != 0 && old as u64 == kind {
        return;
    }
    if phase != 0 && old < 3 {
        q.phase_ms[old].fetch_add(now.saturating_sub(phase & SINCE), Ordering::Relaxed);
    }
    q.phase.store(kind << 62 | now, Ordering::Release);
}

/// The reaper's part: clears the pull lock of a dead attachment slot.
pub(crate) fn reclaim_pull_lock(slot: &TaskSlot, attach: u32) {
    let word = slot.quota.pull_lock.load(Ordering::Acquire);
    if word != 0 && (word & 0xffff) as u32 == attach + 1 {
        slot.quota.redeem.store(1, Ordering::Release);
        let _ = slot
            .quota
            .pull_lock
            .compare_exchange(word, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_compare_across_the_wrap_and_slicings() {
        assert!(just_before(0, 1));
        assert!(just_before(u32::MAX, 0));
        assert!(!just_before(5, 5));
        assert!(!just_before(6, 5));
        // A 1 s slice id after 500 ms ones: another slicing, not a late grant.
        assert!(!just_before(1_764_576_000, 3_529_152_000));
    }
}
