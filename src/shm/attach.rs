//! Attachments: which processes use the table, whether they are alive, and
//! giving back what dead ones held.
//!
//! **Liveness comes from the kernel.** Each attachment holds an
//! open-file-description lock (`F_OFD_SETLK`) on one byte of the table file
//! (far beyond its end: locks need no data there), taken when it claims its
//! slot and dropped by the kernel when the last descriptor of that
//! description closes — when the process dies, however it dies. Whoever can
//! take a slot's lock knows its owner is gone *and* holds the slot for
//! itself: reclaiming a dead slot, claiming a free one and reaping cannot
//! race, and a reclaimer that dies drops the lock for the next one. No `/proc`
//! parsing: a process whose main thread exited, a reaper out of descriptors
//! and `hidepid` change nothing, and processes in different pid namespaces
//! sharing the file work.
//!
//! **Epochs.** Every claim of a slot gets a new epoch; an [`Owner`] names the
//! slot *and* the epoch, so a word naming an owner (a permit, a task slot
//! being registered, a configuration being written) can never be mistaken
//! for a later owner of the same slot.
//!
//! **Reaping** runs on attach, in a background thread of each attached
//! process (at most once per [`REAP_INTERVAL`] host-wide, one `fcntl` per
//! live slot), and on demand — never on the request path.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::Shm;
use super::fork::{self, LOST};
use crate::error::{Error, ErrorKind, Result};
use crate::format::*;

/// How often at most the table is swept for dead processes, host-wide.
pub(crate) const REAP_INTERVAL: Duration = Duration::from_millis(10);
/// How often each attached process's reaper thread wakes up.
const REAPER_PERIOD: Duration = Duration::from_millis(20);
/// How often the reaper thread checks that the path still names our file.
const WATCH_PERIOD: Duration = Duration::from_secs(1);
/// How often the handle's periodic job runs (the config file's watch: one
/// `stat`), so an edit is applied well within a second.
const POLL_PERIOD: Duration = Duration::from_millis(250);
/// Where the lock bytes start: past any table, so locks never meet data.
const LOCK_BASE: i64 = 1 << 40;
/// The pooled lane sets' fold lock (see `pool`), below the slots' bytes.
const POOL_LOCK: i64 = LOCK_BASE - 1;

/// The pool's lock, held; dropped with this.
pub(crate) struct PoolLock<'a>(&'a Shm);

impl Drop for PoolLock<'_> {
    fn drop(&mut self) {
        let _ = self.0.lock_byte(POOL_LOCK, false);
    }
}

/// A claim of an attachment slot: `epoch << 16 | (index + 1)`; never 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Owner(pub u64);

impl Owner {
    fn new(index: u32, epoch: u64) -> Self {
        Self((epoch << 16) | (index as u64 + 1))
    }

    pub fn index(self) -> Option<u32> {
        ((self.0 & 0xffff) as u32).checked_sub(1)
    }

    fn epoch(self) -> u64 {
        self.0 >> 16
    }

    /// The claim in 32 bits, for a word that shares room with other fields:
    /// the slot and the low 16 bits of the epoch. Never 0.
    pub fn compact(self) -> u32 {
        ((self.epoch() & 0xffff) << 16 | (self.0 & 0xffff)) as u32
    }
}

/// Whether an open file description other than `fd`'s holds attachment
/// slot `index`'s lock, i.e. whether its owner lives. Asked with
/// `F_OFD_GETLK`: a question, not a claim, so a read-only descriptor may
/// ask it and nothing changes.
pub(super) fn lock_held(fd: std::os::fd::RawFd, index: u32) -> std::io::Result<bool> {
    // SAFETY: a zeroed flock is a valid value for every field (l_pid 0, as
    // OFD locks require).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = LOCK_BASE + index as i64;
    fl.l_len = 1;
    // SAFETY: fcntl on a descriptor the caller owns, with a valid flock.
    if unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut fl) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

/// This handle's attachment, as this process knows it.
pub(crate) struct Attachment {
    /// The fork generation the claim was made in; 0 = none yet.
    generation: AtomicU64,
    owner: AtomicU64,
}

impl Attachment {
    pub fn new() -> Self {
        Self {
            generation: AtomicU64::new(0),
            owner: AtomicU64::new(0),
        }
    }
}

/// Attachment slot states carry the epoch of the last claim above bit 0.
fn live(epoch: u64) -> u64 {
    (epoch << 1) | ATTACH_LIVE
}

impl Shm {
    /// This handle's claim, attaching first if it has none in this process
    /// (a fresh handle, or the child of a fork).
    #[inline]
    pub fn owner(&self) -> Result<Owner> {
        if self.attachment.generation.load(Ordering::Acquire) == fork::generation() {
            return Ok(Owner(self.attachment.owner.load(Ordering::Relaxed)));
        }
        self.attach()
    }

    /// The slot of this handle's claim in this process, if it has one.
    fn my_index(&self) -> Option<u32> {
        (self.attachment.generation.load(Ordering::Acquire) == fork::generation())
            .then(|| Owner(self.attachment.owner.load(Ordering::Relaxed)).index())
            .flatten()
    }

