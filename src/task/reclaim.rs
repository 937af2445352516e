//! Giving back what a dead attachment held of every task: the task layer's
//! side of the reaper.

use std::sync::atomic::Ordering;

use super::stats::{lane_ids, record_reclaimed};
use crate::limit::ledger;
use crate::shm::layout::{Lane, TASK_READY};
use crate::shm::{Reclaim, Shm};

/// Drains the ledger lanes of a dead attachment (see `limit::ledger`).
/// Idempotent and crash-safe: every step is a ledger transaction a later
/// reclaimer finishes or undoes, and the reclaimed count is keyed by the
/// drain's sequence number.
pub(crate) struct TaskReclaim;

impl Reclaim for TaskReclaim {
    fn reclaim(&self, shm: &Shm, attach: u32) {
        for task in 0..shm.geometry.task_capacity {
            let slot = shm.task_slot(task);
            if slot.state.load(Ordering::Acquire) != TASK_READY {
                continue;
            }
            let word = &slot.in_flight;
            let resolve = |id| view(shm, task, id);
            let lanes: Vec<(ledger::Lane<'_>, &Lane)> = lane_ids(attach)
                .filter_map(|id| Some((view(shm, task, id)?, shm.lane(task, id)?)))
                .collect();
            for (lane, _) in &lanes {
                ledger::settle(word, resolve, *lane);
            }
            // Lanes that gave back more than they took first. A process's net
            // holding is never negative, so the count then never has to dip
            // below what the living hold — where it would clamp at zero and
            // lose a permit for good (the loom model shows it does otherwise).
            let negative_first = |(lane, _): &&(ledger::Lane<'_>, &Lane)| {
                ledger::ledger_held(lane.ledger.load(Ordering::Acquire)) >= 0
            };
            let mut order: Vec<_> = lanes.iter().collect();
            order.sort_by_key(negative_first);
            for (lane, raw) in order {
                ledger::drain(word, resolve, *lane, |seq, held| {
                    record_reclaimed(raw, seq, held)
                });
            }
        }
    }
}

fn view(shm: &Shm, task: u32, id: u32) -> Option<ledger::Lane<'_>> {
    shm.lane(task, id).map(|lane| ledger::Lane {
        id,
        ledger: &lane.ledger,
        intent: &lane.intent,
    })
}
