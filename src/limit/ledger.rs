//! The crash-exact concurrency count: one shared word per task, and a ledger
//! per lane (a process's slot × one of its few per-thread lanes) saying what
//! that lane holds.
//!
//! The shared word is what the cap is checked against; the ledgers are the
//! truth about who holds what. A kill can land between any two instructions,
//! so the two may never be updated as two independent steps. Instead every
//! change is a small transaction that anyone can finish:
//!
//! 1. **begin** — the lane's ledger word is marked BUSY (a compare-and-swap;
//!    threads of one process sharing a lane take turns);
//! 2. **intent** — `(seq, delta)` is written to the lane's intent word;
//! 3. **land** — the shared word moves by `delta` *and* records the tag
//!    `(lane, seq)` of the op that moved it, in one compare-and-swap;
//! 4. **apply** — the ledger word takes `held + delta`, `seq`, not BUSY;
//! 5. **untag** — if the word has not moved since, its tag is cleared: the
//!    next process to move it then has nothing to look up in this lane.
//!
//! The rule that makes it exact: **before anyone overwrites a tag, the op it
//! names is applied** (the overwriter *helps*: it performs step 4 for the
//! tagged lane, a compare-and-swap keyed by `seq`). So at every instant,
//!
//! ```text
//! count(word) = Σ held(ledgers) + (delta of the tagged op, if still unapplied)
//! ```
//!
//! and for a lane whose process died, a BUSY ledger is decided by one look at
//! the word: its op landed if and only if the word's tag still names it (had
//! it landed and been overwritten, the overwriter would have applied it).
//! [`settle`] applies or retracts accordingly; [`drain`] then gives the lane's
//! holding back through the same protocol, so a reaper killed at any
//! instruction leaves work the next reaper finishes exactly.
//!
//! Sequence numbers are 24 bits. A tag can only be confused with another op
//! of the same lane 2²⁴ ops later, and only if a thread stalls between
//! helping and its own compare-and-swap while that lane performs all of them
//! and the count returns to the same value.

use std::sync::atomic::{AtomicU64, Ordering};

/// A 64-bit atomic word. The table's words are `std` atomics; the loom model
/// of this protocol (feature `loom`) plugs in loom's.
pub trait Word {
    fn load(&self, order: Ordering) -> u64;
    fn store(&self, value: u64, order: Ordering);
    fn compare_exchange(&self, old: u64, new: u64, ok: Ordering, err: Ordering)
    -> Result<u64, u64>;
    fn compare_exchange_weak(
        &self,
        old: u64,
        new: u64,
        ok: Ordering,
        err: Ordering,
    ) -> Result<u64, u64>;
}

impl Word for AtomicU64 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }
    #[inline(always)]
    fn store(&self, value: u64, order: Ordering) {
        AtomicU64::store(self, value, order)
    }
    #[inline(always)]
    fn compare_exchange(
        &self,
        old: u64,
        new: u64,
        ok: Ordering,
        err: Ordering,
    ) -> Result<u64, u64> {
        AtomicU64::compare_exchange(self, old, new, ok, err)
    }
    #[inline(always)]
    fn compare_exchange_weak(
        &self,
        old: u64,
        new: u64,
        ok: Ordering,
        err: Ordering,
    ) -> Result<u64, u64> {
        AtomicU64::compare_exchange_weak(self, old, new, ok, err)
    }
}

/// The largest count the shared word holds (and so the largest cap).
pub const MAX_COUNT: u64 = (1 << COUNT_BITS) - 1;

const COUNT_BITS: u32 = 24;
const SEQ_BITS: u32 = 24;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
/// Ledger word: held (i32) in bits 0..32, seq in 32..56, BUSY in bit 63.
const BUSY: u64 = 1 << 63;

/// One lane's two ledger words, as they sit in the table.
pub struct Lane<'a, W = AtomicU64> {
    /// The lane's id within its task (< 2¹⁶); part of every tag it writes.
    pub id: u32,
    pub ledger: &'a W,
    pub intent: &'a W,
}

