//! A key's global rate on one host: three words per key in the key file
//! (`format::GlobalWords`), shared by the host's processes.
//!
//! - `now`: the key's state in the current slice — the chunk held (granted
//!   by the store, or the fallback's share), what the host admitted on its
//!   own, how much of that the store was told, whether the store said the
//!   slice is spent, whether the fallback gave its share.
//! - `next`: a chunk asked ahead for the next slice; the first request of
//!   that slice moves it into `now`.
//! - `seen`: requests asked of the key in the slice, whether it pulled, and
//!   whether it was hot in the slice before.
//!
//! Each word carries the slice it is for (24 bits) and a tag of the key (so
//! an entry given to another key reads as empty). A word of another slice
//! or key is the empty state of this one; only compare-and-swap writes it.
//!
//! **The rule.** A key that is not hot on the host (it neither pulled nor
//! asked past its allowance in this slice or the last) is admitted up to
//! `local` a slice on the host's own. Past that, it spends chunks the store
//! granted; the store counts what the host admitted on its own before it
//! grants (the charge), so once a key is hot on every host that asks for
//! it, its slice is exact. A host that loses a grant (a kill between the
//! store's answer and the deposit, a grant racing a slice's roll) admits
//! less, never more.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

use super::limits::{FALLBACK_DENY, FALLBACK_LOCAL, MAX_LOCAL, Rules};
use crate::format::GlobalWords;

/// Bits of a slice id a word keeps.
const SLICE_BITS: u32 = 24;
const SLICE_MASK: u64 = (1 << SLICE_BITS) - 1;
/// The most a word holds of a key's slice: a larger chunk is asked again.
pub(crate) const MAX_HELD: u64 = 0xffff;

/// A key's tag in its words (12 bits of its identity).
pub(crate) fn tag_of(ident: u64) -> u64 {
    (ident >> 40) & 0xfff
}

/// The global rate of a key's rules, if it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GlobalRule {
    /// Permits of a slice, fleet-wide.
    pub permits: u64,
    pub local: u64,
    pub slice_ms: u64,
    pub fallback: u64,
}

impl GlobalRule {
    #[inline(always)]
    pub(crate) fn of(rules: &Rules) -> Option<Self> {
        let permits = rules.global & 0xffff_ffff;
        let slice_ms = rules.global_ms & 0xffff_ffff;
        (permits != 0 && slice_ms != 0).then_some(Self {
            permits,
            local: (rules.global >> 32) & 0xff,
            slice_ms,
            fallback: (rules.global >> 40) & 3,
        })
    }

    /// The rule with its allowance in force among `hosts` (the store's
    /// census; 0: unknown): the configured one, or half the slice over the
    /// hosts if more (at most [`MAX_LOCAL`]) — a key a few hosts share is
    /// not kept waiting for the store at its second request of a slice,
    /// and its hosts' allowances together pass half its slice at most.
    pub(crate) fn among(mut self, hosts: u64) -> Self {
        if hosts > 0 {
            let share = self.permits / (2 * hosts);
            self.local = self.local.max(share.min(MAX_LOCAL as u64));
        }
        self
    }

    /// What the host admits of the key in a slice while the store fails:
    /// `None` for the key's local limits alone.
    pub(crate) fn fallback_share(&self, hosts: u64) -> Option<u64> {
        match self.fallback {
            FALLBACK_LOCAL => None,
            FALLBACK_DENY => Some(0),
            _ => Some((self.permits / hosts.max(1)).max(self.local)),
        }
    }

    /// The chunk to ask for the rest of a slice `elapsed_ms` in, having
    /// been asked `asked` in it, for a request of `n`: twice the rate so far
    /// projected over what is left, at most the slice. A key asked a few
    /// times a slice varies by as much again; asking over costs nothing
    /// the key's other hosts need, since the store divides a key asked for
    /// by many hosts among them.
    pub(crate) fn want(&self, asked: u64, elapsed_ms: u64, n: u64) -> u64 {
        let rest = self.slice_ms.saturating_sub(elapsed_ms);
        // An early rate is a guess from few requests: judged over at least
        // an eighth of the slice.
        let seen = elapsed_ms.max(self.slice_ms / 8).max(1);
        let projected = (asked * rest).div_ceil(seen);
        (2 * projected + n).clamp(n, self.permits.min(MAX_HELD))
    }

