//! The loom model of key placement and entry reuse (`scripts/loom.sh`):
//! the real `place`, `find` and decision loop (`decide`) of `map`, the
//! real rate spend and give-back of `keyed::decide` and the real ledger
//! update of a key's permits, on loom's atomics, over two buckets of
//! eight entries (a key file of 16 keys) and the overflow state.
//!
//! Loom takes sequentially consistent loads and stores for acquire and
//! release ones: what passes here holds without sequential consistency.
//!
//! What each model promises, and the step it fails without (each was
//! checked by removing that step from `map.rs`):
//!
//! - (a) two threads placing one new key leave it in exactly one entry and
//!   both decide on it: without the check after the lock (step 3), or
//!   without either half of it (another mover's lock in the buckets; a
//!   copy of the key already published), the key ends in two entries;
//! - (b) a spend racing the reuse of its key's entry stays with its key:
//!   without the decision's identity check after spending, the spend is
//!   kept on the entry the new key took; without the undo after a failed
//!   check, the new key carries it; without step 2's "a time past now:
//!   the old key is back", the mover takes the entry from under a kept
//!   spend (and erases it); with a time already `now` read by a load
//!   instead of swapped, the spend is kept on the new key's entry;
//! - (c) a limited key and a key whose permit is taken while a mover wants
//!   its entry keep their state: without step 2's look at the permits
//!   held, or with it a load, or without the decision's identity check,
//!   the new key's entry carries the permit; without the undo, the key's
//!   own next permit is refused.
use std::sync::atomic::AtomicU64 as Counter;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Instant;

use loom::sync::Arc;
use loom::sync::atomic::AtomicU64 as LoomWord;
use loom::thread;

use super::decide as map_decide;
use super::*;
use crate::format::{KEY_COUNTERS, MAX_KEY_RATES};
use crate::keyed::decide::{give_back_rates, spend_rate};
use crate::limit::gcra::Gcra;
use crate::limit::ledger::{self, Lane, Update};

// `Word` for loom's atomics is the ledger model's (`limit/ledger_loom.rs`).

/// The clock of every decision and placement, and one rate's interval.
const NOW: u64 = 1_000;
const I: u64 = 100;
/// A live key's time: limited for ten intervals.
const LIVE: u64 = NOW + 10 * I;
/// Identities (any key's two buckets are the model's two).
const A: u64 = 0xA;
const B: u64 = 0xB;
const K: u64 = 0xC;
const ENTRIES: u32 = 2 * BUCKET_KEYS as u32;

fn key(ident: u64) -> Hashed {
    Hashed {
        ident,
        buckets: [0, 1],
    }
}

/// A key file of two buckets, its overflow state, its counters, and one
/// key record (a ledger lane) for each of two threads.
struct Model {
    buckets: [Bucket<LoomWord>; 2],
    overflow: KeyEntry<LoomWord>,
    counters: [Counter; KEY_COUNTERS],
    lanes: [[LoomWord; 2]; 2],
}

impl Slots for Model {
    type W = LoomWord;
    fn bucket(&self, b: u32) -> &Bucket<LoomWord> {
        &self.buckets[b as usize]
    }
    fn count(&self, counter: KeyCounter, n: u64) {
        self.counters[counter as usize].fetch_add(n, Relaxed);
    }
    /// Never: the model waits for every mover (loom runs each to its end).
    fn waited(&self, _: Instant) -> bool {
        false
    }
    fn spin(&self) {
        thread::yield_now()
    }
    fn yield_now(&self) {
        thread::yield_now()
    }
    fn fence(&self) {
        loom::sync::atomic::fence(SeqCst)
    }
}

fn entry_state(tat: u64) -> KeyEntry<LoomWord> {
    KeyEntry {
        key: LoomWord::new(0),
        tat: std::array::from_fn(|r| LoomWord::new(if r == 0 { tat } else { 0 })),
        held: LoomWord::new(0),
        admitted: LoomWord::new(0),
        refused: LoomWord::new(0),
    }
}

