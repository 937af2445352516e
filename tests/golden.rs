//! A table file made by flowctrl 0.3.0 (table layout 3), kept as
//! `tests/data/table-0.3.0.bin`, against the current build, both ways.
//!
//! * A 0.3.0 table is read by this build: a copy of the file opens, every
//!   task's settings (rates, burst, cap, global quota, limiter spec and
//!   bounds) read back exactly as this build registers the same
//!   configuration, the limiters as spelled out; registering each again
//!   with the configuration it was made with is accepted and with any one
//!   field off is refused (`ConfigMismatch`), which pins every stored value
//!   to the registered one; the balancer has its configuration and backends,
//!   acquire/release, the waiting acquire, the global quota on the embedded
//!   store and a pick all work on it, and `check()` is clean.
//! * A table made by this build is read by 0.3.0: a 0.3.0 build cannot be
//!   run here once the code moves on, so the test compares words instead. A
//!   table made now with the same options and registrations has the same
//!   size and, word for word, the same bytes as the 0.3.0 one, except those
//!   that differ between any two tables made alike: the header's per-table
//!   fields (table_id, random; clock_kind and ticks_per_sec, the host's
//!   clock; last_reap, a clock reading), which 0.3.0 takes from each file as
//!   it comes; the local rate's interval, which is in clock ticks and must be
//!   the same rounding of the same rate at each table's own ticks_per_sec;
//!   the attachment slots' pids; and the backends' join times and RTT sample
//!   times (clock readings; the RTT values are compared). So every task sits
//!   in the same slot (0.3.0 finds a task by its name's slot) with the same
//!   state, name, configuration version and copies, global-quota and limiter
//!   copies, limit word and (zero) run-time words, and the balancer and its
//!   backends likewise. 0.3.0 opened and used its own file (it made it, and
//!   its tests passed on such files); a file that is the same but for words
//!   0.3.0 reads per table, or only reports, is one 0.3.0 reads the same
//!   way. What this does not cover: words written at run time (lanes,
//!   counters, windows) by processes of two versions using one table at
//!   once.
//!
//! The golden file's clock is the TSC (it was made on x86_64): elsewhere it
//! is refused as an unknown clock, as any table moved between hosts may
//! be, so the test that opens it runs on x86_64 only.
//!
//! The file is made once, by the ignored `write_golden_table` (see there),
//! and never again: a new layout is a new file beside it.

mod common;

use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::layout::*;
use common::*;
use flowctrl::{
    BalancerConfig, Decision, Limited, LimiterAlgorithm, LimiterSpec, Outcome, PickOptions, Table,
    TableOptions, TaskConfig,
};

/// The table 0.3.0 made.
const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/table-0.3.0.bin");

