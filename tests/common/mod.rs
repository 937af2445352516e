//! Helpers shared by the integration tests: scratch directories and real
//! child processes.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The wall clock in µs since the Unix epoch (slices of the global quota
/// are cut from it).
pub fn wall_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_micros() as i64
}

/// Reads `pair` until its two sides agree, for at most 2 s, and returns
/// the last reading: a store's record against a table's statistics, while
/// the table's keeper thread may be giving idle quota back (its move and
/// the store's hearing of it are a round trip apart).
pub fn settled<T: PartialEq>(mut pair: impl FnMut() -> (T, T)) -> (T, T) {
    let until = monotonic() + Duration::from_secs(2);
    loop {
        let (a, b) = pair();
        if a == b || monotonic() >= until {
            return (a, b);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A directory removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Self {
        Self::under(&std::env::temp_dir(), tag)
    }

    /// In memory (`/dev/shm` where there is one): the stores' files. A
    /// sentinel or cluster node fsyncs its configuration at every change of
    /// a failover; on a busy disk one such fsync stalled a sentinel past
    /// 2 s, and it went into TILT (no failover for 30 s).
    pub fn in_memory(tag: &str) -> Self {
        let shm = PathBuf::from("/dev/shm");
        Self::under(
            &if shm.is_dir() {
                shm
            } else {
                std::env::temp_dir()
            },
            tag,
        )
    }

    fn under(root: &Path, tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = root.join(format!(
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

/// Sets an environment variable in a forked child.
///
/// Through libc, not `std::env::set_var`: the test binary's other threads
/// read the environment (every pull does), and a child forked while one of
/// them held Rust's environment lock inherits it held by a thread it does
/// not have; `set_var` then waits on it until the child's alarm.
pub fn set_env_in_child(name: &str, value: impl AsRef<std::ffi::OsStr>) {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(name).unwrap();
    let value = std::ffi::CString::new(value.as_ref().as_bytes()).unwrap();
    // SAFETY: a forked child runs one thread, and libc's own lock is taken
    // only by setenv, which the parent's threads never call.
    assert_eq!(unsafe { libc::setenv(name.as_ptr(), value.as_ptr(), 1) }, 0);
}

/// Arms one of the library's crash points (`FLOWCTRL_TEST_DIE_*`) in a
/// forked child: the child SIGKILLs itself when it gets there.
pub fn arm_crash_point(hook: &str) {
    set_env_in_child(hook, "1");
}

/// Forks a child that runs `body` and exits with its return value (101 if it
/// panics). The child never returns into the test harness, and a child that
/// hangs dies by SIGALRM after [`CHILD_DEADLINE_S`]: a test waiting for it
/// fails, it never hangs.
pub fn fork(body: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child only runs `body` and then `_exit`s.
    match unsafe { libc::fork() } {
        -1 => panic!("fork failed: {}", std::io::Error::last_os_error()),
        0 => {
            // SAFETY: alarm has no preconditions.
            unsafe { libc::alarm(CHILD_DEADLINE_S) };
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(101);
            unsafe { libc::_exit(code) }
        }
        pid => pid,
    }
}

/// The longest any forked test child may live.
pub const CHILD_DEADLINE_S: u32 = 120;

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

// ---- helpers for the storm, regression and fuzz tests ---------------------

use std::sync::atomic::AtomicU64;
use std::time::Instant;

/// How a child process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
    /// It did not end in time; it was SIGKILLed and reaped.
    TimedOut,
}

impl Exit {
    fn from_status(status: i32) -> Self {
        if libc::WIFEXITED(status) {
            Exit::Code(libc::WEXITSTATUS(status))
        } else {
            Exit::Signal(libc::WTERMSIG(status))
        }
    }

    pub fn killed_by(self, signal: i32) -> bool {
        self == Exit::Signal(signal)
    }
}

/// Reaps `pid` if it has ended (`WNOHANG`).
pub fn try_wait(pid: libc::pid_t) -> Option<Exit> {
    let mut status = 0;
    // SAFETY: waitpid on our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    assert!(r >= 0, "waitpid {pid}: {}", std::io::Error::last_os_error());
    (r == pid).then(|| Exit::from_status(status))
}

/// Waits for a child for at most `timeout`; past it, SIGKILLs and reaps it.
pub fn wait_timeout(pid: libc::pid_t, timeout: Duration) -> Exit {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_micros(20);
    loop {
        if let Some(exit) = try_wait(pid) {
            return exit;
        }
        if Instant::now() >= deadline {
            // SAFETY: signalling and reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            return Exit::TimedOut;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(1));
    }
}

/// Waits until a child is stopped (after SIGSTOP). `Err` with how it ended if
/// it ended instead, or `Err(TimedOut)` (it is then still running).
pub fn wait_stopped(pid: libc::pid_t, timeout: Duration) -> Result<(), Exit> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG | libc::WUNTRACED) };
        assert!(r >= 0, "waitpid {pid}: {}", std::io::Error::last_os_error());
        if r == pid {
            if libc::WIFSTOPPED(status) {
                return Ok(());
            }
            return Err(Exit::from_status(status));
        }
        if Instant::now() >= deadline {
            return Err(Exit::TimedOut);
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Sends a signal, ignoring a child that is gone already.
pub fn signal(pid: libc::pid_t, sig: i32) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, sig) };
}

/// Forks a child that is SIGKILLed when the forking thread ends (a test that
/// panics leaves no process behind), runs `body` and `_exit`s with its value
/// (101 on a panic).
pub fn fork_guarded(body: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    fork(move || {
        // SAFETY: prctl with valid arguments; getppid has no preconditions.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                libc::_exit(99);
            }
        }
        body()
    })
}

