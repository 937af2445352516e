//! What a `fork()` changes for this process's tables.
//!
//! Liveness is a kernel lock held through an open file description, and a
//! forked child shares its parent's descriptions: left alone, a child would
//! keep its parent's locks alive (and the parent's permits unreclaimable) for
//! as long as it runs. So a `pthread_atfork` child handler gives every table
//! descriptor a description of its own — reopened through `/proc/self/fd`,
//! under the same number — and bumps a generation, so the child attaches
//! anew (its own slot, its own lock) on first use. The handler runs in the
//! single-threaded child: it only touches atomics and calls async-signal-safe
//! functions (`open`, `dup3`, `close`), no allocation, no lock.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

use crate::error::{Error, ErrorKind, Result};

/// Bumped in the child after every fork.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// Descriptors of the open tables of this process (`FREE` where unused).
/// The simulator (feature `sim`) opens a table per simulated host.
const SLOTS: usize = if cfg!(feature = "sim") { 4096 } else { 256 };
static FDS: [AtomicI32; SLOTS] = [const { AtomicI32::new(FREE) }; SLOTS];
const FREE: i32 = -1;
/// The child could not reopen the descriptor and closed it: reopen by path.
pub(crate) const LOST: i32 = -2;

pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

extern "C" fn after_fork_in_child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
    for slot in &FDS {
        let fd = slot.load(Ordering::Relaxed);
        if fd >= 0 && !reopen_in_place(fd) {
            // SAFETY: our own descriptor; dropping the parent's description.
            unsafe { libc::close(fd) };
            slot.store(LOST, Ordering::Relaxed);
        }
    }
}

/// Replaces `fd` by a new open file description of the same file.
fn reopen_in_place(fd: RawFd) -> bool {
    // "/proc/self/fd/<fd>\0" built on the stack: no allocation after fork.
    let mut path = *b"/proc/self/fd/\0\0\0\0\0\0\0\0\0\0\0\0";
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (fd as u32, 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        path[14 + i] = digits[len - 1 - i];
    }
    // SAFETY: a NUL-terminated path; async-signal-safe calls only.
    unsafe {
        let new = libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC);
        if new < 0 {
            return false;
        }
        let ok = libc::dup3(new, fd, libc::O_CLOEXEC) == fd;
        libc::close(new);
        ok
    }
}

/// Registers the child handler. Not with `std::sync::Once`: a fork while
/// another thread is inside `call_once` leaves the child's `Once` running for
/// ever, and the child's first open would wait on it. The handler is
/// idempotent (a second run bumps the generation again and reopens again), so
/// threads racing here may register it twice, harmlessly; glibc makes each
/// registration atomic with respect to `fork`.
fn install() {
    static REGISTERED: AtomicBool = AtomicBool::new(false);
    if !REGISTERED.load(Ordering::Acquire) {
        // SAFETY: registering a handler that only uses async-signal-safe calls.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        REGISTERED.store(true, Ordering::Release);
    }
}

/// A table descriptor known to the fork handler. Closed when dropped.
pub(crate) struct TrackedFd {
    slot: usize,
}

impl TrackedFd {
    pub fn new(fd: RawFd) -> Result<Self> {
        install();
        for (slot, entry) in FDS.iter().enumerate() {
            if entry
                .compare_exchange(FREE, fd, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(Self { slot });
            }
        }
        // SAFETY: the caller handed the descriptor over.
        unsafe { libc::close(fd) };
        Err(Error::new(
            ErrorKind::Io,
            format!("this process has {SLOTS} flowctrl tables open; close some first"),
        ))
    }

    /// The descriptor, or [`LOST`] in a child whose reopen failed.
    pub fn get(&self) -> RawFd {
        FDS[self.slot].load(Ordering::Acquire)
    }

    /// Installs a replacement for a lost descriptor.
    pub fn replace_lost(&self, fd: RawFd) -> bool {
        FDS[self.slot]
            .compare_exchange(LOST, fd, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }
}

impl Drop for TrackedFd {
    fn drop(&mut self) {
        let fd = FDS[self.slot].swap(FREE, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: ours, and no longer reachable through the registry.
            unsafe { libc::close(fd) };
        }
    }
}

/// A lock for process-local work that a fork can interrupt: a holder that was
/// a thread of the parent does not exist in the child, so a lock taken in an
/// older generation counts as free.
pub(crate) struct ForkSafeLock {
    /// 0 = free, else the generation of the holder.
    word: AtomicU64,
}

/// Released first when dropped, then its `Defer` writes the lines logged
/// under it (a reap's): a logger calling back into flowctrl finds it free.
pub(crate) struct ForkSafeGuard<'a>(&'a ForkSafeLock, crate::events::Defer);

impl ForkSafeLock {
    pub const fn new() -> Self {
        Self {
            word: AtomicU64::new(0),
        }
    }

    pub fn lock(&self) -> ForkSafeGuard<'_> {
        let mine = generation();
        let mut spins = 0u32;
        loop {
            let current = self.word.load(Ordering::Relaxed);
            if (current == 0 || current != mine)
                && self
                    .word
                    .compare_exchange(current, mine, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return ForkSafeGuard(self, crate::events::defer());
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
    }
}

impl Drop for ForkSafeGuard<'_> {
    fn drop(&mut self) {
        self.0.word.store(0, Ordering::Release);
    }
}

/// A value reached only under a [`ForkSafeLock`]: process-local state a
/// thread may be changing when another thread forks.
pub(crate) struct ForkLocked<T> {
    lock: ForkSafeLock,
    value: std::cell::UnsafeCell<T>,
}

// SAFETY: `value` is only reached through `with`, under `lock`.
unsafe impl<T: Send> Sync for ForkLocked<T> {}
unsafe impl<T: Send> Send for ForkLocked<T> {}

impl<T: Default> Default for ForkLocked<T> {
    fn default() -> Self {
        Self {
            lock: ForkSafeLock::new(),
            value: std::cell::UnsafeCell::new(T::default()),
        }
    }
}

impl<T> ForkLocked<T> {
    /// Runs `body` on the value under the lock.
    pub fn with<R>(&self, body: impl FnOnce(&mut T) -> R) -> R {
        let _guard = self.lock.lock();
        // SAFETY: the lock is held; no reference into `value` outlives `body`.
        body(unsafe { &mut *self.value.get() })
    }
}