/// The tasks of the golden table and the configuration each was registered
/// with: a local rate with a burst and a cap; a global quota on the
/// embedded store (the default store); an adaptive limit with bounds; an
/// adaptive limit with a parameter.
fn tasks() -> [(&'static str, TaskConfig); 4] {
    let spec = |text: &str| LimiterSpec::parse(text).unwrap();
    [
        (
            "local",
            TaskConfig::new()
                .local_rate(250.0)
                .burst(5)
                .max_concurrency(3),
        ),
        (
            "global",
            TaskConfig::new()
                .global_rate(1000.0)
                .slice_ms(500)
                .chunk(50)
                .fallback_rate(100.0),
        ),
        (
            "auto",
            TaskConfig::new()
                .limiter(spec("auto"))
                .min_limit(2)
                .max_limit(40)
                .initial_limit(8),
        ),
        (
            "gradient",
            TaskConfig::new().limiter(spec("gradient2 tolerance=2")),
        ),
    ]
}

/// What each task's settings must read back as, field by field, without
/// naming `TaskSettings`' fields (so the test reads the same over changes
/// of the Rust API): registering a task compares every field a
/// configuration sets with the stored one, so each configuration here,
/// which differs from the registered one in one field (a set field
/// changed, or an unset one set), must be refused with `ConfigMismatch`.
/// With the registered configuration accepted as it is, that pins each
/// stored value to the registered one.
fn one_field_off(name: &str) -> Vec<(&'static str, TaskConfig)> {
    let spec = |text: &str| LimiterSpec::parse(text).unwrap();
    let c = TaskConfig::new;
    let mut off = match name {
        "local" => vec![
            ("local_rate", c().local_rate(251.0)),
            ("burst", c().burst(4)),
            ("max_concurrency", c().max_concurrency(4)),
            ("global_rate", c().global_rate(1000.0)),
        ],
        "global" => vec![
            ("global_rate", c().global_rate(999.0)),
            ("slice_ms", c().slice_ms(1000)),
            ("chunk", c().chunk(0)),
            ("fallback_rate", c().fallback_rate(0.0)),
            ("local_rate", c().local_rate(250.0)),
            ("max_concurrency", c().max_concurrency(3)),
        ],
        "auto" => vec![
            ("min_limit", c().min_limit(1)),
            ("max_limit", c().max_limit(1000)),
            ("initial_limit", c().initial_limit(4)),
            ("limiter window", c().limiter(spec("auto window=200"))),
        ],
        "gradient" => vec![
            (
                "limiter tolerance",
                c().limiter(spec("gradient2 tolerance=3")),
            ),
            ("min_limit", c().min_limit(19)),
            ("initial_limit", c().initial_limit(21)),
        ],
        _ => unreachable!("{name}"),
    };
    // And no task has another limiter than its own.
    off.push(("limiter", c().limiter(spec("vegas"))));
    off
}

/// The limiter each task must have, spelled out.
fn expected_limiter(name: &str) -> LimiterSpec {
    match name {
        "auto" => {
            // 0.3.0's `auto` numbers (probe_interval, baseline_window,
            // tolerance, backoff): 0.4 changed the defaults (5000 and 1.25)
            // and retired baseline_window, keeping its slot; a task 0.3.0
            // registered keeps its own numbers.
            let mut spec = LimiterSpec::parse("auto").unwrap().with_bounds(2, 40, 8);
            spec.params = [3000.0, 2000.0, 1.1, 0.9];
            spec
        }
        "gradient" => LimiterSpec::parse("gradient2 tolerance=2").unwrap(),
        _ => LimiterSpec::fixed(),
    }
}

/// Where a task slot's adaptive limiter copies start: the adaptive section
/// (704) + its window lock and version words (128, 136) = 704 + 144.
const T_ADAPTIVE_LIMITER: usize = 704 + 144;

const BALANCER: &str = "lb";
const BACKENDS: [(&str, u32); 2] = [("10.0.0.1:8080", 3), ("10.0.0.2:8080", 1)];

fn balancer_config() -> BalancerConfig {
    BalancerConfig::new()
        .decay(Duration::from_secs(5))
        .failure_penalty(Duration::from_millis(750))
        .slow_start(Duration::ZERO)
        .default_rtt(Duration::from_millis(20))
        .retry_budget(0.1, 4.0)
}

/// Makes the table: registers the tasks and the balancer, then closes
/// everything.
fn populate(path: &Path) {
    let table = Table::open(
        path,
        &options().capacity(4).processes(2).balancers(1).backends(2),
    )
    .unwrap();
    for (name, config) in tasks() {
        table.task(name, &config).unwrap();
    }
    table
        .balancer_with_backends(BALANCER, &balancer_config(), &BACKENDS)
        .unwrap();
}

/// Writes the golden table (once, by 0.3.0): `FLOWCTRL_GOLDEN_OUT=
/// tests/data/table-0.3.0.bin cargo test --test golden -- --ignored --exact
/// write_golden_table`. Run without that variable it fails, so a run of the
/// ignored tests never rewrites the file with a later build.
#[test]
#[ignore = "writes the golden table file; run once by hand, by version 0.3.0"]
fn write_golden_table() {
    let out = std::env::var_os("FLOWCTRL_GOLDEN_OUT").unwrap_or_else(|| {
        panic!(
            "write_golden_table writes the golden table to $FLOWCTRL_GOLDEN_OUT; it was made \
             once, by 0.3.0, and is not to be rewritten by a later build"
        )
    });
    assert_eq!(flowctrl::VERSION, "0.3.0", "the golden file is 0.3.0's");
    assert_eq!(flowctrl::LAYOUT_VERSION, 3);
    let scratch = Scratch::new("golden-make");
    let path = scratch.path("table");
    populate(&path);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), total_size(4, 2, 1, 2));
    std::fs::write(&out, &bytes).unwrap();
    eprintln!(
        "wrote {} bytes to {}",
        bytes.len(),
        Path::new(&out).display()
    );
}

