//! A table opened for reading only, by views (`crate::view`): the same
//! checks of the header and geometry as an attached open, no trust in the
//! owner needed (nothing read is enforced, every index is checked), and a
//! mapping without write permission, from a read-only descriptor. Nothing
//! a view does can change the file, claim an attachment slot or take a
//! lock: whether an attachment's owner lives is asked of the kernel
//! (`F_OFD_GETLK`), not found out by taking its lock.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use memmap2::MmapOptions;

use super::file::{self, Mapped};
use super::{Region, attach};
use crate::error::{Error, ErrorKind, Result};

/// A read-only mapping of a table; its regions through `Deref`.
pub(crate) struct ReadOnly {
    region: Region,
    file: File,
    /// Device and inode of the file mapped, to notice it being replaced.
    identity: (u64, u64),
}

impl ReadOnly {
    pub fn open(path: &Path) -> Result<Self> {
        let mapped = open_read_only(path)?;
        let meta = mapped
            .file
            .metadata()
            .map_err(|e| Error::io(format!("cannot stat table {}", path.display()), e))?;
        Ok(Self {
            region: Region::new(mapped.map, mapped.geometry, mapped.clock, path),
            file: mapped.file,
            identity: (meta.dev(), meta.ino()),
        })
    }

    /// Whether attachment `index`'s owner lives (holds its kernel lock);
    /// `None` when the kernel would not say.
    pub fn owner_alive(&self, index: u32) -> Option<bool> {
        attach::lock_held(self.file.as_raw_fd(), index).ok()
    }

    /// Whether the path no longer names the file mapped.
    pub fn replaced(&self) -> bool {
        std::fs::symlink_metadata(&self.region.path)
            .map(|m| (m.dev(), m.ino()) != self.identity)
            .unwrap_or(true)
    }
}

impl std::ops::Deref for ReadOnly {
    type Target = Region;

    fn deref(&self) -> &Region {
        &self.region
    }
}

/// Opens an existing table for reading only: no trust in its owner is
/// needed (nothing read from it is enforced, and every index is checked),
/// no space is reserved, and the mapping has no write permission, so
/// nothing done through it can change the file. A table this user may not
/// read is a permission error naming its owner and mode.
fn open_read_only(path: &Path) -> Result<Mapped> {
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
    let (geometry, clock) = file::validate(path, &file, meta.len())?;
    let total = geometry.total_size();
    refuse_holes(path, &file, &meta, total)?;
    let map = MmapOptions::new()
        .len(total)
        .map_raw_read_only(&file)
        .map_err(|e| Error::io(format!("cannot map table {shown}"), e))?;
    Ok(Mapped {
        file,
        map,
        geometry,
        clock,
    })
}

/// On tmpfs, reading a hole of a file through a mapping allocates a page,
/// and raises SIGBUS when the filesystem is full. Every table is allocated
/// whole (`reserve`), so a file with holes is not one; a view refuses it
/// rather than read it. (Other filesystems read holes as zeros.)
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
    if fs.f_type == libc::TMPFS_MAGIC && allocated < total as u64 {
        return Err(Error::corrupt(format!(
            "{} has holes ({allocated} of its {total} bytes allocated): flowctrl allocates a \
             table whole, so this is not one",
            path.display()
        )));
    }
    Ok(())
}
