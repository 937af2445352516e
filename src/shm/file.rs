//! Creating, publishing, trusting and validating the table file.
//!
//! A new table is built in an unnamed file (`O_TMPFILE`) in the target
//! directory, its space reserved (`posix_fallocate`) and its header written,
//! then it is given its name with `linkat`, which fails if the name exists.
//! So a table at the path is always complete, a crash during creation leaves
//! nothing behind, and when many processes race to create it exactly one wins
//! and the others open the winner's file.
//!
//! An existing file is trusted only when it is a regular file (not followed
//! through a symlink), owned by the expected uid, and not writable by group or
//! others unless a shared table was asked for: whoever can write the file
//! sets everyone's limits. Its space is reserved again on open, so pages that
//! were never touched cannot raise SIGBUS when /dev/shm fills up later.
//!
//! A view opens a table for reading only (`read_only.rs`), with the same
//! checks of the header and geometry (`validate_header`), run again on
//! every copy it reads.

use std::ffi::CString;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use crate::clock::{Clock, ClockKind};
use crate::error::{Error, ErrorKind, Result};
use crate::format::*;

/// Who may own the file and whether others may write it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Trust {
    pub owner: u32,
    pub shared: bool,
}

/// A validated, mapped table file and the descriptor it was opened with.
pub(crate) struct Mapped {
    pub file: File,
    pub map: MmapRaw,
    pub table: Checked,
}

/// What a header that passed [`validate_header`] says of its table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Checked {
    pub geometry: Geometry,
    pub clock: Clock,
    pub table_id: u64,
    /// The file carries a [`LaneSketch`] per lane after `total_size`.
    pub lane_sketches: bool,
}

impl Checked {
    /// The bytes a mapping or a copy of the table holds.
    pub fn size(&self) -> usize {
        if self.lane_sketches {
            self.geometry.size_with_sketches()
        } else {
            self.geometry.total_size()
        }
    }
}