impl<W> Clone for Lane<'_, W> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<W> Copy for Lane<'_, W> {}

/// What an op on a lane came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    /// The word and the ledger both moved.
    Applied,
    /// The cap refused it (or the floor of [`update_floored`]); nothing
    /// moved.
    Refused,
    /// Another thread of this process is mid-op on the lane: try another.
    Busy,
}

// ---- word and ledger packing --------------------------------------------

#[inline]
fn count(word: u64) -> u64 {
    word & MAX_COUNT
}

#[inline]
fn tag(word: u64) -> u64 {
    word >> COUNT_BITS
}

/// A tag names a lane (stored + 1, so 0 means "no tag") and a seq.
#[inline]
fn make_tag(lane: u32, seq: u64) -> u64 {
    ((lane as u64 + 1) << SEQ_BITS) | (seq & SEQ_MASK)
}

#[inline]
fn tag_lane(tag: u64) -> Option<u32> {
    u32::try_from(tag >> SEQ_BITS).ok()?.checked_sub(1)
}

#[inline]
fn held(ledger: u64) -> i32 {
    ledger as u32 as i32
}

#[inline]
fn seq(ledger: u64) -> u64 {
    (ledger >> 32) & SEQ_MASK
}

#[inline]
fn make_ledger(held: i32, seq: u64) -> u64 {
    ((seq & SEQ_MASK) << 32) | held as u32 as u64
}

#[inline]
fn make_intent(seq: u64, delta: i32) -> u64 {
    ((seq & SEQ_MASK) << 32) | delta as u32 as u64
}

/// What a ledger word says, for statistics and checks.
pub fn ledger_held(ledger: u64) -> i32 {
    held(ledger)
}

/// The count part of a shared word.
pub fn word_count(word: u64) -> u64 {
    count(word)
}

// ---- the protocol -------------------------------------------------------

/// Moves the shared `word` by `delta` on behalf of `lane`, recording it in the
/// lane's ledger. With `cap`, an increase that would take the count above it
/// is refused. A decrease is never refused; one below zero (a table someone
/// damaged) stops at zero. `resolve` maps a lane id found in the word to its
/// ledger words, or `None` if no such lane exists.
#[inline]
pub fn update<'a, W: Word + 'a>(
    word: &W,
    resolve: impl Fn(u32) -> Option<Lane<'a, W>>,
    lane: Lane<'_, W>,
    delta: i32,
    cap: Option<u64>,
) -> Update {
    apply(word, resolve, lane, delta, cap, None)
}

/// [`update`] for a give-back that the lane must hold: refused (nothing
/// moves) when it would take the lane's own holding below `floor`. The
/// check is part of the op's begin compare-and-swap, so two threads
/// sharing the lane cannot both give back its last unit: the second sees
/// the first's holding, whatever either checked before.
#[inline]
pub fn update_floored<'a, W: Word + 'a>(
    word: &W,
    resolve: impl Fn(u32) -> Option<Lane<'a, W>>,
    lane: Lane<'_, W>,
    delta: i32,
    floor: i32,
) -> Update {
    apply(word, resolve, lane, delta, None, Some(floor))
}

