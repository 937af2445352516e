//! The global quota on a real Redis Cluster (three masters with a replica
//! each, on loopback, made by `redis-cli --cluster create`): every full
//! slice exact with one shard and with three; with three, the pulls spread
//! over the three masters; a master SIGKILLed mid-run fails over with the
//! Sentinel test's budget: every full slice, the failover's own included,
//! within [0.98, 1.01]. Two hosts × three processes at saturating demand.

mod common;

use std::time::{Duration, Instant};

use common::hosts;
use common::redis::{Cluster, Redis};
use common::tls::Tls;
use common::*;
use flowctrl::{ErrorKind, GlobalConfig, Store, StoreOptions, Table, TableOptions, TaskConfig};

const RATE: f64 = 2000.0;
const PROBE: Duration = Duration::from_millis(500);

/// One cluster and its six workers at a time: two on a 2-core machine
/// would measure the machine, not the quota.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn store(url: &str) -> Store {
    Store::open(&StoreOptions {
        url: Some(url.to_string()),
        timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(500),
        ..StoreOptions::default()
    })
    .unwrap()
}

/// A hot task's name: any name's shards land on distinct masters of a
/// cluster made the usual way (the keys' hash tags are chosen so).
const HOT: &str = "hot";

#[test]
fn slices_are_exact_with_one_shard_and_three_and_three_spread_over_the_masters() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = Cluster::start(1000);
    let url = cluster.url();
    let opts = ha_options(&url, PROBE);
    let name = HOT.to_string();
    for shards in [1, 3] {
        let scratch = Scratch::new("cluster-shards");
        // Every host spreads the task alike: from its store record.
        store(&url)
            .set_task_config(
                &name,
                &GlobalConfig {
                    global_rate: Some(RATE),
                    shards: Some(shards),
                    ..GlobalConfig::default()
                },
            )
            .unwrap();
        let masters = cluster.masters();
        let before: Vec<u64> = masters
            .iter()
            .map(|&i| cluster.nodes[i].script_calls())
            .collect();
        let config = TaskConfig::new().global_rate(RATE).shards(shards);
        let run = hosts::run(&scratch, &opts, (2, 3), (&name, config), 5.0, |_| {});
        let calls: Vec<u64> = masters
            .iter()
            .zip(&before)
            .map(|(&i, b)| cluster.nodes[i].script_calls() - b)
            .collect();
        eprintln!(
            "shards {shards}: per slice {:?}, per host {:?}; script calls per master {calls:?}; \
             host 0: {:?}",
            run.per_slice, run.per_host, run.stats
        );
        assert_eq!(run.errors, 0);
        hosts::assert_slices_exact(&run, RATE);
        let fleet = store(&url).fleet(&name, None).unwrap();
        assert_eq!(fleet.hosts.len(), 2, "{fleet:?}");
        assert_eq!(fleet.quota, Some(RATE as u64), "the shards' parts add up");
        if shards == 3 {
            let mean = calls.iter().sum::<u64>() as f64 / 3.0;
            for c in &calls {
                assert!(
                    (*c as f64 - mean).abs() <= 0.2 * mean,
                    "script calls per master {calls:?}: not within ±20 % of {mean}"
                );
            }
        }
    }
    let fleet = store(&url);
    assert!(fleet.remove_task_config(&name).unwrap());
    assert_eq!(fleet.task_config(&name).unwrap(), None);
}

#[test]
fn a_cluster_failover_keeps_every_slice_exact() {
    failover_keeps_every_slice_exact(1);
}

/// The master of one of three shards' keys dies: the hosts pull the two
/// live shards' parts from their keys and grant themselves their fallback
/// shares of the dead one's (`quota::down`), stay failed (no flipping
/// between open and failed by which shard a pull met first) until a probe
/// finds every shard answering, and the promoted replica deducts what each
/// host took of its part meanwhile. Before that fix the hosts flipped and
/// the slices of the failover came out short (1,579–1,901 of 2,000).
#[test]
fn a_cluster_failover_of_one_shard_keeps_every_slice_exact() {
    failover_keeps_every_slice_exact(3);
}