/// Forks `body` in a child and waits for it at most `timeout`.
pub fn run_in_child(timeout: Duration, body: impl FnOnce() -> i32) -> Exit {
    let pid = fork_guarded(body);
    wait_timeout(pid, timeout)
}

/// SIGKILLs and reaps every child still listed when dropped, so a failing
/// test leaves no process behind.
#[derive(Default)]
pub struct KillOnDrop(pub Vec<libc::pid_t>);

impl KillOnDrop {
    pub fn add(&mut self, pid: libc::pid_t) {
        self.0.push(pid);
    }

    /// The child was reaped by the test: forget it.
    pub fn forget(&mut self, pid: libc::pid_t) {
        self.0.retain(|p| *p != pid);
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for &pid in &self.0 {
            // SAFETY: signalling and reaping our own children.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

impl Pipe {
    /// Waits at most `timeout` for a byte; `None` on timeout or a closed pipe.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<u8> {
        let mut fd = libc::pollfd {
            fd: self.read,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut fd, 1, ms) };
        if r != 1 {
            return None;
        }
        let mut byte = 0u8;
        // SAFETY: reading one byte into a valid buffer.
        let n = unsafe { libc::read(self.read, (&mut byte as *mut u8).cast(), 1) };
        (n == 1).then_some(byte)
    }

    pub fn close(self) {
        // SAFETY: closing our own descriptors.
        unsafe {
            libc::close(self.read);
            libc::close(self.write);
        }
    }
}

/// Writes to stderr with one system call and no lock: usable in a forked
/// child of a multi-threaded test, where std's stderr lock may be held by a
/// thread that does not exist there.
pub fn raw_eprint(message: &str) {
    let mut text = message.to_string();
    text.push('\n');
    // SAFETY: writing a valid buffer to fd 2.
    unsafe { libc::write(2, text.as_ptr().cast(), text.len()) };
}

/// A small deterministic generator (splitmix64): a failing run is replayed
/// from the seed it printed.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `1/n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// The seed named by the environment variable `var` (decimal or 0x-hex), or a
/// fresh one.
pub fn seed_from_env(var: &str) -> u64 {
    if let Ok(text) = std::env::var(var) {
        let text = text.trim();
        let parsed = match text.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => text.parse(),
        };
        return parsed.unwrap_or_else(|_| panic!("{var}={text:?} is not a number"));
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    Rng::new(nanos ^ ((std::process::id() as u64) << 32)).next_u64()
}

/// A numeric environment variable, or `default`.
pub fn env_number(var: &str, default: u64) -> u64 {
    match std::env::var(var) {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{var}={text:?} is not a number")),
        Err(_) => default,
    }
}

/// Percentile (0..=100) of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

// ---- the table file, read and written from outside the library -------------
//
// Mirrors `src/shm/layout.rs` and `src/balance/layout.rs` (layout version
// 3): a header page, task slots of 1280 bytes, attachment slots of 64, lanes
// of 128 (ledger, intent, reclaimed, then counters), baselines of 128, then
// balancer slots of 320, backend slots of 384 and pick ledgers of 16. The
// only copy in the tests: every test that reads or writes the file's bytes
// takes its sizes and offsets from here, and `tests/table.rs`
// (`the_layout_the_tests_mirror_is_the_one_the_header_records`) checks them
// against the header of a table the library made.

pub mod elf;
pub mod hosts;
pub mod managed;
pub mod options;
pub mod redis;
pub mod tls;
pub mod trickle;
pub mod worker;

// Each test binary uses a part of them (as of all of this module).
#[allow(unused_imports)]
pub use options::{Options, cli_options, ha_options, host_options, options};

pub mod layout {
    /// The table layout version mirrored here.
    pub const VERSION: u32 = 3;
    /// The page the header occupies: the task slots start here.
    pub const HEADER_SIZE: usize = 4096;
    /// The header struct within that page, as the header's `header_size`
    /// records it.
    pub const HEADER_STRUCT: usize = 192;
    pub const TASK_SLOT: usize = 1280;
    pub const ATTACH_SLOT: usize = 64;
    pub const LANE: usize = 128;
    pub const BASELINE: usize = 128;
    pub const LANES: usize = 4;
    pub const BALANCER_SLOT: usize = 320;
    pub const BACKEND_SLOT: usize = 384;
    /// Per (balancer, attachment, backend).
    pub const PICK_LEDGER: usize = 16;

