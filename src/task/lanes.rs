//! The concurrency count through this process's ledger lanes: which lane
//! a thread uses, and moving the task's count through it (the protocol is
//! `limit::ledger`'s).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Task;
use super::stats::{lane_ids, ledger_view};
use crate::error::{Error, ErrorKind, Result};
use crate::format::{LANES, Lane};
use crate::limit::ledger::{self, Update};

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

    /// One try of the ledger's update through lane `id` of the task.
    #[inline(always)]
    fn move_through(&self, id: u32, delta: i32, cap: Option<u64>) -> Result<Update> {
        let word = &self.shm.task_slot(self.index).in_flight;
        // The task's lanes once: the helpers' look-ups index a slice.
        let lanes = self.lanes();
        let resolve = |id: u32| lanes.get(id as usize).map(|l| ledger_view(id, l));
        let Some(mine) = resolve(id) else {
            return Err(outside_the_table());
        };
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

    #[inline]
    pub(super) fn lane(&self, id: u32) -> &Lane {
        self.shm
            .lane(self.index, id)
            .expect("own lane within the table")
    }

    #[inline]
    fn lanes(&self) -> &[Lane] {
        self.shm
            .task_lanes(self.index)
            .expect("own task within the table")
    }

    /// What attachment `attach` holds of the task, by its ledgers.
    #[inline]
    pub(super) fn held_by(&self, attach: u32) -> i64 {
        let lanes = self.lanes();
        lane_ids(attach)
            .filter_map(|id| lanes.get(id as usize))
            .map(|lane| ledger::ledger_held(lane.ledger.load(Ordering::Acquire)) as i64)
            .sum()
    }
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
