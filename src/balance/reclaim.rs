//! Giving back the picks a dead attachment held: each of its ledger lanes
//! (one per backend of each balancer) is settled and drained through the
//! ledger protocol, so a reaper killed at any instruction leaves work the
//! next reaper finishes exactly (see `limit::ledger`).

use std::sync::atomic::Ordering;

use crate::format::TASK_READY;
use crate::limit::ledger;
use crate::shm::{Reclaim, Shm};

pub(crate) struct BalanceReclaim;

impl Reclaim for BalanceReclaim {
    fn reclaim(&self, shm: &Shm, attach: u32) {
        for balancer in 0..shm.geometry.balancer_capacity {
            if shm.balancer_slot(balancer).state.load(Ordering::Acquire) != TASK_READY {
                continue;
            }
            for backend in 0..shm.geometry.backend_capacity {
                let (Some(slot), Some(mine)) = (
                    shm.backend_slot(balancer, backend),
                    shm.pick_ledger(balancer, attach, backend),
                ) else {
                    continue;
                };
                let resolve = |id| {
                    shm.pick_ledger(balancer, id, backend)
                        .map(|l| ledger::Lane {
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