impl Model {
    /// Entries `(index, identity, time of rate 0)`; the others are empty.
    fn new(keys: &[(u32, u64, u64)]) -> Arc<Self> {
        let at = |index: u32| keys.iter().find(|k| k.0 == index).copied();
        Arc::new(Self {
            buckets: std::array::from_fn(|b| {
                let index = |i: usize| (b * BUCKET_KEYS + i) as u32;
                Bucket {
                    ident: std::array::from_fn(|i| LoomWord::new(at(index(i)).map_or(0, |k| k.1))),
                    entries: std::array::from_fn(|i| {
                        let e = entry_state(at(index(i)).map_or(0, |k| k.2));
                        e.key.store(at(index(i)).map_or(0, |k| k.1), Relaxed);
                        e
                    }),
                }
            }),
            overflow: entry_state(0),
            counters: std::array::from_fn(|_| Counter::new(0)),
            lanes: std::array::from_fn(|_| [LoomWord::new(0), LoomWord::new(0)]),
        })
    }

    /// Every entry but `except` holds a live (limited) key.
    fn full_but(except: &[(u32, u64, u64)]) -> Arc<Self> {
        let mut keys = except.to_vec();
        for e in 0..ENTRIES {
            if !except.iter().any(|k| k.0 == e) {
                keys.push((e, 0x100 + e as u64, LIVE));
            }
        }
        Self::new(&keys)
    }

    fn entry(&self, at: Place) -> &KeyEntry<LoomWord> {
        match at {
            Place::Entry(e) => entry_at(self, e),
            Place::Overflow => &self.overflow,
        }
    }

    fn ident(&self, e: u32) -> u64 {
        ident_at(self, e).load(SeqCst)
    }

    fn tat(&self, at: Place) -> u64 {
        self.entry(at).tat[0].load(SeqCst)
    }

    fn held(&self, at: Place) -> u64 {
        ledger::word_count(self.entry(at).held.load(SeqCst))
    }

    fn lane(&self, id: u32) -> Option<Lane<'_, LoomWord>> {
        self.lanes
            .get(id as usize)
            .map(|[ledger, intent]| Lane { id, ledger, intent })
    }

    /// The real ledger update of the key's permits at `at` on lane `id`
    /// (one thread a lane: never busy).
    fn update(&self, at: Place, id: u32, delta: i32, cap: Option<u64>) -> Update {
        let lane = self.lane(id).expect("a lane of the model");
        let r = ledger::update(&self.entry(at).held, |i| self.lane(i), lane, delta, cap);
        assert_ne!(r, Update::Busy, "lane {id} is one thread's");
        r
    }

    fn counter(&self, counter: KeyCounter) -> u64 {
        self.counters[counter as usize].load(Relaxed)
    }

    /// The entries holding `ident`.
    fn holding(&self, ident: u64) -> Vec<u32> {
        (0..ENTRIES).filter(|&e| self.ident(e) == ident).collect()
    }

    /// What every model ends with: no lock left, no key in two entries.
    fn assert_settled(&self) {
        for e in 0..ENTRIES {
            let id = self.ident(e);
            assert_eq!(id & IDENT_LOCK, 0, "entry {e} left locked: {id:#x}");
            if id != 0 {
                assert_eq!(self.holding(id).len(), 1, "key {id:#x} in two entries");
                assert_eq!(entry_at(self, e).key.load(SeqCst), id, "entry {e}'s copy");
            }
        }
    }
}

/// What a decider spends: rate 0 of `burst` (interval `I`) and a permit
/// of the key under `cap`, kept once admitted.
#[derive(Clone, Copy)]
struct Spend {
    burst: Option<u32>,
    cap: Option<u64>,
}

