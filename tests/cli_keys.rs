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
    // Checked whole before any write: a plain field an update refuses
    // leaves the key limits as they were; a task not registered is not
    // made; an override's key past 4,096 bytes writes nothing either.
    let rates = || -> Vec<String> {
        let config = task.key_config().unwrap().unwrap();
        config.limits.rates().map(|r| r.to_string()).collect()
    };
    let err = fails(cli::flowctrl(
        &path,
        &["set", "api", "key_rate=9/second", "burst=0"],
    ));
    assert!(err.contains("burst"), "{err}");
    assert_eq!(rates(), ["2/s"], "nothing written past a refused field");
    let long = format!("key_override.{}=1/second", "k".repeat(5000));
    let err = fails(cli::flowctrl(
        &path,
        &["set", "api", "key_rate=9/second", &long],
    ));
    assert!(err.contains("4096"), "{err}");
    assert_eq!(rates(), ["2/s"], "nothing written before a key too long");
    fails(cli::flowctrl(&path, &["set", "typo", "key_rate=9/second"]));
    assert!(
        flowctrl::View::open(&path).unwrap().task("typo").is_err(),
        "no task registered by a failed set"
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

#[test]
fn set_gives_keys_a_global_rate_and_keys_shows_each_keys() {
    use flowctrl::{Fallback, KeyGlobal, KeyLimits, KeyRate};
    let scratch = Scratch::new("keys-global");
    let path = scratch.path("t");
    let table = Table::open(&path, &TableOptions::default()).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    let out = ok(
        &path,
        &[
            "set",
            "api",
            "key_rate=100/second",
            "key_global=5/s",
            "key_global_slice=1s",
            "key_capacity=64",
        ],
    );
    assert!(
        out.contains("key_global 5/s slice 1s local 1 fallback share (5 a slice)"),
        "{out}"
    );
    // --dry-run says old -> new for each field, and writes nothing.
    let out = ok(
        &path,
        &[
            "set",
            "--dry-run",
            "api",
            "key_global=1000/h",
            "key_global_slice=1m",
            "key_global_local=2",
            "key_global_fallback=deny",
        ],
    );
    assert_eq!(
        out,
        "task \"api\": key_global 5/s slice 1s local 1 fallback share (5 a slice) -> \
         1000/h slice 1m local 2 fallback deny (16 a slice), key_global_slice 1s -> 1m, \
         key_global_local 1 -> 2, key_global_fallback share -> deny (dry run: nothing changed)\n"
    );
    let global = || task.key_config().unwrap().unwrap().limits.global.unwrap();
    assert_eq!(
        (global().permits(), global().local),
        (5, 1),
        "nothing written"
    );
    // A field alone changes that field; key_rate keeps the global rate.
    ok(
        &path,
        &["set", "api", "key_global_local=3", "key_rate=50/second"],
    );
    assert_eq!((global().permits(), global().local), (5, 3));
    ok(&path, &["set", "api", "key_global_local=1"]);
    // Bad fields: usage errors (exit 2) or refusals (exit 1), nothing changed.
    for (args, code, says) in [
        (&["key_global=fast"][..], 2, "key rate"),
        (&["key_global_slice=1 fortnight"][..], 2, "unknown unit"),
        (&["key_global_fallback=5"][..], 2, "\"deny\""),
        (
            &["key_global=none", "key_global_local=1"][..],
            2,
            "key_global=none",
        ),
        (&["key_global_local=32"][..], 1, "at most 31"),
        (&["key_global_slice=5ms"][..], 1, "between 10 ms and a day"),
        (&["--dry-run", "key_global_local=32"][..], 1, "at most 31"),
    ] {
        let mut words = vec!["set"];
        let (flags, fields): (Vec<&str>, Vec<&str>) =
            args.iter().partition(|a| a.starts_with("--"));
        words.extend(flags);
        words.push("api");
        words.extend(fields);
        let mut run = cli::flowctrl(&path, &words);
        assert_eq!(run.code, code, "{args:?}: {run:?}");
        run.code = 1;
        let err = fails(run);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert_eq!((global().permits(), global().local), (5, 1));
    // A key with an override has its own global rate (or none).
    task.set_key_override(
        b"vip",
        Some(
            &KeyLimits::parse_rates("100/second")
                .unwrap()
                .global(KeyGlobal::new(KeyRate::per_second(2.0)).fallback(Fallback::Deny)),
        ),
    )
    .unwrap();
    task.set_key_override(
        b"free",
        Some(&KeyLimits::parse_rates("100/second").unwrap()),
    )
    .unwrap();
    for key in [&b"alice"[..], b"vip", b"free"] {
        for _ in 0..10 {
            let _ = task.acquire_key(key, 1).unwrap();
        }
    }
    let text = ok(&path, &["keys", "api"]);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[1].starts_with("key_global 5/s slice 1s local 1 fallback share (5 a slice)"),
        "{text}"
    );
    assert!(
        lines[2].ends_with("  global (rate; on this host now)"),
        "{text}"
    );
    let line_of = |key: &str| {
        *lines
            .iter()
            .find(|l| l.starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no {key}: {text}"))
    };
    // Asked 10 of a slice of 5 on a host alone: hot (whatever slice edge
    // the asks crossed: a key asked past its allowance stays hot).
    assert!(
        line_of("alice").contains("  5/s slice 1s local 1 fallback share (5 a slice); hot, held "),
        "{text}"
    );
    assert!(line_of("vip").contains("  2/s slice 1s local 1 fallback deny (2 a slice); hot"));
    assert!(line_of("free").ends_with("  none"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&path, &["keys", "api", "--json"])).unwrap();
    assert_eq!(json["global"]["permits_per_slice"], 5);
    assert_eq!(json["global"]["slice_ms"], 1000);
    let key = |name: &str| {
        json["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["key"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(key("alice")["overridden"], false);
    assert_eq!(key("alice")["global_now"]["hot"], true, "{json}");
    assert!(key("alice")["global_now"]["asked"].as_u64().unwrap() >= 5);
    assert_eq!(key("free")["global_now"], serde_json::Value::Null);
    assert_eq!(key("alice")["global"]["rate"], "5/s");
    assert_eq!(key("vip")["overridden"], true);
    assert_eq!(key("vip")["global"]["fallback"], "deny");
    assert_eq!(key("vip")["global"]["local"], 1);
    assert!(key("free")["global"].is_null());
    // Taken away: no column, a null in JSON.
    let out = ok(&path, &["set", "api", "key_global=none"]);
    assert!(out.contains("key_global none,"), "{out}");
    task.set_key_override(b"vip", None).unwrap();
    task.set_key_override(b"free", None).unwrap();
    let text = ok(&path, &["keys", "api"]);
    // The counter of global refusals stays; the rate's line and columns go.
    // vip asked 10 of 2 a slice: at least 6 refused, whatever slice edge
    // the asks crossed.
    let refused: u64 = text
        .lines()
        .next()
        .and_then(|l| l.rsplit("by global rate ").next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(refused >= 6, "{text}");
    assert!(
        !text.contains("key_global") && !text.contains("  global") && !text.contains("hot,"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&path, &["keys", "api", "--json"])).unwrap();
    assert!(json["global"].is_null() && json["keys"][0]["global"].is_null());
    // Fields without a global rate to change are refused.
    let err = fails(cli::flowctrl(&path, &["set", "api", "key_global_local=2"]));
    assert!(err.contains("no global rate"), "{err}");
}