/// Opens the table at `path`, creating it with `geometry` and `mode` if it
/// does not exist. `geometry` and `mode` are ignored for an existing table.
pub(crate) fn open_or_create(
    path: &Path,
    geometry: Geometry,
    mode: u32,
    trust: Trust,
) -> Result<Mapped> {
    // Two rounds suffice: if creation loses the race, the file now exists.
    for _ in 0..3 {
        match open_nofollow(path) {
            Ok(file) => return open_existing(path, file, trust),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(mapped) = create(path, geometry, mode)? {
                    return Ok(mapped);
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(Error::new(
                    ErrorKind::Permission,
                    format!(
                        "{} is a symbolic link; a table is never opened through one",
                        path.display()
                    ),
                ));
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

pub(super) fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::invalid(format!("path {} contains a NUL byte", path.display())))
}

pub(super) fn open_nofollow(path: &Path) -> io::Result<File> {
    let c = c_path(path)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.message().to_owned()))?;
    // SAFETY: a valid C string; the descriptor is owned by the File below.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Builds a table in an unnamed file and links it into place. `None` when
/// another process published a table at `path` first.
fn create(path: &Path, geometry: Geometry, mode: u32) -> Result<Option<Mapped>> {
    let shown = path.display();
    let (file, temp) = unnamed_file(path)?;
    // A named temporary (no O_TMPFILE here) goes away in every case; once
    // linked, the table lives on under `path`.
    let _cleanup = temp.as_deref().map(RemoveOnDrop);
    let size = geometry.size_with_sketches();
    reserve(&file, size, path)?;
    let map = map_file(&file, size, path)?;
    let clock = Clock::detect();
    let table_id = random_u64();
    // SAFETY: the mapping is `size` bytes, page-aligned, and nobody else can
    // see this file yet.
    let h = unsafe { &*(map.as_ptr() as *const Header) };
    let set = |f: &std::sync::atomic::AtomicU32, v: u32| f.store(v, Ordering::Relaxed);
    set(&h.layout_version, geometry.layout_version());
    set(&h.lane_sets, geometry.lane_sets);
    set(&h.lane_sketch_size, size_of::<LaneSketch>() as u32);
    set(&h.header_size, size_of::<Header>() as u32);
    set(&h.task_slot_size, size_of::<TaskSlot>() as u32);
    set(&h.attach_slot_size, size_of::<AttachSlot>() as u32);
    set(&h.lane_size, size_of::<Lane>() as u32);
    set(&h.baseline_size, size_of::<Baseline>() as u32);
    set(&h.task_capacity, geometry.task_capacity);
    set(&h.attach_capacity, geometry.attach_capacity);
    set(&h.balancer_capacity, geometry.balancer_capacity);
    set(&h.backend_capacity, geometry.backend_capacity);
    set(&h.balancer_slot_size, size_of::<BalancerSlot>() as u32);
    set(&h.backend_slot_size, size_of::<BackendSlot>() as u32);
    set(&h.clock_kind, clock.kind() as u32);
    h.ticks_per_sec
        .store(clock.ticks_per_sec(), Ordering::Relaxed);
    h.total_size
        .store(geometry.total_size() as u64, Ordering::Relaxed);
    h.table_id.store(table_id, Ordering::Relaxed);
    h.magic.store(MAGIC, Ordering::Release);
    // The umask must not narrow (or widen) what the caller asked for.
    // SAFETY: plain fchmod on our descriptor.
    if unsafe { libc::fchmod(file.as_raw_fd(), mode as libc::mode_t) } != 0 {
        return Err(Error::io(
            format!("cannot set mode of table {shown}"),
            io::Error::last_os_error(),
        ));
    }
    let published = match &temp {
        None => link_unnamed(&file, path),
        Some(t) => std::fs::hard_link(t, path),
    };
    match published {
        Ok(()) => Ok(Some(Mapped {
            file,
            map,
            table: Checked {
                geometry,
                clock,
                table_id,
                lane_sketches: true,
            },
        })),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(Error::io(format!("cannot publish table {shown}"), e)),
    }
}

/// An `O_TMPFILE` in the directory of `path`; where the filesystem has none,
/// a named temporary beside it (returned with its path, to be removed).
pub(super) fn unnamed_file(path: &Path) -> Result<(File, Option<std::path::PathBuf>)> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let c = c_path(dir)?;
    // SAFETY: a valid C string; the descriptor is owned by the File below.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd >= 0 {
        // SAFETY: a fresh descriptor.
        return Ok((unsafe { File::from_raw_fd(fd) }, None));
    }
    let err = io::Error::last_os_error();
    if !matches!(
        err.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
    ) {
        return Err(Error::io(
            format!("cannot create table {}", path.display()),
            err,
        ));
    }
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{}.{:016x}.tmp", std::process::id(), random_u64()));
    let temp = std::path::PathBuf::from(name);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(|e| Error::io(format!("cannot create table {}", path.display()), e))?;
    Ok((file, Some(temp)))
}

/// Gives an `O_TMPFILE` its name. Through /proc where it is mounted, else
/// with `AT_EMPTY_PATH` (which needs CAP_DAC_READ_SEARCH).
pub(super) fn link_unnamed(file: &File, path: &Path) -> io::Result<()> {
    let target = c_path(path)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.message().to_owned()))?;
    let proc_path = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).unwrap_or_default();
    // SAFETY: valid C strings and descriptors.
    let r = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc_path.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.kind() == io::ErrorKind::AlreadyExists {
        return Err(err);
    }
    // SAFETY: as above.
    let r = unsafe {
        libc::linkat(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reserves `size` bytes of backing store, so a full /dev/shm is an error
/// now and never a SIGBUS at the first touch of a page later.
pub(super) fn reserve(file: &File, size: usize, path: &Path) -> Result<()> {
    // SAFETY: plain posix_fallocate on our descriptor.
    let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, size as libc::off_t) };
    match r {
        0 => Ok(()),
        libc::ENOSPC => Err(Error::new(
            ErrorKind::Io,
            format!(
                "no space for table {} ({size} bytes): its filesystem is full; \
                 make it larger or create the table with a smaller capacity or max_processes",
                path.display()
            ),
        )),
        e => Err(Error::io(
            format!("cannot reserve {size} bytes for table {}", path.display()),
            io::Error::from_raw_os_error(e),
        )),
    }
}