#[inline]
fn apply<'a, W: Word + 'a>(
    word: &W,
    resolve: impl Fn(u32) -> Option<Lane<'a, W>>,
    lane: Lane<'_, W>,
    delta: i32,
    cap: Option<u64>,
    floor: Option<i32>,
) -> Update {
    // 1. begin
    let before = lane.ledger.load(Ordering::Relaxed);
    if before & BUSY != 0 {
        return Update::Busy;
    }
    // A ledger that is not BUSY changes only through a begin: if the
    // compare-and-swap below succeeds, the lane held `held(before)` when
    // this op began, and it is the lane's only op until it is applied.
    if floor.is_some_and(|f| (held(before) as i64 + delta as i64) < f as i64) {
        return Update::Refused;
    }
    let busy = before | BUSY;
    if lane
        .ledger
        .compare_exchange(before, busy, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return Update::Busy;
    }
    let seq = (seq(before) + 1) & SEQ_MASK;
    // 2. intent (published to helpers by the Release of the landing CAS)
    lane.intent
        .store(make_intent(seq, delta), Ordering::Relaxed);
    let my_tag = make_tag(lane.id, seq);
    // 3. land
    let mut current = word.load(Ordering::Acquire);
    let landed = loop {
        let t = tag(current);
        if t != 0 && tag_lane(t) != Some(lane.id) {
            // Ops of this lane before ours are applied: we began on a lane
            // that was not BUSY. Another lane's may not be: finish it first.
            help(t, &resolve);
        }
        let c = count(current) as i64 + delta as i64;
        if delta > 0 && (c as u64 > cap.unwrap_or(MAX_COUNT) || c as u64 > MAX_COUNT) {
            // Retract: the word never named this op, so nobody else can have
            // touched the ledger since we made it BUSY.
            lane.ledger.store(before, Ordering::Release);
            return Update::Refused;
        }
        let next = c.max(0) as u64 | (my_tag << COUNT_BITS);
        match word.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break next,
            Err(actual) => current = actual,
        }
    };
    // 4. apply (a helper may have done it already: then this fails, harmlessly)
    let applied = make_ledger(held(before).wrapping_add(delta), seq);
    let _ = lane
        .ledger
        .compare_exchange(busy, applied, Ordering::Release, Ordering::Relaxed);
    // 5. untag, if nobody has landed since: the op is applied, so the word
    // need not name it, and the next process to move the word has nothing
    // to look up in this lane (whose cache line would then travel to it and
    // back). If the word moved meanwhile, its new tag replaced ours anyway.
    let _ = word.compare_exchange(
        landed,
        landed & MAX_COUNT,
        Ordering::Release,
        Ordering::Relaxed,
    );
    Update::Applied
}

/// Applies the op that `tag` names if it is still pending. Safe to call with
/// any tag, however old: it only ever applies an op whose landing was seen.
#[inline]
fn help<'a, W: Word + 'a>(tag: u64, resolve: &impl Fn(u32) -> Option<Lane<'a, W>>) {
    let Some(lane) = tag_lane(tag).and_then(resolve) else {
        return; // a tag no lane of this table can have written: damage, ignore
    };
    let ledger = lane.ledger.load(Ordering::Acquire);
    let tag_seq = tag & SEQ_MASK;
    if ledger & BUSY == 0 || (seq(ledger) + 1) & SEQ_MASK != tag_seq {
        return; // applied already (or the lane has moved past it)
    }
    let intent = lane.intent.load(Ordering::Acquire);
    if (intent >> 32) & SEQ_MASK != tag_seq {
        return; // inconsistent words: only a damaged table gets here
    }
    let applied = make_ledger(held(ledger).wrapping_add(intent as u32 as i32), tag_seq);
    let _ = lane
        .ledger
        .compare_exchange(ledger, applied, Ordering::AcqRel, Ordering::Relaxed);
}