    // Header fields (u32 unless named otherwise).
    /// u64: "FLOWCTRL".
    pub const H_MAGIC: usize = 0;
    pub const H_VERSION: usize = 8;
    pub const H_HEADER_SIZE: usize = 12;
    pub const H_TASK_SLOT_SIZE: usize = 16;
    pub const H_ATTACH_SLOT_SIZE: usize = 20;
    pub const H_LANE_SIZE: usize = 24;
    pub const H_BASELINE_SIZE: usize = 28;
    pub const H_TASK_CAPACITY: usize = 32;
    pub const H_ATTACH_CAPACITY: usize = 36;
    pub const H_CLOCK_KIND: usize = 40;
    /// u64.
    pub const H_TICKS: usize = 48;
    /// u64.
    pub const H_TOTAL_SIZE: usize = 56;
    /// u64.
    pub const H_TABLE_ID: usize = 64;
    /// Balancer capacity, backend capacity, and their slot sizes (u32 each).
    pub const H_BALANCER_CAPACITY: usize = 72;
    /// Lane sets of a pooled table (0: a set per pair).
    pub const H_LANE_SETS: usize = 88;
    /// Size of a lane's own latency sketch when the file carries one per
    /// lane after `total_size` (0: none, as in a table made by 0.3.0).
    pub const H_LANE_SKETCH_SIZE: usize = 92;
    pub const LANE_SKETCH: usize = 160;
    /// u64: where the next claim of a pooled set starts looking (a hint).
    pub const H_LANE_HINT: usize = 96;
    /// The layout version of a table made with `lanes` > 0.
    pub const POOLED_VERSION: u32 = 4;
    pub const FOLD_RECORD: usize = 192;
    pub const LANE_TOTALS: usize = 256;
    pub const H_BACKEND_CAPACITY: usize = 76;
    pub const H_BALANCER_SLOT_SIZE: usize = 80;
    pub const H_BACKEND_SLOT_SIZE: usize = 84;
    /// u64.
    pub const H_LAST_REAP: usize = 128;

