//! Opening tables, validating files, registering tasks, and decisions, in one
//! process.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;
use flowctrl::{
    Decision, ErrorKind, Limited, LocalSettings, Outcome, Table, TableOptions, TaskConfig,
    TaskSettings,
};

fn open(path: &std::path::Path) -> flowctrl::Result<Table> {
    Table::open(path, &TableOptions::default())
}

fn mode_of(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_new_table_is_private_unless_asked_otherwise() {
    let scratch = Scratch::new("mode");
    let private = scratch.path("private");
    open(&private).unwrap();
    assert_eq!(mode_of(&private), 0o600);
    let shared = scratch.path("shared");
    let group_writable = TableOptions {
        mode: 0o660,
        ..Default::default()
    };
    // Others' write access is an explicit choice: refused unless shared.
    assert_eq!(
        Table::open(&shared, &group_writable).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let options = TableOptions {
        shared: true,
        ..group_writable
    };
    Table::open(&shared, &options).unwrap();
    assert_eq!(mode_of(&shared), 0o660);
    // And an existing group-writable table is only opened as shared.
    assert_eq!(open(&shared).unwrap_err().kind(), ErrorKind::Permission);
    Table::open(&shared, &options).unwrap();
    let bad = TableOptions {
        mode: 0o044,
        ..Default::default()
    };
    assert_eq!(
        Table::open(scratch.path("bad"), &bad).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn an_existing_table_keeps_its_geometry() {
    let scratch = Scratch::new("geometry");
    let path = scratch.path("t");
    let small = TableOptions {
        capacity: 4,
        max_processes: 8,
        ..Default::default()
    };
    let first = Table::open(&path, &small).unwrap();
    let second = open(&path).unwrap();
    assert_eq!((second.capacity(), second.max_processes()), (4, 8));
    first.task("a", &TaskConfig::new()).unwrap();
}

#[test]
fn bare_names_live_in_dev_shm() {
    assert_eq!(
        flowctrl::table::resolve_path(Some("svc".as_ref())),
        std::path::Path::new("/dev/shm/svc")
    );
    assert_eq!(
        flowctrl::table::resolve_path(None),
        std::path::Path::new("/dev/shm/flowctrl")
    );
    assert_eq!(
        flowctrl::table::resolve_path(Some("./svc".as_ref())),
        std::path::Path::new("./svc")
    );
}

#[test]
fn files_that_are_not_good_tables_are_refused_with_their_reason() {
    let scratch = Scratch::new("files");
    let garbage = scratch.path("garbage");
    std::fs::write(
        &garbage,
        (0..8192u32)
            .map(|i| (i * 7919 % 251) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    assert_eq!(open(&garbage).unwrap_err().kind(), ErrorKind::Corrupt);

    let empty = scratch.path("empty");
    std::fs::write(&empty, b"").unwrap();
    assert_eq!(open(&empty).unwrap_err().kind(), ErrorKind::Corrupt);

    let truncated = scratch.path("truncated");
    drop(open(&truncated).unwrap());
    let len = std::fs::metadata(&truncated).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&truncated)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let err = open(&truncated).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt);
    assert!(err.message().contains("truncated"), "{err}");

    let other_version = scratch.path("v999");
    drop(open(&other_version).unwrap());
    let mut bytes = std::fs::read(&other_version).unwrap();
    bytes[8..12].copy_from_slice(&999u32.to_le_bytes());
    std::fs::write(&other_version, bytes).unwrap();
    let err = open(&other_version).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Incompatible);
    assert!(err.message().contains("999"), "{err}");

    let missing_dir = scratch.path("no/such/dir");
    assert_eq!(open(&missing_dir).unwrap_err().kind(), ErrorKind::Io);
}

#[test]
fn a_path_without_permission_is_a_permission_error() {
    let scratch = Scratch::new("perm");
    let path = scratch.path("t");
    drop(open(&path).unwrap());
    // Root ignores file modes: as root, try as an unprivileged user in a child.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
    }
    let child = fork(|| {
        // SAFETY: dropping privileges in the forked child only.
        if root && unsafe { libc::setuid(65534) } != 0 {
            return 2;
        }
        match open(&path) {
            Err(e) if e.kind() == ErrorKind::Permission => 0,
            _ => 1,
        }
    });
    assert_eq!(wait(child), 0);
}

#[test]
fn names_are_checked() {
    let scratch = Scratch::new("names");
    let table = open(&scratch.path("t")).unwrap();
    for bad in ["", &"x".repeat(64), "tab\there", "nl\n"] {
        let err = table.task(bad, &TaskConfig::new()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidName, "{bad:?}");
    }
    for good in ["a", &"x".repeat(63), "ünïcode task", "GET /api/v1"] {
        table.task(good, &TaskConfig::new()).unwrap();
    }
}

#[test]
fn the_first_registration_wins_and_update_changes_it() {
    let scratch = Scratch::new("config");
    let table = open(&scratch.path("t")).unwrap();
    let config = TaskConfig::new()
        .local_rate(50.0)
        .burst(3)
        .max_concurrency(7);
    let task = table.task("svc", &config).unwrap();
    // The same config, or no fields at all, attach to it.
    table.task("svc", &config).unwrap();
    let attached = table.task("svc", &TaskConfig::new()).unwrap();
    assert_eq!(
        attached.settings(),
        TaskSettings {
            local: LocalSettings {
                local_rate: 50.0,
                burst: 3,
                max_concurrency: 7,
                ..LocalSettings::default()
            },
            ..TaskSettings::default()
        }
    );
    let err = table.task("svc", &TaskConfig::new().burst(4)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConfigMismatch);
    assert!(err.message().contains("burst 3 (asked 4)"), "{err}");
    task.update(&TaskConfig::new().burst(4)).unwrap();
    assert_eq!(attached.settings().local.burst, 4);
    table.task("svc", &TaskConfig::new().burst(4)).unwrap();
    assert_eq!(
        task.update(&TaskConfig::new().burst(0)).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        task.update(&TaskConfig::new().local_rate(-1.0))
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn a_full_table_says_so() {
    let scratch = Scratch::new("full");
    let options = TableOptions {
        capacity: 3,
        ..Default::default()
    };
    let table = Table::open(scratch.path("t"), &options).unwrap();
    for name in ["a", "b", "c"] {
        table.task(name, &TaskConfig::new()).unwrap();
    }
    assert_eq!(
        table.task("d", &TaskConfig::new()).unwrap_err().kind(),
        ErrorKind::TableFull
    );
    table.task("b", &TaskConfig::new()).unwrap();
}

#[test]
fn decisions_and_statistics() {
    let scratch = Scratch::new("decide");
    let table = open(&scratch.path("t")).unwrap();
    let task = table
        .task("svc", &TaskConfig::new().max_concurrency(2))
        .unwrap();
    let a = task.acquire(1).unwrap().permit().unwrap();
    let b = task.acquire(1).unwrap().permit().unwrap();
    assert!(matches!(
        task.acquire(1).unwrap(),
        Decision::Limited(Limited::Concurrency)
    ));
    std::thread::sleep(std::time::Duration::from_millis(2));
    a.release(Outcome::Success).unwrap();
    b.release(Outcome::Dropped).unwrap();
    task.acquire(2)
        .unwrap()
        .permit()
        .unwrap()
        .release(Outcome::Ignored)
        .unwrap();
    let s = task.stats();
    assert_eq!(
        (
            s.admitted,
            s.limited_concurrency,
            s.released_success,
            s.released_dropped,
            s.released_ignored,
            s.in_flight
        ),
        (4, 1, 1, 1, 2, 0)
    );
    assert_eq!(s.rtt_samples, 2);
    assert!(
        s.mean_rtt().unwrap() >= std::time::Duration::from_millis(1),
        "{s:?}"
    );

    let rated = table
        .task("rated", &TaskConfig::new().local_rate(1.0).burst(3))
        .unwrap();
    for _ in 0..3 {
        drop(rated.acquire(1).unwrap().permit().unwrap());
    }
    assert!(matches!(
        rated.acquire(1).unwrap(),
        Decision::Limited(Limited::Local)
    ));
    assert_eq!(rated.stats().limited_local, 1);
}

#[test]
fn a_rejection_gives_back_what_earlier_checks_took() {
    let scratch = Scratch::new("giveback");
    let table = open(&scratch.path("t")).unwrap();
    let task = table
        .task("svc", &TaskConfig::new().local_rate(1.0).max_concurrency(5))
        .unwrap();
    let held = task.acquire(1).unwrap().permit().unwrap();
    for _ in 0..10 {
        assert!(matches!(
            task.acquire(1).unwrap(),
            Decision::Limited(Limited::Local)
        ));
    }
    assert_eq!(task.stats().in_flight, 1);
    drop(held);
    assert_eq!(task.stats().in_flight, 0);
}

#[test]
fn impossible_requests_and_bad_permits_are_errors() {
    let scratch = Scratch::new("bad");
    let table = open(&scratch.path("t")).unwrap();
    let task = table
        .task(
            "svc",
            &TaskConfig::new()
                .local_rate(100.0)
                .burst(4)
                .max_concurrency(3),
        )
        .unwrap();
    let other = table.task("other", &TaskConfig::new()).unwrap();
    for n in [0, 4, 5] {
        assert_eq!(
            task.acquire(n).err().map(|e| e.kind()),
            Some(ErrorKind::InvalidArgument),
            "n={n}"
        );
    }
    let permit = task.acquire(1).unwrap().permit().unwrap();
    let raw = *permit.raw();
    assert_eq!(
        other
            .release_raw(&mut raw.clone(), Outcome::Success)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    permit.release(Outcome::Success).unwrap();
    // A copy of the released permit: this process holds nothing any more.
    let err = task
        .release_raw(&mut raw.clone(), Outcome::Success)
        .unwrap_err();
    assert!(err.message().contains("twice"), "{err}");
    let forged = flowctrl::RawPermit {
        owner: raw.owner ^ 1,
        ..raw
    };
    assert_eq!(
        task.release_raw(&mut forged.clone(), Outcome::Success)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    let s = task.stats();
    assert_eq!((s.admitted, s.released_success, s.in_flight), (1, 1, 0));
}

#[test]
fn dropping_everything_detaches_and_returns_permits() {
    let scratch = Scratch::new("detach");
    let path = scratch.path("t");
    let observer = open(&path).unwrap();
    let watched = observer
        .task("svc", &TaskConfig::new().max_concurrency(4))
        .unwrap();
    {
        let table = open(&path).unwrap();
        let task = table.task("svc", &TaskConfig::new()).unwrap();
        let raw = task.acquire_raw(3).unwrap().unwrap();
        let _ = raw; // never released: the handle goes away holding it
        assert_eq!(watched.stats().in_flight, 3);
    }
    let s = watched.stats();
    assert_eq!((s.in_flight, s.reclaimed, s.admitted), (0, 3, 3));
    assert!(matches!(watched.acquire(4).unwrap(), Decision::Admitted(_)));
}

#[test]
fn a_permit_may_be_released_on_another_thread() {
    let scratch = Scratch::new("threads");
    let table = open(&scratch.path("t")).unwrap();
    let task = table
        .task("svc", &TaskConfig::new().max_concurrency(64))
        .unwrap();
    // Several threads acquire, another releases: each thread counts into its
    // own statistics stripe, and a release finds the permit in any of them.
    let permits: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| {
                s.spawn(|| {
                    (0..8)
                        .map(|_| task.acquire_raw(1).unwrap().unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(task.stats().in_flight, 48);
    std::thread::spawn(move || {
        let mut permits = permits;
        for p in &mut permits {
            task.release_raw(p, Outcome::Success).unwrap();
        }
        assert_eq!(
            task.release_raw(&mut permits[0], Outcome::Success)
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidArgument
        );
        let s = task.stats();
        assert_eq!((s.admitted, s.released_success, s.in_flight), (48, 48, 0));
    })
    .join()
    .unwrap();
}

/// Every byte of the header and of a task slot overwritten with hostile
/// values: opening and using the table answers or errs, and never crashes.
#[test]
fn damaged_tables_are_refused_or_survived_never_crash() {
    let scratch = Scratch::new("damage");
    let pristine_path = scratch.path("pristine");
    let options = TableOptions {
        capacity: 4,
        max_processes: 4,
        ..Default::default()
    };
    {
        let table = Table::open(&pristine_path, &options).unwrap();
        let task = table
            .task(
                "svc",
                &TaskConfig::new()
                    .local_rate(10.0)
                    .burst(2)
                    .max_concurrency(3),
            )
            .unwrap();
        drop(task.acquire(1).unwrap());
    }
    let pristine = std::fs::read(&pristine_path).unwrap();
    // The header's words but last_reap (which the library rewrites), and
    // the four task slots.
    let header = 0..layout::H_LAST_REAP;
    let task_slots = layout::HEADER_SIZE..layout::HEADER_SIZE + 4 * layout::TASK_SLOT;
    let mut outcomes = std::collections::BTreeMap::<&str, u32>::new();
    for (i, offset) in header.chain(task_slots.step_by(3)).enumerate() {
        for value in [0x00u8, 0xff, 0x7f, 0x80, (offset * 31 + i) as u8] {
            let mut bytes = pristine.clone();
            bytes[offset] = value;
            // A file of its own per case: the last case's handle may still
            // map its file a moment after it is dropped (its reaper thread
            // holds it through a round), and rewriting a mapped file in
            // place truncates it under that mapping (SIGBUS there).
            let path = scratch.path(&format!("damaged-{i}-{value:02x}"));
            std::fs::write(&path, &bytes).unwrap();
            let outcome = match Table::open(&path, &options) {
                Err(e) => {
                    assert!(
                        matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::Incompatible),
                        "{e}"
                    );
                    "refused"
                }
                Ok(table) => match table.task("svc", &TaskConfig::new()) {
                    Err(_) => "task refused",
                    Ok(task) => {
                        let _ = task
                            .acquire(1)
                            .map(|d| d.permit().map(|p| p.release(Outcome::Success)));
                        let _ = task.stats();
                        "survived"
                    }
                },
            };
            *outcomes.entry(outcome).or_default() += 1;
            let _ = std::fs::remove_file(&path);
        }
    }
    assert!(
        outcomes["refused"] > 0 && outcomes["survived"] > 0,
        "{outcomes:?}"
    );
}

/// `check` under traffic that returns the count to the same value over and
/// over (acquired on one thread's lane, released on another's): a word that
/// merely looks unchanged is no proof of an instant, so `check` must never
/// report a drift that is not there.
#[test]
fn check_under_traffic_never_reports_a_false_drift() {
    let scratch = Scratch::new("check-traffic");
    let table = open(&scratch.path("t")).unwrap();
    let task = table
        .task("busy", &TaskConfig::new().max_concurrency(64))
        .unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<flowctrl::RawPermit>(16);
        let producer = s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(p) = task.acquire_raw(1).unwrap()
                    && tx.send(p).is_err()
                {
                    break;
                }
            }
            drop(tx);
        });
        let consumer = s.spawn(|| {
            for mut p in rx {
                task.release_raw(&mut p, Outcome::Success).unwrap();
            }
        });
        let mut checks = 0;
        let mut drifts = Vec::new();
        let began = std::time::Instant::now();
        while began.elapsed() < std::time::Duration::from_millis(700) {
            if let Ok(c) = task.check() {
                if c.drift() != 0 {
                    drifts.push(c);
                }
                checks += 1;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(
            drifts.is_empty(),
            "{} of {checks} checks drifted: {drifts:?}",
            drifts.len()
        );
        producer.join().unwrap();
        consumer.join().unwrap();
        assert!(checks > 0, "no check found an instant in 700 ms");
    });
    assert_eq!(task.check().unwrap().drift(), 0);
}

/// The tests' copy of the file format (`common::layout`, the one copy every
/// test that reads or writes a table's bytes uses) is the format the library
/// writes: tables of several geometries, made through the public API, record
/// in their header the layout version, struct sizes and capacities the copy
/// says; their total size is the copy's sum over the regions (for
/// geometries that differ in one capacity each, which pins what the header
/// does not record: the header page, lanes per (task, process) and the pick
/// ledgers); and the offsets the copy computes find what the library wrote
/// there: a task's name and configuration, this process's attachment, the
/// ledger lanes of held permits, a balancer's name, a backend's address and
/// weight, the pick ledger of a held pick.
#[test]
fn the_layout_the_tests_mirror_is_the_one_the_header_records() {
    use flowctrl::{BalancerConfig, PickOptions};
    use layout::*;
    assert_eq!(VERSION, flowctrl::LAYOUT_VERSION);
    const { assert!(HEADER_STRUCT <= HEADER_SIZE) };
    let scratch = Scratch::new("layout");
    let geometries: [(usize, usize, usize, usize); 7] = [
        (3, 5, 2, 3),
        (4, 5, 2, 3),
        (3, 6, 2, 3),
        (3, 5, 3, 3),
        (3, 5, 2, 4),
        (1, 1, 0, 0),
        (2, 1, 0, 0),
    ];
    for (i, &(tasks, processes, balancers, backends)) in geometries.iter().enumerate() {
        let at = format!("geometry {:?}", geometries[i]);
        let path = scratch.path(&format!("t{i}"));
        let options = TableOptions {
            capacity: tasks as u32,
            max_processes: processes as u32,
            balancers: balancers as u32,
            backends_per_balancer: if balancers == 0 { 32 } else { backends as u32 },
            ..Default::default()
        };
        let table = Table::open(&path, &options).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
        assert_eq!(&bytes[H_MAGIC..H_MAGIC + 8], b"FLOWCTRL", "{at}");
        assert_eq!(u32_at(H_VERSION), VERSION, "{at}");
        let recorded = [
            (H_HEADER_SIZE, HEADER_STRUCT, "header_size"),
            (H_TASK_SLOT_SIZE, TASK_SLOT, "task_slot_size"),
            (H_ATTACH_SLOT_SIZE, ATTACH_SLOT, "attach_slot_size"),
            (H_LANE_SIZE, LANE, "lane_size"),
            (H_BASELINE_SIZE, BASELINE, "baseline_size"),
            (H_TASK_CAPACITY, tasks, "task_capacity"),
            (H_ATTACH_CAPACITY, processes, "attach_capacity"),
            (H_BALANCER_CAPACITY, balancers, "balancer_capacity"),
            (H_LANE_SKETCH_SIZE, LANE_SKETCH, "lane_sketch_size"),
        ];
        for (offset, expected, name) in recorded {
            assert_eq!(u32_at(offset) as usize, expected, "{at}: header {name}");
        }
        if balancers > 0 {
            for (offset, expected, name) in [
                (H_BACKEND_CAPACITY, backends, "backend_capacity"),
                (H_BALANCER_SLOT_SIZE, BALANCER_SLOT, "balancer_slot_size"),
                (H_BACKEND_SLOT_SIZE, BACKEND_SLOT, "backend_slot_size"),
            ] {
                assert_eq!(u32_at(offset) as usize, expected, "{at}: header {name}");
            }
        }
        let total = total_size(tasks, processes, balancers, backends);
        assert_eq!(u64_at(H_TOTAL_SIZE) as usize, total, "{at}: total_size");
        let file = file_size(tasks, processes, balancers, backends);
        assert_eq!(bytes.len(), file, "{at}: file size");
        assert_eq!(table.size_bytes() as usize, file, "{at}: size_bytes");
        assert_eq!(table.clock().ticks_per_sec(), u64_at(H_TICKS), "{at}");

        // The offsets find what the library wrote.
        let task = table
            .task("mirror", &TaskConfig::new().burst(3).max_concurrency(7))
            .unwrap();
        let permits = [task.acquire(2).unwrap(), task.acquire(1).unwrap()];
        let raw = RawTable::open(&path);
        assert_eq!(raw.total_size(), total, "{at}");
        let slot = raw.find_task("mirror").expect("the task's slot");
        let version = raw.get(raw.task(slot) + T_CONFIG_VERSION);
        let limits = raw.get(raw.task(slot) + T_CONFIG + 24 * (version as usize & 1) + 16);
        assert_eq!((limits as u32, limits >> 32), (3, 7), "{at}: config limits");
        let me = std::process::id() as libc::pid_t;
        let (attachment, _) = raw.slot_of(me).expect("this process's attachment");
        let word = raw.get(raw.task(slot) + T_IN_FLIGHT);
        assert_eq!(word & COUNT_MASK, 3, "{at}");
        assert_eq!(raw.held(slot, word), 3, "{at}: the lanes hold the permits");
        drop(permits);
        assert_eq!(raw.drift(slot), 0, "{at}");
        if balancers == 0 {
            continue;
        }
        let backends_given = [("10.1.2.3:8080", 5), ("db.example:5432", 2)];
        let lb = table
            .balancer_with_backends("mirror-lb", &BalancerConfig::new(), &backends_given)
            .unwrap();
        let b = (0..balancers)
            .find(|&b| {
                let base = raw.balancer(b);
                raw.get(base + B_STATE) == TASK_READY
                    && raw.name_at(base + B_NAME, raw.get(base + B_NAME_LEN) as usize)
                        == b"mirror-lb"
            })
            .expect("the balancer's slot");
        for (address, weight) in backends_given {
            let k = lb.index_of(address).unwrap() as usize;
            let base = raw.backend(b, k);
            assert_eq!(raw.get(base + K_STATE) & 0xff, BACKEND_ACTIVE, "{at}");
            assert_eq!(
                raw.get(base + K_WEIGHT),
                u64::from(weight),
                "{at}: weight of {address}"
            );
            let len = raw.get(base + K_ADDR_LEN) as usize;
            assert_eq!(raw.name_at(base + K_ADDR, len), address.as_bytes(), "{at}");
        }
        let pick = lb.pick(&PickOptions::default()).unwrap();
        let k = pick.raw().backend as usize;
        assert_eq!(
            raw.get(raw.backend(b, k) + K_IN_FLIGHT) & COUNT_MASK,
            1,
            "{at}"
        );
        let ledger = raw.get(raw.pick_ledger(b, attachment as usize, k));
        assert_eq!(ledger as u32, 1, "{at}: the pick ledger holds the pick");
        pick.done(Outcome::Success).unwrap();
        assert_eq!(
            raw.get(raw.pick_ledger(b, attachment as usize, k)) as u32,
            0,
            "{at}"
        );
    }
}
