//! Reading a task's counters and checking its concurrency count against the
//! ledgers. Counters are monotonic per lane and summed with wrapping
//! arithmetic: a damaged or hostile table gives odd numbers, never a panic.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::adaptive;
use crate::error::{Error, ErrorKind, Result};
use crate::format::{
    ATTACH_LIVE, Baseline, COUNTERS, Counter, LANES, Lane, RECLAIMED_BITS, RECLAIMED_MASK, TOTALS,
    WAIT_BUCKETS, load_acquire, reclaimed_total,
};
use crate::limit::ledger;
use crate::shm::{Region, pool};

/// Counters of one task, in permits unless named otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskStats {
    pub admitted: u64,
    pub limited_local: u64,
    pub limited_global: u64,
    pub limited_concurrency: u64,
    pub released_success: u64,
    pub released_dropped: u64,
    pub released_ignored: u64,
    /// Permits of processes that died holding them, given back by the reaper.
    pub reclaimed: u64,
    /// The host's concurrency count: permits counted against the cap now.
    pub in_flight: u64,
    /// What the ledgers of the processes say they hold. Equal to `in_flight`
    /// when nothing is in motion; [`crate::Task::check`] compares them exactly.
    pub held: i64,
    /// Acquire→release times of permits released as success or dropped,
    /// summed per permit (ns).
    pub rtt_sum_ns: u64,
    /// Permits summed in `rtt_sum_ns` (`released_success + released_dropped`).
    pub rtt_samples: u64,
    /// The concurrency limit applied now (0 = none): the adaptive limit or
    /// `max_concurrency`.
    pub limit: u64,
    /// The adaptive limiter's no-load RTT estimate (ns; 0 = none).
    pub baseline_rtt_ns: u64,
    /// The RTT of its last window with samples (ns; 0 = none).
    pub recent_rtt_ns: u64,
    /// Acquires waiting for a permit now, host-wide (queued in its order).
    pub waiting: u64,
    /// Acquires decided without lanes of their process's own, because the
    /// table's lane pool was empty (`TableOptions::lanes`); 0 in a table
    /// with lanes for every pair.
    pub unlaned: u64,
    /// Of those, the acquires of a capped task, refused (and counted as
    /// limited by concurrency too): their permits would have had no ledger.
    pub unlaned_refused: u64,
    /// Requests the task's limits refused and shadow mode admitted (also
    /// counted as `admitted` and by the limit that refused them).
    pub shadow_refused: u64,
}

/// A latency histogram of a task: counts per bucket (not cumulative), each
/// with its upper bound in seconds (the last bound is infinite), and the
/// sum of the times, in nanoseconds. Counts and sum are monotonic for the
/// table's life, except that a pooled table's set, given back when its
/// process is gone, takes its round-trip buckets with it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    pub buckets: Vec<(f64, u64)>,
    pub sum_ns: u64,
}

impl Histogram {
    /// The samples in every bucket (saturating: the counts are words of
    /// the file).
    pub fn count(&self) -> u64 {
        self.buckets
            .iter()
            .fold(0u64, |n, (_, c)| n.saturating_add(*c))
    }
}

/// The task's round-trip times as its lanes' sketch counts them, with the
/// RTT sum of `stats`, which also counts releases that fill no bucket (a
/// pooled table's without a set of their own, a 0.3.0 process's).
pub(crate) fn rtt_histogram(region: &Region, index: u32, stats: &TaskStats) -> Histogram {
    let sketch = crate::quota::health::sketch(region, index);
    Histogram {
        buckets: (0..sketch.len())
            .map(|k| (crate::quota::health::upper_seconds(k), sketch[k]))
            .collect(),
        sum_ns: stats.rtt_sum_ns,
    }
}

/// How long the acquires that joined the task's queue waited in it, each
/// counted when it left the queue (with a permit, at its deadline, or gone).
pub(crate) fn wait_histogram(region: &Region, index: u32) -> Histogram {
    let slot = region.task_slot(index);
    let word = |i| slot.wait_word(i).load(Ordering::Relaxed);
    Histogram {
        buckets: (0..WAIT_BUCKETS)
            .map(|j| (crate::quota::health::octave_upper_seconds(j), word(j)))
            .collect(),
        sum_ns: word(WAIT_BUCKETS),
    }
}

