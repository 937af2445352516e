//! Creating, publishing and validating the table file.
//!
//! A new table is built in a private temporary file beside the final path and
//! published with `link(2)`, which fails if the path exists: so a table at the
//! path is always complete, and when many processes race to create it exactly
//! one wins and the others open the winner's file.

use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::ErrorKind as IoKind;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use memmap2::{MmapOptions, MmapRaw};

use super::layout::*;
use crate::clock::{Clock, ClockKind};
use crate::error::{Error, ErrorKind, Result};

/// A validated, mapped table file.
pub(crate) struct Mapped {
    pub map: MmapRaw,
    pub geometry: Geometry,
    pub clock: Clock,
    pub table_id: u64,
}

/// Opens the table at `path`, creating it with `geometry` and `mode` if it
/// does not exist. `geometry` is ignored for an existing table.
pub(crate) fn open_or_create(path: &Path, geometry: Geometry, mode: u32) -> Result<Mapped> {
    // Two rounds suffice: if creation loses the race, the file now exists.
    for _ in 0..3 {
        match OpenOptions::new().read(true).write(true).open(path) {
            Ok(file) => return open_existing(path, &file),
            Err(e) if e.kind() == IoKind::NotFound => {
                if let Some(mapped) = create(path, geometry, mode)? {
                    return Ok(mapped);
                }
            }
            Err(e) => {
                return Err(Error::io(
                    format!("cannot open table {}", path.display()),
                    e,
                ));
            }
        }
    }
    Err(Error::new(
        ErrorKind::Io,
        format!(
            "table {} keeps disappearing while being opened",
            path.display()
        ),
    ))
}

/// Builds a table in a temporary file and links it into place. `None` when
/// another process published a table at `path` first.
fn create(path: &Path, geometry: Geometry, mode: u32) -> Result<Option<Mapped>> {
    let tmp = temp_path(path);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| Error::io(format!("cannot create table {}", path.display()), e))?;
    // The temporary name goes away in every case; once linked, the table
    // lives on under `path`.
    let _cleanup = RemoveOnDrop(&tmp);
    let size = geometry.total_size();
    file.set_len(size as u64)
        .map_err(|e| Error::io(format!("cannot size table {}", path.display()), e))?;
    let map = map_file(&file, size, path)?;
    let clock = Clock::detect();
    let table_id = random_u64();
    // SAFETY: the mapping is at least HEADER_SIZE bytes, page-aligned, and no
    // other process can see this file yet.
    unsafe {
        let h = map.as_mut_ptr() as *mut Header;
        (*h).layout_version = LAYOUT_VERSION;
        (*h).header_size = size_of::<Header>() as u32;
        (*h).task_slot_size = size_of::<TaskSlot>() as u32;
        (*h).attach_slot_size = size_of::<AttachSlot>() as u32;
        (*h).stat_cell_size = size_of::<StatCell>() as u32;
        (*h).task_capacity = geometry.task_capacity;
        (*h).attach_capacity = geometry.attach_capacity;
        (*h).clock_kind = clock.kind() as u32;
        (*h).ticks_per_sec = clock.ticks_per_sec();
        (*h).total_size = size as u64;
        (*h).table_id = table_id;
        (*h).magic.store(MAGIC, Ordering::Release);
    }
    // The umask must not narrow (or widen) what the caller asked for.
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(format!("cannot set mode of table {}", path.display()), e))?;
    match std::fs::hard_link(&tmp, path) {
        Ok(()) => Ok(Some(Mapped {
            map,
            geometry,
            clock,
            table_id,
        })),
        Err(e) if e.kind() == IoKind::AlreadyExists => Ok(None),
        Err(e) => Err(Error::io(
            format!("cannot publish table {}", path.display()),
            e,
        )),
    }
}

