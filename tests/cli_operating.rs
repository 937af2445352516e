//! The `flowctrl` command as an operator runs it: exit codes that tell a
//! usage error (2) from a failure (1), `top` into a pipe, `set` that
//! refuses a cap of 0 and previews with `--dry-run`, the table a service
//! finds through FLOWCTRL_CONFIG, `table create` / `table info`, shell
//! completions and the manual page, the systemd units of dist/systemd, and
//! the log lines of `metrics` (RFC 3339 times, `--log-format json`).

#[path = "common/cli.rs"]
mod cli;
mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use cli::{fails, flowctrl, ok};
use common::*;
use flowctrl::{NO_CAP, Table, TableOptions, TaskConfig, View};
use serde_json::Value;

/// A table holding `api` (cap 4, burst 20), no process attached.
fn table_with_api(path: &Path) {
    let table = Table::open(path, &cli_options()).unwrap();
    table
        .task("api", &TaskConfig::new().max_concurrency(4).burst(20))
        .unwrap();
}

fn cap_of(path: &Path) -> u32 {
    View::open(path)
        .unwrap()
        .task("api")
        .unwrap()
        .settings
        .local
        .max_concurrency
}

/// A usage error: exit 2, one line on stderr, nothing on stdout.
fn usage_fails(run: cli::Run) -> String {
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
    assert!(
        run.stderr.starts_with("flowctrl: ") && run.stderr.lines().count() == 1,
        "one line on stderr: {run:?}"
    );
    run.stderr.trim_end().to_string()
}

#[test]
fn usage_errors_exit_2_and_failures_exit_1() {
    let scratch = Scratch::new("ops-exit");
    let path = scratch.path("t");
    table_with_api(&path);
    // clap's own.
    for args in [
        &["nosuch"][..],
        &["set", "api"],
        &["top", "--interval", "x"],
    ] {
        let run = flowctrl(&path, args);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
    }
    // Words of the command line refused before any table is read.
    for (args, says) in [
        (&["set", "api", "nope=1"][..], "unknown key \"nope\""),
        (&["set", "api", "burst"], "\"burst\" is not KEY=VALUE"),
        (&["set", "api", "burst=x"], "is not a whole number"),
        (&["set", "api", "limiter=bbr"], "unknown limiter"),
        (&["set", "api", "max_concurrency=0"], "max_concurrency 0"),
        (&["set", "api", "key_overflow=maybe"], "shared or admit"),
        (&["set", "missing", "nope=1"], "unknown key"),
        (&["top", "--interval", "0"], "--interval must be between"),
        (
            &["keys", "api", "--by", "foo"],
            "--by takes admitted or refused, not \"foo\"",
        ),
        (&["metrics", "--listen", "not an address"], "cannot listen"),
    ] {
        let line = usage_fails(flowctrl(&path, args));
        assert!(line.contains(says), "{args:?}: {line}");
    }
    // The command ran and failed.
    for (args, says) in [
        (
            &["set", "missing", "burst=2"][..],
            "has no task \"missing\"",
        ),
        (&["set", "api", "burst=0"], "burst must be at least 1"),
        (&["keys", "api"], "has no key limits"),
    ] {
        let line = fails(flowctrl(&path, args));
        assert!(line.contains(says), "{args:?}: {line}");
    }
    let line = fails(flowctrl(&scratch.path("none"), &["stats"]));
    assert!(line.contains("none"), "{line}");
    assert_eq!(cap_of(&path), 4, "nothing refused changed the table");
}