/// Checks who owns the file and who may write it.
pub(super) fn check_trust(path: &Path, meta: &std::fs::Metadata, trust: Trust) -> Result<()> {
    let shown = path.display();
    if !meta.file_type().is_file() {
        return Err(Error::new(
            ErrorKind::Permission,
            format!("{shown} is not a regular file"),
        ));
    }
    if meta.uid() != trust.owner {
        return Err(Error::new(
            ErrorKind::Permission,
            format!(
                "{shown} belongs to uid {}, not {}: a table is trusted only from its expected owner \
                 (name the owner in the options to accept it)",
                meta.uid(),
                trust.owner
            ),
        ));
    }
    if meta.mode() & 0o022 != 0 && !trust.shared {
        return Err(Error::new(
            ErrorKind::Permission,
            format!(
                "{shown} is writable by group or others (mode {:o}): anyone who can write it sets \
                 everyone's limits; open it as a shared table to accept that",
                meta.mode() & 0o777
            ),
        ));
    }
    Ok(())
}

/// Maps an existing table and checks everything the header claims before
/// anything else is trusted.
fn open_existing(path: &Path, file: File, trust: Trust) -> Result<Mapped> {
    let meta = file
        .metadata()
        .map_err(|e| Error::io(format!("cannot stat table {}", path.display()), e))?;
    check_trust(path, &meta, trust)?;
    let table = validate(path, &file, meta.len())?;
    reserve(&file, table.size(), path)?;
    let map = map_file(&file, table.size(), path)?;
    Ok(Mapped { file, map, table })
}

/// Checks everything the header of `file` (`len` bytes) claims, on a copy
/// of it read with `pread` (a file truncated meanwhile is a short read,
/// never a fault); returns the geometry and clock a mapping or a copy of
/// the whole table may then rely on.
pub(super) fn validate(path: &Path, file: &File, len: u64) -> Result<Checked> {
    let shown = path.display();
    if len < HEADER_SIZE as u64 {
        return Err(Error::corrupt(format!(
            "{shown} is {len} bytes, too small to be a flowctrl table (truncated or not a table)"
        )));
    }
    let head = super::copy::Copied::read(file, HEADER_SIZE)
        .map_err(|e| Error::io(format!("cannot read table {shown}"), e))?;
    if head.len() < HEADER_SIZE {
        return Err(Error::corrupt(format!(
            "{shown} is {} bytes, too small to be a flowctrl table (truncated meanwhile)",
            head.len()
        )));
    }
    // SAFETY: the copy holds a whole header, aligned, made of atomics.
    validate_header(path, unsafe { &*(head.as_ptr() as *const Header) }, len)
}

