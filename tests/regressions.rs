//! Regression tests: each names a way the earlier design failed (or could
//! fail) and checks the current one does not.

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::layout::*;
use common::*;
use flowctrl::{Decision, ErrorKind, Limited, Outcome, Table, TableOptions, TaskConfig};

fn cap(n: u32) -> TaskConfig {
    TaskConfig::new().max_concurrency(n)
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A child that opens the table, holds `n` permits of `task`, says so, and
/// sleeps until killed.
fn holder(path: &Path, opts: &TableOptions, task: &str, n: u32, ready: Pipe) -> i32 {
    let table = Table::open(path, opts).unwrap();
    let task = table.task(task, &TaskConfig::new()).unwrap();
    for _ in 0..n {
        task.acquire_raw(1).unwrap().unwrap();
    }
    ready.send(1);
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

// ---- (a) a reaper out of file descriptors -----------------------------------

/// The old reaper judged liveness by opening `/proc/<pid>`: out of
/// descriptors, it could not tell the dead from the living. Liveness is now a
/// lock on the descriptor the table already has.
#[test]
fn a_reaper_out_of_descriptors_reclaims_the_dead_and_spares_the_living() {
    let scratch = Scratch::new("emfile");
    let path = scratch.path("t");
    let opts = options().capacity(4).processes(16);
    drop(
        Table::open(&path, &opts)
            .unwrap()
            .task("db", &cap(10))
            .unwrap(),
    );
    let mut children = KillOnDrop::default();
    let ready = Pipe::new();
    let go = Pipe::new();
    let live = fork_guarded(|| holder(&path, &opts, "db", 2, ready));
    children.add(live);
    assert_eq!(ready.recv_timeout(Duration::from_secs(10)), Some(1));
    let dead = fork_guarded(|| holder(&path, &opts, "db", 3, ready));
    children.add(dead);
    assert_eq!(ready.recv_timeout(Duration::from_secs(10)), Some(1));

    let reaper = fork_guarded(|| {
        let table = Table::open(&path, &opts).unwrap();
        let task = table.task("db", &TaskConfig::new()).unwrap();
        // Lower the limit to the descriptors in use, then use up every free one.
        let highest = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
            .max()
            .unwrap();
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: valid out-pointer / in-pointer.
        unsafe {
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
            limit.rlim_cur = highest + 1;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
            while libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) >= 0 {}
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EMFILE) {
                return 10;
            }
        }
        ready.send(1);
        if go.recv_timeout(Duration::from_secs(10)) != Some(1) {
            return 11;
        }
        let began = Instant::now();
        loop {
            table.reap();
            let s = task.stats();
            if s.reclaimed >= 3 || began.elapsed() > Duration::from_secs(3) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let stats = task.stats();
        let rows = task.stats_by_process();
        let live_row = rows
            .iter()
            .find(|p| p.pid == live as u32)
            .map(|p| p.stats.held);
        let dead_listed = rows.iter().any(|p| p.pid == dead as u32);
        let drift = task.check().map(|c| c.drift());
        if stats.reclaimed != 3
            || stats.in_flight != 2
            || live_row != Some(2)
            || dead_listed
            || drift != Ok(0)
        {
            raw_eprint(&format!(
                "EMFILE reaper: reclaimed {} (want 3), in_flight {} (want 2), live holder's row \
                 {live_row:?} (want Some(2)), dead holder still listed {dead_listed}, drift {drift:?}",
                stats.reclaimed, stats.in_flight
            ));
            return 1;
        }
        0
    });
    children.add(reaper);
    assert_eq!(
        ready.recv_timeout(Duration::from_secs(10)),
        Some(1),
        "the reaper did not get to EMFILE: {:?}",
        try_wait(reaper)
    );
    // Only the reaper may reap: the live holder is stopped, the test process
    // has no handle open.
    signal(live, libc::SIGSTOP);
    wait_stopped(live, Duration::from_secs(5)).unwrap();
    signal(dead, libc::SIGKILL);
    assert!(wait_timeout(dead, Duration::from_secs(5)).killed_by(libc::SIGKILL));
    children.forget(dead);
    go.send(1);
    assert_eq!(wait_timeout(reaper, Duration::from_secs(15)), Exit::Code(0));
    children.forget(reaper);
}

// ---- (b) stale and live task-slot claims ------------------------------------

/// A task slot left CLAIMING by a process whose pid was reused, or that
/// died, used to make registration spin forever. Claims now name an
/// attachment and its epoch: an old epoch or a dead owner is taken over at
/// once, and a live claim is waited for only up to its deadline.
#[test]
fn stale_claims_are_taken_over_and_a_live_one_times_out() {
    let scratch = Scratch::new("claims");
    let opts = options().capacity(1).processes(8); // one task slot: every name probes slot 0
    let (old_epoch, dead_owner, live_claim) = (
        scratch.path("old"),
        scratch.path("dead"),
        scratch.path("live"),
    );
    for path in [&old_epoch, &dead_owner, &live_claim] {
        drop(Table::open(path, &opts).unwrap());
    }
    let mut children = KillOnDrop::default();
    let ready = Pipe::new();
    let live = fork_guarded(|| {
        let _a = Table::open(&old_epoch, &opts).unwrap();
        let _b = Table::open(&live_claim, &opts).unwrap();
        ready.send(1);
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    children.add(live);
    assert_eq!(ready.recv_timeout(Duration::from_secs(10)), Some(1));

    let register = |path: &PathBuf| {
        let (path, opts) = (path.clone(), opts.clone());
        move || {
            let table = Table::open(&path, &opts).unwrap();
            let began = Instant::now();
            let result = table.task("svc", &cap(3));
            let took = began.elapsed();
            match result {
                Ok(task) if took < Duration::from_millis(500) => {
                    let permit = task.acquire(1).unwrap().permit();
                    i32::from(permit.is_none())
                }
                Ok(_) => {
                    raw_eprint(&format!("registration over a stale claim took {took:?}"));
                    2
                }
                Err(e) if e.kind() == ErrorKind::Timeout => {
                    if (Duration::from_millis(1500)..Duration::from_secs(5)).contains(&took) {
                        42
                    } else {
                        raw_eprint(&format!("Timeout after {took:?}, expected ~2 s"));
                        3
                    }
                }
                Err(e) => {
                    raw_eprint(&format!("registration failed: {e} ({:?})", e.kind()));
                    4
                }
            }
        }
    };

    // 1. The live process's slot, an epoch before its current claim.
    let raw = RawTable::open(&old_epoch);
    let (slot, epoch) = raw.slot_of(live).expect("live process attached");
    raw.set(
        raw.task(0) + T_STATE,
        TASK_CLAIMING | owner(slot, epoch - 1),
    );
    assert_eq!(
        run_in_child(Duration::from_secs(10), register(&old_epoch)),
        Exit::Code(0)
    );

    // 2. A claimer that died; the registering process attached before it died.
    let raw = RawTable::open(&dead_owner);
    let doomed = fork_guarded(|| {
        let _t = Table::open(&dead_owner, &opts).unwrap();
        ready.send(1);
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    children.add(doomed);
    assert_eq!(ready.recv_timeout(Duration::from_secs(10)), Some(1));
    let (slot, epoch) = raw.slot_of(doomed).expect("doomed process attached");
    let go = Pipe::new();
    let registrar = fork_guarded(|| {
        let table = Table::open(&dead_owner, &opts).unwrap();
        ready.send(1);
        go.recv_timeout(Duration::from_secs(10));
        let began = Instant::now();
        match table.task("svc", &cap(3)) {
            Ok(_) if began.elapsed() < Duration::from_millis(500) => 0,
            other => {
                raw_eprint(&format!(
                    "over a dead claimer: {:?} after {:?}",
                    other.err(),
                    began.elapsed()
                ));
                1
            }
        }
    });
    children.add(registrar);
    assert_eq!(ready.recv_timeout(Duration::from_secs(10)), Some(1));
    signal(doomed, libc::SIGKILL);
    assert!(wait_timeout(doomed, Duration::from_secs(5)).killed_by(libc::SIGKILL));
    children.forget(doomed);
    raw.set(raw.task(0) + T_STATE, TASK_CLAIMING | owner(slot, epoch));
    go.send(1);
    assert_eq!(
        wait_timeout(registrar, Duration::from_secs(10)),
        Exit::Code(0)
    );
    children.forget(registrar);

    // 3. The live process's current claim: wait for it, then give up, ~2 s.
    let raw = RawTable::open(&live_claim);
    let (slot, epoch) = raw.slot_of(live).expect("live process attached");
    raw.set(raw.task(0) + T_STATE, TASK_CLAIMING | owner(slot, epoch));
    assert_eq!(
        run_in_child(Duration::from_secs(10), register(&live_claim)),
        Exit::Code(42)
    );
    assert_eq!(
        raw.get(raw.task(0) + T_STATE),
        TASK_CLAIMING | owner(slot, epoch)
    );
}

// ---- (c) double release across threads --------------------------------------

/// A permit acquired on one thread and released on another; a copy of it
/// released again is refused, and the count never lets the cap be exceeded.
#[test]
fn a_copy_of_a_permit_released_on_another_thread_is_refused() {
    let scratch = Scratch::new("double");
    let table = Table::open(scratch.path("t"), &options().capacity(4).processes(8)).unwrap();
    let task = table.task("svc", &cap(2)).unwrap();
    let permit = std::thread::scope(|s| {
        s.spawn(|| task.acquire_raw(1).unwrap().unwrap())
            .join()
            .unwrap()
    });
    let copy = permit;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut p = permit;
            task.release_raw(&mut p, Outcome::Success).unwrap();
            assert!(p.is_spent());
            assert_eq!(
                task.release_raw(&mut p, Outcome::Success)
                    .unwrap_err()
                    .kind(),
                ErrorKind::InvalidArgument
            );
        })
        .join()
        .unwrap();
        s.spawn(|| {
            let err = task
                .release_raw(&mut copy.clone(), Outcome::Success)
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        })
        .join()
        .unwrap();
    });
    let c = task.check().unwrap();
    assert_eq!((c.in_flight, c.held), (0, 0));
    // The cap still holds: two admitted (on two threads), the third refused.
    let held: Vec<_> = std::thread::scope(|s| {
        let a = s.spawn(|| task.acquire_raw(1).unwrap().unwrap());
        let b = s.spawn(|| task.acquire_raw(1).unwrap().unwrap());
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    assert!(matches!(
        task.acquire_raw(1).unwrap(),
        Err(Limited::Concurrency)
    ));
    let refused = std::thread::scope(|s| {
        s.spawn(|| task.release_raw(&mut copy.clone(), Outcome::Success))
            .join()
            .unwrap()
    });
    // Documented limit (include/flowctrl.h, fc_release): while the process
    // holds other permits of the task, a copy's second release cannot be told
    // from theirs; it is then one of those whose release is refused. The count
    // itself never goes below what the process's ledgers hold.
    if refused.is_ok() {
        let c = task.check().unwrap();
        assert_eq!((c.in_flight, c.drift()), (1, 0));
        let mut held = held;
        let results: Vec<_> = held
            .iter_mut()
            .map(|p| task.release_raw(p, Outcome::Success))
            .collect();
        assert_eq!(
            results.iter().filter(|r| r.is_err()).count(),
            1,
            "{results:?}"
        );
    } else {
        for mut p in held {
            task.release_raw(&mut p, Outcome::Success).unwrap();
        }
    }
    let c = task.check().unwrap();
    assert_eq!((c.in_flight, c.held), (0, 0));
    let s = task.stats();
    assert_eq!((s.admitted, s.limited_concurrency), (3, 1), "{s:?}");
}

// ---- (d) permits taken while no cap was set ---------------------------------

/// Permits admitted while a task had no cap hold no concurrency. The old
/// reaper gave back everything a dead process had admitted, so setting a cap
/// and then killing such a holder took the count below what others held.
#[test]
fn uncounted_permits_of_a_dead_process_do_not_lower_the_count() {
    let scratch = Scratch::new("uncounted");
    let path = scratch.path("t");
    let opts = options().capacity(4).processes(8);
    let table = Table::open(&path, &opts).unwrap();
    let task = table
        .task("svc", &TaskConfig::new().no_max_concurrency())
        .unwrap();
    let (up, down) = (Pipe::new(), Pipe::new());
    let mut children = KillOnDrop::default();
    let child = fork_guarded(|| {
        let table = Table::open(&path, &opts).unwrap();
        let task = table.task("svc", &TaskConfig::new()).unwrap();
        let mut uncounted = task.acquire_raw(3).unwrap().unwrap();
        up.send(b'a');
        down.recv_timeout(Duration::from_secs(10));
        let _counted = task.acquire_raw(1).unwrap().unwrap();
        up.send(b'b');
        down.recv_timeout(Duration::from_secs(10));
        task.release_raw(&mut uncounted, Outcome::Success).unwrap();
        up.send(b'c');
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    children.add(child);
    let step = |want: u8| assert_eq!(up.recv_timeout(Duration::from_secs(10)), Some(want));
    step(b'a');
    assert_eq!(task.stats().in_flight, 0);
    task.update(&cap(5)).unwrap();
    down.send(1);
    step(b'b');
    let mine = task.acquire_raw(2).unwrap().unwrap();
    assert_eq!(task.check().unwrap().in_flight, 3);
    down.send(1);
    step(b'c');
    // Releasing the uncounted permits moved nothing.
    let c = task.check().unwrap();
    assert_eq!((c.in_flight, c.drift()), (3, 0));
    signal(child, libc::SIGKILL);
    assert!(wait_timeout(child, Duration::from_secs(5)).killed_by(libc::SIGKILL));
    children.forget(child);
    table.reap();
    let c = task.check().unwrap();
    let s = task.stats();
    assert_eq!((c.in_flight, c.held, s.reclaimed), (2, 2, 1), "{s:?}");
    // And the cap is exact: 3 more fit, the 4th does not.
    let more = task.acquire_raw(3).unwrap().unwrap();
    assert!(matches!(
        task.acquire(1).unwrap(),
        Decision::Limited(Limited::Concurrency)
    ));
    for mut p in [mine, more] {
        task.release_raw(&mut p, Outcome::Success).unwrap();
    }
    assert_eq!(task.check().unwrap().in_flight, 0);
}

// ---- (e) a full /dev/shm ----------------------------------------------------

/// A tmpfs mounted for the test, unmounted when dropped (even on a panic).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Result<Self, String> {
        let target = CString::new(dir.as_os_str().as_bytes()).unwrap();
        let data = CString::new(format!("size={size}")).unwrap();
        // SAFETY: valid C strings.
        let r = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                data.as_ptr().cast(),
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        Ok(Self(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let target = CString::new(self.0.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// The old table was created with `ftruncate` and touched lazily: on a full
/// /dev/shm the first write to a new page raised SIGBUS in whichever process
/// got there. Now space is reserved at creation and on open: a clear error.
#[test]
fn a_full_filesystem_is_an_error_at_open_never_sigbus() {
    if !is_root() {
        eprintln!(
            "SKIPPED a_full_filesystem_is_an_error_at_open_never_sigbus: needs root to mount a tmpfs"
        );
        return;
    }
    let scratch = Scratch::new("fullfs");
    let dir = scratch.path("mnt");
    std::fs::create_dir(&dir).unwrap();
    let _mount = match Tmpfs::mount(&dir, "2m") {
        Ok(m) => m,
        Err(e) => {
            eprintln!(
                "SKIPPED a_full_filesystem_is_an_error_at_open_never_sigbus: cannot mount a tmpfs: {e}"
            );
            return;
        }
    };
    let expect_no_space = |path: PathBuf, opts: TableOptions| {
        move || match Table::open(&path, &opts) {
            Err(e) if e.kind() == ErrorKind::Io && e.message().contains("no space") => 0,
            Err(e) => {
                raw_eprint(&format!(
                    "{}: unexpected error {e} ({:?})",
                    path.display(),
                    e.kind()
                ));
                2
            }
            Ok(table) => {
                // Touch every task: an unreserved page would raise SIGBUS here.
                for i in 0..table.capacity().min(64) {
                    let _ = table
                        .task(&format!("t{i}"), &cap(1))
                        .map(|t| t.acquire(1).map(drop));
                }
                raw_eprint(&format!("{}: opened on a full filesystem", path.display()));
                3
            }
        }
    };
    // 10 MiB of table on a 2 MiB filesystem.
    let big = dir.join("big");
    assert_eq!(
        run_in_child(
            Duration::from_secs(20),
            expect_no_space(big.clone(), options().capacity(256).processes(64))
        ),
        Exit::Code(0)
    );
    assert!(!big.exists(), "a failed creation left a file behind");
    let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A table that fits works.
    let small = dir.join("small");
    let use_small = || {
        let table = Table::open(&small, &options().capacity(8).processes(8)).unwrap();
        let task = table.task("svc", &cap(4)).unwrap();
        let p = task.acquire(4).unwrap().permit().unwrap();
        p.release(Outcome::Success).unwrap();
        i32::from(task.stats().admitted == 0)
    };
    assert_eq!(
        run_in_child(Duration::from_secs(20), use_small),
        Exit::Code(0)
    );

    // A sparse table file (an existing table whose pages were never
    // allocated), then the filesystem fills up: opening it must fail cleanly.
    let elsewhere = scratch.path("model");
    drop(Table::open(&elsewhere, &options().capacity(32).processes(16)).unwrap());
    let total = std::fs::metadata(&elsewhere).unwrap().len();
    let header = &std::fs::read(&elsewhere).unwrap()[..4096];
    let sparse = dir.join("sparse");
    {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&sparse)
            .unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, header, 0).unwrap();
        f.set_len(total).unwrap();
    }
    let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![1u8; 64 * 1024];
    loop {
        use std::io::Write;
        if let Err(e) = filler.write_all(&chunk) {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
            break;
        }
    }
    let _ = filler.sync_all();
    assert_eq!(
        run_in_child(
            Duration::from_secs(20),
            expect_no_space(sparse, options().capacity(32).processes(16))
        ),
        Exit::Code(0)
    );
    // The table whose space was reserved keeps working on the full filesystem.
    assert_eq!(
        run_in_child(Duration::from_secs(20), use_small),
        Exit::Code(0)
    );
}

// ---- (f) files the table must not trust -------------------------------------

/// Whoever can write the file sets everyone's limits: a file owned by another
/// user, a symbolic link, or a group-writable file is refused unless asked for.
#[test]
fn squatted_linked_and_writable_files_are_refused() {
    let scratch = Scratch::new("squat");
    let opts = options().capacity(4).processes(8);
    // A symlink at the path, to a perfectly good table.
    let real = scratch.path("real");
    drop(Table::open(&real, &opts).unwrap());
    let link = scratch.path("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let err = Table::open(&link, &opts).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permission, "{err}");
    // A group-writable table is only opened as a shared one.
    let shared_opts = TableOptions {
        mode: 0o660,
        shared: true,
        ..opts.clone()
    };
    let shared = scratch.path("shared");
    drop(Table::open(&shared, &shared_opts).unwrap());
    assert_eq!(
        Table::open(&shared, &opts).unwrap_err().kind(),
        ErrorKind::Permission
    );
    Table::open(&shared, &shared_opts).unwrap();

    if !is_root() {
        eprintln!(
            "SKIPPED the squatter half of squatted_linked_and_writable_files_are_refused: needs root to chown"
        );
        return;
    }
    let squatted = scratch.path("squatted");
    drop(Table::open(&squatted, &opts).unwrap());
    std::os::unix::fs::chown(&squatted, Some(65534), Some(65534)).unwrap();
    let err = Table::open(&squatted, &opts).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permission, "{err}");
    assert!(err.message().contains("65534"), "{err}");
    let accepting = TableOptions {
        owner: Some(65534),
        ..opts.clone()
    };
    let table = Table::open(&squatted, &accepting).unwrap();
    let task = table.task("svc", &cap(1)).unwrap();
    drop(task.acquire(1).unwrap().permit().unwrap());
}

// ---- (g) the file deleted under a running table ------------------------------

#[test]
fn a_deleted_or_replaced_file_is_reported() {
    let scratch = Scratch::new("deleted");
    let path = scratch.path("t");
    let opts = options().capacity(4).processes(8);
    let table = Table::open(&path, &opts).unwrap();
    table.task("svc", &cap(1)).unwrap();
    assert!(!table.check().replaced);
    std::fs::remove_file(&path).unwrap();
    let check = table.check();
    assert!(check.replaced && !check.is_ok(), "{check:?}");
    // A new file at the path is another table: still reported.
    let other = Table::open(&path, &opts).unwrap();
    assert!(!other.check().replaced);
    assert!(table.check().replaced);
    // The old mapping keeps working for the processes that have it.
    drop(
        table
            .task("svc", &TaskConfig::new())
            .unwrap()
            .acquire(1)
            .unwrap()
            .permit()
            .unwrap(),
    );
}

// ---- (h) fork while another thread opens or attaches -------------------------

/// Entry point of the re-executed helper process, not a test of its own:
/// ignored, so a plain `cargo test` does not run it, and
/// [`a_fork_during_open_does_not_deadlock_the_child`] runs it with
/// `--ignored --exact regression_helper`. Run by hand, without the
/// environment that test gives it, it fails.
#[test]
#[ignore = "the helper process of a_fork_during_open_does_not_deadlock_the_child, run by it"]
fn regression_helper() {
    match std::env::var("FLOWCTRL_REGRESSION_ROLE").as_deref() {
        Ok("fork-during-open") => {
            let path =
                PathBuf::from(std::env::var("FLOWCTRL_REGRESSION_PATH").expect(
                    "FLOWCTRL_REGRESSION_PATH names the table of the fork-during-open helper",
                ));
            let code = fork_while_opening(&path, 40);
            // Tells the parent this process did run the helper (a harness
            // whose filter matched nothing would exit 0 too).
            if let Ok(ran) = std::env::var("FLOWCTRL_REGRESSION_RAN") {
                std::fs::write(ran, code.to_string()).expect("write the helper's marker");
            }
            // SAFETY: ends the helper process.
            unsafe { libc::_exit(code) }
        }
        Ok(other) => panic!("unknown FLOWCTRL_REGRESSION_ROLE {other:?}"),
        Err(_) => panic!(
            "regression_helper is the helper process of \
             a_fork_during_open_does_not_deadlock_the_child, re-executed by it with \
             FLOWCTRL_REGRESSION_ROLE=fork-during-open; run alone it has nothing to test"
        ),
    }
}

/// One thread opens the table, registers and acquires in a loop while this
/// thread forks; each child opens the table itself (and uses `inherited`, a
/// handle opened before the forks, if any). Returns 0 if every child attached
/// and exited 0 within 5 s.
fn fork_while_opening(path: &Path, forks: u32) -> i32 {
    fork_while_opening_with(path, forks, None)
}

fn fork_while_opening_with(path: &Path, forks: u32, inherited: Option<&Table>) -> i32 {
    let opts = options().capacity(4).processes(128);
    let stop = Arc::new(AtomicBool::new(false));
    let opener = {
        let (stop, path, opts) = (stop.clone(), path.to_path_buf(), opts.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let table = Table::open(&path, &opts).unwrap();
                let task = table.task("f", &cap(1000)).unwrap();
                drop(task.acquire(1).unwrap());
            }
        })
    };
    let mut failures = 0;
    for i in 0..forks {
        let pid = fork_guarded(|| {
            // SAFETY: alarm only schedules a signal for this process.
            unsafe { libc::alarm(10) };
            if let Some(table) = inherited {
                let task = table.task("f", &cap(1000)).unwrap();
                drop(task.acquire(1).unwrap().permit().unwrap());
            }
            let table = Table::open(path, &opts).unwrap();
            let task = table.task("f", &cap(1000)).unwrap();
            drop(task.acquire(1).unwrap().permit().unwrap());
            0
        });
        match wait_timeout(pid, Duration::from_secs(5)) {
            Exit::Code(0) => {}
            other => {
                raw_eprint(&format!(
                    "fork {i} while another thread opened the table: child {other:?}"
                ));
                failures += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    opener.join().unwrap();
    i32::from(failures > 0)
}

/// A fork taken while another thread is inside `Table::open` (the process's
/// first, in fresh processes, and later ones) must not leave the child
/// waiting for a lock its parent's thread held.
#[test]
fn a_fork_during_open_does_not_deadlock_the_child() {
    let scratch = Scratch::new("forkopen");
    let path = scratch.path("t");
    // In this process, with a handle the children inherit.
    let table = Table::open(&path, &options().capacity(4).processes(128)).unwrap();
    assert_eq!(fork_while_opening_with(&path, 30, Some(&table)), 0);
    // In fresh processes, where the first open races the first fork.
    let ran = scratch.path("helper-ran");
    for run in 0..6 {
        let _ = std::fs::remove_file(&ran);
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--ignored",
            "--exact",
            "regression_helper",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("FLOWCTRL_REGRESSION_ROLE", "fork-during-open")
        .env("FLOWCTRL_REGRESSION_PATH", &path)
        .env("FLOWCTRL_REGRESSION_RAN", &ran)
        .stdout(std::process::Stdio::null());
        let pid = cmd.spawn().unwrap().id() as libc::pid_t;
        assert_eq!(
            wait_timeout(pid, Duration::from_secs(60)),
            Exit::Code(0),
            "fresh process {run}"
        );
        assert_eq!(
            std::fs::read_to_string(&ran).ok().as_deref(),
            Some("0"),
            "fresh process {run} exited 0 without running regression_helper"
        );
    }
}

// ---- (i) two handles of one process -------------------------------------------

#[test]
fn two_handles_of_one_process_are_two_attachments() {
    let scratch = Scratch::new("handles");
    let path = scratch.path("t");
    let opts = options().capacity(4).processes(8);
    let first = Table::open(&path, &opts).unwrap();
    let second = Table::open(&path, &opts).unwrap();
    let a = first.task("svc", &cap(10)).unwrap();
    let b = second.task("svc", &TaskConfig::new()).unwrap();
    let pa = a.acquire(1).unwrap().permit().unwrap();
    let pb = b.acquire(2).unwrap().permit().unwrap();
    let me = std::process::id();
    let rows = a.stats_by_process();
    let mine: Vec<_> = rows.iter().filter(|p| p.pid == me).collect();
    assert_eq!(mine.len(), 2, "{rows:?}");
    assert_ne!(mine[0].slot, mine[1].slot);
    let mut held: Vec<_> = mine
        .iter()
        .map(|p| (p.stats.held, p.stats.admitted))
        .collect();
    held.sort();
    assert_eq!(held, vec![(1, 1), (2, 2)]);
    // A permit of one handle is not the other's to release.
    let mut raw = *pa.raw();
    assert_eq!(
        b.release_raw(&mut raw, Outcome::Success)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    drop((pa, pb));
    // Dropping one handle detaches it alone.
    drop(b);
    drop(second);
    let rows = a.stats_by_process();
    assert_eq!(rows.iter().filter(|p| p.pid == me).count(), 1, "{rows:?}");
    assert_eq!(a.check().unwrap().in_flight, 0);
}
