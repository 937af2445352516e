//! What the task layer does when an attachment slot changes hands: gives
//! back what a dead owner held of every task, and notes where a new owner's
//! statistics start.

use std::sync::atomic::Ordering;

use super::stats::{Sums, lane_ids, ledger_view, record_reclaimed};
use crate::events::{self, Event};
use crate::format::{Lane, TASK_READY, TaskSlot};
use crate::limit::ledger;
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
            crate::quota::reclaim_pull_lock(slot, attach);
            if slot.keyed.load(Ordering::Acquire) != 0 {
                reclaim_keys(shm, task, attach);
            }
            let word = &slot.in_flight;
            let resolve = |id| shm.lane(task, id).map(|lane| ledger_view(id, lane));
            let mut lanes: Vec<(u32, &Lane)> = lane_ids(attach)
                .filter_map(|id| Some((id, shm.lane(task, id)?)))
                .collect();
            for &(id, lane) in &lanes {
                ledger::settle(word, resolve, ledger_view(id, lane));
            }
            // Lanes that gave back more than they took first. A process's net
            // holding is never negative, so the count then never has to dip
            // below what the living hold — where it would clamp at zero and
            // lose a permit for good (the loom model shows it does otherwise).
            lanes.sort_by_key(|(_, lane)| {
                ledger::ledger_held(lane.ledger.load(Ordering::Acquire)) >= 0
            });
            let mut given_back = 0i64;
            for (id, lane) in lanes {
                given_back += ledger::drain(word, resolve, ledger_view(id, lane), |seq, held| {
                    record_reclaimed(lane, seq, held)
                }) as i64;
            }
            if given_back > 0 {
                report_reclaimed(shm, slot, attach, given_back);
            }
            // Its waiters are gone: the queue's head moves past them. The
            // flag is lowered whenever it is up, not only when this head
            // was: a reaper killed between the two left it up with no head.
            let queued = shm.baseline(task, attach).is_some_and(|base| {
                base.queue_len.store(0, Ordering::Relaxed);
                base.queue_head.swap(0, Ordering::SeqCst) != 0
            });
            if queued || slot.adaptive.queued.load(Ordering::Acquire) != 0 {
                super::wait::clear_flag(shm, task);
            }
            if given_back > 0 || queued {
                std::sync::atomic::fence(Ordering::SeqCst);
                super::wait::freed(shm, task);
            }
        }
    }

    fn baseline(&self, shm: &Shm, attach: u32) {
        // Every slot, registered or not: an unused one sums to zero, and a
        // task registered meanwhile cannot have counted on this slot yet.
        for task in 0..shm.geometry.task_capacity {
            let mut sums = Sums::default();
            lane_ids(attach)
                .filter_map(|id| shm.lane(task, id))
                .for_each(|lane| sums.add_lane(lane));
            // A pooled pair without a set has nothing to note.
            let Some(base) = shm.baseline(task, attach) else {
                continue;
            };
            sums.store(base);
            base.queue_head.store(0, Ordering::Relaxed);
            base.queue_len.store(0, Ordering::Relaxed);
        }
    }
}

/// One line per task and interval (the reaper runs under the table's lock:
/// the line is written once it is free, see `events::Defer`).
#[cold]
fn report_reclaimed(shm: &Shm, slot: &TaskSlot, attach: u32, permits: i64) {
    if !Event::Reclaimed.enabled() {
        return; // not even the name's allocation
    }
    let name = super::register::slot_name(slot).unwrap_or_default();
    let pid = shm.attach_slot(attach).pid.load(Ordering::Relaxed);
    events::report_with(
        Event::Reclaimed,
        &name,
        events::Extra {
            dead_pid: u32::try_from(pid).ok(),
            host: None,
        },
        format_args!(
            "task {name:?}: gave back {permits} permit(s) held by dead process {pid} \
             (attachment {attach})"
        ),
    );
}

/// Gives back the per-key permits a dead attachment held of a keyed task.
/// A task without a key file holds none: the reaper makes no file (one
/// removed with its table would be made again behind its owner's back).
fn reclaim_keys(shm: &Shm, task: u32, attach: u32) {
    if !crate::keyed::key_file_path(&shm.path, task).exists() {
        return;
    }
    match crate::keyed::Keys::open(shm, task, crate::keyed::DEFAULT_KEY_CAPACITY) {
        Ok(keys) => {
            let given = keys.reclaim(attach);
            if given > 0 {
                log::info!(
                    target: crate::events::TABLE,
                    "gave back {given} per-key permits a dead process held (task slot {task})"
                );
            }
        }
        Err(e) => log::warn!(
            target: crate::events::TABLE,
            "cannot open the key file of task slot {task} to give back a dead process's \
             per-key permits: {e}"
        ),
    }
}