/// Checks everything header `h` of a file of `len` bytes claims; the
/// geometry, the clock and the table's id.
pub(super) fn validate_header(path: &Path, h: &Header, len: u64) -> Result<Checked> {
    let shown = path.display();
    let get = |f: &std::sync::atomic::AtomicU32| f.load(Ordering::Relaxed);
    let get64 = |f: &AtomicU64| f.load(Ordering::Relaxed);
    if load_acquire(&h.magic) != MAGIC {
        return Err(Error::corrupt(format!(
            "{shown} is not a flowctrl table (bad magic)"
        )));
    }
    let version = get(&h.layout_version);
    if version != LAYOUT_VERSION && version != POOLED_LAYOUT_VERSION {
        return Err(Error::new(
            ErrorKind::Incompatible,
            format!(
                "{shown} has table layout version {version}; this flowctrl speaks versions \
                 {LAYOUT_VERSION} and {POOLED_LAYOUT_VERSION} (pooled lanes)"
            ),
        ));
    }
    let sizes = [
        (get(&h.header_size), size_of::<Header>(), "header"),
        (get(&h.task_slot_size), size_of::<TaskSlot>(), "task slot"),
        (
            get(&h.attach_slot_size),
            size_of::<AttachSlot>(),
            "attachment slot",
        ),
        (get(&h.lane_size), size_of::<Lane>(), "lane"),
        (get(&h.baseline_size), size_of::<Baseline>(), "baseline"),
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
        task_capacity: get(&h.task_capacity),
        attach_capacity: get(&h.attach_capacity),
        balancer_capacity: get(&h.balancer_capacity),
        backend_capacity: get(&h.backend_capacity),
        lane_sets: get(&h.lane_sets),
    };
    // A table made before balancers has zeros here: no balancer regions.
    let balancer_sizes_ok = geometry.balancer_capacity == 0
        || (get(&h.balancer_slot_size) as usize == size_of::<BalancerSlot>()
            && get(&h.backend_slot_size) as usize == size_of::<BackendSlot>());
    if !geometry.within_bounds() || !balancer_sizes_ok {
        return Err(Error::corrupt(format!(
            "{shown}: capacities {geometry:?} are out of range (damaged header)"
        )));
    }
    // The version and the pool size must agree: each names the other's
    // layout of the lanes, and read with the wrong one every lane, pair map
    // and total would be looked for in the wrong place.
    if geometry.layout_version() != version {
        return Err(Error::corrupt(format!(
            "{shown}: layout version {version} with {} lane sets: version {LAYOUT_VERSION} has a \
             set per pair (0 in the header), version {POOLED_LAYOUT_VERSION} a pool of them \
             (damaged header)",
            geometry.lane_sets
        )));
    }
    let total = get64(&h.total_size);
    if total != geometry.total_size() as u64 {
        return Err(Error::corrupt(format!(
            "{shown}: header says {total} bytes but its capacities need {} (damaged header)",
            geometry.total_size()
        )));
    }
    let lane_sketches = match get(&h.lane_sketch_size) {
        0 => false,
        size if size as usize == size_of::<LaneSketch>() => true,
        size => {
            return Err(Error::corrupt(format!(
                "{shown}: lane sketch size is {size} bytes, this flowctrl expects 0 (none) or {} \
                 (damaged header)",
                size_of::<LaneSketch>()
            )));
        }
    };
    let needed = if lane_sketches {
        geometry.size_with_sketches() as u64
    } else {
        total
    };
    if len < needed {
        return Err(Error::corrupt(format!(
            "{shown} is {len} bytes but the table needs {needed} (truncated)"
        )));
    }
    let kind = get(&h.clock_kind);
    let ticks = get64(&h.ticks_per_sec);
    match ClockKind::from_raw(kind) {
        Some(kind) if (1_000..=1 << 40).contains(&ticks) => Ok(Checked {
            geometry,
            clock: Clock::new(kind, ticks),
            table_id: get64(&h.table_id),
            lane_sketches,
        }),
        _ => Err(Error::new(
            ErrorKind::Incompatible,
            format!("{shown}: unknown clock {kind} at {ticks} ticks/s"),
        )),
    }
}

pub(super) fn map_file(file: &File, len: usize, path: &Path) -> Result<MmapRaw> {
    MmapOptions::new()
        .len(len)
        .map_raw(file)
        .map_err(|e| Error::io(format!("cannot map table {}", path.display()), e))
}

/// Random enough to tell tables apart; std seeds `RandomState` from the OS.
pub(crate) fn random_u64() -> u64 {
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u64(crate::clock::monotonic_ns());
    h.finish()
}

pub(super) struct RemoveOnDrop<'a>(pub(super) &'a Path);

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}
