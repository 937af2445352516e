//! The `flowctrl` command, driven as an operator would: the real binary
//! against tables built by real processes. The read-only commands report
//! exact counters and change not one byte of the table (no attachment, no
//! reaping: a dead process stays unreaped until `flowctrl reap`); another
//! user's table is read when its mode allows and refused clearly otherwise;
//! `set` changes a task for every process and refuses bad input.

#[path = "common/cli.rs"]
mod cli;
mod common;

use std::path::Path;
use std::time::Duration;

use cli::{fails, field, flowctrl, flowctrl_as, ok};
use common::*;
use flowctrl::{BalancerConfig, Decision, Limited, Outcome, Table, TaskConfig, View};
use serde_json::Value;

/// The mode of the tables made here: others may read them (the test of
/// another user's table).
const MODE: u32 = 0o644;

fn api() -> TaskConfig {
    TaskConfig::new()
        .local_rate(1000.0)
        .burst(20)
        .max_concurrency(4)
}

/// Known traffic in a process that then exits (and detaches): `api` admits
/// 4 (held at once, so a fifth is refused by the cap) released as success,
/// success, dropped, ignored; `slow` (1/s, burst 1) admits 1 and refuses 1;
/// the balancer `db` is picked 3 times.
fn traffic(path: &Path) -> i32 {
    let table = Table::open(path, &cli_options().mode(MODE)).unwrap();
    let task = table.task("api", &api()).unwrap();
    let held: Vec<_> = (0..4)
        .map(|_| task.acquire(1).unwrap().permit().unwrap())
        .collect();
    assert!(matches!(
        task.acquire(1).unwrap(),
        Decision::Limited(Limited::Concurrency)
    ));
    let outcomes = [
        Outcome::Success,
        Outcome::Success,
        Outcome::Dropped,
        Outcome::Ignored,
    ];
    for (permit, outcome) in held.into_iter().zip(outcomes) {
        permit.release(outcome).unwrap();
    }
    let slow = table
        .task("slow", &TaskConfig::new().local_rate(1.0).burst(1))
        .unwrap();
    slow.acquire(1)
        .unwrap()
        .permit()
        .unwrap()
        .release(Outcome::Success)
        .unwrap();
    assert!(matches!(
        slow.acquire(1).unwrap(),
        Decision::Limited(Limited::Local)
    ));
    let db = table
        .balancer_with_backends(
            "db",
            &BalancerConfig::default(),
            &[("10.0.0.1:5432", 1), ("10.0.0.2:5432", 2)],
        )
        .unwrap();
    for _ in 0..3 {
        db.pick(&Default::default())
            .unwrap()
            .done(Outcome::Success)
            .unwrap();
    }
    0
}