    /// The chunk to ask ahead for the next slice, having been asked `asked`
    /// in this one by `elapsed_ms`: twice the rate, and two.
    pub(crate) fn want_ahead(&self, asked: u64, elapsed_ms: u64) -> u64 {
        let projected = (asked * self.slice_ms).div_ceil(elapsed_ms.max(1));
        (2 * projected + 2).clamp(1, self.permits.min(MAX_HELD))
    }
}

/// `now`: held 16 | local 5 | charged 5 | exhausted | fallback | slice 24 |
/// tag 12.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Now {
    pub tag: u64,
    pub slice: u64,
    pub held: u64,
    pub local: u64,
    pub charged: u64,
    pub exhausted: bool,
    pub fallback: bool,
}

impl Now {
    fn pack(&self) -> u64 {
        self.held
            | self.local << 16
            | self.charged << 21
            | (self.exhausted as u64) << 26
            | (self.fallback as u64) << 27
            | (self.slice & SLICE_MASK) << 28
            | self.tag << 52
    }

    pub(crate) fn unpack(w: u64) -> Self {
        Self {
            held: w & 0xffff,
            local: (w >> 16) & 0x1f,
            charged: (w >> 21) & 0x1f,
            exhausted: w >> 26 & 1 != 0,
            fallback: w >> 27 & 1 != 0,
            slice: (w >> 28) & SLICE_MASK,
            tag: w >> 52,
        }
    }

    fn is(&self, tag: u64, slice: u64) -> bool {
        self.tag == tag && self.slice == slice & SLICE_MASK
    }
}

/// `next`: held 16 | exhausted (bit 26) | slice 24 | tag 12, as `now`.
fn next_word(tag: u64, slice: u64, held: u64, exhausted: bool) -> u64 {
    Now {
        tag,
        slice,
        held,
        exhausted,
        ..Now::default()
    }
    .pack()
}

/// Slices a key stays hot on a host after the last one it was hot in: a
/// key hot on many hosts, each asking a few a slice, is no host's
/// allowance each time one of them saw it less than twice.
pub(crate) const HOT_SLICES: u64 = 8;

/// `seen`: asked 16 | pulled | waits for the store | slices still hot 4
/// (bits 18..22) | slice 24 | tag 12.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    pub tag: u64,
    pub slice: u64,
    pub asked: u64,
    pub pulled: bool,
    /// A request needed the store since the host's last call to it.
    pub wants: bool,
    /// Slices the key is still hot in, from earlier ones (0: it is not).
    pub hot_for: u64,
}

impl Seen {
    fn pack(&self) -> u64 {
        self.asked.min(0xffff)
            | (self.pulled as u64) << 16
            | (self.wants as u64) << 17
            | self.hot_for.min(15) << 18
            | (self.slice & SLICE_MASK) << 28
            | self.tag << 52
    }

    pub(crate) fn unpack(w: u64) -> Self {
        Self {
            asked: w & 0xffff,
            pulled: w >> 16 & 1 != 0,
            wants: w >> 17 & 1 != 0,
            hot_for: (w >> 18) & 0xf,
            slice: (w >> 28) & SLICE_MASK,
            tag: w >> 52,
        }
    }

    fn is(&self, tag: u64, slice: u64) -> bool {
        self.tag == tag && self.slice == slice & SLICE_MASK
    }

    /// Whether the key is hot on the host: it pulls, or it was asked past
    /// its allowance.
    pub(crate) fn hot(&self, rule: &GlobalRule) -> bool {
        self.pulled || self.asked > rule.local
    }

    /// Of the same key, the slices it is still hot in from this word's on,
    /// `slice` (a later one) included: [`HOT_SLICES`] after a hot one.
    pub(crate) fn hot_for_in(&self, rule: &GlobalRule, slice: u64) -> u64 {
        let gap = slice.wrapping_sub(self.slice) & SLICE_MASK;
        if self.hot(rule) {
            (HOT_SLICES + 1).saturating_sub(gap)
        } else {
            self.hot_for.saturating_sub(gap)
        }
    }
}