/// One attachment's share of a task's counters since it attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessStats {
    /// The pid the process saw itself as (its own pid namespace).
    pub pid: u32,
    /// The attachment slot: two handles of one process are two attachments.
    pub slot: u32,
    pub stats: TaskStats,
}

/// The concurrency count against the ledgers, read at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Consistency {
    /// The shared count the cap is checked against.
    pub in_flight: u64,
    /// The sum of every process's ledger (including an op in motion whose
    /// shared half has happened).
    pub held: i64,
}

impl Consistency {
    /// `in_flight - held`: 0 when the count is exact; positive = capacity
    /// leaked, negative = capacity handed out twice.
    pub fn drift(&self) -> i64 {
        self.in_flight as i64 - self.held
    }
}

/// Counter sums of some lanes, indexed by [`Counter`].
#[derive(Clone, Copy, Default)]
pub(crate) struct Sums {
    pub counters: [u64; COUNTERS],
    pub reclaimed: u64,
}

impl Sums {
    pub fn add_lane(&mut self, lane: &Lane) {
        for (sum, c) in self.counters.iter_mut().zip(&lane.counters) {
            *sum = sum.wrapping_add(c.load(Ordering::Relaxed));
        }
        self.reclaimed = self
            .reclaimed
            .wrapping_add(reclaimed_total(lane.reclaimed.load(Ordering::Relaxed)));
    }

    /// Adds counts kept beside the lanes (`shm::pool::Beside::totals`).
    pub fn add_totals(&mut self, totals: &[u64; TOTALS]) {
        for (sum, t) in self.counters.iter_mut().zip(totals) {
            *sum = sum.wrapping_add(*t);
        }
        self.reclaimed = self.reclaimed.wrapping_add(totals[COUNTERS]);
    }

    /// What a [`Baseline`] recorded.
    pub fn load(base: &Baseline) -> Self {
        Self {
            counters: std::array::from_fn(|i| base.counters[i].load(Ordering::Relaxed)),
            reclaimed: base.reclaimed.load(Ordering::Relaxed),
        }
    }

    /// Records these sums as a [`Baseline`].
    pub fn store(&self, base: &Baseline) {
        for (b, sum) in base.counters.iter().zip(self.counters) {
            b.store(sum, Ordering::Relaxed);
        }
        base.reclaimed.store(self.reclaimed, Ordering::Relaxed);
    }

    pub fn minus(mut self, base: &Sums) -> Self {
        for (c, b) in self.counters.iter_mut().zip(&base.counters) {
            *c = c.wrapping_sub(*b);
        }
        self.reclaimed = self.reclaimed.wrapping_sub(base.reclaimed);
        self
    }

    pub fn into_stats(self, in_flight: u64, held: i64) -> TaskStats {
        let c = |k: Counter| self.counters[k as usize];
        TaskStats {
            admitted: c(Counter::Admitted),
            limited_local: c(Counter::LimitedLocal),
            limited_global: c(Counter::LimitedGlobal),
            limited_concurrency: c(Counter::LimitedConcurrency),
            released_success: c(Counter::ReleasedSuccess),
            released_dropped: c(Counter::ReleasedDropped),
            released_ignored: c(Counter::ReleasedIgnored),
            reclaimed: self.reclaimed & RECLAIMED_MASK,
            in_flight,
            held,
            rtt_sum_ns: c(Counter::RttSumNs),
            rtt_samples: c(Counter::ReleasedSuccess).wrapping_add(c(Counter::ReleasedDropped)),
            ..TaskStats::default()
        }
    }
}