/// A copy of the golden file in a scratch directory, mode 0600 and owned by
/// this user, as a table must be to be opened.
fn golden_copy(scratch: &Scratch) -> PathBuf {
    let bytes = std::fs::read(GOLDEN).unwrap_or_else(|e| panic!("{GOLDEN}: {e}"));
    let path = scratch.path("golden");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut file, &bytes).unwrap();
    drop(file);
    // The umask may only narrow the mode: make it exactly 0600.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    // SAFETY: geteuid cannot fail.
    assert_eq!(meta.uid(), unsafe { libc::geteuid() });
    assert_eq!(meta.mode() & 0o777, 0o600);
    path
}

#[test]
fn the_golden_file_is_a_small_layout_3_table() {
    let bytes = std::fs::read(GOLDEN).unwrap();
    assert_eq!(bytes.len(), total_size(4, 2, 1, 2));
    assert!(bytes.len() < 64 * 1024, "{} bytes", bytes.len());
    assert_eq!(&bytes[H_MAGIC..H_MAGIC + 8], b"FLOWCTRL");
    assert_eq!(u32_at(&bytes, H_VERSION), 3);
}

#[test]
#[cfg_attr(
    not(target_arch = "x86_64"),
    ignore = "the golden table's clock is the x86_64 TSC"
)]
fn a_0_3_0_table_reads_back_as_registered_and_works() {
    let scratch = Scratch::new("golden-read");
    let path = golden_copy(&scratch);
    // Default options: an existing table keeps the geometry it was made with.
    let table = Table::open(&path, &TableOptions::default()).unwrap();
    assert_eq!((table.capacity(), table.max_processes()), (4, 2));
    let check = table.check();
    assert!(check.is_ok(), "{check:?}");

    // The settings this build registers for the same configurations.
    let fresh_scratch = Scratch::new("golden-fresh");
    let fresh = Table::open(
        fresh_scratch.path("fresh"),
        &options().capacity(4).processes(2).balancers(1).backends(2),
    )
    .unwrap();
    for (name, config) in tasks() {
        // Read as it is, without a configuration of ours: as this build
        // would have registered it.
        let task = table.task(name, &TaskConfig::new()).unwrap();
        let settings = task.settings();
        let mut now = fresh.task(name, &config).unwrap().settings();
        if name == "auto" {
            // This build registers its own defaults; 0.3.0's task keeps
            // 0.3.0's (and the same configuration attaches to it, below).
            assert_eq!(now.limiter.params, [5000.0, 2000.0, 1.25, 0.9]);
            now.limiter = expected_limiter(name);
        }
        assert_eq!(
            settings, now,
            "task {name}: 0.3.0's settings, then this build's"
        );
        assert_eq!(settings.limiter, expected_limiter(name), "task {name}");
        // The configuration it was made with is accepted, and any one field
        // off is refused: every stored value is the registered one.
        let again = table.task(name, &config).unwrap();
        assert_eq!(again.settings(), settings, "task {name}");
        for (field, off) in one_field_off(name) {
            let err = table
                .task(name, &off)
                .err()
                .unwrap_or_else(|| panic!("task {name}: a different {field} was accepted"));
            assert_eq!(
                err.kind(),
                flowctrl::ErrorKind::ConfigMismatch,
                "task {name}, {field}: {err}"
            );
        }
    }
    let limiter = |name| {
        table
            .task(name, &TaskConfig::new())
            .unwrap()
            .settings()
            .limiter
    };
    let auto = limiter("auto");
    assert_eq!(auto.algorithm, LimiterAlgorithm::Auto);
    assert_eq!((auto.min, auto.max, auto.initial), (2, 40, 8));
    let gradient = limiter("gradient");
    assert_eq!(gradient.algorithm, LimiterAlgorithm::Gradient2);
    assert!(
        gradient.canonical().contains(" tolerance=2"),
        "{}",
        gradient.canonical()
    );

    // The local rate and cap: three at once, the fourth refused by the cap.
    let local = table.task("local", &TaskConfig::new()).unwrap();
    let held: Vec<_> = (0..3)
        .map(|_| local.acquire(1).unwrap().permit().unwrap())
        .collect();
    assert!(matches!(
        local.acquire(1).unwrap(),
        Decision::Limited(Limited::Concurrency)
    ));
    for p in held {
        p.release(Outcome::Success).unwrap();
    }
    // The global quota, on the embedded store.
    let global = table.task("global", &TaskConfig::new()).unwrap();
    let p = global.acquire(1).unwrap().permit().unwrap();
    p.release(Outcome::Success).unwrap();
    assert!(
        global.quota_stats().granted > 0,
        "{:?}",
        global.quota_stats()
    );
    // The adaptive limits start at their initial limits.
    let auto = table.task("auto", &TaskConfig::new()).unwrap();
    assert_eq!(auto.limit(), Some(8));
    let mut raw = auto.acquire_raw(1).unwrap().unwrap();
    auto.release_raw_rtt(&mut raw, Outcome::Success, Some(Duration::from_millis(3)))
        .unwrap();
    let gradient = table.task("gradient", &TaskConfig::new()).unwrap();
    assert_eq!(gradient.limit(), Some(20));
    let p = gradient
        .acquire_wait(1, Some(Duration::from_secs(1)))
        .unwrap()
        .permit()
        .unwrap();
    p.release(Outcome::Dropped).unwrap();

    // The balancer: its configuration, its backends, a pick.
    // A balancer's registration names its whole configuration: the one it
    // was made with is accepted, the default one refused.
    let lb = table.balancer(BALANCER, &balancer_config()).unwrap();
    assert_eq!(lb.config(), balancer_config());
    let err = table
        .balancer(BALANCER, &BalancerConfig::new())
        .unwrap_err();
    assert_eq!(err.kind(), flowctrl::ErrorKind::ConfigMismatch, "{err}");
    let mut backends: Vec<_> = lb
        .stats()
        .backends
        .into_iter()
        .filter(|b| b.active)
        .map(|b| (b.address, b.weight))
        .collect();
    backends.sort();
    let given: Vec<_> = BACKENDS.iter().map(|(a, w)| (a.to_string(), *w)).collect();
    assert_eq!(backends, given);
    let pick = lb.pick(&PickOptions::default()).unwrap();
    assert!(BACKENDS.iter().any(|(a, _)| *a == pick.backend()));
    pick.done(Outcome::Success).unwrap();

    for (name, _) in tasks() {
        let task = table.task(name, &TaskConfig::new()).unwrap();
        let s = task.stats();
        assert_eq!((s.in_flight, s.held), (0, 0), "task {name}: {s:?}");
        assert_eq!(task.check().unwrap().drift(), 0, "task {name}");
    }
    let check = table.check();
    assert!(check.is_ok(), "{check:?}");
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap())
}

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().unwrap())
}

