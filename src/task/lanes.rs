//! The concurrency count through this process's ledger lanes: which lane
//! a thread uses, and moving the task's count through it (the protocol is
//! `limit::ledger`'s).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::Task;
use super::stats::{lane_ids, ledger_view};
use crate::error::{Error, ErrorKind, Result};
use crate::format::{COUNTERS, Counter, LANES, Lane};
use crate::limit::ledger::{self, Update};
use crate::shm::pool;
use crate::words::Limited;

/// How long a thread waits when every ledger lane of its process is busy
/// (more threads mid-op than lanes, one of them descheduled).
const LANE_DEADLINE: Duration = Duration::from_secs(1);

impl Task {
    /// Moves the task's concurrency count by `delta` through this thread's
    /// lane of `attach`, or another lane of it when that one is busy. The
    /// first try is nearly every call; the rotation is apart and cold (its
    /// set-up, every lane's address and bounds, was most of a move's
    /// instructions when it ran inline).
    #[inline]
    pub(super) fn move_count(
        &self,
        attach: u32,
        lane: u32,
        delta: i32,
        cap: Option<u64>,
    ) -> Result<Update> {
        match self.move_through(attach * LANES + lane % LANES, delta, cap)? {
            Update::Busy => self.rotate(attach, lane, delta, cap),
            done => Ok(done),
        }
    }

    /// Gives `n` back through the process's lanes. A decrease is never
    /// refused, and a lane is busy only while one of this process's own
    /// threads is mid-update: it waits those out rather than give up after
    /// [`LANE_DEADLINE`] and leave the count up until the process exits.
    pub(super) fn give_back_count(&self, attach: u32, lane: u32, n: u32) -> Result<()> {
        loop {
            match self.move_count(attach, lane, -(n as i32), None) {
                Err(e) if e.kind() == ErrorKind::Timeout => continue,
                done => return done.map(drop),
            }
        }
    }

    /// One try of the ledger's update through lane `id` of the task.
    #[inline(always)]
    fn move_through(&self, id: u32, delta: i32, cap: Option<u64>) -> Result<Update> {
        let word = &self.shm.task_slot(self.index).in_flight;
        let Some(lanes) = self.shm.task_lanes(self.index) else {
            return self.move_through_pool(id, delta, cap);
        };
        // The task's lanes once: the helpers' look-ups index a slice.
        let resolve = |id: u32| lanes.get(id as usize).map(|l| ledger_view(id, l));
        let Some(mine) = resolve(id) else {
            return Err(outside_the_table());
        };
        Ok(ledger::update(word, resolve, mine, delta, cap))
    }

    /// [`Task::move_through`] in a pooled table: its own lane through its
    /// pair's set, the helpers' look-ups through the pair map.
    #[inline(never)]
    fn move_through_pool(&self, id: u32, delta: i32, cap: Option<u64>) -> Result<Update> {
        let shm = &*self.shm;
        let word = &shm.task_slot(self.index).in_flight;
        let resolve = |id: u32| shm.lane(self.index, id).map(|l| ledger_view(id, l));
        let Some(set) = shm.pair_set(self.index, id / LANES) else {
            return Err(outside_the_table());
        };
        let mine = ledger_view(id, shm.set_lane(set, id % LANES));
        Ok(ledger::update(word, resolve, mine, delta, cap))
    }

