//! Pulling: one round trip under the task's pull lock (`lock`), asking
//! the store for a chunk (`chunk`) of the current slice, depositing the
//! grant (`account`), and moving the phase by the reply (`phase`).
//!
//! **While a pull is in flight** the other processes keep spending what is
//! left; one that finds nothing left waits for the pull, polling, for at
//! most one store command timeout, and is then refused as `Global` (or
//! decided by the fallback if the store has just failed). The low-water
//! mark makes that wait rare.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::account::{Account, crash_point};
use super::fallback::{share_left, share_over};
use super::lock::{PullLock, try_lock};
use super::phase::{self, Phase, Settled};
use super::shard::Spread;
use super::store::{Ask, QuotaStore, slice_of, wall_us};
use super::{Global, Quota, QuotaStats, TaskRef, down, notes, outage, policy, record};
use crate::error::Result;
use crate::events::{self, Event};
use crate::format::{QuotaSlot, TaskSlot};
use crate::shm::Shm;

impl Quota {
    /// A lock older than this is broken even if its holder lives.
    pub(super) fn stale_after(&self) -> Duration {
        policy::stale_after(self.options.connect_timeout, self.options.timeout)
    }

    /// Pulls the next chunk if the lock is free and the phase lets it:
    /// never waits.
    #[cold]
    pub(super) fn pull_ahead(&self, t: TaskRef<'_>, slice: u32) {
        let phase = Phase::at(t.shm, t.slot, slice, down::partial(t.slot, t.g));
        if !phase.pulls_ahead() {
            return;
        }
        if let Ok(Some(lock)) = try_lock(t.shm, &t.slot.quota, self.stale_after()) {
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
        let ns = outage::probe_delay_ns(self.options.probe_interval, now);
        now + ns * shm.clock.ticks_per_sec() / 1_000_000_000
    }

    /// One pull under the lock: asks the store for `want` permits of the
    /// current slice and deposits them. Corrects the clock offset with
    /// every answer, and asks again when the store is in another slice
    /// than this host thought or its record changed. Returns what was
    /// granted.
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
        // Its lines carry this host's id and store.
        let _origin = crate::events::within(&self.origin);
        let (q, account) = (&slot.quota, Account::of(slot));
        // A give-back its mover left half done comes first.
        account.finish_give_back();
        let mut slice = slice_of(self.store_now_us(q), g.slice_ms);
        // While failed every pull probes (the request path pulls then only
        // when a probe is due); while only some shards are down, one pull
        // per probe interval asks the down ones too.
        let probe = phase::failed(q) && (!down::partial(slot, g) || self.probe_due(shm, q));
        let shards = g.shards;
        let touched = |s| down::cut_short(slot, shards, s);
        // A reservation comes first: it is usable once the pacing it came
        // with is over, and the host asks for no more before.
        if account.has_reservation() {
            if phase::reservation_waits(shm, slot) {
                return Ok(0);
            }
            let moved = account.move_reserved(touched);
            if account.held(slice) > 0 {
                return Ok(moved);
            }
        }
        for _ in 0..policy::SLICE_RETRIES {
            // Back from a fallback in this slice: no more than its share. A
            // probe asks for nothing then, but still asks (it ends the
            // failed phase).
            let want = match share_left(slot, g, slice) {
                Some(left) if left < want => {
                    if left == 0 && !probe {
                        return Ok(0);
                    }
                    left
                }
                _ => want,
            };
            let redeem = q.redeem.load(Ordering::Acquire) == 1;
            let (record_version, spends_record) = record::seen(q);
            let sent = wall_us() + self.skew_us;
            let began = Instant::now();
            let answer = Spread::over(self, slot, g, probe).pull(&Ask {
                task,
                shard: 0,
                shards: g.shards.max(1),
                slice,
                slice_ms: g.slice_ms,
                quota: g.quota as u64,
                burst: g.burst() as u64,
                want: want.min(g.quota as u64),
                host: &self.host,
                claimed: account.taken(slice),
                given: account.given(slice),
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
            });
            let ns = began.elapsed().as_nanos() as u64;
            q.pulls.fetch_add(1, Ordering::Relaxed);
            q.pull_ns_sum.fetch_add(ns, Ordering::Relaxed);
            q.pull_ns_max.fetch_max(ns, Ordering::Relaxed);
            let reply = match answer {
                Ok(reply) => reply,
                Err(e) => {
                    q.failed_pulls.fetch_add(1, Ordering::Relaxed);
                    let first = phase::fail(q, || self.next_probe(shm, shm.clock.now()));
                    notes::store_failed(task, &e, first, g, self.options.probe_interval);
                    return Err(e);
                }
            };
            let back = wall_us() + self.skew_us;
            if !self.store.shares_host_clock() {
                let old = q.offset_us.load(Ordering::Relaxed) as i64;
                let offset =
                    policy::smooth_offset(old, reply.store_us - (sent + back) / 2, back - sent);
                q.offset_us.store(offset as u64, Ordering::Relaxed);
            }
            if let Some(refresh) = reply.refresh
                && !reply.went_on
            {
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
            if reply.granted > 0 {
                // Tests of the lost chunk: between the grant and the deposit.
                crash_point("FLOWCTRL_TEST_DIE_AFTER_GRANT");
            }
            q.hosts_seen.store(reply.hosts, Ordering::Relaxed);
            if reply.created {
                slot.keys_created.fetch_add(1, Ordering::Relaxed);
            }
            notes::conflicts(q, task, slice, g, &self.host, &reply);
            let kept = reply.usable_ms > 0 && reply.granted > 0;
            // A reservation told to wait past its usable time completes the
            // host's share of the slice: nothing more is asked in it.
            let done = kept && reply.wait_ms > reply.usable_ms;
            let got = if kept {
                account.keep_reserved(slice, reply.granted);
                reply.granted
            } else {
                // Back from a fallback, the share binds the grant too: the
                // host's other processes went on admitting by the fallback
                // while the ask was out, so what fitted when it was sent
                // may not fit now.
                account.deposit(slice, reply.granted, || share_over(slot, g, slice), touched)
            };
            // A give-back's pull for nothing only tells the store: the
            // host's pacing and low water stay the last ask's.
            let telling = want == 0;
            if !telling {
                let wait = if done {
                    reply.usable_ms
                } else {
                    reply.wait_ms.max(reply.usable_ms)
                };
                self.pace(t.shm, slot, g, want, wait);
            }
            // Before the phase leaves "failed": whether this pull ended it.
            // A shard still down keeps it failed (see `down`).
            let partial = down::partial(slot, g);
            events::recovered(
                task,
                phase::failed(q) && !partial,
                format_args!("task {task:?}: the quota store answers again"),
            );
            let settled = Settled {
                slice,
                used_up: reply.left == 0,
                granted: reply.granted,
                waits: reply.wait_ms > 0,
                kept,
                done,
                telling,
                gives_back: self.gives_back(g),
                partial,
            };
            phase::settle(q, &settled, || self.next_probe(shm, shm.clock.now()));
            // Granted across a record change: the record came with the
            // grant, and is adopted now. The grant is the host's whatever
            // the adoption does: one that fails leaves the version unseen,
            // and the next pull carries the record again.
            if let (true, Some(refresh)) = (reply.went_on, reply.refresh)
                && let Err(e) = self.refresh(TaskRef { g, ..t }, refresh)
            {
                events::report(
                    Event::RecordRefused,
                    task,
                    format_args!("task {task:?}: its store record is not adopted yet: {e}"),
                );
            }
            return Ok(got);
        }
        Ok(0)
    }

    /// After an ask of `want`: no pull until `wait_ms` from now (nothing
    /// more released before; a reservation: until usable), and the next
    /// low-water mark (see `policy::low_water`).
    fn pace(&self, shm: &Shm, slot: &TaskSlot, g: Global, want: u64, wait_ms: u64) {
        let q = &slot.quota;
        // A new slice releases anew: no wait runs past this one's end by the
        // host's clock (a wait to the end would else refuse the next slice's
        // first requests, and count them over the last slice's refusals).
        let slice_us = g.slice_ms as u64 * 1000;
        let to_end = slice_us - self.store_now_us(q).max(0) as u64 % slice_us;
        let paced = match Duration::from_millis(wait_ms).min(Duration::from_micros(to_end)) {
            wait if wait.is_zero() => 0,
            wait => shm
                .clock
                .now()
                .saturating_add(shm.clock.duration_to_ticks(wait.min(policy::MAX_PACE))),
        };
        q.paced_until.store(paced, Ordering::Release);
        let pace = super::chunk::pace(self, slot, g);
        let rest = super::spell::rest(slot, g, pace.slice);
        q.low_water
            .store(policy::low_water(want, &pace, rest), Ordering::Relaxed);
    }

    /// [`crate::Task::pull_quota`]: waits up to one command timeout for
    /// another process's pull, then pulls `want` permits.
    pub fn pull_now(&self, t: TaskRef<'_>, want: u64) -> Result<u64> {
        let (q, task) = (&t.slot.quota, t.task);

        let until = Instant::now() + self.options.timeout + self.stale_after();
        loop {
            if let Some(lock) = try_lock(t.shm, q, self.stale_after())? {
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
