//! Giving back the picks a dead attachment held: each of its ledger lanes
//! (one per backend of each balancer) is settled and drained through the
//! ledger protocol, so a reaper killed at any instruction leaves work the
//! next reaper finishes exactly (see `limit::ledger`).

use std::sync::atomic::Ordering;

use super::layout::{backend_slot, balancer_slot, pick_ledger};
use crate::limit::ledger;
use crate::shm::layout::TASK_READY;
use crate::shm::{Reclaim, Shm};

pub(crate) struct BalanceReclaim;

impl Reclaim for BalanceReclaim {
    fn reclaim(&self, shm: &Shm, attach: u32) {
        for balancer in 0..shm.geometry.balancer_capacity {
            if balancer_slot(shm, balancer).state.load(Ordering::Acquire) != TASK_READY {
                continue;
            }
            for backend in 0..shm.geometry.backend_capacity {
                let (Some(slot), Some(mine)) = (
                    backend_slot(shm, balancer, backend),
                    pick_ledger(shm, balancer, attach, backend),
                ) else {
                    continue;
                };
                let resolve = |id| {
                    pick_ledger(shm, balancer, id, backend).map(|l| ledger::Lane {
                        id,
                        ledger: &l.ledger,
                        intent: &l.intent,
                    })
                };
                let lane = ledger::Lane {
                    id: attach,
                    ledger: &mine.ledger,
                    intent: &mine.intent,
                };
                ledger::drain(&slot.in_flight, resolve, lane, |_, _| {});
            }
        }
    }

    /// Picks keep no per-process statistics: nothing to note.
    fn baseline(&self, _shm: &Shm, _attach: u32) {}
}
