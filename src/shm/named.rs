//! Slots found by name — tasks and balancers — and the owner-word locks
//! that guard what is written into them.
//!
//! Names are spread over the slots by an FNV-1a hash with linear probing. A
//! slot being filled is marked with its claimer's [`Owner`] (slot and
//! epoch): a claim whose owner died is taken over, one whose owner lives is
//! waited for up to [`DEADLINE`], then an error — never an endless spin.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Owner, Shm};
use crate::error::{Error, ErrorKind, Result};
use crate::format::{NAME_WORDS, TASK_CLAIMING, TASK_EMPTY, TASK_KIND, TASK_READY};

/// How long registration, and a write under an owner-word lock, wait for a
/// live process holding the claim or the lock.
pub(crate) const DEADLINE: Duration = Duration::from_secs(2);

/// The words of a slot that make it findable by name.
#[derive(Clone, Copy)]
pub(crate) struct Named<'a> {
    /// `TASK_EMPTY`, `TASK_CLAIMING | owner` or `TASK_READY`.
    pub state: &'a AtomicU64,
    pub name_len: &'a AtomicU64,
    pub name: &'a [AtomicU64; NAME_WORDS],
}

impl Named<'_> {
    /// Whether the slot is published.
    pub fn is_ready(&self) -> bool {
        crate::format::load_acquire(self.state) == TASK_READY
    }

    /// The name the slot holds, if it is readable (for reports and views):
    /// a damaged length or bytes that are not UTF-8 give `None`.
    pub fn name(&self) -> Option<String> {
        let len = usize::try_from(self.name_len.load(Ordering::Relaxed)).ok()?;
        if len > crate::words::NAME_MAX {
            return None;
        }
        let bytes: Vec<u8> = self
            .name
            .iter()
            .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
            .take(len)
            .collect();
        String::from_utf8(bytes).ok()
    }

    fn holds(&self, name: &str, words: &[u64; NAME_WORDS]) -> bool {
        self.name_len.load(Ordering::Relaxed) == name.len() as u64
            && self
                .name
                .iter()
                .zip(words)
                .all(|(w, v)| w.load(Ordering::Relaxed) == *v)
    }

    fn claim(&self, seen: u64, me: Owner) -> bool {
        self.state
            .compare_exchange(
                seen,
                TASK_CLAIMING | me.0,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Writes the name; the caller then fills the rest and publishes.
    pub fn write_name(&self, name: &str) {
        for (w, v) in self.name.iter().zip(name_words(name)) {
            w.store(v, Ordering::Relaxed);
        }
        self.name_len.store(name.len() as u64, Ordering::Relaxed);
    }

    /// Makes a filled slot visible to every process.
    pub fn publish(&self) {
        self.state.store(TASK_READY, Ordering::Release);
    }
}

/// The slot of `name` if it is registered; never claims one. Probing
/// stops at the first empty slot, as a claim would have taken it.
pub(crate) fn find<'a>(capacity: u32, name: &str, slot: impl Fn(u32) -> Named<'a>) -> Option<u32> {
    let words = name_words(name);
    let start = (hash(name) % capacity.max(1) as u64) as u32;
    for probe in 0..capacity {
        let index = (start + probe) % capacity;
        let named = slot(index);
        let state = named.state.load(Ordering::Acquire);
        if state == TASK_EMPTY {
            return None;
        }
        if state == TASK_READY && named.holds(name, &words) {
            return Some(index);
        }
    }
    None
}

/// Finds the slot of `name` among `capacity` slots of `kind` ("task",
/// "balancer"), or claims an empty or abandoned one and has `fill` write
/// and publish it. Returns the slot index and whether this call filled it.
pub(crate) fn find_or_claim<'a>(
    shm: &'a Shm,
    kind: &str,
    capacity: u32,
    name: &str,
    slot: impl Fn(u32) -> Named<'a>,
    fill: impl FnOnce(u32),
) -> Result<(u32, bool)> {
    let words = name_words(name);
    let start = (hash(name) % capacity.max(1) as u64) as u32;
    let me = shm.owner()?;
    let began = Instant::now();
    for probe in 0..capacity {
        let index = (start + probe) % capacity;
        let named = slot(index);
        loop {
            let state = named.state.load(Ordering::Acquire);
            let mine = match state & TASK_KIND {
                TASK_READY if state == TASK_READY => {
                    if named.holds(name, &words) {
                        return Ok((index, false));
                    }
                    break;
                }
                TASK_EMPTY if state == TASK_EMPTY => named.claim(state, me),
                TASK_CLAIMING => {
                    let claimer = Owner(state & !TASK_KIND);
                    if claimer != me && !shm.owner_alive(claimer) {
                        // Died half-way: the slot is ours to fill.
                        named.claim(state, me)
                    } else if began.elapsed() > DEADLINE {
                        return Err(Error::new(
                            ErrorKind::Timeout,
                            format!(
                                "{kind} slot {index} of {} has been being registered by a live \
                                 process for over {DEADLINE:?}",
                                shm.path().display()
                            ),
                        ));
                    } else {
                        std::thread::sleep(Duration::from_micros(100));
                        false
                    }
                }
                _ => {
                    return Err(Error::corrupt(format!(
                        "{}: {kind} slot {index} has an unknown state {state:#x}",
                        shm.path().display()
                    )));
                }
            };
            if mine {
                fill(index);
                return Ok((index, true));
            }
        }
    }
    Err(Error::new(
        ErrorKind::TableFull,
        format!(
            "all {capacity} {kind} slots of {} are taken; cannot register {name:?}",
            shm.path().display()
        ),
    ))
}

/// Runs `body` holding `lock`, an owner word (0 = free): a lock held by a
/// dead process is taken over, one held by a live process is waited for up
/// to [`DEADLINE`], then a timeout error naming `what`.
pub(crate) fn with_owner_lock<T>(
    shm: &Shm,
    lock: &AtomicU64,
    what: &str,
    body: impl FnOnce() -> T,
) -> Result<T> {
    let me = shm.owner()?;
    let start = Instant::now();
    loop {
        let current = lock.load(Ordering::Acquire);
        let free = current == 0 || (current != me.0 && !shm.owner_alive(Owner(current)));
        if free
            && lock
                .compare_exchange(current, me.0, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            let result = body();
            lock.store(0, Ordering::Release);
            return Ok(result);
        }
        if start.elapsed() > DEADLINE {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!("{what} has been locked by a live process for over {DEADLINE:?}"),
            ));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// A name as the slot stores it: zero-padded little-endian words.
pub(crate) fn name_words(name: &str) -> [u64; NAME_WORDS] {
    let mut bytes = [0u8; NAME_WORDS * 8];
    let len = name.len().min(bytes.len());
    bytes[..len].copy_from_slice(&name.as_bytes()[..len]);
    std::array::from_fn(|i| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap()))
}

/// FNV-1a: spreads names over the slots; collisions probe linearly.
fn hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}
