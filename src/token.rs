//! The one token: what a permit and a pick are while caller memory holds
//! them (a C struct, a Python object, a Rust guard). Each is plain data
//! issued by the table handle: who holds it (the attachment's owner word),
//! when it was issued, what it is for, a spent mark, and a keyed check of
//! those fields, so that a token that was finished already, belongs to
//! another process or handle, or was altered in caller memory is refused
//! instead of giving back capacity it never held.
//!
//! [`Guard`] is the one owner of a token in Rust: it finishes the token
//! once, with the outcome given or as `Ignored` when dropped. The Rust
//! `Permit` and `Pick` and the Python `Permit` and `Choice` are guards.

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::shm::Owner;
use crate::words::Outcome;

/// The spent mark in a token's `flags`.
pub(crate) const SPENT: u32 = 2;

/// What kind of token, for its check and its messages.
pub(crate) struct Kind {
    /// Mixed into the key: a permit's check never passes for a pick's.
    pub salt: u64,
    /// Flags it may carry besides [`SPENT`].
    pub flags: u32,
    pub noun: &'static str,
    /// What finishing it is called ("release", "finish").
    pub verb: &'static str,
    /// Why a spent one is refused.
    pub spent: &'static str,
    /// Why one of another attachment is refused.
    pub foreign: &'static str,
    /// Why one of another subject (task, balancer) is refused.
    pub elsewhere: &'static str,
}

/// The fields of a token its check covers.
pub(crate) struct Fields {
    pub at: u64,
    pub owner: u64,
    /// The subject's index (task or balancer).
    pub subject: u32,
    /// What of the subject it holds (permits; the backend).
    pub item: u32,
    /// Anything else it carries (a flag it holds, a slot generation).
    pub extra: u64,
}

/// A token in caller memory.
pub(crate) trait Token {
    const KIND: Kind;
    fn fields(&self) -> Fields;
    fn flags(&self) -> u32;
    fn flags_mut(&mut self) -> &mut u32;
    fn check(&self) -> u64;
    fn set_check(&mut self, check: u64);
    /// Whether the words reserved for later versions are still zero.
    fn reserved_clear(&self) -> bool;
}

/// A cheap keyed check of every field: the fields are folded into one word
/// (each rotated apart), keyed, and multiplied by an odd constant, a
/// bijection, so changing any one field always changes the check. The key
/// is random per handle and never leaves the process. It detects damage and
/// forgery by mistake, not a determined attacker inside the process.
#[inline]
fn mac<T: Token>(token: &T, key: u64) -> u64 {
    let f = token.fields();
    let folded = f.at
        ^ f.owner.rotate_left(21)
        ^ ((f.subject as u64) << 32 | f.item as u64).rotate_left(42)
        ^ f.extra.rotate_left(7);
    let h = (folded ^ key ^ T::KIND.salt).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h ^ (h >> 31)
}

/// Stamps a freshly issued token with its check.
#[inline]
pub(crate) fn seal<T: Token>(token: &mut T, key: u64) {
    let check = mac(token, key);
    token.set_check(check);
}

/// Why `owner` cannot finish `token` for `subject` now, if it cannot: the
/// request path's check, with no formatting until a refusal is explained
/// by [`refusal`].
#[inline]
pub(crate) fn verify<T: Token>(
    token: &T,
    key: u64,
    owner: Owner,
    subject: u32,
) -> Result<(), &'static str> {
    let k = &T::KIND;
    let f = token.fields();
    if token.flags() & SPENT != 0 {
        Err(k.spent)
    } else if f.owner != owner.0 {
        Err(k.foreign)
    } else if f.subject != subject {
        Err(k.elsewhere)
    } else if token.flags() & !k.flags != 0
        || !token.reserved_clear()
        || token.check() != mac(token, key)
    {
        Err("its fields were altered")
    } else {
        Ok(())
    }
}

/// The error for a token refused by [`verify`]; `who` names the subject
/// (`task "x"`).
#[cold]
pub(crate) fn refusal<T: Token>(who: &dyn std::fmt::Display, why: &str) -> Error {
    let k = &T::KIND;
    Error::invalid(format!("{who}: cannot {} this {}: {why}", k.verb, k.noun))
}

/// Marks a token spent, once it was finished.
#[inline]
pub(crate) fn spend<T: Token>(token: &mut T) {
    *token.flags_mut() |= SPENT;
}

/// How a token ends: the outcome, and what the caller measured.
#[derive(Clone, Copy, Debug)]
pub struct Finish {
    pub outcome: Outcome,
    /// The round-trip time the caller measured (`None`: since the issue).
    pub rtt: Option<Duration>,
    /// The load the server reported (picks only; 0 = idle, 1 = saturated).
    pub load: Option<f64>,
}

impl From<Outcome> for Finish {
    fn from(outcome: Outcome) -> Self {
        Self {
            outcome,
            rtt: None,
            load: None,
        }
    }
}

/// What issues tokens of one kind and takes them back.
pub trait Issuer {
    type Raw: Copy + std::fmt::Debug;
    /// Finishes `raw` (marking it spent on success).
    fn finish_raw(&self, raw: &mut Self::Raw, how: Finish) -> Result<()>;
    fn is_spent(raw: &Self::Raw) -> bool;
}

/// The owner of one token: finishes it once, with an outcome or, when
/// dropped unfinished, as `Ignored`. `H` is what keeps the issuer reachable:
/// a reference (a borrowing guard) or the issuer itself (an owning guard,
/// `Send + 'static`, that can cross an `.await`).
pub struct Guard<I: Issuer, H: Borrow<I>> {
    issuer: H,
    raw: I::Raw,
    _issuer: PhantomData<fn() -> I>,
}

impl<I: Issuer, H: Borrow<I>> Guard<I, H> {
    pub(crate) fn new(issuer: H, raw: I::Raw) -> Self {
        Self {
            issuer,
            raw,
            _issuer: PhantomData,
        }
    }

    pub fn raw(&self) -> &I::Raw {
        &self.raw
    }

    pub fn issuer(&self) -> &I {
        self.issuer.borrow()
    }

    pub fn is_finished(&self) -> bool {
        I::is_spent(&self.raw)
    }

    /// Finishes the token unless it was finished already: `Ok(false)` then.
    /// A failed finish leaves it unfinished (it can be tried again, and is
    /// finished as `Ignored` when dropped).
    pub fn finish_once(&mut self, how: Finish) -> Result<bool> {
        if I::is_spent(&self.raw) {
            return Ok(false);
        }
        self.issuer.borrow().finish_raw(&mut self.raw, how)?;
        Ok(true)
    }

    /// Finishes the token, consuming the guard.
    pub fn finish(mut self, how: Finish) -> Result<()> {
        self.finish_once(how).map(drop)
    }
}

impl<I: Issuer, H: Borrow<I>> Drop for Guard<I, H> {
    fn drop(&mut self) {
        if !I::is_spent(&self.raw) {
            let _ = self
                .issuer
                .borrow()
                .finish_raw(&mut self.raw, Outcome::Ignored.into());
        }
    }
}

impl<I: Issuer, H: Borrow<I>> std::fmt::Debug for Guard<I, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard").field("raw", &self.raw).finish()
    }
}
