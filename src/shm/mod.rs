//! The shared-memory file: creating, trusting and mapping it against the
//! geometry `crate::format` defines, the attachments of the processes that
//! use it, and the reaper. This layer knows regions and owners, not
//! features: what a dead attachment held is given back by the [`Reclaim`]
//! hooks the table installs (the tasks' and the balancers').
//!
//! Readers take a [`Region`] (a validated table and its typed regions),
//! which an attached [`Shm`] derefs to (its mapping) and a view's read
//! pass builds ([`ReadOnly::copy`]: a private copy of the file).

mod attach;
pub(crate) mod copy;
mod file;
mod fork;
pub(crate) mod named;
pub(crate) mod pool;
mod read_only;
mod region;
pub(crate) mod side;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use crate::format::*;
use attach::Attachment;
pub(crate) use attach::Owner;
pub(crate) use file::random_u64;
use fork::TrackedFd;
pub(crate) use fork::{ForkLocked, ForkSafeLock, generation as fork_generation};
pub(crate) use read_only::ReadOnly;
pub(crate) use region::Region;

use crate::error::{Error, Result};
use crate::events::{self, Event};

/// What the features do when an attachment slot changes hands: the table
/// installs one hook that gives back the tasks' permits and pull locks and
/// the balancers' picks. Both are called with the attachment's slot held
/// exclusively (its kernel lock).
pub(crate) trait Reclaim: Sync {
    /// Gives back what a dead attachment held; possibly called again after
    /// a reclaimer died half-way, so it must be idempotent and crash-safe.
    fn reclaim(&self, shm: &Shm, attach: u32);
    /// Notes what the slot has counted so far, before a new owner starts:
    /// its own statistics then start from zero without resetting (and
    /// racing) the totals.
    fn baseline(&self, shm: &Shm, attach: u32);
}

/// How to open or create a table file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OpenSpec {
    pub geometry: Geometry,
    pub mode: u32,
    pub owner: u32,
    pub shared: bool,
}

/// One mapping of a table file and this handle's attachment to it; the
/// mapping's regions through `Deref` ([`Region`]).
pub(crate) struct Shm {
    region: Region,
    /// Random per handle, never in the file: keys the permits' checks.
    pub permit_key: u64,
    fd: TrackedFd,
    /// Device and inode of the file mapped, to notice it being replaced.
    identity: (u64, u64),
    replaced: AtomicBool,
    reclaim: &'static dyn Reclaim,
    attachment: Attachment,
    /// Serialises this handle's use of its kernel locks (claiming, reaping):
    /// they are per open file description, so threads of one handle would
    /// otherwise not exclude each other.
    locks: ForkSafeLock,
    reap_interval: u64,
    me: Weak<Shm>,
    /// What the reaper thread also runs every 250 ms for this handle (the
    /// table's config file watch): process-local, never in the file.
    watch: parking_lot::Mutex<Option<Watch>>,
    /// Pooled tables: the clock tick before which this handle does not look
    /// for a free lane set again (it found none).
    lane_retry_at: std::sync::atomic::AtomicU64,
}

/// A periodic job of a handle's reaper thread.
pub(crate) type Watch = Box<dyn Fn(&Arc<Shm>) + Send + Sync>;

impl Shm {
    pub fn open(path: &Path, spec: OpenSpec, reclaim: &'static dyn Reclaim) -> Result<Arc<Self>> {
        let trust = file::Trust {
            owner: spec.owner,
            shared: spec.shared,
        };
        let mapped = file::open_or_create(path, spec.geometry, spec.mode, trust)?;
        let meta = mapped
            .file
            .metadata()
            .map_err(|e| Error::io(format!("cannot stat table {}", path.display()), e))?;
        use std::os::unix::fs::MetadataExt;
        let identity = (meta.dev(), meta.ino());
        let fd = TrackedFd::new(std::os::fd::IntoRawFd::into_raw_fd(mapped.file))?;
        let shm = Arc::new_cyclic(|me| Shm {
            reap_interval: mapped.table.clock.duration_to_ticks(attach::REAP_INTERVAL),
            region: Region::new(region::Backing::Map(mapped.map), mapped.table, path),
            permit_key: file::random_u64(),
            fd,
            identity,
            replaced: AtomicBool::new(false),
            reclaim,
            attachment: Attachment::new(),
            locks: ForkSafeLock::new(),
            me: me.clone(),
            watch: parking_lot::Mutex::new(None),
            lane_retry_at: std::sync::atomic::AtomicU64::new(0),
        });
        shm.owner()?;
        Ok(shm)
    }

    /// Sets the job the reaper thread runs every 250 ms for this handle.
    /// The table's own file: who owns it and its mode, which a file
    /// beside it (a key file) must match to be trusted.
    pub(crate) fn file_owner_mode(&self) -> Result<(u32, u32)> {
        // SAFETY: fstat into a zeroed struct, on our own descriptor.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(self.fd.get(), &mut st) } != 0 {
            return Err(Error::io(
                format!("cannot stat table {}", self.path.display()),
                std::io::Error::last_os_error(),
            ));
        }
        Ok((st.st_uid, st.st_mode & 0o7777))
    }

    pub fn set_watch(&self, watch: Watch) {
        *self.watch.lock() = Some(watch);
    }

    /// Runs the handle's periodic job, if any (the reaper thread's; a job
    /// that panics is dropped, not the thread).
    pub(crate) fn run_watch(self: &Arc<Self>) {
        let Some(guard) = self.watch.try_lock() else {
            return;
        };
        if let Some(watch) = guard.as_ref()
            && std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| watch(self))).is_err()
        {
            drop(guard);
            *self.watch.lock() = None;
            log::error!(target: crate::events::TABLE, "the config file watch panicked; it is stopped");
        }
    }

    /// Whether the file at the path is no longer the one mapped (deleted or
    /// replaced): processes that open the path now share another table.
    pub fn replaced(&self) -> bool {
        if !self.replaced.load(Ordering::Relaxed) {
            use std::os::unix::fs::MetadataExt;
            let same = std::fs::symlink_metadata(&self.path)
                .map(|m| (m.dev(), m.ino()) == self.identity)
                .unwrap_or(false);
            if !same {
                self.replaced.store(true, Ordering::Relaxed);
                let path = self.path.to_string_lossy();
                events::report(
                    Event::TableReplaced,
                    &path,
                    format_args!(
                        "table {path} was deleted or replaced while in use; processes that \
                         open it now get another table, and limits are no longer shared with them"
                    ),
                );
            }
        }
        self.replaced.load(Ordering::Relaxed)
    }
}

impl std::ops::Deref for Shm {
    type Target = Region;

    fn deref(&self) -> &Region {
        &self.region
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        self.detach();
    }
}