/// Adds `held` to a lane's reclaimed count once per drain `seq`: a reaper
/// that dies after this and before the drain lands repeats it with the same
/// seq, and the count does not move twice.
pub(crate) fn record_reclaimed(lane: &Lane, seq: u64, held: i32) {
    let word = &lane.reclaimed;
    let mut current = word.load(Ordering::Relaxed);
    loop {
        if current >> RECLAIMED_BITS == seq {
            return;
        }
        let total = reclaimed_total(current).wrapping_add(held as i64 as u64) & RECLAIMED_MASK;
        match word.compare_exchange_weak(
            current,
            (seq << RECLAIMED_BITS) | total,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return,
            Err(actual) => current = actual,
        }
    }
}

/// What the lanes of one attachment contribute to the shared word `word`.
pub(crate) fn contribution<'a>(word: u64, lanes: impl Iterator<Item = (u32, &'a Lane)>) -> i64 {
    lanes
        .map(|(id, lane)| {
            let ledger = load_acquire(&lane.ledger);
            ledger::contribution_of(word, id, ledger, || load_acquire(&lane.intent))
        })
        .sum()
}

/// A lane's ledger words, as the ledger protocol sees them.
pub(crate) fn ledger_view(id: u32, lane: &Lane) -> ledger::Lane<'_> {
    ledger::Lane {
        id,
        ledger: &lane.ledger,
        intent: &lane.intent,
    }
}

/// Lane ids of attachment `attach`.
pub(crate) fn lane_ids(attach: u32) -> std::ops::Range<u32> {
    attach * LANES..(attach + 1) * LANES
}

impl TaskStats {
    /// Mean acquire→release time of the permits released as success or dropped.
    pub fn mean_rtt(&self) -> Option<std::time::Duration> {
        (self.rtt_samples > 0)
            .then(|| std::time::Duration::from_nanos(self.rtt_sum_ns / self.rtt_samples))
    }
}

impl super::Task {
    /// The task's counters, summed over every process that ever used it.
    pub fn stats(&self) -> TaskStats {
        read(&self.shm, self.index)
    }

    /// The counters of each attachment live now, since it attached; its
    /// `in_flight` and `held` are what its ledgers hold.
    pub fn stats_by_process(&self) -> Vec<ProcessStats> {
        by_process(&self.shm, self.index)
    }

    /// Compares the shared concurrency count with the sum of every ledger at
    /// one instant: the ledgers are read, then the count, then the ledgers
    /// again, until none moved meanwhile; a [`ErrorKind::Timeout`] error if
    /// traffic never lets them hold still for 1 s.
    pub fn check(&self) -> Result<Consistency> {
        consistency(&self.shm, self.index, &self.name, Duration::from_secs(1))
    }
}

// The readers below take a `Region`: attached handles and read-only views
// share them, so they load with `Relaxed` or `format::load_acquire` only.

/// Task `index`'s counters, summed over every process that ever used it.
pub(crate) fn read(region: &Region, index: u32) -> TaskStats {
    let slot = region.task_slot(index);
    let word = load_acquire(&slot.in_flight);
    let ((mut sums, held), beside) = pool::read_consistent(region, index, |skip| {
        let mut sums = Sums::default();
        let mut held = 0;
        for attach in 0..region.geometry.attach_capacity {
            let lanes = lanes_of(region, index, attach, skip);
            lanes.clone().for_each(|(_, lane)| sums.add_lane(lane));
            held += contribution(word, lanes);
        }
        (sums, held)
    });
    if let Some(beside) = &beside {
        sums.add_totals(&beside.totals);
    }
    let mut stats = sums.into_stats(ledger::word_count(word), held);
    if let Some(beside) = beside {
        stats.unlaned = beside.unlaned;
        stats.unlaned_refused = beside.unlaned_refused;
    }
    stats.limit = super::limit(slot).map_or(0, u64::from);
    stats.shadow_refused = slot.shadow_refused.load(Ordering::Relaxed);
    if crate::format::limit_of(load_acquire(&slot.adaptive.limit)).is_some() {
        let state = adaptive::committed(slot);
        stats.baseline_rtt_ns = state.baseline_ns as u64;
        stats.recent_rtt_ns = state.recent_ns as u64;
    }
    // Saturating: the lengths are words of the file (a damaged one, or two
    // pairs a hostile pair map points at one set, can make them sum past
    // u64::MAX, and `sum` would panic in a debug build).
    stats.waiting = (0..region.geometry.attach_capacity)
        .filter(|&a| load_acquire(&region.attach_slot(a).state) & ATTACH_LIVE != 0)
        .filter_map(|a| region.baseline(index, a))
        .map(|base| load_acquire(&base.queue_len))
        .fold(0, u64::saturating_add);
    stats
}

