//! The task's quota phase, host-wide, and its transitions.
//!
//! The phase is one of three, with what each allows:
//! - **open**: spend, and pull the next chunk at the low-water mark;
//! - **limited**: the slice's key, or the host's share of it, is used up;
//!   refuse without asking the store until the slice changes (or, marked
//!   "may come back", until the pacing ends: idle hosts may give back);
//! - **failed**: the store failed; decide by the fallback policy, and let
//!   one process probe per jittered interval. A spread task with only some
//!   shards down (*partly down*) stays failed but pulls on from the others.
//!
//! Beside the phase, a reply may *pace* the host (nothing more released
//! for it until a time) and a reservation may wait to be moved in. The
//! words (`phase`, `exhausted`, `paced_until`, `probe_at`) are read here
//! into one [`Phase`], whose methods are the only gates a pull passes:
//! [`Phase::pulls_ahead`] on the request path's low water, and
//! [`Phase::when_dry`] when a request finds no permits. [`settle`] and
//! [`fail`] are the only writers, under the pull lock.

use std::sync::atomic::Ordering;

use super::QuotaState;
use super::account::Account;
use super::store::wall_us;
use crate::format::{QuotaSlot, TaskSlot, load_acquire};
use crate::shm::Shm;

/// Phases of `QuotaSlot::phase`, in the top two bits; below, the host wall
/// clock in ms when the phase began.
const OPEN: u64 = 0;
const LIMITED: u64 = 1;
const FAILED: u64 = 2;
const SINCE: u64 = (1 << 62) - 1;
/// In `QuotaSlot::exhausted` (slice + 1 of the used-up key): idle hosts
/// may give quota back, so the host asks again when its pacing ends.
const MAY_COME_BACK: u64 = 1 << 63;

/// Whether the store is failing for this task (wholly or some shards).
pub(super) fn failed(q: &QuotaSlot) -> bool {
    q.phase.load(Ordering::Acquire) >> 62 == FAILED
}

/// While failed: whether the next probe is due (nothing claimed).
pub(super) fn probe_time(shm: &Shm, q: &QuotaSlot) -> bool {
    shm.clock.now() >= q.probe_at.load(Ordering::Acquire)
}

/// Whether the slice has released nothing more for this host to pull yet.
fn paced(shm: &Shm, q: &QuotaSlot) -> bool {
    let until = q.paced_until.load(Ordering::Acquire);
    until != 0 && shm.clock.now() < until
}

/// Whether a reservation waits for its pacing to end.
pub(super) fn reservation_waits(shm: &Shm, slot: &TaskSlot) -> bool {
    Account::of(slot).has_reservation() && paced(shm, &slot.quota)
}

/// [`paced`] in `slice`: a wait that a used-up key of an earlier slice set
/// ends with that slice (the host's rounding may carry it a millisecond
/// past, and a refusal counted in the new slice would read as its demand).
fn paced_in(shm: &Shm, q: &QuotaSlot, slice: u32) -> bool {
    paced(shm, q) && {
        let used_up = q.exhausted.load(Ordering::Acquire);
        !(used_up & MAY_COME_BACK != 0 && used_up & !MAY_COME_BACK != slice as u64 + 1)
    }
}

/// The task's phase at one slice, as the gates of a pull see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Spend, and pull at the low-water mark.
    Open,
    /// Nothing more released for this host yet (a reply's wait).
    Paced,
    /// The slice's key is used up, and no reservation waits.
    Limited,
    /// The whole store fails: the fallback decides. `used_up`: the key was
    /// used up before it failed (nothing to fall back on).
    Failed { used_up: bool, probe_due: bool },
    /// Some shards down, the others answering: pulls go on. `held`: the
    /// key is used up or the host paced, as in `Limited` / `Paced`.
    PartlyDown { held: bool, probe_due: bool },
}

/// What a request that finds no permits does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dry {
    /// Pull (or probe) under the lock.
    Pull,
    /// Refused as `Global`.
    Refuse,
    /// The whole store fails: probe if this caller wins the due probe,
    /// else decide by the fallback.
    ProbeOrFallback,
}

