//! Helpers shared by the integration tests: scratch directories and real
//! child processes.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// A directory removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "flowctrl-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn dir(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Forks a child that runs `body` and exits with its return value (101 if it
/// panics). The child never returns into the test harness.
pub fn fork(body: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child only runs `body` and then `_exit`s.
    match unsafe { libc::fork() } {
        -1 => panic!("fork failed: {}", std::io::Error::last_os_error()),
        0 => {
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(101);
            unsafe { libc::_exit(code) }
        }
        pid => pid,
    }
}

/// Waits for a child and returns its exit code (-signal if killed).
pub fn wait(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: plain waitpid on our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid, "waitpid: {}", std::io::Error::last_os_error());
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -libc::WTERMSIG(status)
    }
}

pub fn kill(pid: libc::pid_t, signal: i32) {
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

/// A one-way byte channel between a parent and a forked child.
#[derive(Clone, Copy)]
pub struct Pipe {
    read: i32,
    write: i32,
}

impl Pipe {
    pub fn new() -> Self {
        let mut fds = [0; 2];
        // SAFETY: fds is a valid two-element array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        Self {
            read: fds[0],
            write: fds[1],
        }
    }

    pub fn send(&self, byte: u8) {
        // SAFETY: writing one byte from a valid buffer.
        assert_eq!(
            unsafe { libc::write(self.write, (&byte as *const u8).cast(), 1) },
            1
        );
    }

    pub fn recv(&self) -> u8 {
        let mut byte = 0u8;
        // SAFETY: reading one byte into a valid buffer.
        assert_eq!(
            unsafe { libc::read(self.read, (&mut byte as *mut u8).cast(), 1) },
            1
        );
        byte
    }
}

/// CLOCK_MONOTONIC is host-wide: processes can agree on instants with it.
pub fn monotonic() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

pub fn sleep_until(instant: Duration) {
    let now = monotonic();
    if instant > now {
        std::thread::sleep(instant - now);
    }
}
