//! The shared-memory file: creating, trusting and mapping it against the
//! geometry `crate::format` defines, the attachments of the processes that
//! use it, and the reaper. This layer knows regions and owners, not
//! features: what a dead attachment held is given back by the [`Reclaim`]
//! hooks the table installs (the tasks' and the balancers').

mod attach;
mod file;
mod fork;
pub(crate) mod named;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use memmap2::MmapRaw;

use crate::format::*;
use attach::Attachment;
pub(crate) use attach::Owner;
pub(crate) use file::random_u64;
use fork::{ForkSafeLock, TrackedFd};

use crate::clock::Clock;
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

/// One mapping of a table file and this handle's attachment to it.
pub(crate) struct Shm {
    map: MmapRaw,
    pub geometry: Geometry,
    pub clock: Clock,
    /// Random per handle, never in the file: keys the permits' checks.
    pub permit_key: u64,
    pub path: PathBuf,
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
            reap_interval: mapped.clock.duration_to_ticks(attach::REAP_INTERVAL),
            map: mapped.map,
            geometry: mapped.geometry,
            clock: mapped.clock,
            permit_key: file::random_u64(),
            path: path.to_path_buf(),
            fd,
            identity,
            replaced: AtomicBool::new(false),
            reclaim,
            attachment: Attachment::new(),
            locks: ForkSafeLock::new(),
            me: me.clone(),
            watch: parking_lot::Mutex::new(None),
        });
        shm.owner()?;
        Ok(shm)
    }

    /// Sets the job the reaper thread runs every 250 ms for this handle.
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

    fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// # Safety
    /// `offset + size_of::<T>()` lies within the validated mapping and `T` is
    /// one of the all-atomic structs of [`crate::format`].
    pub(crate) unsafe fn at<T>(&self, offset: usize) -> &T {
        debug_assert!(offset + size_of::<T>() <= self.geometry.total_size());
        // SAFETY: per the contract; the mapping lives as long as `self`.
        unsafe { &*(self.base().add(offset) as *const T) }
    }

    pub fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a validated header.
        unsafe { self.at(0) }
    }

    pub fn task_slot(&self, task: u32) -> &TaskSlot {
        assert!(task < self.geometry.task_capacity);
        let offset = self.geometry.tasks_offset() + task as usize * size_of::<TaskSlot>();
        // SAFETY: bounds checked above against the validated geometry.
        unsafe { self.at(offset) }
    }

    pub fn attach_slot(&self, attach: u32) -> &AttachSlot {
        assert!(attach < self.geometry.attach_capacity);
        let offset = self.geometry.attach_offset() + attach as usize * size_of::<AttachSlot>();
        // SAFETY: bounds checked above.
        unsafe { self.at(offset) }
    }

    /// The lane `id` (`attach * LANES + lane`) of a task, or `None` for an id
    /// no lane has (ids are read from the file: they are checked, not trusted).
    #[inline]
    pub fn lane(&self, task: u32, id: u32) -> Option<&Lane> {
        if task >= self.geometry.task_capacity || id >= self.geometry.attach_capacity * LANES {
            return None;
        }
        let index = task as usize * (self.geometry.attach_capacity * LANES) as usize + id as usize;
        let offset = self.geometry.lanes_offset() + index * size_of::<Lane>();
        // SAFETY: both indices checked above.
        Some(unsafe { self.at(offset) })
    }

    pub fn baseline(&self, task: u32, attach: u32) -> &Baseline {
        assert!(task < self.geometry.task_capacity && attach < self.geometry.attach_capacity);
        let index = task as usize * self.geometry.attach_capacity as usize + attach as usize;
        let offset = self.geometry.baselines_offset() + index * size_of::<Baseline>();
        // SAFETY: both indices checked above.
        unsafe { self.at(offset) }
    }

    pub fn balancer_slot(&self, balancer: u32) -> &BalancerSlot {
        assert!(balancer < self.geometry.balancer_capacity);
        let offset =
            self.geometry.balancers_offset() + balancer as usize * size_of::<BalancerSlot>();
        // SAFETY: index checked against the validated geometry.
        unsafe { self.at(offset) }
    }

    /// A backend slot, or `None` for an index outside the table (indices
    /// come from caller memory and the file: checked, not trusted).
    pub fn backend_slot(&self, balancer: u32, backend: u32) -> Option<&BackendSlot> {
        let g = &self.geometry;
        if balancer >= g.balancer_capacity || backend >= g.backend_capacity {
            return None;
        }
        let index = balancer as usize * g.backend_capacity as usize + backend as usize;
        let offset = g.backends_offset() + index * size_of::<BackendSlot>();
        // SAFETY: both indices checked above.
        Some(unsafe { self.at(offset) })
    }

    /// The ledger of `attach`'s picks on a backend, or `None` for indices
    /// outside the table.
    pub fn pick_ledger(&self, balancer: u32, attach: u32, backend: u32) -> Option<&PickLedger> {
        let g = &self.geometry;
        if balancer >= g.balancer_capacity
            || attach >= g.attach_capacity
            || backend >= g.backend_capacity
        {
            return None;
        }
        let index = (balancer as usize * g.attach_capacity as usize + attach as usize)
            * g.backend_capacity as usize
            + backend as usize;
        let offset = g.pick_ledgers_offset() + index * size_of::<PickLedger>();
        // SAFETY: every index checked above.
        Some(unsafe { self.at(offset) })
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

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        self.detach();
    }
}