    /// [`Task::move_count`] past a busy first lane: the other lanes in
    /// turn, then all of them again after a yield, for up to
    /// [`LANE_DEADLINE`].
    #[cold]
    #[inline(never)]
    fn rotate(&self, attach: u32, lane: u32, delta: i32, cap: Option<u64>) -> Result<Update> {
        let mut waited: Option<Instant> = None;
        // The first lane was just found busy.
        let mut first = 1;
        loop {
            for i in first..LANES {
                match self.move_through(attach * LANES + (lane + i) % LANES, delta, cap)? {
                    Update::Busy => continue,
                    done => return Ok(done),
                }
            }
            first = 0;
            let since = *waited.get_or_insert_with(Instant::now);
            if since.elapsed() > LANE_DEADLINE {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "task {:?}: every ledger lane of this process stayed busy",
                        self.name
                    ),
                ));
            }
            std::thread::yield_now();
        }
    }

    /// This thread's lane of `attach` for the task, and where its counts
    /// go: in a pooled table, the lane is taken with the pair's set on first
    /// use; with the pool empty there is none, and the counts go to the
    /// task's shared line of unlaned counts.
    #[inline(always)]
    pub(super) fn own_lane(
        &self,
        attach: u32,
        lane: u32,
    ) -> (&[AtomicU64; COUNTERS], Option<&Lane>) {
        match self.shm.lane(self.index, attach * LANES + lane) {
            Some(own) => (&own.counters, Some(own)),
            None => self.no_lane(attach, lane),
        }
    }

    /// [`Task::own_lane`] for a pair without a set yet.
    #[cold]
    #[inline(never)]
    fn no_lane(&self, attach: u32, lane: u32) -> (&[AtomicU64; COUNTERS], Option<&Lane>) {
        /// Only a damaged geometry has neither; its counts go nowhere.
        static NOWHERE: [AtomicU64; COUNTERS] = [const { AtomicU64::new(0) }; COUNTERS];
        if self.shm.geometry.pooled()
            && let Some(set) = pool::claim(&self.shm, self.index, attach)
        {
            let own = self.shm.set_lane(set, lane % LANES);
            return (&own.counters, Some(own));
        }
        let unlaned = self.shm.lane_totals(self.index);
        (unlaned.map_or(&NOWHERE, |totals| &totals.unlaned), None)
    }

    /// Whether this handle's process holds lanes of the task (claiming them
    /// if it can): a waiter needs them to queue.
    pub(super) fn holds_lanes(&self) -> Result<bool> {
        let attach = self.shm.owner()?.index().unwrap_or(0);
        Ok(self.own_lane(attach, 0).1.is_some())
    }

    /// An acquire of a capped task by a process without lanes: refused as
    /// the cap refuses (its permits would have no ledger to be reclaimed
    /// from), and counted.
    #[cold]
    #[inline(never)]
    pub(super) fn refuse_unlaned(&self, n: u32) -> Limited {
        if let Some(totals) = self.shm.lane_totals(self.index) {
            totals.unlaned[Counter::LimitedConcurrency as usize]
                .fetch_add(n as u64, Ordering::Relaxed);
            totals
                .unlaned_refused
                .fetch_add(n as u64, Ordering::Relaxed);
        }
        Limited::Concurrency
    }

    /// What attachment `attach` holds of the task, by its ledgers.
    #[inline]
    pub(super) fn held_by(&self, attach: u32) -> i64 {
        let Some(lanes) = self.shm.task_lanes(self.index) else {
            return self.held_in_pool(attach);
        };
        lane_ids(attach)
            .filter_map(|id| lanes.get(id as usize))
            .map(held)
            .sum()
    }

    /// [`Task::held_by`] in a pooled table.
    #[inline(never)]
    fn held_in_pool(&self, attach: u32) -> i64 {
        self.shm.pair_set(self.index, attach).map_or(0, |set| {
            (0..LANES).map(|l| held(self.shm.set_lane(set, l))).sum()
        })
    }
}

fn held(lane: &Lane) -> i64 {
    ledger::ledger_held(lane.ledger.load(Ordering::Acquire)) as i64
}

#[cold]
fn outside_the_table() -> Error {
    Error::new(ErrorKind::Internal, "attachment outside the table")
}

/// This thread's lane: threads take lanes in turn.
#[inline(always)]
pub(super) fn preferred_lane() -> u32 {
    use std::cell::Cell;
    use std::sync::atomic::AtomicU32;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    /// No lane taken yet.
    const NONE: u32 = u32::MAX;
    thread_local! {
        // Const-initialised and without a destructor: no lazy-init state
        // to check on every call (a lazy `thread_local!` cost as many
        // instructions again as the look-up itself), and usable during
        // thread-local destruction too.
        static LANE: Cell<u32> = const { Cell::new(NONE) };
    }
    let lane = LANE.get();
    if lane != NONE {
        return lane;
    }
    let lane = NEXT.fetch_add(1, Ordering::Relaxed) % LANES;
    LANE.set(lane);
    lane
}
