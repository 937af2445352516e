//! Permits: what an admitted request holds until it is released — a
//! [`crate::token`] issued by its task.

use std::time::Duration;

use super::Task;
use crate::error::Result;
use crate::shm::{Owner, Shm};
use crate::token::{self, Finish, Guard, Issuer, Kind, SPENT, Token};
use crate::words::Outcome;

/// [`RawPermit::flags`]: the permit holds `n` of the task's concurrency.
pub(crate) const COUNTED: u32 = 1;
/// [`RawPermit::flags`]: a flag no version sets. A face whose copy of a
/// permit has more room than `RawPermit` (C's reserved words) sets it when
/// that room was written to, and the token's check refuses the permit as
/// altered.
pub const PERMIT_ALTERED: u32 = 1 << 31;

/// A permit as plain data, for faces that keep it in caller memory (C) or in
/// an object of their own. Rust code uses [`Permit`] or [`OwnedPermit`].
/// 40 bytes: the C face's 64-byte `fc_permit` is these fields and reserved
/// words (kept out of here: a bigger permit measurably slowed two threads
/// acquiring from one task).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawPermit {
    /// Clock ticks at admission.
    pub acquired_at: u64,
    /// The attachment that holds it: slot and epoch of its claim.
    pub owner: u64,
    /// The task's slot index.
    pub task: u32,
    pub n: u32,
    /// Bit 0: it holds concurrency; bit 1: it was released (see
    /// [`PERMIT_ALTERED`] too).
    pub flags: u32,
    /// A keyed permit holding the key's concurrency: the record of its
    /// process that holds it, + 1 (see `keyed::hold`); 0: none. In the
    /// padding before `check`, so the permit stays 40 bytes.
    pub key_record: u32,
    /// A keyed check of the fields above (see `token`).
    pub check: u64,
}

impl Token for RawPermit {
    const KIND: Kind = Kind {
        salt: 0,
        flags: COUNTED,
        noun: "permit",
        verb: "release",
        spent: "it was released already",
        foreign: "it was issued to another process or table handle (permits do not cross fork)",
        elsewhere: "it was issued for another task",
    };

    #[inline]
    fn fields(&self) -> token::Fields {
        token::Fields {
            at: self.acquired_at,
            owner: self.owner,
            subject: self.task,
            item: self.n,
            extra: (self.flags & COUNTED) as u64 | (self.key_record as u64) << 32,
        }
    }

    fn flags(&self) -> u32 {
        self.flags
    }

    fn flags_mut(&mut self) -> &mut u32 {
        &mut self.flags
    }

    fn check(&self) -> u64 {
        self.check
    }

    fn set_check(&mut self, check: u64) {
        self.check = check;
    }

    fn reserved_clear(&self) -> bool {
        self.n != 0
    }
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
            key_record: 0,
            check: 0,
        };
        token::seal(&mut p, shm.permit_key);
        p
    }

    /// The permit, naming the key record that holds its key's permits.
    pub(crate) fn with_key_record(mut self, shm: &Shm, record: u32) -> Self {
        self.key_record = record;
        token::seal(&mut self, shm.permit_key);
        self
    }

    /// Whether it was released already.
    pub fn is_spent(&self) -> bool {
        self.flags & SPENT != 0
    }
}

impl Issuer for Task {
    type Raw = RawPermit;

    #[inline]
    fn finish_raw(&self, raw: &mut RawPermit, how: Finish) -> Result<()> {
        self.release_raw_rtt(raw, how.outcome, how.rtt)
    }

    fn is_spent(raw: &RawPermit) -> bool {
        raw.is_spent()
    }
}

/// An admitted request, borrowing its task. Release it with an outcome;
/// dropping it releases it as [`Outcome::Ignored`].
pub type Permit<'a> = Guard<Task, &'a Task>;

/// An admitted request that keeps its task alive: `Send + 'static`, so it
/// can move into a spawned future and cross an `.await`.
pub type OwnedPermit = Guard<Task, Task>;

impl<H: std::borrow::Borrow<Task>> Guard<Task, H> {
    pub fn n(&self) -> u32 {
        self.raw().n
    }

    pub fn task(&self) -> &Task {
        self.issuer()
    }

    /// Releases the permit with the request's outcome.
    pub fn release(self, outcome: Outcome) -> Result<()> {
        self.finish(outcome.into())
    }

    /// Releases it with the round-trip time the caller measured.
    pub fn release_rtt(self, outcome: Outcome, rtt: Duration) -> Result<()> {
        self.finish(Finish {
            rtt: Some(rtt),
            ..outcome.into()
        })
    }
}