/// Offsets within a backend slot: when it joined (ms) and the RTT estimate
/// (sample time in ms, high 32 bits | value in µs, low 32 bits).
const K_FIRST_SEEN: usize = 16;
const K_RTT: usize = 192;

/// How the word at `offset` of a table of the golden geometry may differ
/// between two tables made alike: `Some(mask)` of the bits that must be
/// equal (0 = none), `None` for words that must be equal whole.
fn may_differ(raw: &RawTable, offset: usize) -> Option<(u64, &'static str)> {
    let header = [
        (H_CLOCK_KIND, 0xffff_ffff_0000_0000, "header.clock_kind"),
        (H_TICKS, 0, "header.ticks_per_sec"),
        (H_TABLE_ID, 0, "header.table_id"),
        (H_LAST_REAP, 0, "header.last_reap"),
        // lane_sets stays; lane_sketch_size beside it is new since 0.3.0.
        (H_LANE_SETS, 0xffff_ffff, "header.lane_sketch_size"),
    ];
    if let Some(&(_, mask, what)) = header.iter().find(|(o, _, _)| *o == offset) {
        return Some((mask, what));
    }
    // `auto`'s defaults changed in 0.4 (probe_interval and tolerance: the
    // params words 0 and 2 of the limiter copies, which follow the adaptive
    // section's spec, initial and window words at offset 168).
    if let Some(t) = raw.find_task("auto") {
        for copy in 0..2 {
            for param in [0, 2] {
                if offset == raw.task(t) + T_ADAPTIVE_LIMITER + 56 * copy + 24 + 8 * param {
                    return Some((0, "auto's 0.4 defaults"));
                }
            }
        }
    }
    // The local rate's GCRA interval is in clock ticks (checked apart).
    for t in 0..raw.task_capacity {
        for copy in 0..2 {
            if offset == raw.task(t) + T_CONFIG + 24 * copy {
                return Some((0, "task config interval"));
            }
        }
    }
    for a in 0..raw.attach_capacity {
        if offset == raw.attach(a) + A_PID {
            return Some((0, "attachment pid"));
        }
    }
    for b in 0..raw.balancer_capacity {
        for k in 0..raw.backend_capacity {
            if offset == raw.backend(b, k) + K_FIRST_SEEN {
                return Some((0, "backend first_seen"));
            }
            if offset == raw.backend(b, k) + K_RTT {
                return Some((0xffff_ffff, "backend rtt sample time"));
            }
        }
    }
    None
}

