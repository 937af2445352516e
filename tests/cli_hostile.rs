//! The `flowctrl` command given hostile input: task names and host ids
//! holding terminal escapes (written into the table file or the store by
//! hand) are printed escaped by every text view, and no form of store URL
//! the store accepts has its password printed in an error.

#[path = "common/cli.rs"]
mod cli;
mod common;

use cli::{fails, flowctrl};
use common::layout::{HEADER_SIZE, T_NAME, TASK_SLOT};
use common::redis::RedisServer;
use common::*;
use flowctrl::{Table, TableOptions, TaskConfig};

/// Overwrites the name of the task `name` in the table file with `with` (as
/// long), as a process scribbling on the table could.
fn scribble_name(path: &std::path::Path, name: &str, with: &[u8]) {
    assert_eq!(name.len(), with.len());
    let mut bytes = std::fs::read(path).unwrap();
    let slot = (0..)
        .map(|i| HEADER_SIZE + i * TASK_SLOT + T_NAME)
        .take_while(|at| at + name.len() <= bytes.len())
        .find(|at| &bytes[*at..*at + name.len()] == name.as_bytes())
        .expect("the task's name in the file");
    bytes[slot..slot + with.len()].copy_from_slice(with);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn text_views_escape_control_characters_of_names() {
    let scratch = Scratch::new("cli-hostile-names");
    let path = scratch.path("t");
    {
        let table = Table::open(&path, &TableOptions::default()).unwrap();
        table
            .task("evil", &TaskConfig::new().local_rate(10.0))
            .unwrap();
    }
    scribble_name(&path, "evil", b"\x1b[2J");
    for args in [
        &["tasks"][..],
        &["stats"],
        &["check"],
        &["top", "--once", "--interval", "0.1"],
    ] {
        let run = flowctrl(&path, args);
        let all = format!("{}{}", run.stdout, run.stderr);
        assert!(
            !all.contains('\x1b'),
            "{args:?} printed a raw escape: {all:?}"
        );
        if args[0] != "check" {
            assert!(all.contains("\\u{1b}[2J"), "{args:?}: {all}");
        }
    }
    // JSON escapes it its own way.
    let run = flowctrl(&path, &["tasks", "--json"]);
    assert!(!run.stdout.contains('\x1b'), "{}", run.stdout);
}

#[test]
fn fleet_skips_host_ids_no_host_can_have_and_escapes_what_it_prints() {
    let redis = RedisServer::start();
    let url = redis.url();
    let (sec, _): (u64, u64) = redis.command(&["TIME"]);
    // The current slice of 1000 ms (the default slicing) and the three before.
    let now = sec;
    for slice in now - 3..=now {
        let key = format!("flowctrl:{{api}}:{}", slice % (1 << 32));
        redis.command::<()>(&[
            "HSET",
            &key,
            "quota",
            "100",
            "left",
            "50",
            "good-host",
            "10 12 10 10 -35 400",
            "\x1b[2Jbad",
            "10 12 10 10 -35 400",
            "{tag}",
            "10 12 10 10 -35 400",
        ]);
    }
    let scratch = Scratch::new("cli-hostile-fleet");
    for args in [
        &["fleet", "api", "--store", &url][..],
        &["fleet", "api", "--store", &url, "--json"],
    ] {
        let run = flowctrl(&scratch.path("t"), args);
        assert_eq!(run.code, 0, "{run:?}");
        assert!(run.stdout.contains("good-host"), "{run:?}");
        assert!(!run.stdout.contains("bad"), "{run:?}");
        assert!(!run.stdout.contains("{tag}"), "{run:?}");
        assert!(
            !run.stdout.contains('\x1b') && !run.stderr.contains('\x1b'),
            "{run:?}"
        );
    }
}

#[test]
fn no_store_url_has_its_password_printed() {
    let scratch = Scratch::new("cli-hostile-urls");
    let table = scratch.path("t");
    for url in [
        "unix:///tmp/flowctrl-no.sock?pass=secretpw",
        "redis+unix:///tmp/flowctrl-no.sock?db=0&password=secretpw",
        "unix:///tmp/flowctrl-no.sock?pass=secretpw&timeout_ms=0",
        "redis://:secretpw@127.0.0.1:1/0",
        "redis://user:secretpw@127.0.0.1:notaport/0",
        "redis://:secret/pw@127.0.0.1:1/0",
        "redis://:secret@pw@127.0.0.1:1/0",
        "redis://:secret:pw@127.0.0.1:1/0",
        "rediss://:secretpw@127.0.0.1:1/0#insecure",
        "redis+sentinel://:secret/pw@127.0.0.1:1,127.0.0.1:2/master",
        "redis+sentinel://:secret/pw@127.0.0.1:1,127.0.0.1:x/master",
        "redis+sentinel://:secret@pw@127.0.0.1:1/master/db/x",
        "rediss+sentinel://user:secret:pw@127.0.0.1:1/master",
        "redis+cluster://:secret/pw@127.0.0.1:1,127.0.0.1:2",
        "redis+cluster://:secret@pw@127.0.0.1:1/5",
        "rediss+cluster://:secret?pw@127.0.0.1:1",
        "redis://:secretpw@127.0.0.1:1/0?prefix={bad}",
    ] {
        let run = flowctrl(&table, &["fleet", "api", "--store", url]);
        let line = fails(run);
        assert!(!line.contains("secret"), "{url}: {line}");
        assert!(!line.contains("pw@"), "{url}: {line}");
        // A config file naming it: `config check` and the open alike (a
        // URL that parses opens: its store is down, not the open).
        let file = scratch.path("f.toml");
        std::fs::write(&file, format!("[table]\nstore = {url:?}\n")).unwrap();
        let run = flowctrl(&table, &["config", "check", file.to_str().unwrap()]);
        assert!(!format!("{run:?}").contains("secret"), "{url}: {run:?}");
        if let Err(e) = Table::open(&table, &TableOptions::default().config(&file)) {
            assert!(!e.message().contains("secret"), "{url}: {e}");
        }
    }
}
