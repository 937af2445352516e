//! The shared-memory task table: one file every process on the host maps.

mod attach;
mod file;
pub(crate) mod layout;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use memmap2::MmapRaw;

use attach::Attachment;
use attach::process_start_time;
use layout::*;

use crate::clock::Clock;
use crate::error::{Error, ErrorKind, Result};
use crate::task::{Task, TaskConfig};

/// Where a table lives when no path is given.
pub const DEFAULT_DIR: &str = "/dev/shm";
/// The file name of the default table.
pub const DEFAULT_NAME: &str = "flowctrl";
/// How often at most the reaper looks for dead processes when a task's
/// concurrency is exhausted.
const REAP_INTERVAL: Duration = Duration::from_millis(10);

/// How to create a table. Only used when the file does not exist yet; an
/// existing table keeps the geometry it was created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableOptions {
    /// Number of task slots (default 1024).
    pub capacity: u32,
    /// Number of processes that may be attached at once (default 128).
    pub max_processes: u32,
    /// File mode of a new table (default 0o600: only the owner's processes).
    pub mode: u32,
    /// The uid an existing table must belong to; `None` = this process's
    /// effective uid. Anyone who can write the file sets everyone's limits.
    pub owner: Option<u32>,
    /// Accept (and create) a table that group or others may write. Off by
    /// default: such a table lets other users change or break the limits.
    pub shared: bool,
}

impl Default for TableOptions {
    fn default() -> Self {
        Self {
            capacity: 1024,
            max_processes: 128,
            mode: 0o600,
            owner: None,
            shared: false,
        }
    }
}

impl TableOptions {
    fn validate(&self) -> Result<Geometry> {
        if !(1..=MAX_TASK_CAPACITY).contains(&self.capacity) {
            return Err(Error::invalid(format!(
                "capacity must be 1..={MAX_TASK_CAPACITY}, not {}",
                self.capacity
            )));
        }
        if !(1..=MAX_ATTACH_CAPACITY).contains(&self.max_processes) {
            return Err(Error::invalid(format!(
                "max_processes must be 1..={MAX_ATTACH_CAPACITY}, not {}",
                self.max_processes
            )));
        }
        if self.mode & !0o777 != 0 || self.mode & 0o600 != 0o600 {
            return Err(Error::invalid(format!(
                "mode {:#o} must be permission bits including owner read and write (0o600)",
                self.mode
            )));
        }
        Ok(Geometry {
            task_capacity: self.capacity,
            attach_capacity: self.max_processes,
        })
    }
}

/// Resolves the path a user gave: none → `/dev/shm/flowctrl`, a bare name →
/// `/dev/shm/<name>`, anything with a `/` → itself.
pub fn resolve_path(path: Option<&Path>) -> PathBuf {
    match path {
        None => Path::new(DEFAULT_DIR).join(DEFAULT_NAME),
        Some(p) if p.components().count() == 1 && !p.has_root() && p != Path::new(".") => {
            Path::new(DEFAULT_DIR).join(p)
        }
        Some(p) => p.to_path_buf(),
    }
}

/// A handle to a table. Cheap to clone; every clone and every [`Task`] made
/// from it share one mapping and one attachment per process.
#[derive(Clone)]
pub struct Table {
    inner: Arc<TableInner>,
}

pub(crate) struct TableInner {
    map: MmapRaw,
    pub(crate) geometry: Geometry,
    pub(crate) clock: Clock,
    pub(crate) table_id: u64,
    pub(crate) path: PathBuf,
    reap_interval: u64,
    attachment: Attachment,
}

impl Table {
    /// Opens the table at `path` (see [`resolve_path`]), creating it if it does
    /// not exist, and attaches this process to it.
    pub fn open(path: impl AsRef<Path>, options: &TableOptions) -> Result<Self> {
        let geometry = options.validate()?;
        let path = resolve_path(Some(path.as_ref()));
        let mapped = file::open_or_create(&path, geometry, options.mode)?;
        let inner = TableInner {
            reap_interval: mapped.clock.duration_to_ticks(REAP_INTERVAL),
            map: mapped.map,
            geometry: mapped.geometry,
            clock: mapped.clock,
            table_id: mapped.table_id,
            path,
            attachment: Attachment::new(),
        };
        inner.owner()?;
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// Opens the default table, `/dev/shm/flowctrl`.
    pub fn open_default(options: &TableOptions) -> Result<Self> {
        Self::open(resolve_path(None), options)
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Number of task slots.
    pub fn capacity(&self) -> u32 {
        self.inner.geometry.task_capacity
    }

    /// Number of attachment slots.
    pub fn max_processes(&self) -> u32 {
        self.inner.geometry.attach_capacity
    }

    /// The clock decisions are taken against.
    pub fn clock(&self) -> Clock {
        self.inner.clock
    }

    /// Registers the task `name`, or attaches to it if any process on the host
    /// registered it already. The first registration sets the configuration:
    /// a later one that names a different value for any field it sets fails
    /// with [`ErrorKind::ConfigMismatch`] (fields left unset are not
    /// compared); [`Task::update`] changes a task's configuration on purpose.
    pub fn task(&self, name: &str, config: &TaskConfig) -> Result<Task> {
        validate_name(name)?;
        let settings = config.validate(&self.inner.clock)?;
        let clock = self.inner.clock;
        let index = self
            .inner
            .find_or_claim(name, |slot| settings.or_defaults().store(slot, &clock))?;
        let task = Task::new(self.inner.clone(), index, name);
        task.check_matches(config)?;
        Ok(task)
    }

    /// Looks for dead processes now and gives back what they held; returns
    /// whether any was found. Runs by itself on attach and when a task's
    /// concurrency is exhausted, so calling it is rarely needed.
    pub fn reap(&self) -> bool {
        self.inner.reap(true)
    }
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("path", &self.inner.path)
            .field("capacity", &self.capacity())
            .field("max_processes", &self.max_processes())
            .finish()
    }
}

/// Checks a task name: 1–63 bytes of printable UTF-8.
pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!("task name must be 1..={NAME_MAX} bytes, not {}", name.len()),
        ));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!("task name must be printable, found {c:?}"),
        ));
    }
    Ok(())
}