/// A process that takes 2 permits of `api`, says so, and waits to be killed.
fn holder(path: &Path, ready: Pipe) -> i32 {
    let table = Table::open(path, &cli_options().mode(MODE)).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    for _ in 0..2 {
        std::mem::forget(task.acquire(1).unwrap().permit().unwrap());
    }
    ready.send(1);
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A table no process is attached to: the traffic above, and a process
/// SIGKILLed holding 2 permits of `api` (dead, not reaped). Returns the
/// dead process's pid.
fn quiet_table(path: &Path) -> libc::pid_t {
    assert_eq!(
        run_in_child(Duration::from_secs(30), || traffic(path)),
        Exit::Code(0)
    );
    let ready = Pipe::new();
    let pid = fork_guarded(move || holder(path, ready));
    assert_eq!(ready.recv_timeout(Duration::from_secs(30)), Some(1));
    kill(pid, libc::SIGKILL);
    assert_eq!(wait(pid), -libc::SIGKILL);
    pid
}

/// Every command's log lines on stderr begin with an RFC 3339 UTC time:
/// `reap`'s info line (`FLOWCTRL_LOG=info`) about the permits it gave back.
#[test]
fn a_commands_log_lines_carry_rfc3339_utc_times() {
    let scratch = Scratch::new("cli-log-time");
    let path = scratch.path("table");
    let dead = quiet_table(&path);
    let out = cli::command(&path)
        .env("FLOWCTRL_LOG", "info")
        .arg("reap")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("$ FLOWCTRL_LOG=info flowctrl reap 2>&1 >/dev/null\n{stderr}");
    let want = format!("gave back 2 permit(s) held by dead process {dead}");
    let line = stderr
        .lines()
        .find(|l| l.contains(&want))
        .unwrap_or_else(|| panic!("no line about the reaped permits:\n{stderr}"));
    let (time, rest) = line.split_once(' ').unwrap();
    assert!(
        rest.starts_with("flowctrl reap: INFO task \"api\": "),
        "{line}"
    );
    // "2026-12-06T10:24:34.123Z"
    let shape: String = time
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect();
    assert_eq!(shape, "9999-99-99T99:99:99.999Z", "{line}");
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn task_json<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no task {name} in {doc}"))
}

#[test]
fn read_only_commands_report_exact_numbers_and_change_no_byte() {
    let scratch = Scratch::new("cli-quiet");
    let path = scratch.path("table");
    let dead = quiet_table(&path);
    let before = std::fs::read(&path).unwrap();

    let stats = ok(&path, &["stats", "api"]);
    eprintln!("$ flowctrl stats api\n{stats}");
    assert_eq!(field(&stats, "admitted"), "6");
    assert_eq!(
        field(&stats, "limited"),
        "local 0  global 0  concurrency 1  fallback 0"
    );
    assert_eq!(field(&stats, "released"), "success 2  dropped 1  ignored 1");
    assert_eq!(field(&stats, "in flight"), "2 / 4");
    assert_eq!(field(&stats, "reclaimed"), "0");
    assert_eq!(
        field(&stats, "local"),
        "local_rate 1000/s  burst 20  max_concurrency 4"
    );

    let all = ok(&path, &["stats", "--processes"]);
    eprintln!("$ flowctrl stats --processes\n{all}");
    let slow = all.split("task slow").nth(1).unwrap();
    assert_eq!(field(slow, "admitted"), "1");
    assert_eq!(
        field(slow, "limited"),
        "local 1  global 0  concurrency 0  fallback 0"
    );
    let row = all
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(&dead.to_string()))
        .unwrap_or_else(|| panic!("the dead process is listed:\n{all}"));
    let cells: Vec<_> = row.split_whitespace().collect();
    assert_eq!(cells[2], "dead", "{row}");
    assert_eq!(cells[3], "2", "admitted by the dead process: {row}");
    assert_eq!(cells[10], "2", "held by the dead process: {row}");

    let doc = json(&ok(&path, &["stats", "--json", "--processes"]));
    let api = task_json(&doc, "api");
    assert_eq!(api["stats"]["admitted"], 6);
    assert_eq!(api["stats"]["limited_concurrency"], 1);
    assert_eq!(api["stats"]["in_flight"], 2);
    assert_eq!(api["stats"]["limit"], 4);
    assert_eq!(api["settings"]["global_source"], "local");
    assert_eq!(api["quota"]["state"], Value::Null);
    let share = &api["processes"][0];
    assert_eq!(
        (&share["pid"], &share["alive"]),
        (&dead.into(), &false.into())
    );

    let tasks = ok(&path, &["tasks"]);
    eprintln!("$ flowctrl tasks\n{tasks}");
    let row: Vec<_> = tasks.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..5], ["api", "1000/s", "20", "4", "fixed"]);
    let doc = json(&ok(&path, &["tasks", "--json"]));
    assert_eq!(task_json(&doc, "slow")["settings"]["local_rate"], 1.0);

    let top = ok(&path, &["top", "--once", "--interval", "0.2"]);
    eprintln!("$ flowctrl top --once\n{top}");
    let row: Vec<_> = top
        .lines()
        .find(|l| l.starts_with("api "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        row,
        ["api", "0.0", "0.0", "0.0", "0.0", "0.0", "2", "4", "-", "-"]
    );
    assert_eq!(
        top.lines().filter(|l| l.starts_with("db ")).count(),
        2,
        "both backends: {top}"
    );

    let check = ok(&path, &["check"]);
    eprintln!("$ flowctrl check\n{check}");
    assert!(
        check.contains("1 dead process(es) not reaped yet"),
        "{check}"
    );
    assert!(
        check.ends_with(": ok (2 tasks, 2 compared, 0 drifting, 0 keys drifting)\n"),
        "{check}"
    );

    let server = cli::Server::start(&path);
    let (status, body) = server.get("/metrics");
    assert_eq!(status, 200);
    assert!(
        body.contains("flowctrl_permits_in_flight{task=\"api\"} 2\n"),
        "{body}"
    );
    drop(server);

    assert!(
        std::fs::read(&path).unwrap() == before,
        "a read-only command changed the table"
    );

    // Now reap: the dead process's permits come back.
    let reaped = ok(&path, &["reap"]);
    eprintln!("$ flowctrl reap\n{reaped}");
    assert!(
        reaped.ends_with(&format!("(pid {dead}): gave back 2 permits of \"api\"\n")),
        "{reaped}"
    );
    let stats = ok(&path, &["stats", "api"]);
    assert_eq!(field(&stats, "in flight"), "0 / 4");
    assert_eq!(field(&stats, "reclaimed"), "2");
    assert_eq!(ok(&path, &["reap"]), "no dead processes to reap\n");

    // Every counter the command printed is the library's.
    let doc = json(&ok(&path, &["stats", "--json"]));
    let table = Table::open(&path, &cli_options().mode(MODE)).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    let s = task.stats();
    let printed = &task_json(&doc, "api")["stats"];
    for (key, value) in [
        ("admitted", s.admitted),
        ("released_success", s.released_success),
        ("released_dropped", s.released_dropped),
        ("released_ignored", s.released_ignored),
        ("reclaimed", s.reclaimed),
        ("rtt_sum_ns", s.rtt_sum_ns),
        ("rtt_samples", s.rtt_samples),
        ("in_flight", s.in_flight),
    ] {
        assert_eq!(printed[key], value, "{key}");
    }
}