/// Maps an existing table and checks everything the header claims before
/// anything else is trusted.
fn open_existing(path: &Path, file: &File) -> Result<Mapped> {
    let shown = path.display();
    let len = file
        .metadata()
        .map_err(|e| Error::io(format!("cannot stat table {shown}"), e))?
        .len();
    if len < HEADER_SIZE as u64 {
        return Err(Error::corrupt(format!(
            "{shown} is {len} bytes, too small to be a flowctrl table (truncated or not a table)"
        )));
    }
    let len = usize::try_from(len).map_err(|_| Error::corrupt(format!("{shown} is too large")))?;
    let map = map_file(file, len, path)?;
    let h = map.as_ptr() as *const Header;
    // SAFETY: the mapping holds at least a header. Plain fields are copied out
    // with volatile reads: another process could be writing garbage into them.
    let read = |f: *const u32| unsafe { std::ptr::read_volatile(f) };
    let read64 = |f: *const u64| unsafe { std::ptr::read_volatile(f) };
    let magic = unsafe { (*h).magic.load(Ordering::Acquire) };
    if magic != MAGIC {
        return Err(Error::corrupt(format!(
            "{shown} is not a flowctrl table (bad magic)"
        )));
    }
    let version = read(unsafe { &raw const (*h).layout_version });
    if version != LAYOUT_VERSION {
        return Err(Error::new(
            ErrorKind::Incompatible,
            format!(
                "{shown} has table layout version {version}; this flowctrl speaks version {LAYOUT_VERSION}"
            ),
        ));
    }
    let sizes = [
        (
            read(unsafe { &raw const (*h).header_size }),
            size_of::<Header>(),
            "header",
        ),
        (
            read(unsafe { &raw const (*h).task_slot_size }),
            size_of::<TaskSlot>(),
            "task slot",
        ),
        (
            read(unsafe { &raw const (*h).attach_slot_size }),
            size_of::<AttachSlot>(),
            "attachment slot",
        ),
        (
            read(unsafe { &raw const (*h).stat_cell_size }),
            size_of::<StatCell>(),
            "statistics cell",
        ),
    ];
    for (found, expected, what) in sizes {
        if found as usize != expected {
            return Err(Error::new(
                ErrorKind::Incompatible,
                format!("{shown}: {what} size is {found} bytes, this flowctrl expects {expected}"),
            ));
        }
    }
    let geometry = Geometry {
        task_capacity: read(unsafe { &raw const (*h).task_capacity }),
        attach_capacity: read(unsafe { &raw const (*h).attach_capacity }),
    };
    if !(1..=MAX_TASK_CAPACITY).contains(&geometry.task_capacity)
        || !(1..=MAX_ATTACH_CAPACITY).contains(&geometry.attach_capacity)
    {
        return Err(Error::corrupt(format!(
            "{shown}: capacities {geometry:?} are out of range (damaged header)"
        )));
    }
    let total = read64(unsafe { &raw const (*h).total_size });
    if total != geometry.total_size() as u64 {
        return Err(Error::corrupt(format!(
            "{shown}: header says {total} bytes but its capacities need {} (damaged header)",
            geometry.total_size()
        )));
    }
    if (len as u64) < total {
        return Err(Error::corrupt(format!(
            "{shown} is {len} bytes but the table needs {total} (truncated)"
        )));
    }
    let kind = read(unsafe { &raw const (*h).clock_kind });
    let ticks = read64(unsafe { &raw const (*h).ticks_per_sec });
    let clock = match ClockKind::from_raw(kind) {
        Some(kind) if ticks > 0 => Clock::new(kind, ticks),
        _ => {
            return Err(Error::new(
                ErrorKind::Incompatible,
                format!("{shown}: unknown clock {kind} at {ticks} ticks/s"),
            ));
        }
    };
    Ok(Mapped {
        map,
        geometry,
        clock,
        table_id: read64(unsafe { &raw const (*h).table_id }),
    })
}

fn map_file(file: &File, len: usize, path: &Path) -> Result<MmapRaw> {
    MmapOptions::new()
        .len(len)
        .map_raw(file)
        .map_err(|e| Error::io(format!("cannot map table {}", path.display()), e))
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{}.{:016x}.tmp", std::process::id(), random_u64()));
    PathBuf::from(name)
}

/// Random enough to tell tables and temporary files apart; std seeds
/// `RandomState` from the OS.
pub(crate) fn random_u64() -> u64 {
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u64(crate::clock::monotonic_ns());
    h.finish()
}

struct RemoveOnDrop<'a>(&'a Path);

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}