    /// Bytes of the task regions (header page, task slots, attachment slots,
    /// lanes, baselines) of a table with these capacities.
    pub fn tasks_size(tasks: usize, processes: usize) -> usize {
        HEADER_SIZE
            + tasks * TASK_SLOT
            + processes * ATTACH_SLOT
            + tasks * processes * (LANES * LANE + BASELINE)
    }

    /// Bytes of the balancer regions, which follow the task regions.
    pub fn balancers_size(balancers: usize, backends: usize, processes: usize) -> usize {
        balancers * BALANCER_SLOT + balancers * backends * (BACKEND_SLOT + processes * PICK_LEDGER)
    }

    /// Bytes of a whole table as 0.3.0 reads it: the header's `total_size`.
    pub fn total_size(tasks: usize, processes: usize, balancers: usize, backends: usize) -> usize {
        tasks_size(tasks, processes) + balancers_size(balancers, backends, processes)
    }

    /// Bytes of a table file this release makes (a set per pair): the
    /// table, then a lane sketch per lane.
    pub fn file_size(tasks: usize, processes: usize, balancers: usize, backends: usize) -> usize {
        sketches_at(tasks, processes, balancers, backends) + tasks * processes * LANES * LANE_SKETCH
    }

    /// Where the lane sketches start: `total_size` rounded up to 128 bytes.
    pub fn sketches_at(tasks: usize, processes: usize, balancers: usize, backends: usize) -> usize {
        total_size(tasks, processes, balancers, backends).next_multiple_of(128)
    }

    // Task slot fields.
    pub const T_STATE: usize = 0;
    pub const T_NAME_LEN: usize = 8;
    pub const T_CONFIG_LOCK: usize = 16;
    pub const T_NAME: usize = 64;
    pub const T_CONFIG_VERSION: usize = 128;
    /// Two copies of (interval, rate bits, burst | cap << 32).
    pub const T_CONFIG: usize = 136;
    pub const T_TAT: usize = 192;
    pub const T_IN_FLIGHT: usize = 256;
    /// The adaptive limit: limit word, due, wake word, window lock and
    /// version, limiter copies, window copies (72 words).
    pub const T_ADAPTIVE: usize = 704;
    pub const T_ADAPTIVE_WORDS: usize = 72;

    // Attachment slot fields.
    pub const A_STATE: usize = 0;
    pub const A_PID: usize = 8;

    // Balancer slot fields.
    pub const B_STATE: usize = 0;
    pub const B_NAME_LEN: usize = 8;
    pub const B_NAME: usize = 64;

    // Backend slot fields.
    /// Kind (low byte: 1 = active) | generation << 8.
    pub const K_STATE: usize = 0;
    pub const K_WEIGHT: usize = 8;
    pub const K_ADDR_LEN: usize = 32;
    pub const K_ADDR: usize = 64;
    pub const K_IN_FLIGHT: usize = 128;
    pub const BACKEND_ACTIVE: u64 = 1;

    // Baseline fields (one per lane set): counters, reclaimed, queue head
    // and length, then (pooled tables) the owner: `(task + 1) << 32 |
    // attachment`, 0 = free.
    pub const S_QUEUE_HEAD: usize = 72;
    pub const S_QUEUE_LEN: usize = 80;
    pub const S_OWNER: usize = 88;

    // Pooled tables: the fold record (set + 1, task, 9 words before, 9 of
    // delta, the folds counter) and the per-task lane totals (9 retired
    // words, then 8 unlaned counters and the unlaned refusals).
    pub const F_SET: usize = 0;
    pub const F_TASK: usize = 8;
    pub const F_BEFORE: usize = 16;
    pub const F_DELTA: usize = 88;
    pub const F_FOLDS: usize = 160;
    /// Counters and the reclaimed total: what a fold moves.
    pub const TOTALS: usize = 9;
    pub const LT_RETIRED: usize = 0;
    pub const LT_UNLANED: usize = 128;
    pub const LT_UNLANED_REFUSED: usize = 192;

