//! Permits: what an admitted request holds until it is released.

use super::{Outcome, Task};
use crate::error::{Error, Result};
use crate::shm::{Owner, Shm};

/// [`RawPermit::flags`]: the permit holds `n` of the task's concurrency.
pub(crate) const COUNTED: u32 = 1;
/// [`RawPermit::flags`]: released; releasing it again is refused.
pub(crate) const SPENT: u32 = 2;

/// A permit as plain data, for faces that keep it in caller memory (C) or in
/// an object of their own (Python). Rust code uses [`Permit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawPermit {
    /// Clock ticks at admission.
    pub acquired_at: u64,
    /// The attachment that holds it: slot and epoch of its claim.
    pub owner: u64,
    /// The task's slot index.
    pub task: u32,
    pub n: u32,
    /// Bit 0: it holds concurrency; bit 1: it was released.
    pub flags: u32,
    /// A keyed check of the fields above, so a permit altered in caller
    /// memory is refused instead of returning capacity it never held.
    pub check: u64,
}

impl RawPermit {
    #[inline]
    pub(crate) fn issue(shm: &Shm, owner: Owner, task: u32, n: u32, at: u64, flags: u32) -> Self {
        let mut p = Self {
            acquired_at: at,
            owner: owner.0,
            task,
            n,
            flags,
            check: 0,
        };
        p.check = p.mac(shm.permit_key);
        p
    }

    /// Whether it was released already.
    pub fn is_spent(&self) -> bool {
        self.flags & SPENT != 0
    }

    /// A cheap keyed check of every field: the fields are folded into one
    /// word (each rotated apart), keyed, and multiplied by an odd constant,
    /// a bijection, so changing any one field always changes the check. The
    /// key is random per handle and never leaves the process. It detects
    /// damage and forgery by mistake, not a determined attacker inside the
    /// process.
    #[inline]
    fn mac(&self, key: u64) -> u64 {
        let folded = self.acquired_at
            ^ self.owner.rotate_left(21)
            ^ ((self.task as u64) << 32 | self.n as u64).rotate_left(42)
            ^ (self.flags & COUNTED) as u64;
        let h = (folded ^ key).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^ (h >> 31)
    }

    /// Refuses a permit this handle cannot release for `task` now.
    #[inline]
    pub(crate) fn verify(&self, shm: &Shm, owner: Owner, task: u32, name: &str) -> Result<()> {
        let why = if self.flags & SPENT != 0 {
            "it was released already"
        } else if self.owner != owner.0 {
            "it was issued to another process or table handle (permits do not cross fork)"
        } else if self.task != task {
            "it was issued for another task"
        } else if self.n == 0
            || self.flags & !COUNTED != 0
            || self.check != self.mac(shm.permit_key)
        {
            "its fields were altered"
        } else {
            return Ok(());
        };
        Err(Error::invalid(format!(
            "task {name:?}: cannot release this permit: {why}"
        )))
    }
}

/// An admitted request. Release it with an outcome; dropping it releases it
/// as [`Outcome::Ignored`]. It can be released once: `release` consumes it.
#[must_use = "a permit holds concurrency until it is released"]
pub struct Permit<'a> {
    task: &'a Task,
    raw: RawPermit,
}

impl<'a> Permit<'a> {
    pub(crate) fn new(task: &'a Task, raw: RawPermit) -> Self {
        Self { task, raw }
    }

    pub fn n(&self) -> u32 {
        self.raw.n
    }

    pub fn raw(&self) -> &RawPermit {
        &self.raw
    }

    pub fn task(&self) -> &'a Task {
        self.task
    }

    /// Releases the permit with the request's outcome.
    pub fn release(mut self, outcome: Outcome) -> Result<()> {
        self.task.release_raw(&mut self.raw, outcome)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if !self.raw.is_spent() {
            let _ = self.task.release_raw(&mut self.raw, Outcome::Ignored);
        }
    }
}

impl std::fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("task", &self.task.name())
            .field("n", &self.raw.n)
            .finish()
    }
}
