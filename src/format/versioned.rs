//! The one reader of double-buffered copies. A writer (serialised by a lock
//! of its own) fills the copy readers are not using, then bumps the version;
//! a reader never waits and never sees half an update: it reads copy
//! `version & 1` and retries if the version moved meanwhile.

use std::sync::atomic::{AtomicU64, Ordering, fence};

/// Tries before a reader settles for the last copy it read: a table someone
/// keeps rewriting (a hostile writer) must not hold a reader forever.
const MAX_TRIES: u32 = 64;

/// Reads copy `version & 1` with `read` until the version held still.
#[inline]
pub(crate) fn read_versioned<T>(version: &AtomicU64, mut read: impl FnMut(usize) -> T) -> T {
    let mut tries = 0;
    loop {
        // Not `load(Acquire)`: views read copies through a read-only
        // mapping (see `load_acquire`); the same order on every target.
        let seen = super::load_acquire(version);
        let value = read((seen & 1) as usize);
        // Pairs with the writer's fence before it fills a copy: if any word
        // read came from a later write, the version moved too.
        fence(Ordering::Acquire);
        tries += 1;
        if version.load(Ordering::Relaxed) == seen || tries >= MAX_TRIES {
            return value;
        }
    }
}

/// The copy a writer fills next, given the current version; the writer
/// publishes it with [`commit`].
#[inline]
pub(crate) fn next_copy(version: &AtomicU64) -> (u64, usize) {
    // Pairs with the readers' fence: a reader that sees any of the stores
    // that follow also sees the version bump that preceded them.
    fence(Ordering::Release);
    let v = version.load(Ordering::Relaxed);
    (v, (v.wrapping_add(1) & 1) as usize)
}

/// Makes the copy filled after [`next_copy`] current.
#[inline]
pub(crate) fn commit(version: &AtomicU64, seen: u64) {
    version.store(seen.wrapping_add(1), Ordering::Release);
}