    #[cold]
    fn attach(&self) -> Result<Owner> {
        let _guard = self.locks.lock();
        let generation = fork::generation();
        if self.attachment.generation.load(Ordering::Acquire) == generation {
            return Ok(Owner(self.attachment.owner.load(Ordering::Relaxed)));
        }
        self.ensure_fd()?;
        let owner = self.claim()?;
        self.attachment.owner.store(owner.0, Ordering::Relaxed);
        self.attachment
            .generation
            .store(generation, Ordering::Release);
        self.sweep(owner.index());
        self.start_reaper();
        Ok(owner)
    }

    /// In a forked child whose descriptor could not be reopened in place,
    /// opens the path again — if it still names the file mapped.
    fn ensure_fd(&self) -> Result<()> {
        if self.fd.get() != LOST {
            return Ok(());
        }
        use std::os::fd::IntoRawFd;
        use std::os::unix::fs::MetadataExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(|e| Error::io(format!("cannot reopen table {}", self.path.display()), e))?;
        let meta = file
            .metadata()
            .map_err(|e| Error::io(format!("cannot stat table {}", self.path.display()), e))?;
        if (meta.dev(), meta.ino()) != self.identity {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "table {} was replaced since it was opened",
                    self.path.display()
                ),
            ));
        }
        let fd = file.into_raw_fd();
        if !self.fd.replace_lost(fd) {
            // SAFETY: our descriptor, not installed anywhere.
            unsafe { libc::close(fd) };
        }
        Ok(())
    }

    /// Takes (`true`) or drops the kernel lock on a slot's byte. `Ok(false)`:
    /// another open file description holds it — its owner is alive.
    fn lock_slot(&self, index: u32, take: bool) -> Result<bool> {
        self.lock_byte(LOCK_BASE + index as i64, take)
    }

    /// [`Shm::lock_slot`] for any lock byte.
    fn lock_byte(&self, byte: i64, take: bool) -> Result<bool> {
        // SAFETY: a zeroed flock is a valid value for every field.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = if take { libc::F_WRLCK } else { libc::F_UNLCK } as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = byte;
        fl.l_len = 1;
        // SAFETY: fcntl on our descriptor with a valid flock.
        if unsafe { libc::fcntl(self.fd.get(), libc::F_OFD_SETLK, &fl) } == 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN | libc::EACCES) => Ok(false),
            _ => Err(Error::io(
                format!("cannot lock byte {byte} of table {}", self.path.display()),
                err,
            )),
        }
    }

    /// Claims a slot: free ones first, then slots whose owner died unreaped.
    fn claim(&self) -> Result<Owner> {
        let capacity = self.geometry.attach_capacity;
        for free_only in [true, false] {
            for index in 0..capacity {
                let slot = self.attach_slot(index);
                let state = slot.state.load(Ordering::Acquire);
                if free_only == (state & ATTACH_LIVE != 0) || !self.lock_slot(index, true)? {
                    continue;
                }
                // The slot's lock is ours: nobody else reads or writes it now.
                let state = slot.state.load(Ordering::Acquire);
                if state & ATTACH_LIVE != 0 {
                    // Sets it could not give back stay with the slot: this
                    // owner carries on with them (a new baseline below).
                    self.give_back(index);
                }
                let epoch = ((state >> 1) + 1) & ((1 << 46) - 1);
                self.reclaim.baseline(self, index);
                slot.pid.store(std::process::id() as u64, Ordering::Relaxed);
                slot.state.store(live(epoch), Ordering::Release);
                return Ok(Owner::new(index, epoch));
            }
        }
        Err(Error::new(
            ErrorKind::TooManyProcesses,
            format!(
                "all {capacity} attachment slots of {} are held by live processes",
                self.path.display()
            ),
        ))
    }

    /// Reclaims the dead slots among all but `skip`; returns how many.
    fn sweep(&self, skip: Option<u32>) -> usize {
        let mut reaped = 0;
        for index in 0..self.geometry.attach_capacity {
            if Some(index) == skip
                || self.attach_slot(index).state.load(Ordering::Acquire) & ATTACH_LIVE == 0
            {
                continue;
            }
            if let Ok(true) = self.lock_slot(index, true) {
                // Re-read under the lock: the owner may have detached.
                if self.free_slot(index) {
                    reaped += 1;
                }
                let _ = self.lock_slot(index, false);
            }
        }
        reaped
    }

    /// Gives back what a slot held and marks it free. The caller holds the
    /// slot's lock. Returns whether it was live.
    fn free_slot(&self, index: u32) -> bool {
        let slot = self.attach_slot(index);
        let state = slot.state.load(Ordering::Acquire);
        if state & ATTACH_LIVE == 0 {
            return false;
        }
        if !self.give_back(index) {
            // Its lane sets are not back yet: it stays marked, and a later
            // sweep finishes (everything else it held is back already).
            return false;
        }
        slot.state.store(state & !ATTACH_LIVE, Ordering::Release);
        true
    }

    /// Everything a dead (or leaving) attachment held: the features' hooks
    /// first (they drain its ledgers), then its pooled lane sets. Whether
    /// all of it is back (a pooled table's sets wait for the pool's lock).
    fn give_back(&self, index: u32) -> bool {
        self.reclaim.reclaim(self, index);
        !self.geometry.pooled() || super::pool::give_back(self, index)
    }

    /// Pooled tables: the host-wide lock folds are made under (a kernel
    /// lock, so it dies with its holder), tried for up to 20 ms; `None` if
    /// another process keeps it (stopped, say). The caller holds `locks`.
    pub(super) fn pool_lock(&self) -> Option<PoolLock<'_>> {
        for _ in 0..20 {
            match self.lock_byte(POOL_LOCK, true) {
                Ok(true) => return Some(PoolLock(self)),
                Ok(false) => std::thread::sleep(Duration::from_millis(1)),
                Err(_) => return None,
            }
        }
        None
    }

    /// Looks for dead processes now and gives back what they held. Returns
    /// how many were found.
    pub fn reap(&self) -> usize {
        let _guard = self.locks.lock();
        self.header()
            .last_reap
            .store(self.clock.now(), Ordering::Relaxed);
        self.sweep(self.my_index())
    }

    /// Reaps if no process on the host did within [`REAP_INTERVAL`].
    fn maybe_reap(&self) {
        let now = self.clock.now();
        let last = &self.header().last_reap;
        let seen = last.load(Ordering::Relaxed);
        if now.wrapping_sub(seen) >= self.reap_interval
            && last
                .compare_exchange(seen, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let _guard = self.locks.lock();
            self.sweep(self.my_index());
        }
    }

    /// Whether the claim `owner` still stands: its slot is live with its
    /// epoch and the kernel lock is held. A dead owner found here is reaped
    /// on the spot. A slow path (a system call): for waits on other claims.
    pub fn owner_alive(&self, owner: Owner) -> bool {
        let Some(index) = owner.index().filter(|i| *i < self.geometry.attach_capacity) else {
            return false;
        };
        let slot = self.attach_slot(index);
        if slot.state.load(Ordering::Acquire) != live(owner.epoch()) {
            return false;
        }
        if self.my_index() == Some(index) {
            return true;
        }
        let _guard = self.locks.lock();
        match self.lock_slot(index, true) {
            Ok(true) => {
                self.free_slot(index);
                let _ = self.lock_slot(index, false);
                false
            }
            // Held, or we cannot tell: assume alive and let the caller's
            // deadline decide.
            _ => true,
        }
    }

    /// [`Shm::owner_alive`] for a [`Owner::compact`] claim. An epoch that
    /// matches in its low 16 bits only (the slot changed hands 65,536 times
    /// in between) counts as alive: callers also bound how long they wait.
    pub fn compact_owner_alive(&self, compact: u32) -> bool {
        let Some(index) = (compact & 0xffff)
            .checked_sub(1)
            .filter(|i| *i < self.geometry.attach_capacity)
        else {
            return false;
        };
        let state = self.attach_slot(index).state.load(Ordering::Acquire);
        let epoch = state >> 1;
        state & ATTACH_LIVE != 0
            && epoch & 0xffff == (compact >> 16) as u64
            && self.owner_alive(Owner::new(index, epoch))
    }

    /// Detaches this handle: what it still holds goes back, its slot is freed.
    pub(super) fn detach(&self) {
        let _guard = self.locks.lock();
        if let Some(index) = self.my_index() {
            self.free_slot(index);
            let _ = self.lock_slot(index, false);
            self.attachment.generation.store(0, Ordering::Release);
        }
    }

    /// Starts this process's reaper thread for this handle. It holds only a
    /// weak reference and ends when the handle is gone; a forked child starts
    /// its own when it attaches.
    fn start_reaper(&self) {
        // The simulator's thousand tables in one process, on a clock that
        // stands still: none of their processes can die.
        if crate::clock::sim::active() {
            return;
        }
        let me = self.me.clone();
        let spawned = std::thread::Builder::new()
            .name("flowctrl-reaper".into())
            // A live reload parses the config file here (toml and serde,
            // a deep call chain in a debug build): 256 KiB, reserved
            // address space more than memory touched.
            .stack_size(256 * 1024)
            .spawn(move || {
                let mut watched = std::time::Instant::now();
                let mut polled = watched;
                let jitter = super::random_u64() % 5;
                loop {
                    std::thread::sleep(REAPER_PERIOD + Duration::from_millis(jitter));
                    let Some(shm) = me.upgrade() else { return };
                    if shm.my_index().is_none() {
                        return; // detached
                    }
                    shm.maybe_reap();
                    if watched.elapsed() >= WATCH_PERIOD {
                        watched = std::time::Instant::now();
                        shm.replaced();
                    }
                    if polled.elapsed() >= POLL_PERIOD {
                        polled = std::time::Instant::now();
                        shm.run_watch();
                    }
                }
            });
        if let Err(e) = spawned {
            let path = self.path.to_string_lossy();
            crate::events::report(
                crate::events::Event::NoReaper,
                &path,
                format_args!(
                    "table {path}: no reaper thread ({e}); dead processes are reaped on \
                     attach only"
                ),
            );
        }
    }
}