/// The master of the task's shard 0 SIGKILLed 2.3 s into a run of 14 s.
/// The cluster's own election usually promotes the replica 1–3 s later,
/// but on a loaded machine it has taken 7.7 s: the run leaves room after
/// it, so the reopening and the census are always judged.
fn failover_keeps_every_slice_exact(shards: u32) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = Cluster::start(1000);
    let url = cluster.url();
    let opts = ha_options(&url, PROBE);
    let scratch = Scratch::new("cluster-failover");
    let name = if shards == 1 { "api" } else { HOT }.to_string();
    let config = GlobalConfig {
        global_rate: Some(RATE),
        shards: Some(shards),
        ..GlobalConfig::default()
    };
    store(&url).set_task_config(&name, &config).unwrap();
    let tag = format!("{{{name}}}");
    let victim = cluster.master_of(&tag).unwrap();
    let mut failover = None;
    let run = hosts::run(
        &scratch,
        &opts,
        (2, 3),
        (&name, TaskConfig::new().global_rate(RATE).shards(shards)),
        14.0,
        |start| {
            sleep_until(start + Duration::from_millis(2300));
            let killed = Instant::now();
            cluster.nodes[victim].kill();
            while cluster.master_of(&tag).is_none_or(|m| m == victim) {
                assert!(killed.elapsed() < Duration::from_secs(20), "no failover");
                std::thread::sleep(Duration::from_millis(10));
            }
            failover = Some((monotonic() - start, killed.elapsed()));
            assert!(
                killed.elapsed() < Duration::from_secs(9),
                "the cluster took {:?} to promote a replica: too late to judge the run",
                killed.elapsed()
            );
        },
    );
    let (promoted_at, failover) = failover.unwrap();
    eprintln!(
        "shards {shards}: per slice {:?}, per host {:?}; errors {}, slowest acquire {:?}; \
         hosts: {:?}",
        run.per_slice, run.per_host, run.errors, run.slowest, run.all_stats
    );
    let ratios: Vec<String> = run
        .per_slice
        .values()
        .map(|n| format!("{:.3}", *n as f64 / RATE))
        .collect();
    eprintln!(
        "shards {shards}: admitted / quota per slice (first and last partial): {}",
        ratios.join(" ")
    );
    eprintln!(
        "killed at 2.3 s; a replica took the slot over after {failover:?} (at {promoted_at:?}); \
         host 0 failed at {:?}, open again at {:?}, reopened {} time(s) (probe interval \
         {PROBE:?})",
        run.failed_at, run.open_again_at, run.reopened
    );
    let fleet = store(&url).fleet(&name, None).unwrap();
    assert_eq!(
        fleet.hosts.len(),
        2,
        "the census reads the new master: {fleet:?}"
    );
    assert_eq!(run.errors, 0, "no caller sees an error");
    hosts::assert_slices_exact(&run, RATE);
    let open = run.open_again_at.unwrap();
    assert!(
        open <= promoted_at + PROBE.mul_f64(1.2) + Duration::from_millis(100),
        "open again at {open:?}, the replica promoted at {promoted_at:?}"
    );
    // Open only once the dead master's slots are served again (this test
    // sees the promotion by polling: the hosts may see it a little sooner),
    // and once: no flipping while a shard is down.
    assert!(
        open + Duration::from_millis(200) >= promoted_at,
        "open again at {open:?}, before the replica was promoted at {promoted_at:?}"
    );
    assert_eq!(
        run.reopened, 1,
        "host 0 went from failed to open more than once"
    );
    // The stats name the dead shard while it is down (shard 0's key has
    // the name's own hash tag; the others may be named too while the
    // cluster refuses every command for want of a master for its slots),
    // and none once every shard answers again. A task on one key is never
    // spread: none.
    if shards == 1 {
        assert_eq!(run.shards_down_seen, 0, "a task on one key has no shards");
    } else {
        assert_eq!(run.shards_down_seen & 1, 1, "shard 0 was not reported down");
    }
    assert_eq!(run.stats.shards_down, 0, "a shard still reported down");
}

#[test]
fn shards_need_a_redis_store() {
    let scratch = Scratch::new("shards-embedded");
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    let spread = TaskConfig::new().global_rate(100.0).shards(2);
    let err = table.task("x", &spread).unwrap_err().to_string();
    assert!(err.contains("embedded store"), "{err}");
    let task = table
        .task("x", &TaskConfig::new().global_rate(100.0))
        .unwrap();
    let err = task.update(&spread).unwrap_err().to_string();
    assert!(err.contains("embedded store"), "{err}");
}

/// `rediss+cluster://`: three masters on TLS ports only (their bus over
/// TLS too), their certificate signed by a CA made here. A host that trusts
/// the CA, given one node, discovers the others and pulls a task spread
/// over three shards from all three masters over TLS; one that does not,
/// and the plain form, get a store error.
#[test]
fn a_tls_cluster_url_reaches_every_master_over_tls() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tls = Tls::make();
    let cluster = Redis::new().tls(&tls).cluster(1000, 0);
    assert!(cluster.url().starts_with("rediss+cluster://"));
    let url = format!("rediss+cluster://127.0.0.1:{}", cluster.nodes[0].port);
    let name = HOT.to_string();
    let scratch = Scratch::new("cluster-tls");
    let pull = |table: &str, url: String, trust: bool| {
        let (table, ca, name) = (scratch.path(table), tls.ca.clone(), name.clone());
        run_in_child(Duration::from_secs(30), move || {
            if trust {
                set_env_in_child("SSL_CERT_FILE", &ca);
            }
            let t = Table::open(&table, &ha_options(&url, PROBE)).unwrap();
            // The whole slice released at once: one pull takes each
            // shard's part.
            let config = TaskConfig::new()
                .global_rate(300.0)
                .global_burst(300)
                .shards(3);
            let task = t.task(&name, &config).unwrap();
            match task.pull_quota(300) {
                Ok(granted) => {
                    assert_eq!(granted, Ok(300));
                    0
                }
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::Store, "{e}");
                    raw_eprint(&format!("{url}: {e}"));
                    1
                }
            }
        })
    };
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3);
    let calls = || -> Vec<u64> {
        masters
            .iter()
            .map(|&i| cluster.nodes[i].script_calls())
            .collect()
    };
    let before = calls();
    assert_eq!(pull("t", url.clone(), true), Exit::Code(0));
    let after = calls();
    assert!(
        before.iter().zip(&after).all(|(b, a)| a > b),
        "script calls per master {before:?} -> {after:?}: every master pulled from"
    );
    assert_eq!(pull("untrusted", url.clone(), false), Exit::Code(1));
    let plain = url.replacen("rediss+", "redis+", 1);
    assert_eq!(pull("plain", plain, true), Exit::Code(1));
}
