//! `flowctrl fleet`: the census of a task's hosts in a real `redis-server`,
//! pulled into by two tables with their own host ids; the command prints
//! what `Store::fleet` reads, exactly.

#[path = "common/cli.rs"]
mod cli;
mod common;

use std::time::Duration;

use cli::{fails, field, flowctrl, ok};
use common::redis::RedisServer;
use common::*;
use flowctrl::{GlobalConfig, KeyGlobal, KeyRate, KeyRecord, Table, TaskConfig};
use serde_json::Value;

/// The monotonic instant `offset` after the wall clock's next whole second.
fn at_wall_second(offset: Duration) -> Duration {
    let now_us = wall_us() as u64;
    let next = (now_us / 1_000_000 + 1) * 1_000_000;
    monotonic() + Duration::from_micros(next - now_us) + offset
}

#[test]
fn fleet_prints_the_census_of_both_hosts() {
    let redis = RedisServer::start();
    let url = redis.url();
    let scratch = Scratch::new("cli-fleet");
    let config = TaskConfig::new().global_rate(1000.0).global_burst(1000);
    let a = Table::open(scratch.path("a"), &host_options(&url, "host-a")).unwrap();
    let b = Table::open(scratch.path("b"), &host_options(&url, "host-b")).unwrap();
    let (ta, tb) = (
        a.task("api", &config).unwrap(),
        b.task("api", &config).unwrap(),
    );
    // Both pull early in one slice; the census covers full slices.
    sleep_until(at_wall_second(Duration::from_millis(50)));
    let slice = wall_us() / 1_000_000;
    assert_eq!(ta.pull_quota(10).unwrap(), Ok(10));
    assert_eq!(tb.pull_quota(30).unwrap(), Ok(30));
    assert_eq!(wall_us() / 1_000_000, slice, "stayed in one slice");
    sleep_until(at_wall_second(Duration::from_millis(20)));

    let table = scratch.path("unused");
    let doc: Value =
        serde_json::from_str(&ok(&table, &["fleet", "api", "--store", &url, "--json"])).unwrap();
    let store = common::options::admin_store(&url);
    let fleet = store.fleet("api", None).unwrap();
    assert_eq!(doc["quota"], 1000);
    assert_eq!(doc["slice_ms"], 1000);
    let hosts = doc["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2, "{doc}");
    for (printed, read) in hosts.iter().zip(&fleet.hosts) {
        assert_eq!(printed["host"], read.host.as_str());
        assert_eq!(printed["slice"], read.slice);
        assert_eq!(printed["asked"], read.asked);
        assert_eq!(printed["granted"], read.granted);
        assert_eq!(printed["claimed"], read.claimed);
        assert_eq!(printed["demand"], read.demand);
        assert_eq!(printed["offset_us"], read.offset_us);
    }
    let by_host: Vec<_> = hosts
        .iter()
        .map(|h| {
            (
                h["host"].as_str().unwrap(),
                h["slice"].as_i64().unwrap(),
                h["granted"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(by_host, [("host-a", slice, 10), ("host-b", slice, 30)]);

    let text = ok(&table, &["fleet", "api", "--store", &url]);
    eprintln!("$ flowctrl fleet api --store {url}\n{text}");
    assert!(text.starts_with("task api: slice "), "{text}");
    assert!(
        text.contains("quota 1000 per slice, 2 live host(s)"),
        "{text}"
    );
    let row: Vec<_> = text
        .lines()
        .find(|l| l.starts_with("host-b "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        row[1..4],
        [slice.to_string().as_str(), "30", "30"],
        "{text}"
    );

    // A record in the store wins over the hosts' own numbers: the view says so.
    let record = GlobalConfig {
        global_rate: Some(2000.0),
        ..GlobalConfig::default()
    };
    store.set_task_config("api", &record).unwrap();
    ta.pull_quota(1).unwrap().unwrap();
    let stats = ok(&scratch.path("a"), &["stats", "api"]);
    eprintln!("$ flowctrl stats api   # with a store record\n{stats}");
    assert_eq!(
        field(&stats, "global"),
        "global_rate 2000/s  slice_ms 1000  chunk auto  fallback share  global_burst auto  source store"
    );
    let tasks = ok(&scratch.path("a"), &["tasks"]);
    assert!(
        tasks
            .lines()
            .nth(1)
            .unwrap()
            .ends_with(" store   store: global_rate,slice_ms,chunk,fallback,global_burst"),
        "{tasks}"
    );
    let out = ok(&scratch.path("a"), &["set", "api", "global_rate=1500"]);
    assert_eq!(
        out,
        "task \"api\": global_rate 2000 -> 2000\nthe store's record of \"api\" is in force: \
         this host's own global numbers changed, and apply when the record is removed\n"
    );
    assert_eq!(ta.settings().global.global_rate, 2000.0);

    // A store that is not there is one line, not a hang.
    let line = fails(flowctrl(
        &table,
        &["fleet", "api", "--store", "redis://127.0.0.1:1/0"],
    ));
    assert!(line.contains("127.0.0.1:1"), "{line}");
    assert_eq!(
        flowctrl(&table, &["fleet", "api"]).code,
        2,
        "--store is required"
    );
}

/// `--slice-ms` outside a key's slices (10 ms to a day) on a task without
/// key limits: the census is read in it and the hot keys are not asked (a
/// note says so), where they failed the command on the hot keys' range
/// check; once a keys' record names the keys' slice, they are read in it.
#[test]
fn fleet_with_a_slice_no_key_has_skips_the_hot_keys() {
    let redis = RedisServer::start();
    let url = redis.url();
    let scratch = Scratch::new("cli-fleet-slice");
    let table = scratch.path("unused");
    let args = ["fleet", "api", "--store", &url, "--slice-ms", "5"];
    let text = ok(&table, &args);
    eprintln!("$ flowctrl fleet api --store {url} --slice-ms 5\n{text}");
    assert!(text.starts_with("task api: slice "), "{text}");
    assert!(text.contains(" of 5 ms, "), "{text}");
    assert!(
        text.contains("hot keys not read") && text.contains("5 ms is not a key's"),
        "{text}"
    );
    let json = [&args[..], &["--json"]].concat();
    let doc: Value = serde_json::from_str(&ok(&table, &json)).unwrap();
    assert_eq!(doc["slice_ms"], 5, "{doc}");
    assert!(doc["hot_keys"].is_null(), "{doc}");

    let record = KeyRecord {
        default: Some(KeyGlobal::new(KeyRate::per_second(10.0))),
        overrides: Vec::new(),
    };
    common::options::admin_store(&url)
        .set_key_record("api", &record)
        .unwrap();
    let text = ok(&table, &args);
    assert!(!text.contains("not read"), "{text}");
    let doc: Value = serde_json::from_str(&ok(&table, &json)).unwrap();
    assert_eq!(doc["slice_ms"], 5, "{doc}");
    assert_eq!(doc["hot_keys"]["slice_ms"], 1000, "{doc}");
    assert_eq!(doc["hot_keys"]["keys"], 0, "{doc}");
}

/// `flowctrl fleet` (1 s timeouts) against a store that answers every
/// request one byte every 20 ms (2.16 s a reply): each read succeeds
/// within its timeout, yet the command ends within a request's bound (1 s
/// to connect + 1 s for the command) with one line saying the store timed
/// out, not after the replies have trickled in.
#[test]
fn fleet_against_a_trickling_store_ends_within_the_request_bound() {
    let trickler = common::trickle::Trickler::start();
    let scratch = Scratch::new("cli-fleet-trickle");
    let began = std::time::Instant::now();
    let run = flowctrl(
        &scratch.path("unused"),
        &["fleet", "api", "--store", &trickler.url()],
    );
    let took = began.elapsed();
    eprintln!("flowctrl fleet took {took:?}: {run:?}");
    let line = fails(run);
    assert!(
        took < Duration::from_millis(2500),
        "flowctrl fleet took {took:?}: {line}"
    );
    assert!(
        line.contains("the store timed out after") && line.contains("a request's bound: 2000 ms"),
        "{line}"
    );
    assert!(line.contains(&trickler.url()), "{line}");
}
