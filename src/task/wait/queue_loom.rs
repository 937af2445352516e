//! The loom model of the queue's flag and wake protocol (`scripts/loom.sh`):
//! the real `publish_in`, `lower_in` and `freed_in` on loom's atomics.
//!
//! The promise checked: a waiter that publishes itself while a permit is
//! freed and while another attachment leaves the queue either takes the
//! permit or is woken (its wake word moved after it last looked) — never
//! asleep beside a free permit; and the flag is up whenever a head is
//! published, so no non-waiting acquire can pass it.
use std::sync::atomic::Ordering;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64 as LoomWord, fence};
use loom::thread;

use super::*;
use crate::words::WaitOrder;

// `Word` for loom's atomics is the ledger model's (`limit/ledger_loom.rs`).

/// Two attachments' queue words, their wake words, and the task's count.
struct Model {
    flag: LoomWord,
    heads: [LoomWord; 2],
    wakes: [LoomWord; 2],
    /// Permits taken (the cap is 1).
    count: LoomWord,
}

impl Words for Model {
    type W = LoomWord;
    fn flag(&self) -> &LoomWord {
        &self.flag
    }
    fn attachments(&self) -> u32 {
        2
    }
    fn head_of(&self, i: u32) -> &LoomWord {
        &self.heads[i as usize]
    }
    fn live(&self, _: u32) -> bool {
        true
    }
    fn wake(&self, i: u32) {
        self.wakes[i as usize].fetch_add(1, Ordering::SeqCst);
    }
    fn fence(&self) {
        fence(Ordering::SeqCst);
    }
}

/// Attachment 1 heads the queue (ticket 3) and leaves it, as when its last
/// waiter times out or is granted; attachment 0's waiter (ticket 5) joins
/// and its waiter thread tries once; a holder releases the only permit.
#[test]
fn a_waiter_is_never_left_asleep_beside_a_free_permit() {
    // Three preemptions (as the ledger's models; LOOM_MAX_PREEMPTIONS
    // overrides): it finds the missing fence after the wake word's read.
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(|| {
        let m = Arc::new(Model {
            flag: LoomWord::new(1),
            heads: [LoomWord::new(0), LoomWord::new(3)],
            wakes: [LoomWord::new(0), LoomWord::new(0)],
            count: LoomWord::new(1),
        });
        let order = WaitOrder::Fifo;
        let waiter = {
            let m = m.clone();
            thread::spawn(move || {
                publish_in(&*m, 0, 5, order);
                // The waiter thread's turn (as `helper::run` and `serve`).
                let seen = m.wakes[0].load(Ordering::SeqCst);
                fence(Ordering::SeqCst);
                let turn = head_in(&*m, order).is_none_or(|(a, _)| a == 0);
                if turn
                    && m.count
                        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                {
                    return None; // admitted
                }
                if !turn {
                    // Not its turn: it passes the wake on to the head.
                    m.wake(1);
                }
                Some(seen) // asleep while its wake word stays `seen`
            })
        };
        let leaver = {
            let m = m.clone();
            thread::spawn(move || {
                publish_in(&*m, 1, 0, order);
                // It was its attachment's first waiter: `Room::leave`
                // wakes the head.
                wake_head_in(&*m, order);
            })
        };
        let releaser = {
            let m = m.clone();
            thread::spawn(move || {
                m.count.fetch_sub(1, Ordering::AcqRel);
                fence(Ordering::SeqCst);
                freed_in(&*m, || order);
            })
        };
        let asleep = waiter.join().unwrap();
        leaver.join().unwrap();
        releaser.join().unwrap();
        if let Some(seen) = asleep {
            assert_eq!(m.count.load(Ordering::SeqCst), 0, "the permit is free");
            assert_ne!(
                m.wakes[0].load(Ordering::SeqCst),
                seen,
                "a waiter was left asleep beside a free permit"
            );
            assert_eq!(
                m.flag.load(Ordering::SeqCst),
                1,
                "a head with the flag down"
            );
        }
    });
}