    // Lane fields.
    pub const L_LEDGER: usize = 0;
    pub const L_INTENT: usize = 8;
    pub const L_RECLAIMED: usize = 16;
    pub const L_COUNTERS: usize = 64;

    pub const TASK_CLAIMING: u64 = 1 << 62;
    pub const TASK_READY: u64 = 2 << 62;
    pub const ATTACH_LIVE: u64 = 1;
    pub const BUSY: u64 = 1 << 63;
    pub const COUNT_BITS: u32 = 24;
    pub const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
    pub const SEQ_MASK: u64 = (1 << 24) - 1;

    /// An attachment claim as task states and locks name it.
    pub fn owner(slot: u32, epoch: u64) -> u64 {
        (epoch << 16) | (slot as u64 + 1)
    }
}

/// A table file mapped by the test itself, to read the words the library
/// keeps and to write the ones a crash or a hostile writer would leave.
pub struct RawTable {
    map: memmap2::MmapRaw,
    pub task_capacity: usize,
    pub attach_capacity: usize,
    pub balancer_capacity: usize,
    pub backend_capacity: usize,
    /// 0: a lane set per (task, attachment) pair at a fixed place.
    pub lane_sets: usize,
}

impl RawTable {
    pub fn open(path: &Path) -> Self {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let map = memmap2::MmapOptions::new().map_raw(&file).unwrap();
        let mut raw = Self {
            map,
            task_capacity: 0,
            attach_capacity: 0,
            balancer_capacity: 0,
            backend_capacity: 0,
            lane_sets: 0,
        };
        raw.task_capacity = raw.u32_at(layout::H_TASK_CAPACITY) as usize;
        raw.attach_capacity = raw.u32_at(layout::H_ATTACH_CAPACITY) as usize;
        raw.balancer_capacity = raw.u32_at(layout::H_BALANCER_CAPACITY) as usize;
        raw.backend_capacity = raw.u32_at(layout::H_BACKEND_CAPACITY) as usize;
        raw.lane_sets = raw.u32_at(layout::H_LANE_SETS) as usize;
        raw
    }

    fn sets(&self) -> usize {
        match self.lane_sets {
            0 => self.task_capacity * self.attach_capacity,
            n => n,
        }
    }

    /// Pooled tables: the set pair (task, slot) holds, if any.
    pub fn pair_set(&self, task: usize, slot: usize) -> Option<usize> {
        if self.lane_sets == 0 {
            return Some(task * self.attach_capacity + slot);
        }
        let pair = task * self.attach_capacity + slot;
        let at = self.pair_map_offset() + pair * 4;
        (self.u32_at(at) as usize)
            .checked_sub(1)
            .filter(|s| *s < self.lane_sets)
    }

    fn pair_map_offset(&self) -> usize {
        self.baselines_offset() + self.sets() * layout::BASELINE
    }

    /// Pooled tables: where the pair map's u32 of (task, slot) is.
    pub fn pair_map_entry(&self, task: usize, slot: usize) -> usize {
        assert!(
            self.lane_sets != 0,
            "a table with a set per pair has no map"
        );
        self.pair_map_offset() + (task * self.attach_capacity + slot) * 4
    }

    /// Writes the u32 at `offset` (4-aligned).
    pub fn set_u32(&self, offset: usize, value: u32) {
        assert!(offset.is_multiple_of(4) && offset + 4 <= self.map.len());
        // SAFETY: in bounds and aligned, as checked above.
        let word = unsafe { &*(self.map.as_mut_ptr().add(offset) as *const AtomicU32) };
        word.store(value, Ordering::SeqCst);
    }

    /// Lane `id` of `task`, if its pair holds a set.
    pub fn lane_opt(&self, task: usize, id: usize) -> Option<usize> {
        let set = self.pair_set(task, id / layout::LANES)?;
        Some(self.lanes_offset() + (set * layout::LANES + id % layout::LANES) * layout::LANE)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(
            offset.is_multiple_of(8) && offset + 8 <= self.map.len(),
            "offset {offset}"
        );
        // SAFETY: in bounds, aligned, and the mapping lives as long as self.
        unsafe { &*(self.map.as_mut_ptr().add(offset) as *const AtomicU64) }
    }

