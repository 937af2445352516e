//! The host-wide adaptive limit of a task: its configuration copies, the
//! window driver, and the limit every acquire reads.
//!
//! Samples are not written anywhere new: every release already counts its
//! outcome and RTT into its own lane (`Counter::ReleasedSuccess`,
//! `ReleasedDropped`, `RttSumNs`, and acquires `LimitedConcurrency`). When
//! a window is due, the first process to notice takes the window lock (a
//! compare-and-swap; the others carry on), sums those counters over every
//! lane, subtracts what the current [`WindowCopy`] says was consumed, runs
//! the algorithm, writes the other copy (state *and* the sums it consumed)
//! and commits it by bumping `window_version`. A driver killed before the
//! commit leaves the previous copy current, so the next driver consumes the
//! same samples again: none is lost or counted twice. After the commit the
//! limit and the next due time are published (idempotent: a driver that
//! takes the lock over from a dead one publishes the committed copy first).
//! Counters of dead processes stay in their lanes, so their samples count.

use std::sync::atomic::{Ordering, fence};

use crate::format::{Counter, TaskSlot, generation_of, make_limit, next_generation};
use crate::limit::adaptive::{self, Spec, State, Window};
use crate::limit::ledger::{self, MAX_COUNT};
use crate::shm::{Owner, Shm};

/// Writes `spec` into copy `next` (the caller holds the configuration lock
/// and commits `version` next). Returns its generation: the current one if
/// the limiter did not change.
pub(crate) fn write_copy(slot: &TaskSlot, version: u64, next: usize, spec: &Spec) -> u64 {
    let (current, generation) = slot.adaptive.config[(version & 1) as usize].load();
    let generation = if current == *spec && version != 0 {
        generation
    } else {
        next_generation(generation)
    };
    slot.adaptive.config[next].store(spec, generation);
    generation
}

/// After a configuration write: a new limiter generation starts at its
/// initial limit now, and its first window is due at once.
pub(crate) fn configured(slot: &TaskSlot, spec: &Spec, generation: u64) {
    let a = &slot.adaptive;
    let word = a.limit.load(Ordering::Acquire);
    if generation_of(word) == generation && word != 0 {
        return;
    }
    let limit = make_limit(spec.is_adaptive(), generation, spec.initial as f64);
    a.limit.store(limit, Ordering::Release);
    a.due.store(0, Ordering::Release);
}

// ---- the window driver ------------------------------------------------------

/// How long past its due time a window may stay locked before the lock's
/// owner is checked for life (the check is a system call).
const STALE_LOCK_NS: u64 = 1_000_000_000;

