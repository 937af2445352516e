//! Lane sets from a pool, in a table created with `lanes = N`: a (task,
//! process) pair takes a set on its first use of the task and gives it back
//! when its process is gone, so the file grows with the pairs in use rather
//! than with tasks × processes.
//!
//! **Who owns a set.** A set's `owner` word names its pair; the pair map
//! names the set. A claimer takes a free set's owner word (a
//! compare-and-swap from 0), empties the set's counters, then publishes it
//! in the map (a compare-and-swap from 0: threads of one handle may race,
//! and the loser gives its set back). Only the pair's live process ever
//! writes through the map, so a set is never shared by two pairs.
//!
//! **Giving back.** When an attachment is reclaimed (its slot's kernel lock
//! held, its ledgers already drained), its sets are folded: their counters
//! are added to the task's `retired` totals, so the task's statistics stay
//! exact, and the set is freed. A fold is one record written before any
//! total moves ([`FoldRecord`]: the totals before, the set's delta), under a
//! host-wide kernel lock that dies with its holder; the next holder finishes
//! a fold it finds recorded, with plain stores of `before + delta`, so a
//! reclaimer killed at any instruction leaves every total counted once. A
//! set whose claim or free was cut short (its owner word set, the map not
//! naming it) holds no counts and is freed as it is found.
//!
//! **No set.** When the pool is empty a process still decides: its rate,
//! global limits and counters work on the task's shared `unlaned` line; an
//! acquire of a capped task is refused as concurrency, because permits
//! counted against a cap must sit in a ledger the reaper can drain. Both are
//! counted, and the process retries a claim every [`RETRY`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{Region, Shm};
use crate::format::{COUNTERS, FoldRecord, LANES, Lane, TOTALS, reclaimed_total};
use crate::limit::ledger;

/// How long a process that found the pool empty waits before it looks again
/// (a look scans every set's owner word).
pub(crate) const RETRY: Duration = Duration::from_millis(50);

fn owner_word(task: u32, attach: u32) -> u64 {
    (task as u64 + 1) << 32 | attach as u64
}

/// (task, attachment) of a set's owner word, if it names a pair in the table.
fn pair_of(region: &Region, owner: u64) -> Option<(u32, u32)> {
    let task = ((owner >> 32) as u32).checked_sub(1)?;
    let attach = owner as u32;
    (task < region.geometry.task_capacity && attach < region.geometry.attach_capacity)
        .then_some((task, attach))
}

fn pair_index(region: &Region, task: u32, attach: u32) -> u32 {
    task * region.geometry.attach_capacity + attach
}

/// Takes a set for (task, attach), the caller's own live pair; the set now
/// held by the pair (this one's or a racing thread's), or `None` when the
/// pool has none free.
#[cold]
#[inline(never)]
pub(crate) fn claim(shm: &Shm, task: u32, attach: u32) -> Option<u32> {
    let sets = shm.geometry.lane_sets;
    let map = shm.pair_map(pair_index(shm, task, attach));
    match map.load(Ordering::Acquire).checked_sub(1) {
        Some(set) if set < sets => return Some(set),
        // Damage: no set of ours has that number. The pair is ours alone
        // (its process is this one), so the word may be cleared.
        Some(_) => map.store(0, Ordering::Release),
        None => {}
    }
    let now = shm.clock.now();
    if now < shm.lane_retry_at.load(Ordering::Relaxed) {
        return None;
    }
    let hint = &shm.header().lane_hint;
    let start = (hint.load(Ordering::Relaxed) % sets as u64) as u32;
    // A fold its folder did not finish names its set until the next give-
    // back finishes it: readers leave that set out, so nobody may count on
    // it meanwhile.
    let folding = shm.fold_record().set.load(Ordering::Acquire);
    for i in 0..sets {
        let set = (start + i) % sets;
        let base = shm.set_baseline(set);
        if folding == set as u64 + 1
            || base.owner.load(Ordering::Relaxed) != 0
            || base
                .owner
                .compare_exchange(
                    0,
                    owner_word(task, attach),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            continue;
        }
        empty(shm, set);
        match map.compare_exchange(0, set + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                hint.store(set as u64 + 1, Ordering::Relaxed);
                return Some(set);
            }
            Err(theirs) => {
                base.owner.store(0, Ordering::Release);
                return theirs.checked_sub(1).filter(|s| *s < sets);
            }
        }
    }
    let wait = shm.clock.duration_to_ticks(RETRY);
    shm.lane_retry_at.store(now + wait, Ordering::Relaxed);
    None
}