    pub fn get(&self, offset: usize) -> u64 {
        self.word(offset).load(Ordering::SeqCst)
    }

    pub fn set(&self, offset: usize, value: u64) {
        self.word(offset).store(value, Ordering::SeqCst)
    }

    pub fn u32_at(&self, offset: usize) -> u32 {
        let w = self.get(offset & !7);
        if offset.is_multiple_of(8) {
            w as u32
        } else {
            (w >> 32) as u32
        }
    }

    pub fn task(&self, task: usize) -> usize {
        layout::HEADER_SIZE + task * layout::TASK_SLOT
    }

    pub fn attach(&self, slot: usize) -> usize {
        self.task(self.task_capacity) + slot * layout::ATTACH_SLOT
    }

    pub fn lanes_offset(&self) -> usize {
        self.attach(self.attach_capacity)
    }

    /// Lane `id` (attachment × LANES + lane) of `task` (its pair holds a
    /// set: always, unless the table is pooled).
    pub fn lane(&self, task: usize, id: usize) -> usize {
        self.lane_opt(task, id).expect("the pair holds a lane set")
    }

    pub fn baselines_offset(&self) -> usize {
        self.lanes_offset() + self.sets() * layout::LANES * layout::LANE
    }

    pub fn baseline(&self, task: usize, slot: usize) -> usize {
        let set = self
            .pair_set(task, slot)
            .expect("the pair holds a lane set");
        self.baselines_offset() + set * layout::BASELINE
    }

    /// Pooled tables: the fold record, and a task's lane totals.
    pub fn fold_record(&self) -> usize {
        let pairs = self.task_capacity * self.attach_capacity;
        self.pair_map_offset() + (pairs * 4).next_multiple_of(64)
    }

    pub fn lane_totals(&self, task: usize) -> usize {
        self.fold_record() + layout::FOLD_RECORD + task * layout::LANE_TOTALS
    }

    /// Lane `lane` of set `set`.
    pub fn set_lane(&self, set: usize, lane: usize) -> usize {
        self.lanes_offset() + (set * layout::LANES + lane) * layout::LANE
    }

    pub fn balancers_offset(&self) -> usize {
        if self.lane_sets == 0 {
            return self.pair_map_offset();
        }
        let pairs = self.task_capacity * self.attach_capacity;
        self.pair_map_offset()
            + (pairs * 4).next_multiple_of(64)
            + layout::FOLD_RECORD
            + self.task_capacity * layout::LANE_TOTALS
    }

    pub fn balancer(&self, balancer: usize) -> usize {
        self.balancers_offset() + balancer * layout::BALANCER_SLOT
    }

    pub fn backend(&self, balancer: usize, backend: usize) -> usize {
        self.balancer(self.balancer_capacity)
            + (balancer * self.backend_capacity + backend) * layout::BACKEND_SLOT
    }

    /// The ledger of attachment `slot`'s picks of `backend` of `balancer`.
    pub fn pick_ledger(&self, balancer: usize, slot: usize, backend: usize) -> usize {
        self.backend(self.balancer_capacity, 0)
            + ((balancer * self.attach_capacity + slot) * self.backend_capacity + backend)
                * layout::PICK_LEDGER
    }

    /// The bytes of a zero-padded name of `len` bytes at `offset`.
    pub fn name_at(&self, offset: usize, len: usize) -> Vec<u8> {
        (0..8)
            .flat_map(|i| self.get(offset + 8 * i).to_le_bytes())
            .take(len.min(64))
            .collect()
    }

    pub fn total_size(&self) -> usize {
        self.balancers_offset()
            + layout::balancers_size(
                self.balancer_capacity,
                self.backend_capacity,
                self.attach_capacity,
            )
    }

