//! `flowctrl config check FILE`: a file checked as an open would, and what
//! applying it would change on its table, without changing the table.

mod common;

use std::process::Command;

use common::*;
use flowctrl::{Table, TableOptions, TaskConfig};

fn flowctrl(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_flowctrl"))
        .args(args)
        .env_remove("FLOWCTRL_TABLE")
        .env_remove("FLOWCTRL_CONFIG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn config_check_says_what_a_file_would_change_and_changes_nothing() {
    let scratch = Scratch::new("cli-config");
    let table_path = scratch.path("t");
    let table = Table::open(&table_path, &TableOptions::default()).unwrap();
    table
        .task(
            "api",
            &TaskConfig::new().max_concurrency(4).local_rate(100.0),
        )
        .unwrap();
    table.task("same", &TaskConfig::new().burst(3)).unwrap();
    // Detached: no process of ours writes the table while it is compared.
    drop(table);
    let file = scratch.path("flowctrl.toml");
    std::fs::write(
        &file,
        format!(
            "[table]\npath = {table_path:?}\n[tasks.api]\nmax_concurrency = 8\nlocal_rate = 100\n\
             [tasks.same]\nburst = 3\n[tasks.new]\nburst = 2\n"
        ),
    )
    .unwrap();
    let before = std::fs::read(&table_path).unwrap();
    let (code, out, err) = flowctrl(&["config", "check", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ok (3 task(s), 0 balancer(s))"), "{out}");
    assert!(
        out.contains("task \"api\": max_concurrency 4 -> 8\n"),
        "{out}"
    );
    assert!(out.contains("task \"same\": unchanged"), "{out}");
    assert!(out.contains("task \"new\": not registered yet"), "{out}");
    assert!(
        std::fs::read(&table_path).unwrap() == before,
        "the check changed the table"
    );
    let table = Table::open(&table_path, &TableOptions::default()).unwrap();
    assert_eq!(
        table
            .task("api", &TaskConfig::new())
            .unwrap()
            .settings()
            .local
            .max_concurrency,
        4
    );

    // `tasks --config` says which fields come from the file.
    let t = table_path.to_str().unwrap();
    let f = file.to_str().unwrap();
    let (code, out, err) = flowctrl(&["-t", t, "tasks", "--config", f]);
    assert_eq!(code, 0, "{err}");
    let api = out.lines().find(|l| l.starts_with("api ")).unwrap();
    assert!(api.ends_with("file: local_rate,max_concurrency"), "{out}");
    let (_, out, _) = flowctrl(&["-t", t, "tasks", "--json", "--config", f]);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let api = doc["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "api")
        .unwrap();
    assert_eq!(api["sources"]["max_concurrency"], "file");
    assert_eq!(api["sources"]["burst"], "code");

    // A bad file: exit 1, the file, the line and the key.
    std::fs::write(&file, "[tasks.api]\nmax_concurency = 8\n").unwrap();
    let (code, out, err) = flowctrl(&["config", "check", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains(&format!("{}:2:1", file.display())), "{err}");
    assert!(err.contains("max_concurency"), "{err}");

    // A file whose table does not exist yet.
    std::fs::write(
        &file,
        format!(
            "[table]\npath = {:?}\n[tasks.api]\nburst = 2\n",
            scratch.path("none")
        ),
    )
    .unwrap();
    let (code, out, _) = flowctrl(&["config", "check", file.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("not created yet"), "{out}");
    assert!(!scratch.path("none").exists(), "the check created nothing");
}

/// `--table` wins over the checked file's `[table] path`, as it wins over
/// FLOWCTRL_CONFIG's for every command: the check compares the file with
/// the table the flag names, and says that it is not the file's.
#[test]
fn config_check_compares_with_the_table_the_flag_names() {
    let scratch = Scratch::new("cli-config-flag");
    let (named, flagged) = (scratch.path("named"), scratch.path("flagged"));
    for (path, cap) in [(&named, 4), (&flagged, 6)] {
        let table = Table::open(path, &TableOptions::default()).unwrap();
        table
            .task("api", &TaskConfig::new().max_concurrency(cap))
            .unwrap();
    }
    let file = scratch.path("flowctrl.toml");
    std::fs::write(
        &file,
        format!("[table]\npath = {named:?}\n[tasks.api]\nmax_concurrency = 8\n"),
    )
    .unwrap();
    let (f, n, t) = (
        file.to_str().unwrap(),
        named.to_str().unwrap(),
        flagged.to_str().unwrap(),
    );
    // Without the flag: the file's table.
    let (code, out, err) = flowctrl(&["config", "check", f]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("task \"api\": max_concurrency 4 -> 8\n"),
        "{out}"
    );
    assert!(!out.contains("--table"), "{out}");
    // With it, before or after the command: the flag's, said once.
    let note =
        format!("table {t}: --table's (or FLOWCTRL_TABLE's), over the file's [table] path {n}\n");
    for args in [
        &["-t", t, "config", "check", f][..],
        &["config", "check", f, "--table", t],
    ] {
        let (code, out, err) = flowctrl(args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        assert!(
            out.contains("task \"api\": max_concurrency 6 -> 8\n"),
            "{args:?}: {out}"
        );
        assert_eq!(out.matches(&note).count(), 1, "{args:?}: {out}");
    }
    // FLOWCTRL_TABLE stands for the flag, as for every command.
    let out = Command::new(env!("CARGO_BIN_EXE_flowctrl"))
        .args(["config", "check", f])
        .env("FLOWCTRL_TABLE", t)
        .env_remove("FLOWCTRL_CONFIG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text.contains("max_concurrency 6 -> 8\n"), "{text}");
    assert!(text.contains(&note), "{text}");
    // The flag naming the file's own table: nothing to say.
    let (code, out, err) = flowctrl(&["config", "check", f, "--table", n]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("max_concurrency 4 -> 8\n"), "{out}");
    assert!(!out.contains("over the file's"), "{out}");
}

/// `config check` runs the checks the open and `flowctrl manage` run, no
/// fewer: what it passes they take, what they refuse it refuses, with the
/// same message, and every refusal names the file, the line and the column
/// of the key.
#[test]
fn config_check_refuses_what_the_open_and_the_manager_refuse() {
    let scratch = Scratch::new("cli-config-parity");
    let file = scratch.path("f.toml");
    let f = file.to_str().unwrap();
    let managed = "[table]\nstore = \"redis://127.0.0.1:1/0\"\n[tasks.api]\nglobal_rate = 100\n";
    for (text, at, says, opens) in [
        ("[table]\ncapacity = 0\n", ":2:12", "capacity", false),
        (
            "[table]\nstore = \"nota://\"\n",
            ":2:9",
            "must start with redis://",
            false,
        ),
        ("[table]\nmode = 4095\n", ":2:8", "mode", false),
        ("[table]\nmode = 0o666\n", ":2:8", "shared", false),
        ("[table]\nlanes = 99999999\n", ":2:9", "lanes", false),
        (
            "[table]\nkey_prefix = \"app{\"\n",
            ":2:14",
            "key_prefix",
            false,
        ),
        (
            "[table]\nkey_prefix = \"{app}\"\n",
            ":2:14",
            "hash tag",
            false,
        ),
        (
            "[table]\nkey_prefix = \"a\\nb\"\n",
            ":2:14",
            "key_prefix",
            false,
        ),
        ("[table]\nhost_id = \"a{b\"\n", ":2:11", "host_id", false),
        ("[table]\nstore_timeout_ms = 0\n", ":2:20", "timeout", false),
        ("[tasks.\"}x\"]\nburst = 1\n", ":1:1", "hash tag", false),
        (
            &format!("{managed}[manager]\nbogus = 1\n"),
            ":6:1",
            "unknown key \"bogus\"",
            true,
        ),
        (
            &format!("{managed}[manager]\nlease_ms = 5\n"),
            ":6:12",
            "lease_ms",
            true,
        ),
        (
            &format!(
                "{managed}[tasks.api.policy]\nmin_rate = 500\nmax_rate = 5\ndropped_ratio = 0.1\n"
            ),
            ":5:1",
            "inverted",
            true,
        ),
        (
            &format!("{managed}[tasks.api.policy]\nmin_rate = 1\nmax_rate = 500\nfoo = 1\n"),
            ":8:1",
            "unknown key \"foo\"",
            true,
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let (code, out, err) = flowctrl(&["config", "check", f]);
        assert_eq!(code, 1, "{text:?}: {out}{err}");
        let line = err.trim_end();
        assert_eq!(line.lines().count(), 1, "{text:?}: {err}");
        assert!(line.contains(&format!("{f}{at}")), "{text:?}: {err}");
        assert!(line.contains(says), "{text:?}: {err}");
        // The same refusal from the one that runs it.
        let theirs = if opens {
            flowctrl::manage::ManagerConfig::load(&file).unwrap_err()
        } else {
            Table::open(scratch.path("t"), &TableOptions::default().config(&file)).unwrap_err()
        };
        assert_eq!(line, format!("flowctrl: {theirs}"), "{text:?}");
    }
    // A good file for hosts and manager passes all three.
    std::fs::write(&file, format!("{managed}[manager]\nlease_ms = 3000\n")).unwrap();
    let (code, out, err) = flowctrl(&[
        "-t",
        scratch.path("none").to_str().unwrap(),
        "config",
        "check",
        f,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("1 managed task(s)"), "{out}");
    flowctrl::manage::ManagerConfig::load(&file).unwrap();
}
