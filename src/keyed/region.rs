//! A keyed task's key file, mapped: made beside the table when the task is
//! first given key limits (`<table>.keys.<slot>`), validated against the
//! table and task it belongs to on every open, and read through bounds-
//! checked accessors only.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapRaw;

use crate::error::{Error, Result};
use crate::format::{
    BUCKET_KEYS, Bucket, GlobalWords, KEYS_HEADER_SIZE, KEYS_MAGIC, KEYS_VERSION, KeyConfig,
    KeyCounter, KeyEntry, KeyRecord, KeysGeometry, KeysHeader, NameSlot,
};
use crate::shm::Shm;
use crate::shm::copy::Copied;

/// The entry index a permit holds for the shared overflow state.
pub(crate) const OVERFLOW: u32 = u32::MAX;

/// Keys a key file holds unless told otherwise.
pub const DEFAULT_KEY_CAPACITY: u32 = 65_536;
/// The most keys one key file holds (2^24: 1 GiB of entries).
pub const MAX_KEY_CAPACITY: u32 = 1 << 24;
/// Keys whose display name is kept for the views.
const NAMES: u32 = 4096;

pub(crate) struct KeyRegion {
    base: *const u8,
    len: usize,
    _backing: Backing,
    pub geometry: KeysGeometry,
    pub hash_key: (u64, u64),
    pub path: PathBuf,
    buckets_at: usize,
}

/// What holds the bytes: a shared mapping for the request path, a private
/// copy read with `pread` for a view (`shm::copy`: a copy cannot fault
/// when the file is truncated under it).
enum Backing {
    Map(
        #[allow(dead_code)] MmapRaw,
        #[allow(dead_code)] std::fs::File,
    ),
    Copy(#[allow(dead_code)] Copied),
}

// SAFETY: the bytes are only ever accessed through atomics.
unsafe impl Send for KeyRegion {}
unsafe impl Sync for KeyRegion {}

/// The key file of task `task` of the table at `table`.
pub(crate) fn path_of(table: &Path, task: u32) -> PathBuf {
    let mut p = table.as_os_str().to_owned();
    p.push(format!(".keys.{task}"));
    PathBuf::from(p)
}

/// Records each process has: the distinct keys whose permits it can hold
/// at once (lane ids of the ledger stay below 2^16).
pub(crate) fn records_for(processes: u32) -> u32 {
    (65_000 / processes.max(1)).clamp(1, 256)
}

/// A key capacity a key file can be made with: 1 to [`MAX_KEY_CAPACITY`].
pub(crate) fn check_capacity(keys: u32) -> Result<()> {
    if !(1..=MAX_KEY_CAPACITY).contains(&keys) {
        return Err(Error::invalid(format!(
            "a key capacity of {keys} is out of range (1 to {MAX_KEY_CAPACITY})"
        )));
    }
    Ok(())
}

impl KeyRegion {
    /// Opens task `task`'s key file, creating it for `keys` keys if absent
    /// (an existing file keeps its own capacity).
    pub(crate) fn open_or_create(shm: &Shm, task: u32, keys: u32) -> Result<Self> {
        check_capacity(keys)?;
        let processes = shm.geometry.attach_capacity;
        let geometry = KeysGeometry {
            buckets: keys.div_ceil(BUCKET_KEYS as u32),
            records: records_for(processes),
            processes,
            names: NAMES,
        };
        let table_id = shm.header().table_id.load(Ordering::Relaxed);
        let path = path_of(&shm.path, task);
        let init = |map: &MmapRaw| {
            // SAFETY: a fresh mapping of `total_size` bytes nobody else sees.
            let h = unsafe { &*(map.as_ptr() as *const KeysHeader) };
            let set = |w: &AtomicU64, v: u64| w.store(v, Ordering::Relaxed);
            set(
                &h.version,
                KEYS_VERSION as u64 | (KEYS_HEADER_SIZE as u64) << 32,
            );
            set(&h.table_id, table_id);
            set(&h.task, task as u64);
            set(
                &h.geometry,
                geometry.buckets as u64 | (geometry.records as u64) << 32,
            );
            set(
                &h.geometry2,
                geometry.processes as u64 | (geometry.names as u64) << 32,
            );
            set(&h.total_size, geometry.total_size() as u64);
            set(&h.hash_key[0], crate::shm::random_u64());
            set(
                &h.hash_key[1],
                crate::shm::random_u64() ^ 0x9e37_79b9_7f4a_7c15,
            );
            h.magic.store(KEYS_MAGIC, Ordering::Release);
        };
        let check = |head: &[u8], len: u64| check_header(head, len, table_id, task, processes);
        let side = crate::shm::side::open_or_create(
            &path,
            geometry.total_size(),
            shm.file_owner_mode()?,
            init,
            check,
        )?;
        let (base, len) = (side.map.as_ptr(), side.map.len());
        Ok(Self::over(
            base,
            len,
            Backing::Map(side.map, side.file),
            path,
        ))
    }