/// A keyed decision of key `h` as `Keys::take` makes it, from the real
/// parts: `map::decide` (find, or `map::place`; spend; identity check;
/// undo and again), `spend_rate`, `give_back_rates`, `ledger::update`.
/// `me` is the thread's compact owner, `lane` its key record. Returns
/// where the spend was kept, or `None`: refused.
fn decide(m: &Model, h: Hashed, me: u32, lane: u32, limits: Spend) -> Option<Place> {
    // The entry the lane (a key record) is bound to: rebound as `Using`
    // does, its tags taken out of the old entry's word first.
    let mut bound: Option<Place> = None;
    map_decide(
        m,
        h,
        || place(m, h, || NOW, me, |_| true),
        |at| {
            let entry = m.entry(at);
            let mut spent = [0u64; MAX_KEY_RATES];
            if let Some(burst) = limits.burst {
                let g = Gcra { interval: I, burst };
                spent[0] = spend_rate(&entry.tat[0], g, NOW, 1).map_err(|_| ())?;
            }
            if let Some(cap) = limits.cap {
                if let Some(old) = bound.filter(|&b| b != at) {
                    ledger::untag(&m.entry(old).held, |i| i == lane);
                }
                bound = Some(at);
                if m.update(at, lane, 1, Some(cap)) != Update::Applied {
                    give_back_rates(entry, &spent);
                    return Err(());
                }
            }
            Ok((at, spent))
        },
        |(at, spent)| {
            give_back_rates(m.entry(at), &spent);
            if limits.cap.is_some() {
                assert_eq!(m.update(at, lane, -1, None), Update::Applied);
            }
        },
    )
    .ok()
    .map(|(at, _)| at)
}

/// Runs `f` under loom with `preemptions` unless LOOM_MAX_PREEMPTIONS
/// says otherwise, and says how many executions it checked.
fn model(name: &str, preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(preemptions);
    }
    // A placement scans 16 entries a round, and a wait yields a turn at a
    // time: an execution takes more than loom's default 1,000 branches.
    builder.max_branches = builder.max_branches.max(100_000);
    let runs = std::sync::Arc::new(Counter::new(0));
    let counted = runs.clone();
    let bound = builder.preemption_bound;
    builder.check(move || {
        counted.fetch_add(1, Relaxed);
        f()
    });
    eprintln!(
        "{name}: {} executions, preemption bound {bound:?}",
        runs.load(Relaxed)
    );
}

/// (a) Two threads ask for the same new key in an empty key file (rate 0:
/// a burst of 2): it is placed in exactly one entry, inserted once, and
/// both decisions are kept on that entry: its time carries both spends.
#[test]
fn loom_model_one_new_key_placed_by_two_threads() {
    model("one new key", 4, || {
        let m = Model::new(&[]);
        let x = key(A);
        let spend = Spend {
            burst: Some(2),
            cap: None,
        };
        let threads: Vec<_> = (0..2u32)
            .map(|t| {
                let m = m.clone();
                thread::spawn(move || decide(&m, x, t + 1, t, spend))
            })
            .collect();
        let at: Vec<_> = threads.into_iter().map(|h| h.join().unwrap()).collect();
        m.assert_settled();
        let holding = m.holding(A);
        assert_eq!(holding.len(), 1, "the key in one entry: {holding:?}");
        let e = Place::Entry(holding[0]);
        assert_eq!(at, vec![Some(e), Some(e)], "both decided on its entry");
        assert_eq!(m.tat(e), NOW + 2 * I, "both spends on it");
        assert_eq!(m.tat(Place::Overflow), 0, "none on the overflow state");
        assert_eq!(m.counter(KeyCounter::Inserted), 1);
        assert_eq!(m.counter(KeyCounter::Reused), 0);
    });
}

/// (b) Key A is idle in entry 0, every other entry holds a live key: a
/// new key B can only take A's entry. One thread decides A (a burst of 1:
/// its spend leaves A limited) while another places B. A is admitted
/// once, and its spend is where A is: on A's entry (B then found none
/// and overflowed, or B moved in and A moved back), or on the overflow
/// state. An entry B holds carries none of it (its time is `NOW`: whole).
#[test]
fn loom_model_a_spend_racing_a_reuse_stays_with_its_key() {
    // A's time before: long past, or `now` itself (which the mover
    // leaves as it is, a read-modify-write of the same value).
    for before in [0, NOW] {
        spend_racing_a_reuse(before);
    }
}