#[test]
fn a_missing_or_hostile_file_is_an_error_never_a_new_table_or_a_hang() {
    let scratch = Scratch::new("cli-hostile");
    let missing = scratch.path("missing");
    for args in [
        &["stats"][..],
        &["tasks"],
        &["check"],
        &["set", "api", "burst=2"],
        &["reap"],
    ] {
        let line = fails(flowctrl(&missing, args));
        assert!(line.contains("No such file"), "{args:?}: {line}");
        assert!(!missing.exists(), "{args:?} created a table");
    }
    let junk = scratch.path("junk");
    std::fs::write(&junk, vec![7u8; 8192]).unwrap();
    assert!(fails(flowctrl(&junk, &["stats"])).contains("bad magic"));
    let fifo = scratch.path("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    assert!(fails(flowctrl(&fifo, &["stats"])).contains("not a regular file"));
    let short = scratch.path("short");
    Table::open(&short, &cli_options().mode(MODE)).unwrap();
    let bytes = std::fs::read(&short).unwrap();
    std::fs::write(&short, &bytes[..bytes.len() / 2]).unwrap();
    assert!(fails(flowctrl(&short, &["stats"])).contains("truncated"));
}

#[test]
fn a_table_with_holes_on_tmpfs_is_refused() {
    let dir = Path::new("/dev/shm");
    if !dir.is_dir() {
        eprintln!("no /dev/shm: skipped");
        return;
    }
    let path = dir.join(format!("flowctrl-cli-holes-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    drop(Table::open(&path, &cli_options().mode(MODE)).unwrap());
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let len = file.metadata().unwrap().len() as i64;
    // SAFETY: fallocate on our own descriptor.
    let punched = unsafe {
        libc::fallocate(
            std::os::fd::AsRawFd::as_raw_fd(&file),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            (len / 2) & !4095,
            65536,
        )
    };
    let run = flowctrl(&path, &["stats"]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(punched, 0);
    assert!(fails(run).contains("has holes"));
}

#[test]
fn another_users_table_is_read_when_its_mode_allows_and_refused_clearly_otherwise() {
    let scratch = Scratch::new("cli-owner");
    let path = scratch.path("table");
    quiet_table(&path);
    let mine = ok(&path, &["stats", "--json"]);
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let set_mode = |mode| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    if root {
        // `nobody` reads root's table (mode 644): the same numbers.
        let run = flowctrl_as(65534, &path, &["stats", "--json"]);
        assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{run:?}");
        assert_eq!(json(&run.stdout), json(&mine));
        set_mode(0o600);
        let line = fails(flowctrl_as(65534, &path, &["stats"]));
        assert_eq!(
            line,
            format!(
                "flowctrl: cannot read table {}: permission denied (it belongs to uid 0, \
                 mode 600; reading it needs read permission)",
                path.display()
            )
        );
    } else {
        set_mode(0o200);
        let line = fails(flowctrl(&path, &["stats"]));
        assert!(line.contains("permission denied"), "{line}");
    }
}

#[test]
fn set_changes_a_task_for_every_process_and_refuses_bad_input() {
    let scratch = Scratch::new("cli-set");
    let path = scratch.path("table");
    let table = Table::open(&path, &cli_options().mode(MODE)).unwrap();
    let task = table.task("api", &api()).unwrap();
    let out = ok(
        &path,
        &["set", "api", "local_rate=500", "burst=40", "limiter=aimd"],
    );
    eprintln!("$ flowctrl set api local_rate=500 burst=40 limiter=aimd\n{out}");
    let limiter = task.settings().limiter.to_string();
    assert_eq!(
        out,
        format!(
            "task \"api\": local_rate 1000 -> 500, burst 20 -> 40, limiter fixed -> {limiter}\n"
        )
    );
    let s = task.settings();
    assert_eq!((s.local.local_rate, s.local.burst), (500.0, 40));
    assert_eq!(s.limiter.algorithm.name(), "aimd");
    let view = View::open(&path).unwrap();
    assert_eq!(view.task("api").unwrap().settings, s);

    // Words that do not parse are usage errors (exit 2); a value the
    // table refuses, or a task it does not have, a failure (exit 1).
    for (args, says, code) in [
        (
            &["set", "api", "nope=1"][..],
            "unknown key \"nope\"; the keys are local_rate, burst",
            2,
        ),
        (
            &["set", "api", "burst=zero"],
            "burst=\"zero\" is not a whole number",
            2,
        ),
        (&["set", "api", "burst=0"], "burst must be at least 1", 1),
        (&["set", "api", "fallback=maybe"], "fallback must be", 2),
        (&["set", "api", "burst"], "\"burst\" is not KEY=VALUE", 2),
        (
            &["set", "missing", "burst=2"],
            "has no task \"missing\" (its tasks: api)",
            1,
        ),
    ] {
        let mut run = flowctrl(&path, args);
        assert_eq!(run.code, code, "{args:?}: {run:?}");
        run.code = 1;
        let line = fails(run);
        assert!(line.contains(says), "{args:?}: {line}");
    }
    assert_eq!(task.settings(), s, "a refused set changes nothing");
    let usage = flowctrl(&path, &["set", "api"]);
    assert_eq!(usage.code, 2, "no fields is a usage error: {usage:?}");
}

#[test]
fn stats_show_the_lane_pool_and_the_acquires_it_could_not_serve() {
    let scratch = Scratch::new("cli-pool");
    let path = scratch.path("t");
    let pooled = cli_options().mode(MODE).lanes(1);
    let table = Table::open(&path, &pooled).unwrap();
    let api = table
        .task("api", &TaskConfig::new().max_concurrency(2))
        .unwrap();
    let _held = api.acquire_raw(1).unwrap().unwrap();
    // A second handle is a second attachment: the pool has no set for it.
    let other = Table::open(&path, &pooled).unwrap();
    let refused = other.task("api", &TaskConfig::new()).unwrap();
    assert_eq!(
        refused.acquire_raw(1).unwrap().err(),
        Some(Limited::Concurrency)
    );
    let doc = json(&ok(&path, &["stats", "--json"]));
    assert_eq!(doc["lane_pool"]["in_use"], 1);
    assert_eq!(doc["lane_pool"]["sets"], 1);
    let stats = &task_json(&doc, "api")["stats"];
    assert_eq!(
        (stats["unlaned"].as_u64(), stats["unlaned_refused"].as_u64()),
        (Some(1), Some(1))
    );
    let text = ok(&path, &["stats", "api"]);
    assert!(text.contains("lane pool: 1 of 1 sets in use"), "{text}");
    assert!(text.contains("unlaned     1 (refused 1)"), "{text}");
    // A table with lanes for every pair says nothing of a pool.
    let dense = scratch.path("dense");
    Table::open(&dense, &cli_options().mode(MODE)).unwrap();
    assert_eq!(
        json(&ok(&dense, &["stats", "--json"]))["lane_pool"],
        Value::Null
    );
}