/// Runs the window update if it is due and nobody else is running it.
/// Called by acquires and releases that read the clock past `due`.
#[cold]
pub(crate) fn drive(shm: &Shm, index: u32, me: Owner, now: u64) {
    let slot = shm.task_slot(index);
    let a = &slot.adaptive;
    let held = a.window_lock.load(Ordering::Relaxed);
    let mut took_over = false;
    if held != 0 {
        let due = a.due.load(Ordering::Relaxed);
        let late = shm.clock.ticks_to_ns(now.saturating_sub(due));
        if held == me.0 || late < STALE_LOCK_NS || shm.owner_alive(Owner(held)) {
            return;
        }
        took_over = true;
    }
    if a.window_lock
        .compare_exchange(held, me.0, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // A dead driver's committed copy is published first; its window, due
    // since, runs at once: its samples are in the lanes, not lost.
    if took_over {
        publish(shm, index, now, None);
    }
    if now >= a.due.load(Ordering::Acquire) {
        run_window(shm, index, slot, now);
    }
    a.window_lock.store(0, Ordering::Release);
}

/// The current limiter copy and its generation.
pub(crate) fn limiter(slot: &TaskSlot) -> (Spec, u64) {
    crate::format::read_versioned(&slot.config_version, |i| slot.adaptive.config[i].load())
}

/// One window, under the window lock.
fn run_window(shm: &Shm, index: u32, slot: &TaskSlot, now: u64) {
    let a = &slot.adaptive;
    let (spec, generation) = limiter(slot);
    let version = a.window_version.load(Ordering::Acquire);
    let current = &a.windows[(version & 1) as usize];
    let sums = lane_sums(shm, index);
    let start = current.start.load(Ordering::Relaxed);
    let fresh = start == 0
        || start > now
        || current.generation.load(Ordering::Relaxed) != generation
        || !spec.is_adaptive();
    let mut applied = a.applied[(version & 1) as usize].load(Ordering::Relaxed);
    let (state, next_ns) = if fresh {
        applied = 0;
        (adaptive::initial(&spec), spec.window_ns())
    } else {
        let consumed: [u64; 4] =
            std::array::from_fn(|i| current.consumed[i].load(Ordering::Relaxed));
        let d = |i: usize| sums[i].wrapping_sub(consumed[i]);
        let samples = d(0).wrapping_add(d(1));
        let window = Window {
            now_ns: shm.clock.ticks_to_ns(now),
            elapsed_ns: shm.clock.ticks_to_ns(now - start),
            samples: if samples > 1 << 40 { 0 } else { samples },
            dropped: d(1).min(samples),
            rtt_ns: if samples == 0 {
                0.0
            } else {
                d(2) as f64 / samples as f64
            },
            rejected: d(3),
            in_flight: ledger::word_count(slot.in_flight.load(Ordering::Acquire)),
        };
        applied = applied.wrapping_add(window.samples);
        let mut state = current.load_state();
        state.limit = spec.clamp(state.limit);
        let next = adaptive::update(&spec, &mut state, &window);
        (state, next)
    };
    let next = &a.windows[(version.wrapping_add(1) & 1) as usize];
    next.start.store(now, Ordering::Relaxed);
    next.generation.store(generation, Ordering::Relaxed);
    for (w, s) in next.consumed.iter().zip(sums) {
        w.store(s, Ordering::Relaxed);
    }
    next.store_state(&state);
    a.applied[(version.wrapping_add(1) & 1) as usize].store(applied, Ordering::Relaxed);
    // Commit: the copy's words before the version (Release).
    a.window_version
        .store(version.wrapping_add(1), Ordering::Release);
    let due = now.saturating_add(
        shm.clock
            .duration_to_ticks(std::time::Duration::from_nanos(next_ns)),
    );
    publish(shm, index, due, Some(generation));
}

/// Publishes the committed window's limit, and the next due time.
fn publish(shm: &Shm, index: u32, due: u64, generation: Option<u64>) {
    let slot = shm.task_slot(index);
    let a = &slot.adaptive;
    let version = a.window_version.load(Ordering::Acquire);
    let current = &a.windows[(version & 1) as usize];
    let generation = generation.unwrap_or_else(|| current.generation.load(Ordering::Relaxed));
    let (spec, configured) = limiter(slot);
    let old = a.limit.load(Ordering::Acquire);
    // A configuration written meanwhile wins: its generation is newer.
    if configured != generation || generation_of(old) != generation {
        a.due.store(0, Ordering::Release);
        return;
    }
    let limit = spec.clamp(current.load_state().limit);
    let word = make_limit(spec.is_adaptive(), generation, limit);
    if a.limit
        .compare_exchange(old, word, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
        && word & MAX_COUNT > old & MAX_COUNT
    {
        fence(Ordering::SeqCst);
        super::wait::freed(shm, index);
    }
    a.due.store(due, Ordering::Release);
}

/// Success, dropped, RTT sum and concurrency rejections, task-wide.
fn lane_sums(shm: &Shm, index: u32) -> [u64; 4] {
    let totals = crate::shm::pool::task_totals(shm, index);
    [
        Counter::ReleasedSuccess,
        Counter::ReleasedDropped,
        Counter::RttSumNs,
        Counter::LimitedConcurrency,
    ]
    .map(|c| totals[c as usize])
}

/// The committed state: (limit, baseline RTT ns, recent RTT ns).
pub(crate) fn committed(slot: &TaskSlot) -> State {
    let a = &slot.adaptive;
    // A reader views share: loaded as `format::load_acquire` says.
    let version = crate::format::load_acquire(&a.window_version);
    let state = a.windows[(version & 1) as usize].load_state();
    fence(Ordering::Acquire);
    state
}

/// (samples applied by the windows of the current generation, windows run)
/// after running a window now: for tests of the driver.
pub(crate) fn settle(shm: &Shm, index: u32, me: Owner) -> (u64, u64) {
    let a = &shm.task_slot(index).adaptive;
    a.due.store(0, Ordering::Release);
    drive(shm, index, me, shm.clock.now().max(1));
    let version = a.window_version.load(Ordering::Acquire);
    (
        a.applied[(version & 1) as usize].load(Ordering::Relaxed),
        version,
    )
}

#[cfg(test)]
mod tests {
    use crate::{Decision, Outcome, Table, TableOptions, TaskConfig};
    use std::sync::atomic::Ordering;

    /// A driver killed holding the window lock: the next driver takes the
    /// lock over and runs the window it left, so every sample is applied.
    #[test]
    fn a_window_left_locked_by_a_dead_driver_runs_at_the_takeover() {
        let path = std::env::temp_dir().join(format!("flowctrl-window-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let table = Table::open(&path, &TableOptions::default()).unwrap();
        let config = TaskConfig::new()
            .limiter(crate::LimiterSpec::parse("aimd window=5").unwrap())
            .initial_limit(40);
        let task = table.task("svc", &config).unwrap();
        let release = |n: usize| {
            for _ in 0..n {
                let Decision::Admitted(p) = task.acquire(1).unwrap() else {
                    panic!("refused")
                };
                p.release(Outcome::Success).unwrap();
            }
        };
        release(10);
        let (before, _) = task.settle_window().unwrap();
        let a = &task.shm.task_slot(task.index).adaptive;
        // Seven samples, then a driver dies holding the lock (an owner
        // whose slot index is past the table's is never alive).
        a.due.store(u64::MAX, Ordering::Release);
        release(7);
        a.window_lock.store(u64::MAX, Ordering::Release);
        let (applied, _) = task.settle_window().unwrap();
        assert_eq!(a.window_lock.load(Ordering::Acquire), 0);
        assert_eq!(applied - before, 7);
        let _ = std::fs::remove_file(&path);
    }
}
