//! Private copies of a file, read with `pread`: what views read tables and
//! key files through. A copy cannot fault: a file truncated under its
//! reader is a short read (an error the caller words), never a SIGBUS, as
//! touching a mapping past the file's new end would be. The copy is
//! aligned as the file's structs are (64 bytes), so the readers that take
//! a mapping's typed regions run on it unchanged.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicU64;

/// One line of a copy: aligned as the file's structs are.
#[repr(C, align(64))]
struct Line([AtomicU64; 8]);

const LINE: usize = size_of::<Line>();

/// The first bytes of a file, copied into memory of this process.
pub(crate) struct Copied {
    lines: Vec<Line>,
    /// Bytes read (the file may have ended before those asked for).
    len: usize,
}

impl Copied {
    /// The first `len` bytes of `file`, or fewer where it ends first
    /// ([`Copied::len`] says how many); the rest of the copy is zeros.
    pub fn read(file: &File, len: usize) -> io::Result<Self> {
        let lines = len.div_ceil(LINE);
        let mut copy: Vec<Line> = Vec::with_capacity(lines);
        let base = copy.as_mut_ptr() as *mut u8;
        let got = pread_into(file, base, len, 0)?;
        // SAFETY: `lines * LINE` bytes are allocated; the first `got` were
        // written by the kernel, the rest are zeroed here, and a line is
        // plain atomics, valid for any bytes.
        unsafe {
            std::ptr::write_bytes(base.add(got), 0, lines * LINE - got);
            copy.set_len(lines);
        }
        Ok(Self {
            lines: copy,
            len: got,
        })
    }

    /// Bytes copied from the file.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The copy's first byte (64-byte aligned); valid while `self` lives.
    pub fn as_ptr(&self) -> *const u8 {
        self.lines.as_ptr() as *const u8
    }

    /// The first `n` bytes copied (fewer if fewer were), as plain bytes.
    pub fn head(&self, n: usize) -> Vec<u8> {
        let n = n.min(self.len);
        let mut out = vec![0u8; n];
        // SAFETY: `n` bytes of the copy, into a buffer of `n`.
        unsafe { std::ptr::copy_nonoverlapping(self.as_ptr(), out.as_mut_ptr(), n) };
        out
    }

    /// Reads `len` bytes at `offset` of `file` again, over the same bytes
    /// of the copy; `false` (and the range left as it was, or partly
    /// renewed) when the file now ends before them.
    ///
    /// The copy's bytes are atomics, read through shared references only,
    /// and this thread is the one that writes them: no reader of the copy
    /// can run while the kernel writes.
    pub fn reread(&self, file: &File, offset: usize, len: usize) -> io::Result<bool> {
        let len = len.min(self.len.saturating_sub(offset));
        if len == 0 {
            return Ok(true);
        }
        // SAFETY: the range lies within the copy (clamped above); writing
        // it through a pointer derived from a shared reference is allowed
        // as every byte is inside an atomic (an `UnsafeCell`).
        let at = unsafe { (self.as_ptr() as *mut u8).add(offset) };
        Ok(pread_into(file, at, len, offset)? == len)
    }
}

/// `pread` until `len` bytes are read into `buf` or the file ends; the
/// bytes read.
fn pread_into(file: &File, buf: *mut u8, len: usize, offset: usize) -> io::Result<usize> {
    let mut done = 0;
    while done < len {
        // SAFETY: `buf` holds `len` writable bytes; the kernel writes at
        // most `len - done` from `buf + done`.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                buf.add(done) as *mut libc::c_void,
                len - done,
                (offset + done) as libc::off_t,
            )
        };
        match n {
            0 => break,
            n if n > 0 => done += n as usize,
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_copy_is_aligned_and_says_how_much_the_file_held() {
        let mut f = tempfile();
        f.write_all(&[7u8; 100]).unwrap();
        let c = Copied::read(&f, 200).unwrap();
        assert_eq!(c.len(), 100);
        assert_eq!(c.as_ptr() as usize % 64, 0);
        assert_eq!(c.head(200), vec![7u8; 100]);
        // SAFETY: within the 256 bytes allocated.
        assert_eq!(unsafe { *c.as_ptr().add(150) }, 0, "zeros past the end");
        f.set_len(10).unwrap();
        assert!(!c.reread(&f, 0, 64).unwrap(), "the file ended first");
        assert!(c.reread(&f, 0, 10).unwrap());
    }

    fn tempfile() -> File {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("flowctrl-copy-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let _ = std::fs::remove_file(&path);
        f
    }
}