    /// The task slot holding `name`, if any is READY with it.
    pub fn find_task(&self, name: &str) -> Option<usize> {
        (0..self.task_capacity).find(|&t| {
            let base = self.task(t);
            if self.get(base + layout::T_STATE) != layout::TASK_READY
                || self.get(base + layout::T_NAME_LEN) != name.len() as u64
            {
                return false;
            }
            self.name_at(base + layout::T_NAME, name.len()) == name.as_bytes()
        })
    }

    /// Attachment slots marked live: (slot, epoch, pid).
    pub fn live_attachments(&self) -> Vec<(u32, u64, u64)> {
        (0..self.attach_capacity)
            .filter_map(|a| {
                let state = self.get(self.attach(a) + layout::A_STATE);
                let pid = self.get(self.attach(a) + layout::A_PID);
                (state & layout::ATTACH_LIVE != 0).then_some((a as u32, state >> 1, pid))
            })
            .collect()
    }

    /// The live slot and epoch of the process `pid`.
    pub fn slot_of(&self, pid: libc::pid_t) -> Option<(u32, u64)> {
        self.live_attachments()
            .into_iter()
            .find(|(_, _, p)| *p == pid as u64)
            .map(|(slot, epoch, _)| (slot, epoch))
    }

    /// The concurrency count of `task` minus what its ledgers say, computed
    /// here from the raw words (an oracle independent of the library): a
    /// lane contributes its held count plus its op in flight if the word's
    /// tag names that op. Meaningful only while nothing moves the words.
    pub fn drift(&self, task: usize) -> i64 {
        use layout::*;
        let at = self.task(task) + T_IN_FLIGHT;
        // As `Task::check`: at an instant the word did not move (a reaper
        // may still be finishing a drain).
        for _ in 0..10_000 {
            let word = self.get(at);
            let held = self.held(task, word);
            if self.get(at) == word {
                return (word & COUNT_MASK) as i64 - held;
            }
            std::thread::yield_now();
        }
        panic!("the in-flight word of task slot {task} never held still");
    }

    /// Σ over every lane of `task`, as in [`RawTable::drift`].
    pub fn held(&self, task: usize, word: u64) -> i64 {
        use layout::*;
        let tag = word >> COUNT_BITS;
        (0..self.attach_capacity * LANES)
            .filter_map(|id| Some((id, self.lane_opt(task, id)?)))
            .map(|(id, lane)| {
                let ledger = self.get(lane + L_LEDGER);
                let mut held = ledger as u32 as i32 as i64;
                let next = (((ledger >> 32) & SEQ_MASK) + 1) & SEQ_MASK;
                if ledger & BUSY != 0 && tag == ((id as u64 + 1) << 24 | next) {
                    let intent = self.get(lane + L_INTENT);
                    if (intent >> 32) & SEQ_MASK == next {
                        held += intent as u32 as i32 as i64;
                    }
                }
                held
            })
            .sum()
    }

    /// Non-zero or busy lanes of `task`, for failure reports.
    pub fn describe_lanes(&self, task: usize) -> String {
        use layout::*;
        let word = self.get(self.task(task) + T_IN_FLIGHT);
        let mut out = format!(
            "in_flight word {word:#x} (count {}, tag lane {:?} seq {})",
            word & COUNT_MASK,
            ((word >> COUNT_BITS) >> 24).checked_sub(1),
            (word >> COUNT_BITS) & SEQ_MASK
        );
        for id in 0..self.attach_capacity * LANES {
            let Some(lane) = self.lane_opt(task, id) else {
                continue;
            };
            let ledger = self.get(lane + L_LEDGER);
            if ledger as u32 != 0 || ledger & BUSY != 0 {
                let intent = self.get(lane + L_INTENT);
                out += &format!(
                    "\n  lane {id} (slot {}): held {} seq {} busy {} | intent seq {} delta {}",
                    id / LANES,
                    ledger as u32 as i32,
                    (ledger >> 32) & SEQ_MASK,
                    ledger & BUSY != 0,
                    (intent >> 32) & SEQ_MASK,
                    intent as u32 as i32
                );
            }
        }
        out
    }
}