impl Phase {
    /// Reads the phase of the task in `slot` at `slice`; `partial`: some
    /// of its shards are down (`down`).
    pub(super) fn at(shm: &Shm, slot: &TaskSlot, slice: u32, partial: bool) -> Self {
        let q = &slot.quota;
        let exhausted = q.exhausted.load(Ordering::Acquire);
        // Not while a pull is under way or a redeem is owed (a dead mover's).
        let busy =
            q.pull_lock.load(Ordering::Acquire) != 0 || q.redeem.load(Ordering::Acquire) == 1;
        let limited =
            exhausted == slice as u64 + 1 && !Account::of(slot).has_reservation() && !busy;
        let paced = paced_in(shm, q, slice);
        match (failed(q), partial) {
            (true, false) => Phase::Failed {
                used_up: exhausted & !MAY_COME_BACK == slice as u64 + 1,
                probe_due: probe_time(shm, q),
            },
            (true, true) => Phase::PartlyDown {
                held: limited || paced,
                probe_due: probe_time(shm, q),
            },
            _ if limited => Phase::Limited,
            _ if paced => Phase::Paced,
            _ => Phase::Open,
        }
    }

    /// The whole store fails: the fallback decides.
    pub(super) fn falls_back(self) -> bool {
        matches!(self, Phase::Failed { .. })
    }

    /// Whether a process that still has permits pulls the next chunk now:
    /// when open, and partly down unless held (but for a due probe).
    pub(super) fn pulls_ahead(self) -> bool {
        match self {
            Phase::Open => true,
            Phase::PartlyDown { held, probe_due } => !held || probe_due,
            Phase::Paced | Phase::Limited | Phase::Failed { .. } => false,
        }
    }

    /// What a request that found no permits does after `pulls` pulls of
    /// its own; `short()`: the host's fallback share of the slice is too
    /// small for the request (asked only when it matters).
    pub(super) fn when_dry(self, pulls: u32, short: impl Fn() -> bool) -> Dry {
        let more = pulls < super::policy::MAX_PULLS_PER_TAKE;
        match self {
            Phase::Failed { used_up: true, .. } => Dry::Refuse,
            Phase::Failed { .. } => Dry::ProbeOrFallback,
            Phase::PartlyDown {
                probe_due: true, ..
            } if more => Dry::Pull,
            Phase::Open | Phase::PartlyDown { held: false, .. } if more && !short() => Dry::Pull,
            _ => Dry::Refuse,
        }
    }
}

/// What a pull's reply says of the phase.
pub(super) struct Settled {
    pub slice: u32,
    /// The key is used up (`left` 0).
    pub used_up: bool,
    pub granted: u64,
    /// The reply asked the host to wait.
    pub waits: bool,
    /// The grant was kept as a reservation.
    pub kept: bool,
    /// The reservation completes the host's share of the slice.
    pub done: bool,
    /// A pull for nothing, telling the store of a give-back.
    pub telling: bool,
    /// The host gives idle quota back (so a used-up key may refill).
    pub gives_back: bool,
    /// Some shards are still down.
    pub partial: bool,
}

/// Moves the phase after a reply (under the pull lock); `next_probe`: the
/// probe time to set if the task turns partly down.
pub(super) fn settle(q: &QuotaSlot, s: &Settled, next_probe: impl FnOnce() -> u64) {
    // A give-back's pull for nothing says nothing of what the host may ask
    // for. A key used up with nothing granted (or to a host that gives
    // nothing back) holds the host until the slice changes, or until its
    // pacing ends when quota may come back; a key that holds quota again
    // clears that. A reservation completing the host's share holds it so.
    if s.used_up && s.telling {
    } else if s.done {
        q.exhausted.store(s.slice as u64 + 1, Ordering::Release);
    } else if s.used_up && (s.granted == 0 || !s.gives_back) {
        let back = if s.waits { MAY_COME_BACK } else { 0 };
        q.exhausted
            .store((s.slice as u64 + 1) | back, Ordering::Release);
    } else if q.exhausted.load(Ordering::Relaxed) != 0 {
        q.exhausted.store(0, Ordering::Release);
    }
    if s.partial {
        if !failed(q) {
            q.probe_at.store(next_probe(), Ordering::Release);
        }
        enter(q, FAILED);
    } else if s.used_up && !s.kept && !s.telling {
        enter(q, LIMITED);
    } else {
        enter(q, OPEN);
    }
}