/// Finishes or undoes the op a dead lane was in the middle of: applied if it
/// landed, retracted if not. The caller guarantees nothing runs on the lane
/// any more (its process is dead and the caller holds its slot).
pub fn settle<'a, W: Word + 'a>(
    word: &W,
    resolve: impl Fn(u32) -> Option<Lane<'a, W>>,
    lane: Lane<'_, W>,
) {
    let ledger = lane.ledger.load(Ordering::Acquire);
    if ledger & BUSY == 0 {
        return;
    }
    let pending = make_tag(lane.id, seq(ledger) + 1);
    if tag(word.load(Ordering::Acquire)) == pending {
        help(pending, &resolve);
    } else {
        // Never landed: a landed op whose tag was overwritten has been
        // applied, and then this compare-and-swap fails.
        let _ = lane.ledger.compare_exchange(
            ledger,
            ledger & !BUSY,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }
}

/// Gives back everything a dead lane holds. Returns the permits returned (the
/// lane's net holding, negative for a lane that released permits other lanes
/// of its process acquired). `record(seq, held)` is called before the shared
/// word moves, once per distinct `seq`, so a count kept by it stays exact
/// when a reaper dies here and another repeats the drain.
pub fn drain<'a, W: Word + 'a>(
    word: &W,
    resolve: impl Fn(u32) -> Option<Lane<'a, W>> + Copy,
    lane: Lane<'_, W>,
    record: impl FnOnce(u64, i32),
) -> i32 {
    settle(word, resolve, lane);
    let ledger = lane.ledger.load(Ordering::Acquire);
    let h = held(ledger);
    if h == 0 || ledger & BUSY != 0 {
        return 0;
    }
    record((seq(ledger) + 1) & SEQ_MASK, h);
    match update(word, resolve, lane, h.wrapping_neg(), None) {
        Update::Applied => h,
        // Not reachable on a settled dead lane; report nothing returned.
        Update::Refused | Update::Busy => 0,
    }
}

/// Clears the word's tag if it names a lane `names` picks: lanes whose ops
/// are all applied (a dead process's, drained), whose ids may next belong
/// to other ledger words (a pooled lane set given back). Clearing the tag
/// of an applied op is the protocol's own step 5.
pub fn untag<W: Word>(word: &W, names: impl Fn(u32) -> bool) {
    let mut current = word.load(Ordering::Acquire);
    while let Some(id) = tag_lane(tag(current))
        && names(id)
    {
        match word.compare_exchange(current, count(current), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(actual) => current = actual,
        }
    }
}

/// The held count of a lane including its op in flight when that op has
/// landed — what the lane contributes to the shared word right now. The
/// tests' and the model's invariant; the table's readers load the words
/// themselves (a view's mapping is read-only) and use [`contribution_of`].
#[cfg(test)]
pub fn contribution<W: Word>(word: u64, lane: Lane<'_, W>) -> i64 {
    let ledger = lane.ledger.load(Ordering::Acquire);
    contribution_of(word, lane.id, ledger, || {
        lane.intent.load(Ordering::Acquire)
    })
}

/// [`contribution`] from words read already: the shared word, and lane `id`'s
/// ledger word (its intent word is read only if it matters).
pub fn contribution_of(word: u64, id: u32, ledger: u64, intent: impl FnOnce() -> u64) -> i64 {
    let mut total = held(ledger) as i64;
    if ledger & BUSY != 0 && tag(word) == make_tag(id, seq(ledger) + 1) {
        let intent = intent();
        if (intent >> 32) & SEQ_MASK == (seq(ledger) + 1) & SEQ_MASK {
            total += intent as u32 as i32 as i64;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Lanes(Vec<[AtomicU64; 2]>);

    impl Lanes {
        fn new(n: usize) -> Self {
            Self(
                (0..n)
                    .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                    .collect(),
            )
        }
        fn lane(&self, id: u32) -> Option<Lane<'_>> {
            self.0
                .get(id as usize)
                .map(|[ledger, intent]| Lane { id, ledger, intent })
        }
        fn sum(&self, word: &AtomicU64) -> i64 {
            let w = word.load(Ordering::Relaxed);
            (0..self.0.len() as u32)
                .map(|i| contribution(w, self.lane(i).unwrap()))
                .sum()
        }
    }

    #[test]
    fn take_and_give_keep_the_word_equal_to_the_ledgers() {
        let lanes = Lanes::new(3);
        let word = AtomicU64::new(0);
        let r = |id| lanes.lane(id);
        let l = |id| lanes.lane(id).unwrap();
        assert_eq!(update(&word, r, l(0), 2, Some(3)), Update::Applied);
        assert_eq!(update(&word, r, l(1), 2, Some(3)), Update::Refused);
        assert_eq!(update(&word, r, l(1), 1, Some(3)), Update::Applied);
        assert_eq!(word_count(word.load(Ordering::Relaxed)), 3);
        assert_eq!(update(&word, r, l(2), -2, None), Update::Applied);
        assert_eq!(word_count(word.load(Ordering::Relaxed)), 1);
        assert_eq!(lanes.sum(&word), 1);
        assert_eq!(ledger_held(l(2).ledger.load(Ordering::Relaxed)), -2);
    }

    #[test]
    fn a_floored_give_back_below_the_floor_is_refused_and_moves_nothing() {
        let lanes = Lanes::new(2);
        let word = AtomicU64::new(0);
        let r = |id| lanes.lane(id);
        let l = |id| lanes.lane(id).unwrap();
        assert_eq!(update(&word, r, l(0), 1, None), Update::Applied);
        assert_eq!(update(&word, r, l(1), 1, None), Update::Applied);
        assert_eq!(update_floored(&word, r, l(0), -1, 0), Update::Applied);
        // Lane 0 holds nothing now: the word's other unit is lane 1's.
        assert_eq!(update_floored(&word, r, l(0), -1, 0), Update::Refused);
        assert_eq!(word_count(word.load(Ordering::Relaxed)), 1);
        assert_eq!(ledger_held(l(0).ledger.load(Ordering::Relaxed)), 0);
        assert_eq!(lanes.sum(&word), 1);
        // Two threads sharing a lane that holds one: one gives it back.
        let barrier = std::sync::Barrier::new(2);
        for round in 0..500 {
            assert_eq!(update(&word, r, l(0), 1, None), Update::Applied);
            let applied = std::thread::scope(|s| {
                let give = || {
                    barrier.wait();
                    loop {
                        match update_floored(&word, r, l(0), -1, 0) {
                            Update::Busy => std::hint::spin_loop(),
                            done => return done == Update::Applied,
                        }
                    }
                };
                let a = s.spawn(give);
                let b = s.spawn(give);
                a.join().unwrap() as u32 + b.join().unwrap() as u32
            });
            assert_eq!(applied, 1, "round {round}");
            assert_eq!(ledger_held(l(0).ledger.load(Ordering::Relaxed)), 0);
            assert_eq!(word_count(word.load(Ordering::Relaxed)), 1);
        }
    }

    /// Runs the steps of an op by hand up to `stop`, as a process killed
    /// there would leave them, then settles and drains the lane as a reaper.
    #[test]
    fn a_kill_at_every_step_is_settled_exactly() {
        for stop in 0..4 {
            for delta in [3, -1] {
                let lanes = Lanes::new(2);
                let word = AtomicU64::new(0);
                let r = |id| lanes.lane(id);
                // Lane 1 (a live process) holds 5.
                assert_eq!(
                    update(&word, r, lanes.lane(1).unwrap(), 5, None),
                    Update::Applied
                );
                // Lane 0 held 2 before the kill.
                let dead = lanes.lane(0).unwrap();
                assert_eq!(update(&word, r, dead, 2, None), Update::Applied);
                let before = dead.ledger.load(Ordering::Relaxed);
                let s = seq(before) + 1;
                if stop >= 1 {
                    dead.ledger.store(before | BUSY, Ordering::Relaxed);
                }
                if stop >= 2 {
                    dead.intent.store(make_intent(s, delta), Ordering::Relaxed);
                }
                if stop >= 3 {
                    let w = word.load(Ordering::Relaxed);
                    let c = (count(w) as i64 + delta as i64) as u64;
                    word.store(c | (make_tag(0, s) << COUNT_BITS), Ordering::Relaxed);
                }
                assert_eq!(lanes.sum(&word), count(word.load(Ordering::Relaxed)) as i64);
                drain(&word, r, dead, |_, _| {});
                assert_eq!(word_count(word.load(Ordering::Relaxed)), 5, "stop {stop}");
                assert_eq!(lanes.sum(&word), 5);
            }
        }
    }

    #[test]
    fn a_later_op_helps_a_landed_op_of_a_dead_lane() {
        let lanes = Lanes::new(2);
        let word = AtomicU64::new(0);
        let r = |id| lanes.lane(id);
        let dead = lanes.lane(0).unwrap();
        // Dead lane: landed +4 but never applied.
        dead.ledger.store(BUSY, Ordering::Relaxed);
        dead.intent.store(make_intent(1, 4), Ordering::Relaxed);
        word.store(4 | (make_tag(0, 1) << COUNT_BITS), Ordering::Relaxed);
        assert_eq!(
            update(&word, r, lanes.lane(1).unwrap(), 1, Some(10)),
            Update::Applied
        );
        assert_eq!(ledger_held(dead.ledger.load(Ordering::Relaxed)), 4);
        let mut recorded = Vec::new();
        assert_eq!(drain(&word, r, dead, |s, h| recorded.push((s, h))), 4);
        assert_eq!(recorded, vec![(2, 4)]);
        assert_eq!(word_count(word.load(Ordering::Relaxed)), 1);
    }

    #[test]
    fn hostile_tags_and_counts_never_panic() {
        let lanes = Lanes::new(1);
        let r = |id| lanes.lane(id);
        for raw in [u64::MAX, MAX_COUNT, 1 << 63, 0xdead_beef_dead_beef] {
            let word = AtomicU64::new(raw);
            lanes.0[0][0].store(raw, Ordering::Relaxed);
            lanes.0[0][1].store(raw, Ordering::Relaxed);
            let lane = lanes.lane(0).unwrap();
            let _ = update(&word, r, lane, 1, Some(5));
            let _ = update(&word, r, lane, -1, None);
            let _ = drain(&word, r, lane, |_, _| {});
            let _ = contribution(word.load(Ordering::Relaxed), lane);
        }
    }

    #[test]
    fn threads_never_exceed_the_cap_and_end_exact() {
        let lanes = Lanes::new(4);
        let word = AtomicU64::new(0);
        let max = AtomicU64::new(0);
        std::thread::scope(|s| {
            for id in 0..4u32 {
                let (lanes, word, max) = (&lanes, &word, &max);
                s.spawn(move || {
                    let r = |id| lanes.lane(id);
                    let lane = lanes.lane(id).unwrap();
                    for _ in 0..20_000 {
                        if update(word, r, lane, 1, Some(3)) == Update::Applied {
                            max.fetch_max(count(word.load(Ordering::Relaxed)), Ordering::Relaxed);
                            assert_eq!(update(word, r, lane, -1, None), Update::Applied);
                        }
                    }
                });
            }
        });
        assert!(max.load(Ordering::Relaxed) <= 3);
        assert_eq!(word_count(word.load(Ordering::Relaxed)), 0);
        assert_eq!(lanes.sum(&word), 0);
    }
}

/// A loom model of the protocol: every interleaving (within a preemption
/// bound) and every value the C11 memory model lets a load return, on loom's
/// atomics plugged in through [`Word`]. Run with `scripts/loom.sh`, i.e.
/// `cargo test --release --no-default-features --features loom --lib loom_model`.
/// `LOOM_MAX_PREEMPTIONS=n` deepens the bound of every model.
///
/// A kill cannot be modelled by stopping a loom thread, so a dead lane is
/// left by hand, before the threads start, in each state a kill can leave it
/// in (as `tests::a_kill_at_every_step_is_settled_exactly` does); a reaper
/// thread then settles and drains it with the real [`drain`] while live
/// threads run the real [`update`] and may help it. A kill of the reaper in
/// its drain is one of the same states, since drain moves the word through
/// [`update`].
#[cfg(all(test, feature = "loom"))]
#[path = "ledger_loom.rs"]
mod loom_model;