fn name_words(name: &str) -> [u64; NAME_WORDS] {
    let mut bytes = [0u8; NAME_WORDS * 8];
    bytes[..name.len()].copy_from_slice(name.as_bytes());
    std::array::from_fn(|i| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap()))
}

/// FNV-1a: spreads names over the slots; collisions probe linearly.
fn hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

impl TableInner {
    fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    pub(crate) fn header(&self) -> &Header {
        // SAFETY: the mapping was validated to hold a header; only its atomics
        // are read through this reference after open.
        unsafe { &*(self.base() as *const Header) }
    }

    pub(crate) fn task_slot(&self, index: u32) -> &TaskSlot {
        assert!(index < self.geometry.task_capacity);
        // SAFETY: in bounds of the validated mapping; TaskSlot is atomics and padding.
        unsafe {
            &*(self.base().add(self.geometry.tasks_offset()) as *const TaskSlot).add(index as usize)
        }
    }

    pub(crate) fn cell(&self, task: u32, attach: u32, stripe: u32) -> &StatCell {
        assert!(
            task < self.geometry.task_capacity
                && attach < self.geometry.attach_capacity
                && stripe < STRIPES
        );
        // SAFETY: in bounds of the validated mapping; StatCell is atomics and padding.
        unsafe {
            &*(self
                .base()
                .add(self.geometry.cell_offset(task, attach, stripe))
                as *const StatCell)
        }
    }

    /// Every stripe of an attachment's cells for a task.
    pub(crate) fn cells(&self, task: u32, attach: u32) -> [&StatCell; STRIPES as usize] {
        std::array::from_fn(|stripe| self.cell(task, attach, stripe as u32))
    }

    /// Finds the slot holding `name`, or claims an empty one and fills it with
    /// `init` before publishing it.
    fn find_or_claim(&self, name: &str, init: impl Fn(&TaskSlot)) -> Result<u32> {
        let words = name_words(name);
        let capacity = self.geometry.task_capacity;
        let start = (hash(name) % capacity as u64) as u32;
        let me = std::process::id() as u64;
        for probe in 0..capacity {
            let index = (start + probe) % capacity;
            let slot = self.task_slot(index);
            loop {
                match slot.state.load(Ordering::Acquire) {
                    TASK_READY => {
                        let same = slot.name_len.load(Ordering::Relaxed) as usize == name.len()
                            && slot
                                .name
                                .iter()
                                .zip(&words)
                                .all(|(w, v)| w.load(Ordering::Relaxed) == *v);
                        if same {
                            return Ok(index);
                        }
                        break;
                    }
                    TASK_EMPTY => {
                        if slot
                            .state
                            .compare_exchange(
                                TASK_EMPTY,
                                TASK_CLAIMING | me,
                                Ordering::Acquire,
                                Ordering::Relaxed,
                            )
                            .is_ok()
                        {
                            for (w, v) in slot.name.iter().zip(&words) {
                                w.store(*v, Ordering::Relaxed);
                            }
                            slot.name_len.store(name.len() as u32, Ordering::Relaxed);
                            init(slot);
                            slot.state.store(TASK_READY, Ordering::Release);
                            return Ok(index);
                        }
                    }
                    claiming if claiming & STATE_MASK == TASK_CLAIMING => {
                        // Another process is filling this slot: wait for it,
                        // unless it died half-way, then take the slot over.
                        let pid = (claiming & PID_MASK) as u32;
                        if process_start_time(pid).is_none() {
                            let _ = slot.state.compare_exchange(
                                claiming,
                                TASK_EMPTY,
                                Ordering::Relaxed,
                                Ordering::Relaxed,
                            );
                        } else {
                            std::thread::yield_now();
                        }
                    }
                    other => {
                        return Err(Error::corrupt(format!(
                            "{}: task slot {index} has an unknown state {other:#x}",
                            self.path.display()
                        )));
                    }
                }
            }
        }
        Err(Error::new(
            ErrorKind::TableFull,
            format!(
                "all {capacity} task slots of {} are taken; cannot register {name:?}",
                self.path.display()
            ),
        ))
    }
}

impl Drop for TableInner {
    fn drop(&mut self) {
        self.detach();
    }
}