/// Zeroes what a set counts (its owner is the caller, or dead and folded).
/// The ledger words keep their sequence numbers and hold nothing.
fn empty(region: &Region, set: u32) {
    for l in 0..LANES {
        let lane = region.set_lane(set, l);
        lane.counters
            .iter()
            .for_each(|c| c.store(0, Ordering::Relaxed));
        lane.sketch
            .iter()
            .for_each(|b| b.store(0, Ordering::Relaxed));
        let reclaimed = lane.reclaimed.load(Ordering::Relaxed);
        lane.reclaimed
            .store(reclaimed - reclaimed_total(reclaimed), Ordering::Relaxed);
    }
    region
        .set_lane_sketches(set)
        .flat_map(|own| &own.buckets)
        .for_each(|b| b.store(0, Ordering::Relaxed));
    let base = region.set_baseline(set);
    base.counters
        .iter()
        .for_each(|c| c.store(0, Ordering::Relaxed));
    base.reclaimed.store(0, Ordering::Relaxed);
    base.queue_head.store(0, Ordering::Relaxed);
    base.queue_len.store(0, Ordering::Relaxed);
}

/// Adds what `lane` counted to `totals`: its counters, then its reclaimed
/// total (wrapping: the words are the file's).
fn add_lane(totals: &mut [u64; TOTALS], lane: &Lane) {
    for (t, c) in totals.iter_mut().zip(&lane.counters) {
        *t = t.wrapping_add(c.load(Ordering::Relaxed));
    }
    totals[COUNTERS] =
        totals[COUNTERS].wrapping_add(reclaimed_total(lane.reclaimed.load(Ordering::Relaxed)));
}

/// What a set has counted: its counters, then its reclaimed total.
pub(crate) fn set_totals(region: &Region, set: u32) -> [u64; TOTALS] {
    let mut totals = [0u64; TOTALS];
    (0..LANES).for_each(|l| add_lane(&mut totals, region.set_lane(set, l)));
    totals
}

/// Gives back the sets of dead attachment `attach`, whose ledgers were
/// drained; whether it could. Needs the pool's lock: if another process
/// keeps it (stopped, say), the slot stays marked for a later sweep, and a
/// process that claims the slot meanwhile carries on with its sets, as a
/// table with fixed sets does.
pub(crate) fn give_back(shm: &Shm, attach: u32) -> bool {
    let Some(_lock) = shm.pool_lock() else {
        return false;
    };
    finish_fold(shm);
    for set in 0..shm.geometry.lane_sets {
        let base = shm.set_baseline(set);
        let Some((task, a)) = pair_of(shm, base.owner.load(Ordering::Acquire)) else {
            continue;
        };
        if a != attach {
            continue;
        }
        let map = shm.pair_map(pair_index(shm, task, attach));
        if map.load(Ordering::Acquire) == set + 1 {
            // No tag in the task's word may name the pair's lanes once they
            // can belong to another set.
            let ids = attach * LANES..(attach + 1) * LANES;
            ledger::untag(&shm.task_slot(task).in_flight, |id| ids.contains(&id));
            fold(shm.fold_record(), shm, set, task);
        } else {
            // A claim or a give-back cut short: nothing counted on it.
            base.owner.store(0, Ordering::Release);
        }
    }
    true
}

/// Records the fold of `set` into `task`'s totals, then performs it.
fn fold(record: &FoldRecord, shm: &Shm, set: u32, task: u32) {
    let Some(totals) = shm.lane_totals(task) else {
        return;
    };
    let delta = set_totals(shm, set);
    for (i, d) in delta.into_iter().enumerate() {
        record.before[i].store(totals.retired[i].load(Ordering::Relaxed), Ordering::Relaxed);
        record.delta[i].store(d, Ordering::Relaxed);
    }
    record.task.store(task as u64, Ordering::Relaxed);
    record.set.store(set as u64 + 1, Ordering::Release);
    record.folds.fetch_add(1, Ordering::AcqRel);
    finish_fold(shm);
}

