//! Files beside a table (a keyed task's key file): created, published and
//! trusted as the table is. A new one is built unnamed, its space
//! reserved, initialised by the caller and then linked into place, so a
//! side file at its path is always complete; an existing one is trusted
//! only from the table's owner, and no more writable than the table.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use memmap2::MmapRaw;

use super::file::{self, RemoveOnDrop, Trust};
use crate::error::{Error, ErrorKind, Result};

/// A mapped side file.
pub(crate) struct Side {
    pub file: File,
    pub map: MmapRaw,
}

/// Opens the side file at `path`, or creates it with `size` bytes, `mode`,
/// and `init` run on its mapping before anyone can see it. `check` validates
/// an existing file's first bytes (given its length) and returns the size
/// to map; it runs on a read-only copy of the header, never on a mapping a
/// truncation could take away under it.
pub(crate) fn open_or_create(
    path: &Path,
    size: usize,
    (owner, mode): (u32, u32),
    init: impl FnOnce(&MmapRaw),
    check: impl Fn(&[u8], u64) -> Result<usize>,
) -> Result<Side> {
    let trust = Trust {
        owner,
        shared: mode & 0o022 != 0,
    };
    match file::open_nofollow(path) {
        Ok(f) => open_existing(path, f, trust, &check),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(side) = create(path, size, mode & 0o777, init)? {
                return Ok(side);
            }
            // Lost the race to publish: open the winner's.
            match file::open_nofollow(path) {
                Ok(f) => open_existing(path, f, trust, &check),
                Err(e) => Err(Error::io(format!("cannot open {}", path.display()), e)),
            }
        }
        Err(e) => Err(Error::io(format!("cannot open {}", path.display()), e)),
    }
}

fn create(
    path: &Path,
    size: usize,
    mode: u32,
    init: impl FnOnce(&MmapRaw),
) -> Result<Option<Side>> {
    let (f, temp) = file::unnamed_file(path)?;
    let _cleanup = temp.as_deref().map(RemoveOnDrop);
    file::reserve(&f, size, path)?;
    let map = file::map_file(&f, size, path)?;
    init(&map);
    // SAFETY: plain fchmod on our descriptor.
    if unsafe { libc::fchmod(f.as_raw_fd(), mode as libc::mode_t) } != 0 {
        return Err(Error::io(
            format!("cannot set mode of {}", path.display()),
            io::Error::last_os_error(),
        ));
    }
    let published = match &temp {
        None => file::link_unnamed(&f, path),
        Some(t) => std::fs::hard_link(t, path),
    };
    match published {
        Ok(()) => Ok(Some(Side { file: f, map })),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(Error::io(format!("cannot publish {}", path.display()), e)),
    }
}

fn open_existing(
    path: &Path,
    f: File,
    trust: Trust,
    check: &impl Fn(&[u8], u64) -> Result<usize>,
) -> Result<Side> {
    let meta = f
        .metadata()
        .map_err(|e| Error::io(format!("cannot stat {}", path.display()), e))?;
    file::check_trust(path, &meta, trust)?;
    let mut head = vec![0u8; 4096];
    let read = std::os::unix::fs::FileExt::read_at(&f, &mut head, 0)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    head.truncate(read);
    let size = check(&head, meta.size())?;
    if (meta.size() as usize) < size {
        return Err(Error::new(
            ErrorKind::Corrupt,
            format!(
                "{} is {} bytes, shorter than the {size} its header states",
                path.display(),
                meta.size()
            ),
        ));
    }
    file::reserve(&f, size, path)?;
    let map = file::map_file(&f, size, path)?;
    Ok(Side { file: f, map })
}