/// Moves the task to failed (under the pull lock) after a failed pull;
/// `next_probe` sets the first probe. Returns whether it was not failed
/// before.
pub(super) fn fail(q: &QuotaSlot, next_probe: impl FnOnce() -> u64) -> bool {
    let first = !failed(q);
    if first {
        q.probe_at.store(next_probe(), Ordering::Release);
        enter(q, FAILED);
    }
    first
}

/// Moves the phase word to `kind`, adding the time spent in the phase it
/// leaves to that phase's total.
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

/// Whether the request path may pull or probe at `slice` for `n` permits:
/// a due probe, or permits too few (or of another slice) while not held.
pub(super) fn may_pull(shm: &Shm, slot: &TaskSlot, slice: u32, n: u32, now: u64) -> bool {
    let q = &slot.quota;
    if failed(q) {
        return now >= q.probe_at.load(Ordering::Relaxed);
    }
    if q.exhausted.load(Ordering::Relaxed) == slice as u64 + 1 || paced_in(shm, q, slice) {
        return false;
    }
    let (last, left) = Account::of(slot).last();
    last != slice || (left as u32).saturating_sub(n) < q.low_water.load(Ordering::Relaxed) as u32
}

/// The state and the ms spent in each phase, for the statistics: loads
/// with `Relaxed` or `load_acquire` only (read-only views share it).
pub(super) fn read(slot: &TaskSlot, slice: Option<u32>) -> (Option<QuotaState>, [u64; 3]) {
    let q = &slot.quota;
    let phase = load_acquire(&q.phase);
    let mut ms = [0u64; 3];
    for (m, word) in ms.iter_mut().zip(&q.phase_ms) {
        *m = word.load(Ordering::Relaxed);
    }
    let kind = (phase >> 62) as usize;
    if phase != 0 && kind < 3 {
        ms[kind] += ((wall_us() / 1000) as u64).saturating_sub(phase & SINCE);
    }
    let state = slice.map(|slice| {
        let account = Account::of(slot);
        if kind as u64 == FAILED {
            QuotaState::Failed
        } else if load_acquire(&q.exhausted) & !MAY_COME_BACK == slice as u64 + 1
            && account.held(slice) == 0
            && !account.has_reservation()
        {
            QuotaState::Limited
        } else {
            QuotaState::Open
        }
    });
    (state, ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u32 = super::super::policy::MAX_PULLS_PER_TAKE;

    #[test]
    fn only_an_open_or_partly_down_task_pulls_ahead() {
        assert!(Phase::Open.pulls_ahead());
        assert!(!Phase::Paced.pulls_ahead());
        assert!(!Phase::Limited.pulls_ahead());
        let failed = Phase::Failed {
            used_up: false,
            probe_due: true,
        };
        assert!(!failed.pulls_ahead(), "the request path probes");
        let partly = |held, probe_due| Phase::PartlyDown { held, probe_due };
        assert!(partly(false, false).pulls_ahead());
        assert!(!partly(true, false).pulls_ahead());
        assert!(partly(true, true).pulls_ahead(), "a due probe is not held");
    }

    #[test]
    fn a_dry_request_pulls_refuses_or_falls_back_by_phase() {
        let ok = || false;
        assert_eq!(Phase::Open.when_dry(0, ok), Dry::Pull);
        assert_eq!(Phase::Open.when_dry(MAX, ok), Dry::Refuse);
        assert_eq!(Phase::Open.when_dry(0, || true), Dry::Refuse, "share spent");
        assert_eq!(Phase::Paced.when_dry(0, ok), Dry::Refuse);
        assert_eq!(Phase::Limited.when_dry(0, ok), Dry::Refuse);
        let failed = |used_up| Phase::Failed {
            used_up,
            probe_due: false,
        };
        assert_eq!(failed(false).when_dry(MAX, ok), Dry::ProbeOrFallback);
        assert_eq!(failed(true).when_dry(0, ok), Dry::Refuse);
        let partly = |held, probe_due| Phase::PartlyDown { held, probe_due };
        assert_eq!(partly(true, true).when_dry(0, || true), Dry::Pull);
        assert_eq!(partly(true, true).when_dry(MAX, ok), Dry::Refuse);
        assert_eq!(partly(true, false).when_dry(0, ok), Dry::Refuse);
        assert_eq!(partly(false, false).when_dry(0, ok), Dry::Pull);
    }

    fn settled(slice: u32) -> Settled {
        Settled {
            slice,
            used_up: false,
            granted: 10,
            waits: false,
            kept: false,
            done: false,
            telling: false,
            gives_back: true,
            partial: false,
        }
    }

    fn kind(q: &QuotaSlot) -> u64 {
        q.phase.load(Ordering::Relaxed) >> 62
    }

    #[test]
    fn replies_move_the_phase_and_the_used_up_mark() {
        let slot = super::super::testing::slot();
        let q = &slot.quota;
        settle(q, &settled(7), || 0);
        assert_eq!((kind(q), q.exhausted.load(Ordering::Relaxed)), (OPEN, 0));
        // Used up with nothing granted: limited until the slice changes.
        let used_up = Settled {
            used_up: true,
            granted: 0,
            ..settled(7)
        };
        settle(q, &used_up, || 0);
        assert_eq!((kind(q), q.exhausted.load(Ordering::Relaxed)), (LIMITED, 8));
        // ... or until its pacing ends, when quota may come back.
        let waits = true;
        settle(q, &Settled { waits, ..used_up }, || 0);
        assert_eq!(q.exhausted.load(Ordering::Relaxed), 8 | MAY_COME_BACK);
        // A give-back's pull for nothing says nothing of the mark.
        let telling = Settled {
            telling: true,
            ..used_up
        };
        settle(q, &telling, || 0);
        assert_eq!(q.exhausted.load(Ordering::Relaxed), 8 | MAY_COME_BACK);
        // A key that holds quota again clears it.
        settle(q, &settled(7), || 0);
        assert_eq!((kind(q), q.exhausted.load(Ordering::Relaxed)), (OPEN, 0));
        // A reservation that completes the host's share: open while it
        // waits, the mark set for when it has moved in (no coming back).
        let (kept, done, waits) = (true, true, true);
        settle(
            q,
            &Settled {
                kept,
                done,
                waits,
                ..settled(7)
            },
            || 0,
        );
        assert_eq!((kind(q), q.exhausted.load(Ordering::Relaxed)), (OPEN, 8));
    }

    #[test]
    fn a_failure_sets_one_probe_and_a_partial_reply_keeps_it_failed() {
        let slot = super::super::testing::slot();
        let q = &slot.quota;
        assert!(fail(q, || 500));
        assert!(!fail(q, || 900), "already failed: the probe time stays");
        assert_eq!((kind(q), q.probe_at.load(Ordering::Relaxed)), (FAILED, 500));
        let partial = Settled {
            partial: true,
            ..settled(7)
        };
        settle(q, &partial, || 700);
        assert_eq!((kind(q), q.probe_at.load(Ordering::Relaxed)), (FAILED, 500));
        settle(q, &settled(7), || 0);
        assert!(!failed(q));
        settle(q, &partial, || 700);
        assert_eq!((kind(q), q.probe_at.load(Ordering::Relaxed)), (FAILED, 700));
    }
}