    /// A private copy of task `task`'s key file, for a view: `None` when
    /// the task has none. The copy is checked as a mapping would be.
    pub(crate) fn snapshot(
        table: &Path,
        table_id: u64,
        task: u32,
        processes: u32,
    ) -> Result<Option<Self>> {
        let Some(Opened {
            file, path, total, ..
        }) = open_copied(table, table_id, task, processes)?
        else {
            return Ok(None);
        };
        let copy = Copied::read(&file, total)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        if copy.len() < total {
            return Err(Error::corrupt(format!(
                "key file {} shrank while being read ({} of its {total} bytes)",
                path.display(),
                copy.len()
            )));
        }
        check_header(
            &copy.head(KEYS_HEADER_SIZE),
            total as u64,
            table_id,
            task,
            processes,
        )?;
        let base = copy.as_ptr();
        Ok(Some(Self::over(base, total, Backing::Copy(copy), path)))
    }

    /// The counters of task `task`'s key file, its record words (`seen`,
    /// `refused`: see `keyed::record`) and its capacity, read with `pread`
    /// from its header alone (what a scrape needs: a copy of the whole file
    /// would be 96 bytes a key). `None`: no key file.
    #[allow(clippy::type_complexity)]
    pub(crate) fn counters(
        table: &Path,
        table_id: u64,
        task: u32,
        processes: u32,
    ) -> Result<Option<([u64; crate::format::KEY_COUNTERS], (u64, u64), u32)>> {
        let Some(Opened { head, .. }) = open_copied(table, table_id, task, processes)? else {
            return Ok(None);
        };
        let word_at =
            |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().unwrap_or_default());
        let at = std::mem::offset_of!(KeysHeader, counters);
        let record = std::mem::offset_of!(KeysHeader, record);
        let seen = record + std::mem::offset_of!(crate::format::RecordWords, seen);
        let refused = record + std::mem::offset_of!(crate::format::RecordWords, refused);
        let buckets = word_at(32) as u32;
        Ok(Some((
            std::array::from_fn(|i| word_at(at + i * 8)),
            (word_at(seen), word_at(refused)),
            buckets.saturating_mul(BUCKET_KEYS as u32),
        )))
    }

    fn over(base: *const u8, len: usize, backing: Backing, path: PathBuf) -> Self {
        // SAFETY: `check_header` (or our own init) vouched for the header
        // and the size.
        let h = unsafe { &*(base as *const KeysHeader) };
        let (g1, g2) = (
            h.geometry.load(Ordering::Relaxed),
            h.geometry2.load(Ordering::Relaxed),
        );
        let geometry = KeysGeometry {
            buckets: g1 as u32,
            records: (g1 >> 32) as u32,
            processes: g2 as u32,
            names: (g2 >> 32) as u32,
        };
        debug_assert!(len >= geometry.total_size());
        let hash_key = (
            h.hash_key[0].load(Ordering::Relaxed),
            h.hash_key[1].load(Ordering::Relaxed),
        );
        Self {
            buckets_at: geometry.buckets_offset(),
            base,
            len,
            _backing: backing,
            geometry,
            hash_key,
            path,
        }
    }

    /// # Safety
    /// `offset + size_of::<T>()` lies within the validated mapping.
    unsafe fn at<T>(&self, offset: usize) -> &T {
        debug_assert!(offset + size_of::<T>() <= self.len);
        // SAFETY: per the contract.
        unsafe { &*(self.base.add(offset) as *const T) }
    }

    pub fn header(&self) -> &KeysHeader {
        // SAFETY: the mapping starts with a validated header.
        unsafe { self.at(0) }
    }

    pub fn config(&self, copy: usize) -> &KeyConfig {
        let offset = self.geometry.config_offset() + (copy & 1) * size_of::<KeyConfig>();
        // SAFETY: two copies follow the header.
        unsafe { self.at(offset) }
    }

    #[inline(always)]
    pub fn bucket(&self, b: u32) -> &Bucket {
        debug_assert!(b < self.geometry.buckets);
        let b = b.min(self.geometry.buckets - 1);
        // SAFETY: clamped to the buckets the geometry holds.
        unsafe { self.at(self.buckets_at + b as usize * size_of::<Bucket>()) }
    }

    /// The entry `index` (bucket × 8 + place), or the overflow state; `None`
    /// for an index no entry has (permits and records are checked).
    #[inline]
    pub fn entry(&self, index: u32) -> Option<&KeyEntry> {
        if index == OVERFLOW {
            return Some(&self.header().overflow);
        }
        let (b, i) = (index / BUCKET_KEYS as u32, index as usize % BUCKET_KEYS);
        (b < self.geometry.buckets).then(|| &self.bucket(b).entries[i])
    }

