//! Finding a key's entry, and giving a new key one.
//!
//! A key hashes (SipHash-1-3, 64 bits, keyed per file) to an identity and
//! two buckets; it lives in one of their sixteen entries. A lookup compares
//! identities only: one line per bucket.
//!
//! A key moves into an entry under a lock held in the entry's identity
//! word (the mover's attachment): an empty entry, or one whose key's state
//! carries nothing (every rate's bucket full again, no permit held). The
//! protocol, which a survivor finishes when a mover dies:
//!
//! 1. **lock**: identity `old → LOCK(me)` (a compare-and-swap);
//! 2. **empty the old state**: each arrival time `t ≤ now → 0`; any `t >
//!    now`, or a permit held, means the old key came back: put `old` back;
//! 3. **check**: no other lock and no copy of the key in its buckets (a
//!    racing mover of the same key), else put `old` back and retry;
//! 4. **publish**: `entry.key = new`, then identity `LOCK → new`.
//!
//! A decision on a key that found its entry spends first and checks the
//! identity after ([`decide`]): a mover that locked in between sees the
//! spend in step 2, which reads each word of the old state by a
//! read-modify-write, or the decision's spend (or permit) reads from that
//! step, and then its check sees the lock and it gives its spend back.
//! Between the two, acquire and release suffice; the loom model
//! (`map_loom.rs`) checks both sides. A lookup that does not find its key
//! waits for the locks in its buckets (one may be moving it); a lock whose
//! mover is dead is undone by putting back `entry.key`: the old key (its
//! state was only emptied where it carried nothing) or, past step 4's first
//! write, the new one with an empty state. Either is exact. Nothing waits
//! past [`WAIT`]: a key that cannot be placed in time is decided on the
//! shared overflow state.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::time::{Duration, Instant};

use siphasher::sip::SipHasher13;

use super::region::KeyRegion;
use crate::format::{BUCKET_KEYS, Bucket, IDENT_LOCK, KeyCounter, KeyEntry};
use crate::limit::ledger::{Word, word_count};

/// How long placing a key waits for movers in its buckets.
const WAIT: Duration = Duration::from_millis(10);

/// The words a key is placed and decided in: a key file's
/// ([`KeyRegion`]), or loom's atomics in the model of this protocol
/// (`map_loom.rs`, `scripts/loom.sh`), which also makes waits yield to
/// the model's scheduler.
pub(crate) trait Slots {
    type W: Word;
    fn bucket(&self, b: u32) -> &Bucket<Self::W>;
    fn count(&self, counter: KeyCounter, n: u64);
    /// Whether placing a key that began at `started` waited its fill.
    fn waited(&self, started: Instant) -> bool {
        started.elapsed() > WAIT
    }
    /// One turn of a spin wait, and a wait's yield once it spun.
    fn spin(&self) {
        std::hint::spin_loop()
    }
    fn yield_now(&self) {
        std::thread::yield_now()
    }
    /// A sequentially consistent fence (loom's in the models).
    fn fence(&self) {
        std::sync::atomic::fence(SeqCst)
    }
}

impl Slots for KeyRegion {
    type W = AtomicU64;
    #[inline(always)]
    fn bucket(&self, b: u32) -> &Bucket {
        KeyRegion::bucket(self, b)
    }
    #[inline]
    fn count(&self, counter: KeyCounter, n: u64) {
        KeyRegion::count(self, counter, n)
    }
}

/// Entry `index`'s identity word and state (`index` in the key's buckets).
#[inline(always)]
fn ident_at<R: Slots>(region: &R, index: u32) -> &R::W {
    &region.bucket(index / BUCKET_KEYS as u32).ident[index as usize % BUCKET_KEYS]
}

fn entry_at<R: Slots>(region: &R, index: u32) -> &KeyEntry<R::W> {
    &region.bucket(index / BUCKET_KEYS as u32).entries[index as usize % BUCKET_KEYS]
}

/// A key's identity and its two buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hashed {
    pub ident: u64,
    pub buckets: [u32; 2],
}

/// Where a key's state is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    Entry(u32),
    /// No entry could be had: the shared overflow state.
    Overflow,
}