#[test]
fn a_table_made_now_has_the_words_of_the_0_3_0_table() {
    let scratch = Scratch::new("golden-words");
    let golden_path = golden_copy(&scratch);
    let fresh_path = scratch.path("fresh");
    populate(&fresh_path);
    let golden = std::fs::read(&golden_path).unwrap();
    let fresh = std::fs::read(&fresh_path).unwrap();
    // A table made now has the lanes' own sketches after 0.3.0's bytes.
    assert_eq!(golden.len(), total_size(4, 2, 1, 2), "0.3.0's file size");
    assert_eq!(fresh.len(), file_size(4, 2, 1, 2), "the file size");
    let (old, new) = (RawTable::open(&golden_path), RawTable::open(&fresh_path));

    // Every word of the file, but those that differ between any two tables
    // made alike (per-table fields of the header, clock readings, pids).
    let mut differ = Vec::new();
    let mut excused = 0;
    for offset in (0..golden.len()).step_by(8) {
        let (g, f) = (u64_at(&golden, offset), u64_at(&fresh, offset));
        let (mask, what) = may_differ(&old, offset).unwrap_or((u64::MAX, "must be equal"));
        if g & mask != f & mask {
            differ.push(format!(
                "offset {offset} ({what}): 0.3.0 {g:#x}, now {f:#x}"
            ));
        }
        excused += usize::from(mask != u64::MAX);
    }
    assert!(
        differ.is_empty(),
        "a table made now differs from 0.3.0's:\n{}",
        differ.join("\n")
    );
    // Header, intervals, pids, backend times, and auto's two 0.4 defaults
    // in both copies.
    assert_eq!(
        excused,
        5 + 2 * 4 + 2 + 2 * 2 + 2 * 2,
        "words allowed to differ"
    );

    // The same tasks in the same slots (0.3.0 finds a task by its name's
    // slot), and the intervals the same rounding of the same rate at each
    // table's own clock.
    let ticks = |bytes: &[u8]| u64_at(bytes, H_TICKS) as f64;
    for (name, _) in tasks() {
        let slot = old
            .find_task(name)
            .unwrap_or_else(|| panic!("no slot of 0.3.0's table holds task {name}"));
        assert_eq!(new.find_task(name), Some(slot), "task {name}'s slot");
        for copy in 0..2 {
            let at = T_CONFIG + 24 * copy;
            let rate = f64::from_bits(u64_at(&golden, old.task(slot) + at + 8));
            for (bytes, raw, who) in [(&golden, &old, "0.3.0"), (&fresh, &new, "now")] {
                let interval = u64_at(bytes, raw.task(slot) + at);
                let expected = if rate == 0.0 {
                    0
                } else {
                    (ticks(bytes) / rate).round() as u64
                };
                assert_eq!(
                    interval, expected,
                    "task {name} config[{copy}].interval ({who}) at rate {rate}"
                );
            }
        }
    }
    let local = old.find_task("local").unwrap();
    let version = old.get(old.task(local) + T_CONFIG_VERSION) as usize;
    let rate = old.get(old.task(local) + T_CONFIG + 24 * (version & 1) + 8);
    assert_eq!(f64::from_bits(rate), 250.0, "the local task's current copy");
    // The balancer too.
    let find_balancer = |raw: &RawTable| {
        (0..raw.balancer_capacity).find(|&b| {
            let base = raw.balancer(b);
            raw.get(base + B_STATE) == TASK_READY
                && raw.name_at(base + B_NAME, raw.get(base + B_NAME_LEN) as usize)
                    == BALANCER.as_bytes()
        })
    };
    assert!(
        find_balancer(&old).is_some(),
        "0.3.0's table holds the balancer"
    );
    assert_eq!(
        find_balancer(&new),
        find_balancer(&old),
        "the balancer's slot"
    );
}