/// What a global rate says to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Admit(Paid),
    /// The store said the slice is spent (or the fallback's share is).
    Refuse,
    /// Ask the store for `want`, telling it of `charge` admitted on the
    /// host's own.
    Pull {
        want: u64,
        charge: u64,
    },
}

/// How a request was paid, to give it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Paid {
    Held(u64),
    Local(u64),
}

fn cas(word: &AtomicU64, old: u64, new: u64) -> Result<u64, u64> {
    word.compare_exchange_weak(old, new, AcqRel, Acquire)
}

/// Counts `n` asked of the key in `slice` (rolling `seen` into it) and
/// returns what the host saw.
pub(crate) fn note(w: &GlobalWords, tag: u64, slice: u64, rule: &GlobalRule, n: u64) -> Seen {
    let mut old = w.seen.load(Acquire);
    loop {
        let s = Seen::unpack(old);
        let new = if s.is(tag, slice) {
            Seen {
                asked: (s.asked + n).min(0xffff),
                ..s
            }
        } else {
            let hot_for = if s.tag == tag {
                s.hot_for_in(rule, slice)
            } else {
                0
            };
            Seen {
                tag,
                slice: slice & SLICE_MASK,
                asked: n,
                pulled: false,
                wants: false,
                hot_for,
            }
        };
        match cas(&w.seen, old, new.pack()) {
            Ok(_) => return new,
            Err(actual) => old = actual,
        }
    }
}

/// Marks the key as pulling in `slice` (`pulled`), or as waiting for the
/// store (`!pulled`).
fn mark(w: &GlobalWords, tag: u64, slice: u64, pulled: bool) {
    let mut old = w.seen.load(Acquire);
    loop {
        let s = Seen::unpack(old);
        let new = Seen {
            pulled: s.pulled || pulled,
            wants: !pulled,
            ..s
        };
        if !s.is(tag, slice) || new == s {
            return;
        }
        match cas(&w.seen, old, new.pack()) {
            Ok(_) => return,
            Err(actual) => old = actual,
        }
    }
}

/// `now` in `slice`: the word as it is, or rolled into the slice with what
/// `next` held for it. `next` is taken (zeroed) before `now` is written, so
/// a chunk moves once; a roller killed in between loses it.
pub(crate) fn roll(w: &GlobalWords, tag: u64, slice: u64, id: u64) -> Now {
    let mut carry = (0, false);
    loop {
        let old = w.now.load(Acquire);
        let now = Now::unpack(old);
        if now.is(tag, slice) {
            if carry.0 == 0 && !carry.1 {
                return now;
            }
            let new = Now {
                held: (now.held + carry.0).min(MAX_HELD),
                exhausted: now.exhausted || carry.1,
                ..now
            };
            if cas(&w.now, old, new.pack()).is_ok() {
                return new;
            }
            continue;
        }
        let next = w.next.load(Acquire);
        let n = Now::unpack(next);
        if n.is(tag, slice) && next != 0 {
            if cas(&w.next, next, 0).is_err() {
                continue;
            }
            carry = ((carry.0 + n.held).min(MAX_HELD), carry.1 || n.exhausted);
        }
        let fresh = Now {
            tag,
            slice: slice & SLICE_MASK,
            held: carry.0,
            exhausted: carry.1,
            ..Now::default()
        };
        if cas(&w.now, old, fresh.pack()).is_ok() {
            w.id.store(id, Relaxed);
            return fresh;
        }
    }
}

/// Decides `n` of a key with global rule `rule` in `slice`, `elapsed_ms`
/// into it (the request counted by [`note`]): from its chunk, on the host's
/// own, or not without the store.
pub(crate) fn decide(
    w: &GlobalWords,
    (tag, id): (u64, u64),
    slice: u64,
    rule: &GlobalRule,
    n: u64,
    elapsed_ms: u64,
) -> Step {
    let read = Seen::unpack(w.seen.load(Acquire));
    let seen = if read.is(tag, slice) {
        read
    } else {
        note(w, tag, slice, rule, 0)
    };
    let mut now = roll(w, tag, slice, id);
    loop {
        let (new, step) = if now.held >= n {
            (
                Now {
                    held: now.held - n,
                    ..now
                },
                Step::Admit(Paid::Held(n)),
            )
        } else if now.exhausted {
            return Step::Refuse;
        } else if seen.hot_for == 0 && !seen.pulled && now.local + n <= rule.local {
            (
                Now {
                    local: now.local + n,
                    ..now
                },
                Step::Admit(Paid::Local(n)),
            )
        } else {
            return Step::Pull {
                want: rule.want(seen.asked, elapsed_ms, n),
                charge: now.local - now.charged.min(now.local),
            };
        };
        match cas(&w.now, now.pack(), new.pack()) {
            Ok(_) => return step,
            Err(actual) => {
                now = Now::unpack(actual);
                if !now.is(tag, slice) {
                    now = roll(w, tag, slice, id);
                }
            }
        }
    }
}

