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
//! or key is the empty state of this one; only compare-and-swap writes it,
//! and never back to an earlier slice than it holds (a caller late across
//! a slice's edge would drop the later slice's chunk and its hotness).
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

use super::limits::Rules;
use super::rate::{FALLBACK_DENY, FALLBACK_LOCAL, MAX_LOCAL};
use crate::format::GlobalWords;

mod words;
#[cfg(test)]
use words::{HOT_SLICES, later};
pub(crate) use words::{MAX_HELD, Now, SLICE_MASK, Seen, next_word};

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

    /// What the host admits of the key in a slice while the store fails
    /// (`None`: the key's local limits alone): the slice over the `hosts`
    /// last counted (none while no answer counted them). A key the store
    /// last listed as spread (`spread`) gets that alone, as it has no
    /// allowance with the store either; another gets at least its
    /// allowance, which it would pass without the store. So an outage gives
    /// a listed key no more than the store would: the hosts' allowances on a
    /// spread key are its limit many times over.
    pub(crate) fn fallback_share(&self, hosts: u64, spread: bool) -> Option<u64> {
        let share = self.permits.checked_div(hosts).unwrap_or(0);
        match self.fallback {
            FALLBACK_LOCAL => None,
            FALLBACK_DENY => Some(0),
            _ if spread => Some(share),
            _ => Some(share.max(self.local)),
        }
    }

    /// The most one request may ask of a slice: its permits, as far as a
    /// key's word holds them.
    pub(crate) fn most(&self) -> u64 {
        self.permits.min(MAX_HELD)
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
        (2 * projected + n).clamp(n.min(self.most()), self.most())
    }

    /// The chunk to ask ahead for the next slice, having been asked `asked`
    /// in this one by `elapsed_ms`: twice the rate, and two.
    pub(crate) fn want_ahead(&self, asked: u64, elapsed_ms: u64) -> u64 {
        let projected = (asked * self.slice_ms).div_ceil(elapsed_ms.max(1));
        (2 * projected + 2).clamp(1, self.most().max(1))
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
    Held(u32),
    Local(u32),
}

fn cas(word: &AtomicU64, old: u64, new: u64) -> Result<u64, u64> {
    word.compare_exchange_weak(old, new, AcqRel, Acquire)
}

