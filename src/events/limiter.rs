//! The once-per-interval limiter of event lines: a fixed table of atomic
//! slots, one per (kind, subject) key, each remembering when its key last
//! logged and how many lines it left out since. No allocation and no lock:
//! a `fork()` while another thread was inside it leaves nothing locked in
//! the child. Under races its counts are approximate.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Keys with a failure line not yet followed by a recovery line.
pub(super) static ARMED: AtomicUsize = AtomicUsize::new(0);

/// Slots of the limiter; keys past them share one overflow slot (rate
/// limited together).
const SLOTS: usize = 256;

struct Slot {
    key: AtomicU64,
    /// When it last let a line through (ms), 0 = never.
    last: AtomicU64,
    /// Lines left out since.
    left_out: AtomicU64,
    armed: AtomicBool,
}

impl Slot {
    const fn new(key: u64) -> Self {
        Self {
            key: AtomicU64::new(key),
            last: AtomicU64::new(0),
            left_out: AtomicU64::new(0),
            armed: AtomicBool::new(false),
        }
    }

    /// Nothing to remember: its interval is over and nothing left out.
    fn idle(&self, now: u64, interval: u64) -> bool {
        let last = self.last.load(Ordering::Acquire);
        (last == 0 || now >= last + interval)
            && self.left_out.load(Ordering::Relaxed) == 0
            && !self.armed.load(Ordering::Relaxed)
    }
}

pub(crate) struct Limiter {
    slots: [Slot; SLOTS],
    overflow: Slot,
    interval_ms: u64,
}

impl Limiter {
    pub const fn new(interval_ms: u64) -> Self {
        Self {
            slots: [const { Slot::new(0) }; SLOTS],
            overflow: Slot::new(u64::MAX),
            interval_ms,
        }
    }

    /// The key's slot if it has one.
    fn find(&self, key: u64) -> Option<&Slot> {
        (0..SLOTS)
            .map(|i| &self.slots[(key as usize).wrapping_add(i) % SLOTS])
            .find(|s| s.key.load(Ordering::Acquire) == key)
    }

    /// The key's slot: its own, a free or idle one taken over, or the
    /// overflow slot.
    fn slot(&self, key: u64, now: u64) -> &Slot {
        if let Some(slot) = self.find(key) {
            return slot;
        }
        for i in 0..SLOTS {
            let slot = &self.slots[(key as usize).wrapping_add(i) % SLOTS];
            let held = slot.key.load(Ordering::Acquire);
            if (held == 0 || slot.idle(now, self.interval_ms))
                && slot
                    .key
                    .compare_exchange(held, key, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                // Idle: what it remembered no longer matters.
                slot.last.store(0, Ordering::Release);
                return slot;
            }
        }
        &self.overflow
    }

    /// `Some(lines left out since the last one)` when a line may go out now.
    pub fn admit(&self, key: u64, now: u64) -> Option<u64> {
        let slot = self.slot(key, now);
        let mut last = slot.last.load(Ordering::Acquire);
        loop {
            if last != 0 && now < last + self.interval_ms {
                slot.left_out.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            match slot
                .last
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(slot.left_out.swap(0, Ordering::Relaxed)),
                Err(actual) => last = actual,
            }
        }
    }

    /// Lets a line through whatever the interval: the lines left out.
    pub(super) fn force(&self, key: u64, now: u64) -> u64 {
        let slot = self.slot(key, now);
        slot.last.store(now, Ordering::Release);
        slot.left_out.swap(0, Ordering::Relaxed)
    }

    /// Marks that a failure line of `key` went out.
    pub(super) fn arm(&self, key: u64, now: u64) {
        let slot = self.slot(key, now);
        // The overflow slot is shared: `disarm` never finds it.
        if !std::ptr::eq(slot, &self.overflow) && !slot.armed.swap(true, Ordering::AcqRel) {
            ARMED.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether a failure line of `key` went out since the last disarm.
    pub(super) fn disarm(&self, key: u64) -> bool {
        let was = self
            .find(key)
            .is_some_and(|s| s.armed.swap(false, Ordering::AcqRel));
        if was {
            ARMED.fetch_sub(1, Ordering::Relaxed);
        }
        was
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Event, LeftOut, key};

    #[test]
    pub(super) fn repeats_within_the_interval_make_one_line_then_one_with_the_count() {
        let limiter = Limiter::new(10_000);
        let k = key(Event::StoreFailed, "api");
        assert_eq!(limiter.admit(k, 1_000), Some(0), "the first goes out");
        for i in 0..41 {
            assert_eq!(limiter.admit(k, 1_001 + i * 200), None, "repeat {i}");
        }
        // Another kind, another task: limited apart.
        assert_eq!(
            limiter.admit(key(Event::StoreRecovered, "api"), 1_500),
            Some(0)
        );
        assert_eq!(
            limiter.admit(key(Event::StoreFailed, "web"), 1_500),
            Some(0)
        );
        assert_eq!(limiter.admit(k, 10_999), None, "still within 10 s");
        assert_eq!(limiter.admit(k, 11_000), Some(42), "with the count");
        assert_eq!(limiter.admit(k, 30_000), Some(0), "nothing left out since");
        assert_eq!(LeftOut(42).to_string(), " (and 42 more since)");
        assert_eq!(LeftOut(0).to_string(), "");
    }

    #[test]
    pub(super) fn keys_past_the_slots_share_the_overflow_slot_and_idle_slots_are_reused() {
        let limiter = Limiter::new(10_000);
        for i in 0..SLOTS {
            let k = key(Event::Reclaimed, &format!("task{i}"));
            assert_eq!(limiter.admit(k, 1), Some(0));
            assert_eq!(limiter.admit(k, 2), None, "left out: the slot stays busy");
        }
        let (a, b) = (key(Event::Reclaimed, "a"), key(Event::Reclaimed, "b"));
        assert_eq!(limiter.admit(a, 3), Some(0), "the overflow slot");
        assert_eq!(limiter.admit(b, 4), None, "limited with a");
        // Past the interval, the slots' counts go out and they turn idle.
        for i in 0..SLOTS {
            let k = key(Event::Reclaimed, &format!("task{i}"));
            assert_eq!(limiter.admit(k, 20_000), Some(1));
        }
        assert_eq!(limiter.admit(b, 40_000), Some(0), "an idle slot taken over");
        assert!(std::ptr::eq(
            limiter.slot(b, 40_001),
            limiter.find(b).unwrap()
        ));
    }
}