#[test]
fn top_into_a_pipe_prints_plain_frames_one_after_another() {
    let scratch = Scratch::new("ops-top");
    let path = scratch.path("t");
    table_with_api(&path);
    let child = cli::command(&path)
        .args(["top", "--interval", "0.05"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains('\x1b'), "no escape into a pipe: {text:?}");
    let frames = text.matches("flowctrl top  ").count();
    assert!(frames >= 3, "successive frames ({frames}): {text}");
    assert!(
        text.contains("\n\nflowctrl top  "),
        "a blank line between frames: {text}"
    );
    assert!(text.contains("api"), "{text}");
    // --once: one frame, as before.
    let once = ok(&path, &["top", "--once", "--interval", "0.05"]);
    assert_eq!(once.matches("flowctrl top  ").count(), 1, "{once}");
    assert!(!once.contains('\x1b'), "{once:?}");
    // --json: one document a line, frame after frame.
    let mut child = cli::command(&path)
        .args(["top", "--json", "--interval", "0.05"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for _ in 0..3 {
        let line = lines.next().unwrap().unwrap();
        let doc: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(doc["tasks"][0]["name"], "api", "{doc}");
        assert_eq!(doc["tasks"][0]["stats"]["limit"], 4, "{doc}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Task names in the order a JSON document's `tasks` lists them.
fn task_names(doc: &Value) -> Vec<&str> {
    doc["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

/// Task names in the order a `top` text frame lists them.
fn top_rows(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| !l.starts_with("TASK "))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

/// Live traffic while `top --once` samples: `alpha` holds 1 permit,
/// `bravo` 3, `charlie` 2 and admits (and releases) a stream of requests,
/// `delta` (0.01/s, burst 1) is refused over and over. `top --once --json`
/// is one document carrying every task with its rates and the counters
/// `stats --json` has; `--sort` orders the rows of both forms by its key;
/// a key it does not know is a usage error.
#[test]
fn top_json_carries_the_tasks_and_sort_orders_them() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let scratch = Scratch::new("ops-top-json");
    let path = scratch.path("t");
    let table = Table::open(&path, &cli_options()).unwrap();
    let cap = || TaskConfig::new().max_concurrency(8);
    for (name, n) in [("alpha", 1), ("bravo", 3), ("charlie", 2)] {
        let task = table.task(name, &cap()).unwrap();
        for _ in 0..n {
            // Held until the table is dropped (detached) at the end.
            std::mem::forget(task.acquire(1).unwrap().permit().unwrap());
        }
    }
    let charlie = table.task("charlie", &cap()).unwrap();
    let delta = table
        .task("delta", &TaskConfig::new().local_rate(0.01).burst(1))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let pump = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(p) = charlie.acquire(1).unwrap().permit() {
                    p.release(flowctrl::Outcome::Success).unwrap();
                }
                if let Some(p) = delta.acquire(1).unwrap().permit() {
                    p.release(flowctrl::Outcome::Success).unwrap();
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };

    let text = ok(&path, &["top", "--once", "--json", "--interval", "0.3"]);
    assert_eq!(text.lines().count(), 1, "one document, one line: {text}");
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(doc["table"], path.display().to_string());
    assert!(doc["interval_s"].as_f64().unwrap() >= 0.3, "{doc}");
    assert!(doc["processes"].as_u64().unwrap() >= 1, "{doc}");
    let tasks = doc["tasks"].as_array().unwrap();
    let names = task_names(&doc);
    assert_eq!(
        names,
        ["alpha", "bravo", "charlie", "delta"],
        "the table's order"
    );
    let task = |name: &str| tasks.iter().find(|t| t["name"] == name).unwrap();
    assert_eq!(task("bravo")["stats"]["in_flight"], 3);
    assert_eq!(task("bravo")["stats"]["limit"], 8);
    assert_eq!(task("bravo")["rates"]["admitted"], 0.0);
    assert!(
        task("charlie")["rates"]["admitted"].as_f64().unwrap() > 10.0,
        "charlie admits a stream: {doc}"
    );
    assert!(task("charlie")["stats"]["admitted"].as_u64().unwrap() > 2);
    assert!(
        task("charlie")["stats"]["released_success"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        task("delta")["rates"]["limited_local"].as_f64().unwrap() > 10.0,
        "delta is refused over and over: {doc}"
    );
    // The same fields, spelled as `stats --json` spells them.
    let stats: Value = serde_json::from_str(&ok(&path, &["stats", "--json"])).unwrap();
    for t in stats["tasks"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
        assert_eq!(keys(&task(name)["stats"]), keys(&t["stats"]), "{name}");
        assert_eq!(keys(&task(name)["quota"]), keys(&t["quota"]), "{name}");
    }

    for (key, want) in [
        ("name", ["alpha", "bravo", "charlie", "delta"]),
        ("in_flight", ["bravo", "charlie", "alpha", "delta"]),
        ("admitted", ["charlie", "alpha", "bravo", "delta"]),
        ("limited", ["delta", "alpha", "bravo", "charlie"]),
    ] {
        let once = ["top", "--once", "--interval", "0.2", "--sort", key];
        let rows = top_rows(&ok(&path, &once));
        assert_eq!(rows, want, "--sort {key}");
        let doc: Value =
            serde_json::from_str(&ok(&path, &[&once[..], &["--json"]].concat())).unwrap();
        let names = task_names(&doc);
        assert_eq!(names, want, "--sort {key} --json");
    }
    stop.store(true, Ordering::Relaxed);
    pump.join().unwrap();
    drop(table);

    let run = flowctrl(&path, &["top", "--once", "--sort", "loudest"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
    assert!(run.stderr.contains("'loudest'"), "{run:?}");
}

#[test]
fn a_cap_of_0_is_refused_and_none_or_off_removes_the_cap() {
    let scratch = Scratch::new("ops-cap");
    let path = scratch.path("t");
    table_with_api(&path);
    let line = usage_fails(flowctrl(&path, &["set", "api", "max_concurrency=0"]));
    assert!(
        line.contains("max_concurrency 0 is refused") && line.contains("none"),
        "{line}"
    );
    assert_eq!(cap_of(&path), 4, "the cap stays");
    let out = ok(&path, &["set", "api", "max_concurrency=none"]);
    assert_eq!(out, "task \"api\": max_concurrency 4 -> none\n");
    assert_eq!(cap_of(&path), 0, "no cap");
    ok(&path, &["set", "api", "max_concurrency=3"]);
    let out = ok(&path, &["set", "api", "max_concurrency=off"]);
    assert_eq!(out, "task \"api\": max_concurrency 3 -> none\n");

    // Per key: the same rule.
    let line = usage_fails(flowctrl(&path, &["set", "api", "key_max_concurrency=0"]));
    assert!(line.contains("key_max_concurrency 0 is refused"), "{line}");
    let out = ok(&path, &["set", "api", "key_max_concurrency=5"]);
    assert!(out.contains("key_max_concurrency 5"), "{out}");
    let out = ok(&path, &["set", "api", "key_max_concurrency=none"]);
    assert!(out.contains("key_max_concurrency 0"), "{out}");

    // The library's faces: 0 refused, NO_CAP removes.
    let table = Table::open(&path, &cli_options()).unwrap();
    let err = table
        .task("other", &TaskConfig::new().max_concurrency(0))
        .unwrap_err();
    assert!(
        err.to_string().contains("max_concurrency 0 is refused"),
        "{err}"
    );
    let api = table.task("api", &TaskConfig::new()).unwrap();
    api.update(&TaskConfig::new().max_concurrency(2)).unwrap();
    let err = api
        .update(&TaskConfig::new().max_concurrency(0))
        .unwrap_err();
    assert_eq!(err.kind(), flowctrl::ErrorKind::InvalidArgument);
    assert_eq!(
        api.settings().local.max_concurrency,
        2,
        "refused: unchanged"
    );
    api.update(&TaskConfig::new().no_max_concurrency()).unwrap();
    assert_eq!(api.settings().local.max_concurrency, 0);
    assert_eq!(NO_CAP, 0xFFFF_FFFE);
    // An uncapped task matches a registration asking for no cap.
    table
        .task("api", &TaskConfig::new().max_concurrency(NO_CAP))
        .unwrap();
}

#[test]
fn a_cap_of_0_in_a_config_file_is_refused_at_its_position() {
    let scratch = Scratch::new("ops-capfile");
    let file = scratch.path("flowctrl.toml");
    let table = scratch.path("t");
    for (text, position, key) in [
        (
            "[tasks.api]\nburst = 2\nmax_concurrency = 0\n",
            ":3:19: tasks.\"api\".max_concurrency: ",
            "max_concurrency",
        ),
        (
            "[tasks.api]\nkey_rate = \"10/second\"\n  key_max_concurrency = 0\n",
            ":3:25: tasks.\"api\".key_max_concurrency: ",
            "key_max_concurrency",
        ),
        (
            "[tasks.api]\nmax_concurrency = \"zero\"\n",
            ":2:19: tasks.\"api\".max_concurrency: ",
            "max_concurrency",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let line = fails(flowctrl(
            &table,
            &["config", "check", file.to_str().unwrap()],
        ));
        assert!(
            line.contains(&format!("{}{position}", file.display())),
            "{text:?}: {line}"
        );
        assert!(line.contains(key), "{line}");
        let err = flowctrl::ConfigFile::parse(&file, text).unwrap_err();
        assert!(err.to_string().contains(position), "{err}");
    }
    // `none` and `off` remove the cap; a table open applies that.
    table_with_api(&table);
    std::fs::write(
        &file,
        format!(
            "[table]\npath = {table:?}\n[tasks.api]\nmax_concurrency = \"none\"\n\
             key_max_concurrency = \"off\"\n"
        ),
    )
    .unwrap();
    let out = ok(&table, &["config", "check", file.to_str().unwrap()]);
    assert!(
        out.contains("task \"api\": max_concurrency 4 -> none"),
        "{out}"
    );
    let parsed = flowctrl::ConfigFile::load(&file).unwrap();
    assert_eq!(parsed.tasks["api"].local.max_concurrency, Some(NO_CAP));
    let opened = Table::open(&table, &cli_options().config(file.clone())).unwrap();
    let api = opened.task("api", &TaskConfig::new()).unwrap();
    assert_eq!(
        api.settings().local.max_concurrency,
        0,
        "the file removed it"
    );
    assert_eq!(api.key_config().unwrap().unwrap().limits.max_concurrency, 0);
}

#[test]
fn set_dry_run_says_what_would_change_and_changes_nothing() {
    let scratch = Scratch::new("ops-dry");
    let path = scratch.path("t");
    table_with_api(&path);
    let before = std::fs::read(&path).unwrap();
    let out = ok(
        &path,
        &[
            "set",
            "--dry-run",
            "api",
            "burst=40",
            "max_concurrency=none",
            "key_rate=10/second",
            "key_max_concurrency=5",
        ],
    );
    assert_eq!(
        out,
        "task \"api\": burst 20 -> 40, max_concurrency 4 -> none (dry run: nothing changed)\n\
         task \"api\": key_rate \"\" -> \"10/s\", key_max_concurrency none -> 5 \
         (dry run: nothing changed)\n"
    );
    assert!(
        std::fs::read(&path).unwrap() == before,
        "not a byte changed"
    );
    assert!(
        !scratch.dir().read_dir().unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".keys")),
        "no key file made"
    );
    // Checked as the update would be: refused the same way.
    let line = fails(flowctrl(&path, &["set", "--dry-run", "api", "burst=0"]));
    assert!(line.contains("burst must be at least 1"), "{line}");
    let line = usage_fails(flowctrl(
        &path,
        &["set", "--dry-run", "api", "max_concurrency=0"],
    ));
    assert!(line.contains("refused"), "{line}");
    assert!(std::fs::read(&path).unwrap() == before);
    // And the real thing does what the dry run said.
    let out = ok(&path, &["set", "api", "burst=40", "max_concurrency=none"]);
    assert_eq!(
        out,
        "task \"api\": burst 20 -> 40, max_concurrency 4 -> none\n"
    );
}

/// `flowctrl ARGS` with no `--table`, FLOWCTRL_CONFIG set to `config`.
fn with_config(config: &Path, args: &[&str]) -> cli::Run {
    let out = Command::new(env!("CARGO_BIN_EXE_flowctrl"))
        .env_remove("FLOWCTRL_TABLE")
        .env("FLOWCTRL_CONFIG", config)
        .args(args)
        .output()
        .unwrap();
    cli::Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

#[test]
fn without_table_the_command_reads_the_table_flowctrl_config_names() {
    let scratch = Scratch::new("ops-env");
    let table = scratch.path("custom-table");
    let config = scratch.path("flowctrl.toml");
    std::fs::write(
        &config,
        format!("[table]\npath = {table:?}\ncapacity = 8\nmax_processes = 8\n"),
    )
    .unwrap();
    // A service's open: the file's path wins over the one it is given.
    let service = Table::open(
        scratch.path("ignored"),
        &TableOptions {
            config: Some(config.clone()),
            ..TableOptions::default()
        },
    )
    .unwrap();
    assert_eq!(service.path(), table);
    service.task("api", &TaskConfig::new().burst(3)).unwrap();
    let run = with_config(&config, &["stats", "--json"]);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{run:?}");
    let doc: Value = serde_json::from_str(&run.stdout).unwrap();
    let names = task_names(&doc);
    assert_eq!(names, ["api"], "{doc}");
    assert_eq!(doc["table"], table.display().to_string(), "{doc}");
    // --table still wins; `set` on another table than the file's is
    // refused (an open would take the file's); a broken file is an error
    // that says so.
    let run = with_config(&config, &["--table", "/nonexistent/t", "stats"]);
    assert_eq!(run.code, 1, "{run:?}");
    let other = scratch.path("other");
    table_with_api(&other);
    let run = with_config(
        &config,
        &["--table", other.to_str().unwrap(), "set", "api", "burst=9"],
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("FLOWCTRL_CONFIG names table"),
        "{run:?}"
    );
    assert_eq!(
        View::open(&other)
            .unwrap()
            .task("api")
            .unwrap()
            .settings
            .local
            .burst,
        20
    );
    let run = with_config(&config, &["set", "api", "burst=9"]);
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (0, "task \"api\": burst 3 -> 9\n"),
        "{run:?}"
    );
    std::fs::write(&config, "[table\n").unwrap();
    let run = with_config(&config, &["stats"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("FLOWCTRL_CONFIG"), "{run:?}");
}

#[test]
fn table_create_makes_a_table_or_says_it_exists_and_info_describes_it() {
    let scratch = Scratch::new("ops-table");
    let path = scratch.path("t");
    let args = [
        "table",
        "create",
        "--capacity",
        "16",
        "--max-processes",
        "8",
        "--balancers",
        "3",
        "--mode",
        "0640",
    ];
    let out = ok(&path, &args);
    assert!(
        out.starts_with(&format!("created table {}:", path.display())),
        "{out}"
    );
    assert!(
        out.contains("16 task slots, 8 attachments, 3 balancers"),
        "{out}"
    );
    let view = View::open(&path).unwrap();
    assert_eq!((view.capacity(), view.max_processes()), (16, 8));
    let before = std::fs::read(&path).unwrap();
    let out = ok(&path, &["table", "create", "--capacity", "99"]);
    assert!(
        out.contains("exists (left as it is): 16 task slots"),
        "{out}"
    );
    assert!(std::fs::read(&path).unwrap() == before);

    let doc: Value = serde_json::from_str(&ok(&path, &["table", "info", "--json"])).unwrap();
    assert_eq!(doc["size"], std::fs::metadata(&path).unwrap().len());
    assert_eq!(doc["layout_version"], flowctrl::LAYOUT_VERSION);
    assert_eq!(doc["capacity"], 16);
    assert_eq!(doc["max_processes"], 8);
    assert_eq!(doc["balancers"], 3);
    assert_eq!(doc["mode"], "0640");
    let text = ok(&path, &["table", "info"]);
    for needle in [
        "size ",
        "layout_version ",
        "capacity ",
        "16 task slots",
        "max_processes ",
        "mode ",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let line = fails(flowctrl(&scratch.path("missing"), &["table", "info"]));
    assert!(line.contains("missing"), "{line}");
}

/// Every subcommand the command has.
const SUBCOMMANDS: [&str; 14] = [
    "config",
    "tasks",
    "stats",
    "top",
    "set",
    "keys",
    "check",
    "reap",
    "fleet",
    "manage",
    "metrics",
    "table",
    "completions",
    "man",
];

#[test]
fn completions_and_the_manual_page_name_every_subcommand() {
    let none = Path::new("/nonexistent/t");
    for shell in ["bash", "zsh", "fish"] {
        let out = ok(none, &["completions", shell]);
        assert!(out.len() > 1000, "{shell}: {out}");
        for sub in SUBCOMMANDS {
            assert!(out.contains(sub), "{shell} completes {sub}");
        }
        // `top --sort`'s keys come from its definition too.
        for word in ["sort", "in_flight"] {
            assert!(out.contains(word), "{shell} completes {word}");
        }
    }
    let man = ok(none, &["man"]);
    assert!(
        man.starts_with(".ie") || man.contains(".TH flowctrl 1"),
        "{man}"
    );
    for sub in SUBCOMMANDS {
        assert!(
            man.contains(&format!("flowctrl\\-{sub}")) || man.contains(&format!("\n{sub}\n")),
            "the manual names {sub}: {man}"
        );
    }
    let usage = flowctrl(none, &["completions", "tcsh"]);
    assert_eq!(usage.code, 2, "{usage:?}");
}

#[test]
fn the_systemd_units_verify() {
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/systemd");
    let names = ["flowctrl-metrics.service", "flowctrl-manage.service"];
    for name in names {
        let text = std::fs::read_to_string(units.join(name)).unwrap();
        for hardening in [
            "DynamicUser=yes",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "CapabilityBoundingSet=\n",
        ] {
            assert!(text.contains(hardening), "{name}: {hardening}");
        }
    }
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("skipped: no systemd-analyze on this machine (apt-get install systemd)");
        return;
    };
    assert!(version.status.success());
    // The units name /usr/bin/flowctrl, which verify requires to exist:
    // checked against the binary built here instead.
    let scratch = Scratch::new("ops-units");
    let mut paths = Vec::new();
    for name in names {
        let text = std::fs::read_to_string(units.join(name))
            .unwrap()
            .replace("/usr/bin/flowctrl", env!("CARGO_BIN_EXE_flowctrl"));
        let path = scratch.path(name);
        std::fs::write(&path, text).unwrap();
        paths.push(path);
    }
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(&paths)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let about_ours: Vec<&str> = stderr.lines().filter(|l| l.contains("flowctrl")).collect();
    assert!(
        out.status.success() && about_ours.is_empty(),
        "systemd-analyze verify: {stderr}"
    );
}

/// `flowctrl metrics` on a free port with `extra` arguments: its first
/// line on stderr.
fn metrics_first_line(path: &Path, extra: &[&str]) -> String {
    let mut child = cli::command(path)
        .args(extra)
        .args(["metrics", "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    line
}

/// "2025-03-01T12:34:56.789Z": an RFC 3339 time in UTC.
fn is_rfc3339(t: &str) -> bool {
    let b = t.as_bytes();
    t.len() == 24
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'.',
            23 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

#[test]
fn log_lines_carry_rfc3339_times_and_json_is_one_object_a_line() {
    let scratch = Scratch::new("ops-logs");
    let path = scratch.path("t");
    table_with_api(&path);
    let text = metrics_first_line(&path, &[]);
    let (time, rest) = text.split_once(' ').unwrap();
    assert!(is_rfc3339(time), "{text}");
    assert!(
        rest.starts_with("flowctrl metrics: INFO serving http://127.0.0.1:"),
        "{text}"
    );
    let json = metrics_first_line(&path, &["--log-format", "json"]);
    assert!(json.ends_with('\n'), "{json}");
    let doc: Value = serde_json::from_str(&json).unwrap();
    assert!(is_rfc3339(doc["time"].as_str().unwrap()), "{doc}");
    assert_eq!(doc["level"], "info", "{doc}");
    assert!(
        doc["message"]
            .as_str()
            .unwrap()
            .starts_with("serving http://127.0.0.1:"),
        "{doc}"
    );
    // The server the common helper starts still finds its address.
    let server = cli::Server::start(&path);
    assert_eq!(server.get("/healthz").0, 200);
}