pub(crate) fn hash(region: &KeyRegion, key: &[u8]) -> Hashed {
    let (k0, k1) = region.hash_key;
    let mut hasher = SipHasher13::new_with_keys(k0, k1);
    std::hash::Hasher::write(&mut hasher, key);
    let h = std::hash::Hasher::finish(&hasher);
    let ident = (h & !IDENT_LOCK).max(1);
    // The buckets from the same 64 bits, mixed apart (a bijection of the
    // hash, so keys of one bucket do not share their second bucket).
    let mixed = (h ^ (h >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let n = region.geometry.buckets as u128;
    let b1 = ((mixed as u128 * n) >> 64) as u32;
    let mut b2 = ((mixed.rotate_left(32) as u128 * n) >> 64) as u32;
    if b2 == b1 && n > 1 {
        b2 = (b1 + 1) % n as u32;
    }
    Hashed {
        ident,
        buckets: [b1, b2],
    }
}

/// The entry holding the key, if any.
#[inline(always)]
pub(crate) fn find<R: Slots>(region: &R, h: Hashed) -> Option<u32> {
    for b in h.buckets {
        let bucket = region.bucket(b);
        for (i, ident) in bucket.ident.iter().enumerate() {
            if ident.load(Acquire) == h.ident {
                return Some(b * BUCKET_KEYS as u32 + i as u32);
            }
        }
    }
    None
}

/// Whether an entry's state carries nothing at `now`.
fn idle<W: Word>(entry: &KeyEntry<W>, now: u64) -> bool {
    entry.tat.iter().all(|t| t.load(SeqCst) <= now) && word_count(entry.held.load(SeqCst)) == 0
}

/// Step 2: empties an idle entry's arrival times; false if its key is
/// back (a time past `now`, or a permit held). Each time becomes `now`
/// (a full bucket, as 0 is), a value no decision can have read before: a
/// decision's spend whose compare-and-swap still expects the old key's
/// time then fails, rather than landing on the new key's (a time of 0
/// left as it was would take such a spend).
///
/// Every word is read by a read-modify-write (a time already `now` is
/// swapped for itself, the permits' word too): a decision's spend or
/// permit, a read-modify-write of the same word, is then either before
/// it, and seen here, or after it and reading from it, and so sees the
/// lock when it checks the identity. Loads would need sequential
/// consistency on both sides, which a permit's landing (the ledger's
/// acquire-release compare-and-swap) does not have.
fn empty_old_state<W: Word>(entry: &KeyEntry<W>, now: u64) -> bool {
    for t in &entry.tat {
        let mut seen = t.load(SeqCst);
        loop {
            if seen > now {
                return false;
            }
            match t.compare_exchange(seen, now, SeqCst, SeqCst) {
                Ok(_) => break,
                Err(actual) => seen = actual,
            }
        }
    }
    let mut held = entry.held.load(SeqCst);
    while let Err(actual) = entry.held.compare_exchange(held, held, SeqCst, SeqCst) {
        held = actual;
    }
    word_count(held) == 0
}

/// Finds the key's entry or gives it one. `me` is this process's compact
/// owner; `alive` tells whether a compact owner lives.
pub(crate) fn place<R: Slots>(
    region: &R,
    h: Hashed,
    now: impl Fn() -> u64,
    me: u32,
    alive: impl Fn(u32) -> bool,
) -> Place {
    let started = Instant::now();
    let mut round = 0u32;
    loop {
        round += 1;
        if round > 1 && region.waited(started) {
            return Place::Overflow;
        }
        if let Some(e) = find(region, h) {
            return Place::Entry(e);
        }
        // A lock in the key's buckets may be a mover of this very key.
        if let Some((index, lock)) = locks(region, h).next() {
            wait_for(region, index, lock, &alive);
            continue;
        }
        let now = now();
        let Some((index, old)) = choose(region, h, now) else {
            return Place::Overflow;
        };
        let ident = ident_at(region, index);
        let entry = entry_at(region, index);
        let locked = IDENT_LOCK | me as u64;
        if ident
            .compare_exchange(old, locked, SeqCst, Relaxed)
            .is_err()
        {
            continue;
        }
        let undo = || ident.store(old, Release);
        // Two movers of one key each lock an entry, then look for the
        // other's lock: a store then a load on different words, which only
        // a full fence orders (each may otherwise miss the other's lock).
        region.fence();
        if old != 0 && !empty_old_state(entry, now) {
            undo();
            continue;
        }
        if locks(region, h).any(|(i, _)| i != index) || find(region, h).is_some() {
            undo();
            backoff(round);
            continue;
        }
        entry.admitted.store(0, Relaxed);
        entry.refused.store(0, Relaxed);
        entry.key.store(h.ident, Release);
        ident.store(h.ident, SeqCst);
        region.count(
            if old == 0 {
                KeyCounter::Inserted
            } else {
                KeyCounter::Reused
            },
            1,
        );
        return Place::Entry(index);
    }
}

/// A decision on the key (the module doc's last rule): `spend` on the
/// entry the key is found in, or is given by `place`, kept only if that
/// entry still holds the key once spent; otherwise `undo` gives the spend
/// back and the key is decided again. The overflow state moves to no
/// other key. `Err`: what `spend` returned instead of a spend (a refusal).
#[inline(always)]
pub(crate) fn decide<R: Slots, T, E>(
    region: &R,
    h: Hashed,
    mut place: impl FnMut() -> Place,
    mut spend: impl FnMut(Place) -> Result<T, E>,
    mut undo: impl FnMut(T),
) -> Result<T, E> {
    loop {
        let at = match find(region, h) {
            Some(e) => Place::Entry(e),
            None => place(),
        };
        let taken = spend(at)?;
        match at {
            Place::Entry(e) if ident_at(region, e).load(SeqCst) != h.ident => undo(taken),
            _ => return Ok(taken),
        }
    }
}

/// Locked entries of the key's buckets: (index, lock word).
fn locks<R: Slots>(region: &R, h: Hashed) -> impl Iterator<Item = (u32, u64)> + '_ {
    h.buckets.into_iter().flat_map(move |b| {
        region
            .bucket(b)
            .ident
            .iter()
            .enumerate()
            .filter_map(move |(i, w)| {
                let v = w.load(Acquire);
                (v & IDENT_LOCK != 0).then_some((b * BUCKET_KEYS as u32 + i as u32, v))
            })
    })
}

/// An empty entry of the key's buckets, else the idle one whose state
/// went idle first (the least recently limited); `None`: every entry is
/// live.
fn choose<R: Slots>(region: &R, h: Hashed, now: u64) -> Option<(u32, u64)> {
    let mut best: Option<(u32, u64, u64)> = None;
    for b in h.buckets {
        let bucket = region.bucket(b);
        for i in 0..BUCKET_KEYS {
            let index = b * BUCKET_KEYS as u32 + i as u32;
            let id = bucket.ident[i].load(Acquire);
            if id == 0 {
                return Some((index, 0));
            }
            if id & IDENT_LOCK != 0 {
                continue;
            }
            let entry = &bucket.entries[i];
            if !idle(entry, now) {
                continue;
            }
            let last = entry.tat.iter().map(|t| t.load(Relaxed)).max().unwrap_or(0);
            if best.is_none_or(|(_, _, l)| last < l) {
                best = Some((index, id, last));
            }
        }
    }
    best.map(|(index, id, _)| (index, id))
}

/// Waits a little for a mover; undoes its lock if it is dead.
fn wait_for<R: Slots>(region: &R, index: u32, lock: u64, alive: &impl Fn(u32) -> bool) {
    let ident = ident_at(region, index);
    for _ in 0..64 {
        if ident.load(Acquire) != lock {
            return;
        }
        region.spin();
    }
    if !alive(lock as u32) {
        let entry = entry_at(region, index);
        let _ = ident.compare_exchange(lock, entry.key.load(Acquire), SeqCst, Relaxed);
    } else {
        region.yield_now();
    }
}

fn backoff(round: u32) {
    let spins = 1u32 << round.min(10);
    let spins = spins / 2 + (crate::clock::monotonic_ns() as u32 % spins.max(1));
    for _ in 0..spins {
        std::hint::spin_loop();
    }
}

#[cfg(all(test, feature = "loom"))]
#[path = "map_loom.rs"]
mod loom_model;
