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