/// Counts `n` asked of the key in `slice` (rolling `seen` into it) and
/// returns what the host saw; a word already of a later slice is left as
/// it is (and returned). A key the store lists as spread over the
/// fleet (`spread`, asked only when the word starts a slice) is hot in this
/// slice and the next: no host's allowance passes it once every host has
/// the list, and each host that saw it asks ahead for it.
pub(crate) fn note(
    w: &GlobalWords,
    tag: u64,
    slice: u64,
    rule: &GlobalRule,
    n: u64,
    spread: &dyn Fn() -> bool,
) -> Seen {
    let mut old = w.seen.load(Acquire);
    loop {
        let s = Seen::unpack(old);
        if s.after(tag, slice) {
            return s;
        }
        let new = if s.is(tag, slice) {
            Seen {
                asked: (s.asked + n).min(0xffff),
                ..s
            }
        } else {
            let mut hot_for = if s.tag == tag {
                s.hot_for_in(rule.local, slice)
            } else {
                0
            };
            // Hot in this slice and the next: its hosts ask ahead for it,
            // and the store divides it among them.
            if spread() {
                hot_for = hot_for.max(2);
            }
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
/// a chunk moves once; a roller killed in between loses it. A chunk asked
/// ahead marks the key as having pulled in the slice: the store counted
/// this host in it, so a failing store leaves the key to that chunk, not
/// to a fallback share on top of it. `None`: the word is already of a
/// later slice, which a caller still at `slice` never writes back (its
/// chunk would be lost and its allowance given again).
pub(crate) fn roll(w: &GlobalWords, tag: u64, slice: u64, id: &dyn Fn() -> u64) -> Option<Now> {
    let mut carry = (0, false);
    let mut took = false;
    let taken = |now: Now, took: bool| {
        if took {
            mark(w, tag, slice, true);
        }
        Some(now)
    };
    loop {
        let old = w.now.load(Acquire);
        let now = Now::unpack(old);
        if now.after(tag, slice) {
            return None;
        }
        if now.is(tag, slice) {
            if !took {
                return Some(now);
            }
            let new = Now {
                held: (now.held + carry.0).min(MAX_HELD),
                exhausted: now.exhausted || carry.1,
                ..now
            };
            if cas(&w.now, old, new.pack()).is_ok() {
                return taken(new, took);
            }
            continue;
        }
        let next = w.next.load(Acquire);
        let n = Now::unpack(next);
        if n.is(tag, slice) && next != 0 {
            if cas(&w.next, next, 0).is_err() {
                continue;
            }
            took = true;
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
            w.id.store(id(), Relaxed);
            return taken(fresh, took);
        }
    }
}

/// Decides `n` of a key with global rule `rule` in `slice`, `elapsed_ms`
/// into it (the request counted by [`note`], with the same `spread`): from
/// its chunk, on the host's own, or not without the store.
pub(crate) fn decide(
    w: &GlobalWords,
    (tag, id): (u64, &dyn Fn() -> u64),
    slice: u64,
    rule: &GlobalRule,
    (n, elapsed_ms): (u64, u64),
    spread: &dyn Fn() -> bool,
) -> Step {
    let read = Seen::unpack(w.seen.load(Acquire));
    let seen = if read.is(tag, slice) {
        read
    } else {
        note(w, tag, slice, rule, 0, spread)
    };
    let Some(mut now) = roll(w, tag, slice, id) else {
        return Step::Refuse;
    };
    loop {
        let (new, step) = if now.held >= n {
            (
                Now {
                    held: now.held - n,
                    ..now
                },
                Step::Admit(Paid::Held(n as u32)),
            )
        } else if now.exhausted {
            return Step::Refuse;
        } else if seen.hot_for == 0 && !seen.pulled && now.local + n <= rule.local {
            (
                Now {
                    local: now.local + n,
                    ..now
                },
                Step::Admit(Paid::Local(n as u32)),
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
                    let Some(rolled) = roll(w, tag, slice, id) else {
                        return Step::Refuse;
                    };
                    now = rolled;
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
    key: (u64, u64),
    slice: u64,
    granted: u64,
    charge: u64,
    spent: bool,
) {
    pulled_into(w, key, slice, |now| {
        Some(Now {
            held: (now.held + granted).min(MAX_HELD),
            charged: (now.charged + charge).min(0x1f),
            exhausted: now.exhausted || spent,
            ..now
        })
    });
}

/// The embedded store's grant (the host is the fleet): the slice less what
/// the host admitted of it on its own, once. A process racing another to
/// it finds the slice given (`exhausted`) and adds nothing.
pub(crate) fn grant_whole(w: &GlobalWords, key: (u64, u64), slice: u64, permits: u64) {
    pulled_into(w, key, slice, |now| {
        (!now.exhausted).then_some(Now {
            held: (now.held + permits.saturating_sub(now.local)).min(MAX_HELD),
            charged: now.local,
            exhausted: true,
            ..now
        })
    });
}

/// Marks the key as pulling in `slice` and writes `change` of its `now`
/// there (`None`: nothing to write). A slice that ends meanwhile takes
/// nothing: its grant is spent.
fn pulled_into(
    w: &GlobalWords,
    (tag, id): (u64, u64),
    slice: u64,
    change: impl Fn(Now) -> Option<Now>,
) {
    mark(w, tag, slice, true);
    let Some(mut now) = roll(w, tag, slice, &|| id) else {
        return;
    };
    while let Some(new) = change(now) {
        match cas(&w.now, now.pack(), new.pack()) {
            Ok(_) => return,
            Err(actual) => {
                now = Now::unpack(actual);
                if !now.is(tag, slice) {
                    return;
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
        if now.after(tag, slice) {
            return; // its slice is over: the grant is spent
        }
        let old = w.next.load(Acquire);
        let n = Now::unpack(old);
        // A chunk of the slice before (the current one, not begun on this
        // key yet) moves into `now` first, not overwritten.
        if n.is(tag, slice.wrapping_sub(1)) && n.held > 0 {
            if roll(w, tag, slice.wrapping_sub(1), &|| w.id.load(Relaxed)).is_none() {
                return;
            }
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
            roll(w, tag, slice, &|| w.id.load(Relaxed));
        }
        return;
    }
}

/// The fallback's share of the slice, given once per slice while the store
/// fails: what the host admitted on its own counts in it.
pub(crate) fn fall_back(w: &GlobalWords, (tag, id): (u64, u64), slice: u64, share: u64) {
    let Some(mut now) = roll(w, tag, slice, &|| id) else {
        return;
    };
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
                    let Some(rolled) = roll(w, tag, slice, &|| id) else {
                        return;
                    };
                    now = rolled;
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
                held: (now.held + n as u64).min(MAX_HELD),
                ..now
            },
            Paid::Local(n) => Now {
                local: now.local.saturating_sub(n as u64),
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
mod tests;
