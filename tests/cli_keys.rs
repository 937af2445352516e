//! Keyed tasks from the operator's side: limits per caller set by a config
//! file (at registration and by a live edit) and by `flowctrl set`, seen
//! through `flowctrl keys`, `stats`, `check` and the metrics endpoint.

#[path = "common/cli.rs"]
mod cli;
mod common;

use std::time::{Duration, Instant};

use cli::{Server, fails, ok};
use common::*;
use flowctrl::{KeyDecision, KeyRefused, Table, TableOptions, TaskConfig};

fn admitted(task: &flowctrl::Task, key: &[u8]) -> bool {
    matches!(task.acquire_key(key, 1).unwrap(), KeyDecision::Admitted(_))
}

#[test]
fn a_config_file_gives_a_task_limits_per_caller_and_an_edit_changes_them_live() {
    let scratch = Scratch::new("keys-config");
    let file = scratch.path("flowctrl.toml");
    let table_path = scratch.path("table");
    let text = |vip: &str| {
        format!(
            "[table]\npath = {table_path:?}\n[tasks.api]\nshadow = false\nkey_rate = \"3/second;100/hour\"\n\
             key_capacity = 1000\n[tasks.api.key_overrides]\n\"vip\" = {vip}\n\
             \"abuser\" = \"blocked\"\n"
        )
    };
    std::fs::write(&file, text("{ key_rate = \"50/second\" }")).unwrap();
    let table = Table::open("/ignored", &TableOptions::default().config(&file)).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    assert_eq!((0..10).filter(|_| admitted(&task, b"plain")).count(), 3);
    assert_eq!((0..60).filter(|_| admitted(&task, b"vip")).count(), 50);
    assert!(matches!(
        task.acquire_key(b"abuser", 1).unwrap(),
        KeyDecision::Limited(r) if r.by == KeyRefused::Blocked
    ));
    let config = task.key_config().unwrap().unwrap();
    assert_eq!(config.capacity, 1000);
    assert_eq!(config.limits.rates().count(), 2);
    // An edit: the VIP becomes unlimited, the blocked key is no longer
    // listed (the file's overrides replace the task's as a whole).
    std::fs::write(
        &file,
        text("\"unlimited\"").replace("\"abuser\" = \"blocked\"\n", ""),
    )
    .unwrap();
    let began = Instant::now();
    while !task.key_state(b"vip").unwrap().unlimited {
        assert!(
            began.elapsed() < Duration::from_secs(3),
            "the edit was not applied"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(admitted(&task, b"abuser"), "no longer blocked");
    // A bad key field is refused with the file and line, by config check.
    let bad = scratch.path("bad.toml");
    std::fs::write(&bad, "[tasks.api]\nkey_rate = \"10/fortnight\"\n").unwrap();
    let err = fails(cli::flowctrl(
        &table_path,
        &["config", "check", bad.to_str().unwrap()],
    ));
    assert!(
        err.contains("bad.toml:") && err.contains("unknown unit"),
        "{err}"
    );
}

#[test]
fn keys_set_stats_check_and_metrics_show_a_keyed_task() {
    let scratch = Scratch::new("keys-cli");
    let path = scratch.path("t");
    let table = Table::open(&path, &TableOptions::default()).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    // `set` gives the task keys (a new key file of 4,096 keys) and an
    // override; a bad field changes nothing.
    let out = ok(
        &path,
        &[
            "set",
            "api",
            "key_rate=2/second",
            "key_capacity=4096",
            "key_override.vip=unlimited",
        ],
    );
    assert!(
        out.contains("key_rate \"2/s\"") && out.contains("4096 keys"),
        "{out}"
    );
    let mut run = cli::flowctrl(&path, &["set", "api", "key_rate=fast"]);
    assert_eq!(
        run.code, 2,
        "a rate that does not parse is a usage error: {run:?}"
    );
    run.code = 1;
    let err = fails(run);
    assert!(err.contains("key rate"), "{err}");
    assert_eq!(
        task.key_config().unwrap().unwrap().limits.rates().count(),
        1
    );
    // A hot key refused often, a key holding a terminal escape, and others.
    for _ in 0..40 {
        task.acquire_key(b"hot-key", 1).unwrap().permit();
    }
    for _ in 0..5 {
        task.acquire_key(b"evil\x1b[2J", 1).unwrap().permit();
    }
    for i in 0..100 {
        task.acquire_key(format!("k{i}").as_bytes(), 1)
            .unwrap()
            .permit();
    }
    assert!((0..50).all(|_| admitted(&task, b"vip")));
    let text = ok(&path, &["keys", "api", "--by", "refused", "--top", "3"]);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].contains("102 keys of 4096"), "{text}");
    assert!(
        lines[2].starts_with("hot-key "),
        "the most refused first: {text}"
    );
    assert!(lines[3].starts_with("evil\\u{1b}[2J"), "escaped: {text}");
    assert!(!text.contains('\x1b'), "no raw escape reaches the terminal");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&path, &["keys", "api", "--json", "--by", "refused"])).unwrap();
    assert_eq!(json["keys"][0]["key"], "hot-key");
    assert_eq!(json["keys"][0]["refused"], 38);
    assert_eq!(json["stats"]["refused_rate"], 38 + 3);
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&path, &["stats", "--json", "api"])).unwrap();
    assert_eq!(stats["tasks"][0]["keys"]["keys"], 102);
    assert!(ok(&path, &["stats"]).contains("keys: 102 of 4096"));
    assert!(ok(&path, &["check"]).contains("0 keys drifting"));
    let metrics = Server::start(&path).get("/metrics").1;
    assert!(
        metrics.contains("flowctrl_keys_refused_total{task=\"api\",reason=\"rate\"} 41"),
        "{metrics}"
    );
    assert!(metrics.contains("flowctrl_key_capacity{task=\"api\"} 4096"));
    assert!(!metrics.contains("hot-key"), "no series per key");
    // Shadow mode for the task's own limits, by `set`: refusals counted.
    ok(
        &path,
        &["set", "api", "local_rate=1", "burst=1", "shadow=true"],
    );
    assert!(task.settings().local.shadow);
    for _ in 0..5 {
        assert!(task.acquire(1).unwrap().permit().is_some());
    }
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&path, &["stats", "--json", "api"])).unwrap();
    assert_eq!(stats["tasks"][0]["stats"]["shadow_refused"], 4);
    assert_eq!(stats["tasks"][0]["settings"]["shadow"], true);
    let metrics = Server::start(&path).get("/metrics").1;
    assert!(
        metrics.contains("flowctrl_requests_shadow_refused_total{task=\"api\"} 4"),
        "{metrics}"
    );
    let err = fails(cli::flowctrl(&path, &["keys", "nope"]));
    assert!(err.contains("nope"), "{err}");
}