/// The lanes of attachment `attach` for the task, none when its set is
/// `skip` (a fold is moving it).
fn lanes_of(
    region: &Region,
    index: u32,
    attach: u32,
    skip: Option<u32>,
) -> impl Iterator<Item = (u32, &Lane)> + Clone {
    let skipped = skip.is_some() && region.pair_set(index, attach) == skip;
    lane_ids(attach)
        .filter(move |_| !skipped)
        .filter_map(move |id| Some((id, region.lane(index, id)?)))
}

/// The counters of each attachment marked live, since it attached; its
/// `in_flight` and `held` are what its ledgers hold.
pub(crate) fn by_process(region: &Region, index: u32) -> Vec<ProcessStats> {
    let word = load_acquire(&region.task_slot(index).in_flight);
    region
        .attachments()
        .map(|(slot, pid)| {
            let mut sums = Sums::default();
            let lanes = lanes_of(region, index, slot, None);
            lanes.clone().for_each(|(_, lane)| sums.add_lane(lane));
            let held = contribution(word, lanes);
            let base = region
                .baseline(index, slot)
                .map(Sums::load)
                .unwrap_or_default();
            let stats = sums.minus(&base).into_stats(held.max(0) as u64, held);
            ProcessStats { pid, slot, stats }
        })
        .collect()
}

/// Compares task `index`'s shared concurrency count with the sum of every
/// ledger at one instant. The ledgers are read, then the word, then the
/// ledgers again: when no ledger word changed (each carries a sequence
/// number, so "same" means "untouched"), every ledger held its value at the
/// instant the word was read. Retries while traffic keeps moving them; a
/// [`ErrorKind::Timeout`] error if they never hold still for a whole read
/// within `patience`.
pub(crate) fn consistency(
    region: &Region,
    index: u32,
    name: &str,
    patience: Duration,
) -> Result<Consistency> {
    let word = &region.task_slot(index).in_flight;
    let lanes: Vec<(u32, &Lane)> = (0..region.geometry.attach_capacity)
        .flat_map(|attach| lanes_of(region, index, attach, None))
        .collect();
    // A view's copy is read anew around each read of the words (one
    // `pread` a run of adjacent lanes); a mapping needs none of it.
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut offsets: Vec<usize> = lanes.iter().map(|(_, l)| region.offset_of(*l)).collect();
    offsets.sort_unstable();
    for at in offsets {
        match runs.last_mut() {
            Some((start, len)) if *start + *len == at => *len += size_of::<Lane>(),
            _ => runs.push((at, size_of::<Lane>())),
        }
    }
    let reread_lanes = || -> Result<()> {
        runs.iter()
            .try_for_each(|&(at, len)| region.reread(at, len))
    };
    let began = Instant::now();
    let mut first = Vec::with_capacity(lanes.len());
    loop {
        reread_lanes()?;
        first.clear();
        first.extend(lanes.iter().map(|(_, l)| load_acquire(&l.ledger)));
        region.reread(
            region.offset_of(word),
            size_of::<std::sync::atomic::AtomicU64>(),
        )?;
        let at = load_acquire(word);
        reread_lanes()?;
        let mut held = 0;
        let still = lanes.iter().zip(&first).all(|((id, lane), seen)| {
            let ledger = load_acquire(&lane.ledger);
            held += ledger::contribution_of(at, *id, ledger, || load_acquire(&lane.intent));
            ledger == *seen
        });
        if still {
            return Ok(Consistency {
                in_flight: ledger::word_count(at),
                held,
            });
        }
        if began.elapsed() > patience {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!("task {name:?} kept changing for {patience:?}: no instant to compare at"),
            ));
        }
        std::thread::yield_now();
    }
}