fn spend_racing_a_reuse(before: u64) {
    model(&format!("spend racing a reuse ({before})"), 4, move || {
        let m = Model::full_but(&[(0, A, before)]);
        let decider = {
            let m = m.clone();
            let spend = Spend {
                burst: Some(1),
                cap: None,
            };
            thread::spawn(move || decide(&m, key(A), 1, 0, spend))
        };
        let mover = {
            let m = m.clone();
            thread::spawn(move || place(&*m, key(B), || NOW, 2, |_| true))
        };
        let a = decider
            .join()
            .unwrap()
            .expect("A admitted: nothing else spends it");
        let b = mover.join().unwrap();
        m.assert_settled();
        if let Place::Entry(e) = a {
            assert_eq!(
                m.ident(e),
                A,
                "{before}: A's spend kept on entry {e}, which holds A"
            );
        }
        assert_eq!(m.tat(a), NOW + I, "A's spend is where A is");
        let spent_on_a: u64 = m
            .holding(A)
            .into_iter()
            .map(|e| m.tat(Place::Entry(e)).saturating_sub(NOW))
            .sum::<u64>()
            + m.tat(Place::Overflow).saturating_sub(NOW);
        assert_eq!(spent_on_a, I, "A's one spend, once (B placed at {b:?})");
        for e in m.holding(B) {
            assert_eq!(m.tat(Place::Entry(e)), NOW, "B carries none of A's spend");
        }
        for e in 1..ENTRIES {
            assert_eq!(m.tat(Place::Entry(e)), LIVE, "live key {e} untouched");
        }
    });
}

/// (c) Key A is limited in entry 0 (its bucket of 1 empty), key K idle in
/// entry 1, every other entry live. One thread takes a permit of K (a cap
/// of 1) and keeps it, while another places B, whose only candidate is
/// K's entry until K's permit lands. A keeps its entry and is refused at
/// once; K's permit is counted on the entry K holds (or the overflow
/// state), an entry B holds carries no permit, and the count is the
/// records' (no drift).
#[test]
fn loom_model_limited_and_held_keys_are_never_reused() {
    model("limited and held", 3, || {
        let m = Model::full_but(&[(0, A, NOW + I), (1, K, 0)]);
        let holder = {
            let m = m.clone();
            let spend = Spend {
                burst: None,
                cap: Some(1),
            };
            thread::spawn(move || decide(&m, key(K), 1, 0, spend))
        };
        let mover = {
            let m = m.clone();
            thread::spawn(move || place(&*m, key(B), || NOW, 2, |_| true))
        };
        let k = holder
            .join()
            .unwrap()
            .expect("K's permit: nothing else holds one");
        let b = mover.join().unwrap();
        m.assert_settled();
        assert_eq!(m.ident(0), A, "the limited key keeps its entry");
        assert_eq!(m.tat(Place::Entry(0)), NOW + I);
        let again = Spend {
            burst: Some(1),
            cap: None,
        };
        assert_eq!(decide(&m, key(A), 3, 1, again), None, "A refused at once");
        if let Place::Entry(e) = k {
            assert_eq!(m.ident(e), K, "K's permit on entry {e}, which holds K");
        }
        assert_eq!(m.held(k), 1, "K's permit counted where K is");
        let lane0 = ledger::ledger_held(m.lanes[0][0].load(SeqCst));
        assert_eq!(lane0, 1, "and in its record");
        let all: u64 =
            (0..ENTRIES).map(|e| m.held(Place::Entry(e))).sum::<u64>() + m.held(Place::Overflow);
        assert_eq!(all, 1, "one permit on the host (B placed at {b:?})");
        for e in m.holding(B) {
            assert_eq!(m.held(Place::Entry(e)), 0, "B carries none of K's permit");
        }
    });
}