/// Puts a grant of the current `slice` into the key's chunk: `granted`,
/// the store told of `charge` more admitted on the host's own, `spent` when
/// the store has none left.
pub(crate) fn deposit(
    w: &GlobalWords,
    (tag, id): (u64, u64),
    slice: u64,
    granted: u64,
    charge: u64,
    spent: bool,
) {
    mark(w, tag, slice, true);
    let mut now = roll(w, tag, slice, id);
    loop {
        let new = Now {
            held: (now.held + granted).min(MAX_HELD),
            charged: (now.charged + charge).min(0x1f),
            exhausted: now.exhausted || spent,
            ..now
        };
        match cas(&w.now, now.pack(), new.pack()) {
            Ok(_) => return,
            Err(actual) => {
                now = Now::unpack(actual);
                if !now.is(tag, slice) {
                    return; // the slice ended meanwhile: its grant is spent
                }
            }
        }
    }
}

/// Whether the key pulled from the store in `slice` on this host (its
/// fallback share would come on top of grants the host does not count).
pub(crate) fn pulled_in(w: &GlobalWords, tag: u64, slice: u64) -> bool {
    let s = Seen::unpack(w.seen.load(Acquire));
    s.is(tag, slice) && s.pulled
}

/// Marks the key as waiting for the host's next call to the store.
pub(crate) fn wait_for_store(w: &GlobalWords, tag: u64, slice: u64) {
    mark(w, tag, slice, false);
}

/// Puts a grant asked ahead for `slice` (the next one) into `next`, or into
/// `now` if the slice began meanwhile.
pub(crate) fn deposit_ahead(w: &GlobalWords, tag: u64, slice: u64, granted: u64, spent: bool) {
    loop {
        let now = Now::unpack(w.now.load(Acquire));
        if now.is(tag, slice) {
            return deposit(w, (tag, w.id.load(Relaxed)), slice, granted, 0, spent);
        }
        let old = w.next.load(Acquire);
        let n = Now::unpack(old);
        // A chunk of the slice before (the current one, not begun on this
        // key yet) moves into `now` first, not overwritten.
        if n.is(tag, slice.wrapping_sub(1)) && n.held > 0 {
            roll(w, tag, slice.wrapping_sub(1), w.id.load(Relaxed));
            continue;
        }
        let new = if n.is(tag, slice) && old != 0 {
            next_word(
                tag,
                slice,
                (n.held + granted).min(MAX_HELD),
                n.exhausted || spent,
            )
        } else {
            next_word(tag, slice, granted.min(MAX_HELD), spent)
        };
        if cas(&w.next, old, new).is_err() {
            continue;
        }
        // A roll between our read of `now` and the write did not see it.
        if Now::unpack(w.now.load(Acquire)).is(tag, slice) {
            roll(w, tag, slice, w.id.load(Relaxed));
        }
        return;
    }
}

/// The fallback's share of the slice, given once per slice while the store
/// fails: what the host admitted on its own counts in it.
pub(crate) fn fall_back(w: &GlobalWords, (tag, id): (u64, u64), slice: u64, share: u64) {
    let mut now = roll(w, tag, slice, id);
    while !now.fallback {
        let new = Now {
            held: (now.held + share.saturating_sub(now.local)).min(MAX_HELD),
            fallback: true,
            exhausted: share == 0,
            ..now
        };
        match cas(&w.now, now.pack(), new.pack()) {
            Ok(_) => return,
            Err(actual) => {
                now = Now::unpack(actual);
                if !now.is(tag, slice) {
                    now = roll(w, tag, slice, id);
                }
            }
        }
    }
}

