//! A table opened for reading only, by views (`crate::view`). Nothing of
//! the file is mapped: every read pass ([`ReadOnly::copy`]) fstats it and
//! copies the whole table with `pread` into memory of this process, and
//! the readers run on that copy. So the table's owner truncating the file
//! under a view makes that pass an error ("the table shrank under the
//! view"), never a SIGBUS. Each copy is checked as an attached open checks
//! the file (header, geometry, size; every index read from it is checked
//! by the readers), and against the header the view was opened with: a
//! header changed in place is an error of that pass too. No trust in the
//! owner is needed, and nothing a view does can change the file, claim an
//! attachment slot or take a lock: whether an attachment's owner lives is
//! asked of the kernel (`F_OFD_GETLK`), not found out by taking its lock.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::attach;
use super::copy::Copied;
use super::file::{self, Checked};
use super::region::{Backing, Region};
use crate::clock::Clock;
use crate::error::{Error, ErrorKind, Result};
use crate::format::{Geometry, Header};

/// A table file opened for reading, and what its header said then.
pub(crate) struct ReadOnly {
    file: Arc<File>,
    path: PathBuf,
    /// Device and inode of the file opened, to notice it being replaced.
    identity: (u64, u64),
    /// What the header said at open; a copy whose header says otherwise
    /// is a table changed or made anew in place.
    table: Checked,
}

impl ReadOnly {
    pub fn open(path: &Path) -> Result<Self> {
        let file = open_read_only(path)?;
        let meta = file
            .metadata()
            .map_err(|e| Error::io(format!("cannot stat table {}", path.display()), e))?;
        let table = file::validate(path, &file, meta.len())?;
        refuse_holes(path, &file, &meta, table.size())?;
        Ok(Self {
            file: Arc::new(file),
            path: path.to_path_buf(),
            identity: (meta.dev(), meta.ino()),
            table,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn geometry(&self) -> Geometry {
        self.table.geometry
    }

    pub fn clock(&self) -> Clock {
        self.table.clock
    }

    /// One read pass: the whole table copied with `pread` and checked. A
    /// file now shorter than its header declares, or whose header changed,
    /// is an error of this pass; the next may succeed.
    pub fn copy(&self) -> Result<Region> {
        let shown = self.path.display();
        let total = self.table.size();
        let shrank = |len: u64| {
            Error::corrupt(format!(
                "{shown}: the table shrank under the view: it is {len} bytes, its header \
                 declares {total}"
            ))
        };
        let meta = self
            .file
            .metadata()
            .map_err(|e| Error::io(format!("cannot stat table {shown}"), e))?;
        if meta.len() < total as u64 {
            return Err(shrank(meta.len()));
        }
        refuse_holes(&self.path, &self.file, &meta, total)?;
        let copy = Copied::read(&self.file, total)
            .map_err(|e| Error::io(format!("cannot read table {shown}"), e))?;
        if copy.len() < total {
            return Err(shrank(copy.len() as u64));
        }
        let changed = |why: &str| {
            Error::corrupt(format!(
                "{shown}: the table's header changed in place under the view ({why})"
            ))
        };
        // SAFETY: the copy holds the whole table, aligned; its header is
        // made of atomics.
        let h = unsafe { &*(copy.as_ptr() as *const Header) };
        let now =
            file::validate_header(&self.path, h, total as u64).map_err(|e| changed(e.message()))?;
        let was = self.table;
        if now.geometry != was.geometry {
            return Err(changed(&format!("capacities {:?}", now.geometry)));
        }
        if (now.clock.kind(), now.clock.ticks_per_sec())
            != (was.clock.kind(), was.clock.ticks_per_sec())
        {
            return Err(changed("another clock"));
        }
        if now.table_id != was.table_id {
            return Err(changed(
                "another table's id: a table made anew in the same file",
            ));
        }
        if now.lane_sketches != was.lane_sketches {
            return Err(changed("lane sketches come or go"));
        }
        Ok(Region::new(
            Backing::Copy {
                copy,
                file: self.file.clone(),
            },
            was,
            &self.path,
        ))
    }

    /// Whether attachment `index`'s owner lives (holds its kernel lock);
    /// `None` when the kernel would not say.
    pub fn owner_alive(&self, index: u32) -> Option<bool> {
        attach::lock_held(self.file.as_raw_fd(), index).ok()
    }

    /// Whether the path no longer names the file opened.
    pub fn replaced(&self) -> bool {
        std::fs::symlink_metadata(&self.path)
            .map(|m| (m.dev(), m.ino()) != self.identity)
            .unwrap_or(true)
    }
}

/// Opens an existing table for reading only: no trust in its owner is
/// needed (nothing read from it is enforced, and every index is checked),
/// no space is reserved, and the descriptor cannot write, so nothing done
/// through it can change the file. A table this user may not read is a
/// permission error naming its owner and mode.
fn open_read_only(path: &Path) -> Result<File> {
    let shown = path.display();
    // Looked at before opening: opening a FIFO for reading waits for a
    // writer, and opening a device may act on it.
    let meta = std::fs::symlink_metadata(path)
        .map_err(|e| Error::io(format!("cannot open table {shown}"), e))?;
    if meta.file_type().is_symlink() {
        return Err(Error::new(
            ErrorKind::Permission,
            format!("{shown} is a symbolic link; a table is never opened through one"),
        ));
    }
    if !meta.file_type().is_file() {
        return Err(Error::new(
            ErrorKind::Permission,
            format!("{shown} is not a regular file"),
        ));
    }
    let c = file::c_path(path)?;
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY;
    // SAFETY: a valid C string; the descriptor is owned by the File below.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_NONBLOCK) };
    if fd < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::PermissionDenied {
            return Err(Error::new(
                ErrorKind::Permission,
                format!(
                    "cannot read table {shown}: permission denied (it belongs to uid {}, mode {:o}; \
                     reading it needs read permission)",
                    meta.uid(),
                    meta.mode() & 0o7777
                ),
            ));
        }
        return Err(Error::io(format!("cannot open table {shown}"), err));
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    let meta = file
        .metadata()
        .map_err(|e| Error::io(format!("cannot stat table {shown}"), e))?;
    if !meta.file_type().is_file() {
        return Err(Error::new(
            ErrorKind::Permission,
            format!("{shown} is not a regular file"),
        ));
    }
    Ok(file)
}

/// Every table is allocated whole (`reserve`), so on tmpfs a file with
/// holes is not one, or was truncated and grown again under its processes
/// (what they wrote there is gone): a view says so rather than show
/// zeros. (Only on tmpfs, where flowctrl's tables are always allocated.)
fn refuse_holes(path: &Path, file: &File, meta: &std::fs::Metadata, total: usize) -> Result<()> {
    // SAFETY: a zeroed statfs is a valid out-value; fstatfs on our descriptor.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) } != 0 {
        return Err(Error::io(
            format!("cannot stat the filesystem of table {}", path.display()),
            io::Error::last_os_error(),
        ));
    }
    let allocated = meta.blocks().saturating_mul(512);
    // f_type is signed on glibc, unsigned on musl: compared as bits.
    if fs.f_type as u64 == libc::TMPFS_MAGIC as u64 && allocated < total as u64 {
        return Err(Error::corrupt(format!(
            "{} has holes ({allocated} of its {total} bytes allocated): flowctrl allocates a \
             table whole, so it was truncated and grown again, or is not one",
            path.display()
        )));
    }
    Ok(())
}