    pub fn entries(&self) -> u32 {
        self.geometry.buckets * BUCKET_KEYS as u32
    }

    /// The global words of entry `index`, or of the overflow state; `None`
    /// for an index no entry has.
    #[inline]
    pub fn globals(&self, index: u32) -> Option<&GlobalWords> {
        if index == OVERFLOW {
            return Some(&self.header().overflow_global);
        }
        (index < self.entries()).then(|| {
            // SAFETY: `index` is below the entries the geometry holds, and
            // their global words end where the mapping does.
            unsafe {
                self.at(self.geometry.globals_offset() + index as usize * size_of::<GlobalWords>())
            }
        })
    }

    /// Record `r` of attachment `attach`, or `None` out of range.
    #[inline]
    pub fn record(&self, attach: u32, r: u32) -> Option<&KeyRecord> {
        let g = &self.geometry;
        (attach < g.processes && r < g.records).then(|| {
            let index = attach as usize * g.records as usize + r as usize;
            // SAFETY: both indices checked.
            unsafe { self.at(g.records_offset() + index * size_of::<KeyRecord>()) }
        })
    }

    pub fn name_slot(&self, i: u32) -> &NameSlot {
        let i = i % self.geometry.names.max(1);
        // SAFETY: reduced modulo the slots the geometry holds.
        unsafe { self.at(self.geometry.names_offset() + i as usize * size_of::<NameSlot>()) }
    }

    #[inline]
    pub fn count(&self, counter: KeyCounter, n: u64) {
        self.header().counters[counter as usize].fetch_add(n, Ordering::Relaxed);
    }

    pub fn counter(&self, counter: KeyCounter) -> u64 {
        self.header().counters[counter as usize].load(Ordering::Relaxed)
    }
}

/// A key file opened for a view, its header read with `pread` and checked.
struct Opened {
    file: std::fs::File,
    path: PathBuf,
    head: Vec<u8>,
    /// The size its geometry needs.
    total: usize,
}

/// Opens task `task`'s key file for a view and checks its header. `None`:
/// the task has no key file.
fn open_copied(table: &Path, table_id: u64, task: u32, processes: u32) -> Result<Option<Opened>> {
    let path = path_of(table, task);
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("cannot open {}", path.display()), e)),
    };
    let len = file
        .metadata()
        .map_err(|e| Error::io(format!("cannot stat {}", path.display()), e))?
        .len();
    let head = Copied::read(&file, KEYS_HEADER_SIZE)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?
        .head(KEYS_HEADER_SIZE);
    let total = check_header(&head, len, table_id, task, processes)?;
    Ok(Some(Opened {
        file,
        path,
        head,
        total,
    }))
}

/// Checks a key file's header (its first bytes, read with `pread`) against
/// the table and task it must belong to; returns the size to map.
fn check_header(head: &[u8], len: u64, table_id: u64, task: u32, processes: u32) -> Result<usize> {
    let word = |i: usize| -> u64 {
        head.get(i * 8..i * 8 + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    };
    let bad = |why: String| Error::corrupt(format!("key file: {why}"));
    if head.len() < 64 || word(0) != KEYS_MAGIC {
        return Err(bad("not a flowctrl key file (no magic)".into()));
    }
    let version = word(1);
    if version as u32 != KEYS_VERSION || (version >> 32) as usize != KEYS_HEADER_SIZE {
        return Err(bad(format!(
            "layout version {} is not {KEYS_VERSION}",
            version as u32
        )));
    }
    if word(2) != table_id || word(3) != task as u64 {
        return Err(bad(
            "it belongs to another table or task (a table made anew at the same path?)".into(),
        ));
    }
    let (g1, g2) = (word(4), word(5));
    let geometry = KeysGeometry {
        buckets: g1 as u32,
        records: (g1 >> 32) as u32,
        processes: g2 as u32,
        names: (g2 >> 32) as u32,
    };
    if geometry.buckets == 0
        || geometry.buckets > MAX_KEY_CAPACITY / BUCKET_KEYS as u32
        || geometry.processes != processes
        || geometry.records != records_for(processes)
        || geometry.names != NAMES
    {
        return Err(bad(format!(
            "geometry {geometry:?} does not fit this table"
        )));
    }
    let total = geometry.total_size();
    if word(6) != total as u64 || len < total as u64 {
        return Err(bad(format!(
            "it is {len} bytes, its geometry needs {total}"
        )));
    }
    Ok(total)
}

impl std::fmt::Debug for KeyRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRegion")
            .field("path", &self.path)
            .field("geometry", &self.geometry)
            .finish()
    }
}

const _: () = assert!(size_of::<NameSlot>() == 64 && size_of::<KeyRecord>() == 32);