/// Finishes the recorded fold, if any: every step is a plain store of a
/// value the record fixes, so doing it twice is doing it once.
fn finish_fold(shm: &Shm) {
    let record = shm.fold_record();
    let Some(set) = (record.set.load(Ordering::Acquire) as u32)
        .checked_sub(1)
        .filter(|s| *s < shm.geometry.lane_sets)
    else {
        record.set.store(0, Ordering::Release);
        return;
    };
    let task = record.task.load(Ordering::Relaxed) as u32;
    if let Some(totals) = shm.lane_totals(task) {
        for i in 0..TOTALS {
            let before = record.before[i].load(Ordering::Relaxed);
            let delta = record.delta[i].load(Ordering::Relaxed);
            totals.retired[i].store(before.wrapping_add(delta), Ordering::Relaxed);
        }
    }
    empty(shm, set);
    let base = shm.set_baseline(set);
    if let Some((t, a)) = pair_of(shm, base.owner.load(Ordering::Acquire)) {
        let _ = shm.pair_map(pair_index(shm, t, a)).compare_exchange(
            set + 1,
            0,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }
    base.owner.store(0, Ordering::Release);
    record.set.store(0, Ordering::Release);
    record.folds.fetch_add(1, Ordering::AcqRel);
}

/// What a pooled task's statistics add to its sets' counts.
pub(crate) struct Beside {
    /// The totals of the sets it gave back, then its unlaned counts (by
    /// [`crate::format::Counter`]; the reclaimed total last).
    pub totals: [u64; TOTALS],
    /// The set a recorded fold moves into the totals above: its own counts
    /// are in them already.
    pub skip: Option<u32>,
    /// Acquires decided without a set, and those refused for want of one.
    pub unlaned: u64,
    pub unlaned_refused: u64,
}

/// The folds counter: reads of a task's totals and sets are consistent
/// when it is the same before and after them.
pub(crate) fn folds(region: &Region) -> u64 {
    crate::format::load_acquire(&region.fold_record().folds)
}

/// [`Beside`] for task `task` of a pooled table.
pub(crate) fn beside(region: &Region, task: u32) -> Option<Beside> {
    let totals = region.lane_totals(task)?;
    let record = region.fold_record();
    let load = |w: &AtomicU64| crate::format::load_acquire(w);
    let folding = (load(&record.set) as u32)
        .checked_sub(1)
        .filter(|s| *s < region.geometry.lane_sets && load(&record.task) == task as u64);
    let mut beside = Beside {
        totals: std::array::from_fn(|i| match folding {
            Some(_) => load(&record.before[i]).wrapping_add(load(&record.delta[i])),
            None => load(&totals.retired[i]),
        }),
        skip: folding,
        unlaned: 0,
        unlaned_refused: load(&totals.unlaned_refused),
    };
    use crate::format::Counter::*;
    for (i, c) in totals.unlaned.iter().enumerate() {
        let v = load(c);
        beside.totals[i] = beside.totals[i].wrapping_add(v);
        if [Admitted, LimitedLocal, LimitedGlobal, LimitedConcurrency]
            .iter()
            .any(|k| *k as usize == i)
        {
            beside.unlaned = beside.unlaned.wrapping_add(v);
        }
    }
    Some(beside)
}

/// Sets in use and the pool's size (`None`: a table with a set per pair).
pub(crate) fn usage(region: &Region) -> Option<(u32, u32)> {
    let sets = region.geometry.lane_sets;
    region.geometry.pooled().then(|| {
        let used = (0..sets)
            .filter(|&s| region.set_baseline(s).owner.load(Ordering::Relaxed) != 0)
            .count() as u32;
        (used, sets)
    })
}

/// A consistent read of a task's lanes: `read(skip)` reads them, leaving
/// out set `skip` (a fold is moving its counts into the totals), repeated
/// while a fold moves (up to 64 times); with what the task counted
/// beside its sets, in a pooled table.
pub(crate) fn read_consistent<T>(
    region: &Region,
    task: u32,
    mut read: impl FnMut(Option<u32>) -> T,
) -> (T, Option<Beside>) {
    if !region.geometry.pooled() {
        return (read(None), None);
    }
    let mut tries = 0;
    loop {
        let seen = folds(region);
        let beside = beside(region, task);
        let out = read(beside.as_ref().and_then(|b| b.skip));
        tries += 1;
        if folds(region) == seen || tries == 64 {
            return (out, beside);
        }
    }
}

/// Every count of task `task`: its pairs' lanes and, in a pooled table,
/// what its given-back sets and unlaned acquires counted (by
/// [`crate::format::Counter`], the reclaimed total last). Monotonic across
/// folds, for readers that take differences (the adaptive window, the
/// slice's health).
pub(crate) fn task_totals(region: &Region, task: u32) -> [u64; TOTALS] {
    let ids = region.geometry.attach_capacity * LANES;
    let (mut totals, beside) = read_consistent(region, task, |skip| {
        let mut totals = [0u64; TOTALS];
        for id in 0..ids {
            if skip.is_some() && region.pair_set(task, id / LANES) == skip {
                continue;
            }
            if let Some(lane) = region.lane(task, id) {
                add_lane(&mut totals, lane);
            }
        }
        totals
    });
    if let Some(beside) = beside {
        for (t, b) in totals.iter_mut().zip(beside.totals) {
            *t = t.wrapping_add(b);
        }
    }
    totals
}
