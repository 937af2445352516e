//! The global quota through a Sentinel failover: a real master, its replica
//! and three sentinels on loopback; the master SIGKILLed mid-run under two
//! hosts × three processes at saturating demand. No caller sees an error,
//! every full slice admits within [0.98, 1.01] × the quota, the failover's
//! own included, and the hosts are open again within the sentinels'
//! failover time plus one probe interval.

mod common;

use std::time::{Duration, Instant};

use common::hosts::{self, TASK};
use common::redis::{Redis, Sentinels};
use common::tls::Tls;
use common::*;
use flowctrl::{ErrorKind, Store, StoreOptions, Table, TaskConfig};

const RATE: f64 = 2000.0;
const PROBE: Duration = Duration::from_millis(500);

#[test]
fn a_sentinel_failover_keeps_every_slice_exact() {
    let mut ha = Sentinels::start(1000);
    let scratch = Scratch::new("sentinel");
    let url = ha.url();
    let opts = ha_options(&url, PROBE);
    let old_master = ha.master.port;
    let mut failover = None;
    let run = hosts::run(
        &scratch,
        &opts,
        (2, 3),
        (TASK, TaskConfig::new().global_rate(RATE)),
        11.0,
        |start| {
            sleep_until(start + Duration::from_millis(2300));
            let killed = Instant::now();
            let pid = ha.master.pid().unwrap();
            // SAFETY: SIGKILL to our own child, by its pid.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            while ha.named_master() == Some(old_master) {
                assert!(
                    killed.elapsed() < Duration::from_secs(20),
                    "no failover: {}",
                    ha.state()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            failover = Some((monotonic() - start, killed.elapsed()));
        },
    );
    ha.master.kill(); // reaps it
    let (promoted_at, failover) = failover.unwrap();
    let state = ha.state();
    eprintln!(
        "per slice: {:?}; per host {:?}; errors {}, slowest acquire {:?}; host 0: {:?}",
        run.per_slice, run.per_host, run.errors, run.slowest, run.all_stats
    );
    eprintln!(
        "killed at 2.3 s; sentinels named the replica after {failover:?} (at {promoted_at:?}); \
         host 0 failed at {:?}, open again at {:?} (probe interval {PROBE:?}); {state}",
        run.failed_at, run.open_again_at
    );
    assert_eq!(ha.named_master(), Some(ha.replica.port));
    assert_eq!(run.errors, 0, "no caller sees an error");
    hosts::assert_slices_exact(&run, RATE);
    let (failed, open) = (run.failed_at.unwrap(), run.open_again_at.unwrap());
    assert!(
        failed >= Duration::from_millis(2300),
        "failed at {failed:?}"
    );
    assert!(
        open <= promoted_at + PROBE.mul_f64(1.2) + Duration::from_millis(100),
        "open again at {open:?}, the replica promoted at {promoted_at:?}"
    );
    // The fleet's census reads through the sentinels too.
    let store = Store::open(&StoreOptions {
        url: Some(url),
        timeout: Duration::from_millis(500),
        ..StoreOptions::default()
    })
    .unwrap();
    let fleet = store.fleet(TASK, None).unwrap();
    assert_eq!(fleet.hosts.len(), 2, "{fleet:?}");
}

/// A sentinel that still names a dead master (it has not heard of the
/// failover) is passed over: the next sentinel of the URL names the live
/// one, and the pull goes there.
#[test]
fn a_sentinel_naming_a_dead_master_is_passed_over() {
    let ha = Sentinels::start(1000);
    let scratch = Scratch::new("sentinel-stale");
    let stale = Sentinels::stale_sentinel(&scratch);
    let url = ha.url().replacen(
        "sentinel://",
        &format!("sentinel://127.0.0.1:{},", stale.port),
        1,
    );
    let table = Table::open(scratch.path("t"), &ha_options(&url, PROBE)).unwrap();
    let task = table
        .task("stale", &TaskConfig::new().global_rate(100.0))
        .unwrap();
    assert_eq!(task.pull_quota(10).unwrap(), Ok(10), "through {url}");
}

/// `rediss+sentinel://`: the sentinels and the master on TLS ports only,
/// their certificate signed by a CA made here. A host that trusts the CA
/// pulls through the sentinels from the master; one that does not, and the
/// plain form, get a store error.
#[test]
fn a_tls_sentinel_url_reaches_the_master_over_tls() {
    let tls = Tls::make();
    let ha = Redis::new().tls(&tls).sentinels(1000);
    let url = ha.url();
    assert!(url.starts_with("rediss+sentinel://"), "{url}");
    let scratch = Scratch::new("sentinel-tls");
    let pull = |name: &str, url: String, trust: bool| {
        let (table, ca) = (scratch.path(name), tls.ca.clone());
        run_in_child(Duration::from_secs(30), move || {
            if trust {
                set_env_in_child("SSL_CERT_FILE", &ca);
            }
            let t = Table::open(&table, &ha_options(&url, PROBE)).unwrap();
            let task = t
                .task("tls", &TaskConfig::new().global_rate(100.0))
                .unwrap();
            match task.pull_quota(10) {
                Ok(granted) => {
                    assert_eq!(granted, Ok(10));
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
    assert_eq!(pull("t", url.clone(), true), Exit::Code(0));
    assert_eq!(pull("untrusted", url.clone(), false), Exit::Code(1));
    let plain = url.replacen("rediss+", "redis+", 1);
    assert_eq!(pull("plain", plain, true), Exit::Code(1));
    let keys: Vec<String> = ha.master.command(&["KEYS", "*{tls}*"]);
    assert!(!keys.is_empty(), "the master holds the task's key");
}