/// Gives back what [`decide`] took (the task's own limits refused), while
/// its slice lasts.
pub(crate) fn give_back(w: &GlobalWords, tag: u64, slice: u64, paid: Paid) {
    let mut old = w.now.load(Acquire);
    loop {
        let now = Now::unpack(old);
        if !now.is(tag, slice) {
            return;
        }
        let new = match paid {
            Paid::Held(n) => Now {
                held: (now.held + n).min(MAX_HELD),
                ..now
            },
            Paid::Local(n) => Now {
                local: now.local.saturating_sub(n),
                ..now
            },
        };
        match cas(&w.now, old, new.pack()) {
            Ok(_) => return,
            Err(actual) => old = actual,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request: counted, then decided.
    fn ask(
        w: &GlobalWords,
        key: (u64, u64),
        slice: u64,
        rule: &GlobalRule,
        n: u64,
        at: u64,
    ) -> Step {
        note(w, key.0, slice, rule, n);
        decide(w, key, slice, rule, n, at)
    }

    fn words() -> GlobalWords {
        // SAFETY: atomics are valid zeroed.
        unsafe { std::mem::zeroed() }
    }

    const RULE: GlobalRule = GlobalRule {
        permits: 10,
        local: 1,
        slice_ms: 1000,
        fallback: 0,
    };
    const KEY: (u64, u64) = (0x5a5, 77);

    #[test]
    fn words_round_trip_their_fields() {
        let now = Now {
            tag: 0xfff,
            slice: SLICE_MASK,
            held: MAX_HELD,
            local: 31,
            charged: 31,
            exhausted: true,
            fallback: true,
        };
        assert_eq!(Now::unpack(now.pack()), now);
        let seen = Seen {
            tag: 1,
            slice: 5,
            asked: 0xffff,
            pulled: true,
            wants: true,
            hot_for: 15,
        };
        assert_eq!(Seen::unpack(seen.pack()), seen);
    }

    #[test]
    fn a_cold_key_passes_its_allowance_then_pulls_telling_the_store_of_it() {
        let w = words();
        assert_eq!(ask(&w, KEY, 100, &RULE, 1, 10), Step::Admit(Paid::Local(1)));
        let Step::Pull { want, charge } = ask(&w, KEY, 100, &RULE, 1, 10) else {
            panic!("past the allowance a key asks the store");
        };
        assert_eq!(charge, 1, "the allowance spent is charged before a grant");
        assert!((1..=10).contains(&want));
        deposit(&w, KEY, 100, 3, charge, false);
        for _ in 0..3 {
            assert_eq!(ask(&w, KEY, 100, &RULE, 1, 20), Step::Admit(Paid::Held(1)));
        }
        assert!(
            matches!(
                ask(&w, KEY, 100, &RULE, 1, 20),
                Step::Pull { charge: 0, .. }
            ),
            "charged once"
        );
        deposit(&w, KEY, 100, 0, 0, true);
        assert_eq!(ask(&w, KEY, 100, &RULE, 1, 20), Step::Refuse);
        // The next slice: hot before, so no allowance.
        assert!(matches!(
            ask(&w, KEY, 101, &RULE, 1, 0),
            Step::Pull { charge: 0, .. }
        ));
        // Hot for HOT_SLICES after the last hot one, then the allowance.
        assert!(matches!(
            ask(&w, KEY, 100 + HOT_SLICES, &RULE, 1, 0),
            Step::Pull { .. }
        ));
        assert_eq!(
            ask(&w, KEY, 101 + HOT_SLICES, &RULE, 1, 0),
            Step::Admit(Paid::Local(1))
        );
    }

    #[test]
    fn a_chunk_asked_ahead_is_spent_in_its_slice_once() {
        let w = words();
        ask(&w, KEY, 100, &RULE, 1, 900);
        deposit_ahead(&w, KEY.0, 101, 4, false);
        assert_eq!(
            Now::unpack(w.now.load(Relaxed)).held,
            0,
            "not in this slice"
        );
        for _ in 0..4 {
            assert_eq!(ask(&w, KEY, 101, &RULE, 1, 0), Step::Admit(Paid::Held(1)));
        }
        assert_eq!(
            ask(&w, KEY, 101, &RULE, 1, 0),
            Step::Admit(Paid::Local(1)),
            "not hot before: its allowance"
        );
        assert!(matches!(ask(&w, KEY, 101, &RULE, 1, 0), Step::Pull { .. }));
        assert_eq!(w.next.load(Relaxed), 0, "taken when the slice began");
        // Asked ahead after the slice began: straight into `now`.
        deposit_ahead(&w, KEY.0, 101, 2, true);
        assert_eq!(ask(&w, KEY, 101, &RULE, 1, 0), Step::Admit(Paid::Held(1)));
        ask(&w, KEY, 101, &RULE, 1, 0);
        assert_eq!(ask(&w, KEY, 101, &RULE, 1, 0), Step::Refuse);
    }

    #[test]
    fn a_chunk_asked_ahead_of_a_slice_not_begun_on_the_key_is_kept() {
        let w = words();
        ask(&w, KEY, 100, &RULE, 1, 900);
        deposit_ahead(&w, KEY.0, 101, 1, false);
        // The key's first request of 101 comes after the next call, which
        // asked ahead for 102.
        deposit_ahead(&w, KEY.0, 102, 3, false);
        assert_eq!(ask(&w, KEY, 101, &RULE, 1, 950), Step::Admit(Paid::Held(1)));
        for _ in 0..3 {
            assert_eq!(ask(&w, KEY, 102, &RULE, 1, 0), Step::Admit(Paid::Held(1)));
        }
    }

    #[test]
    fn another_keys_words_read_as_empty() {
        let w = words();
        deposit(&w, KEY, 100, 5, 0, false);
        let other = (0x123, 9);
        assert_eq!(
            ask(&w, other, 100, &RULE, 1, 0),
            Step::Admit(Paid::Local(1)),
            "a key given the entry of another does not spend its chunk"
        );
        assert_eq!(w.id.load(Relaxed), 9);
    }

    #[test]
    fn the_fallback_gives_its_share_once_a_slice_less_the_allowance_spent() {
        let w = words();
        ask(&w, KEY, 100, &RULE, 1, 0);
        assert_eq!(RULE.fallback_share(4), Some(2));
        assert_eq!(RULE.fallback_share(100), Some(1), "at least the allowance");
        fall_back(&w, KEY, 100, 2);
        fall_back(&w, KEY, 100, 2);
        assert_eq!(ask(&w, KEY, 100, &RULE, 1, 0), Step::Admit(Paid::Held(1)));
        assert!(matches!(ask(&w, KEY, 100, &RULE, 1, 0), Step::Pull { .. }));
    }

    #[test]
    fn a_give_back_returns_to_what_paid_within_the_slice_only() {
        let w = words();
        deposit(&w, KEY, 100, 2, 0, false);
        let Step::Admit(paid) = ask(&w, KEY, 100, &RULE, 2, 0) else {
            panic!()
        };
        give_back(&w, KEY.0, 100, paid);
        assert_eq!(Now::unpack(w.now.load(Relaxed)).held, 2);
        ask(&w, KEY, 101, &RULE, 1, 0);
        give_back(&w, KEY.0, 100, paid);
        assert_eq!(Now::unpack(w.now.load(Relaxed)).held, 0, "another slice");
    }

    #[test]
    fn the_allowance_grows_to_half_the_slice_over_the_hosts() {
        let rule = GlobalRule {
            permits: 20,
            ..RULE
        };
        assert_eq!(rule.among(0).local, 1, "hosts unknown: as configured");
        assert_eq!(rule.among(3).local, 3);
        assert_eq!(rule.among(1000).local, 1);
        let big = GlobalRule {
            permits: 100_000,
            ..RULE
        };
        assert_eq!(big.among(2).local, MAX_LOCAL as u64);
    }

    #[test]
    fn chunks_follow_the_rate_seen_and_never_pass_the_slice() {
        assert_eq!(RULE.want(1, 500, 1), 3);
        assert_eq!(RULE.want(100, 500, 1), 10);
        assert_eq!(RULE.want(0, 0, 1), 1);
        assert_eq!(RULE.want_ahead(2, 800), 8);
        assert_eq!(RULE.want_ahead(0, 800), 2);
    }
}
