//! Fuzzing the decoders of what the store answers (`flowctrl::decode`, the
//! code hosts, the manager and `flowctrl fleet` run): census records, task
//! records, the pull script's replies and the manager's change log, from
//! `tests/fuzz/corpus/store/` mutated (`fuzz/text.rs`). Whoever can write
//! the store writes these: none may panic, and what one accepts must be
//! what flowctrl could have written: a host id a host can have, settings a
//! config file could set, a slicing in range, a grant no larger than the
//! ask (a redeem's lost grant: a slice's quota more), a finite threshold.
//! A seeded loop, 8,000 cases by default (a few seconds);
//! `FLOWCTRL_FUZZ_CASES`, `FLOWCTRL_FUZZ_MINUTES`, `FLOWCTRL_FUZZ_SEED`.

mod common;
#[path = "fuzz/text.rs"]
mod text;

use common::Rng;
use flowctrl::decode;

fn census(rng: &mut Rng, line: &str, hosts: &mut Vec<flowctrl::HostRecord>) {
    let (host, value) = line.split_once('\t').unwrap_or((line, ""));
    let Some(r) = decode::host_record(host, rng.below(8), value) else {
        return;
    };
    assert!(
        !r.host.is_empty()
            && r.host.len() <= 63
            && !r
                .host
                .chars()
                .any(|c| c.is_control() || c.is_whitespace() || c == '{' || c == '}'),
        "host id {:?} accepted",
        r.host
    );
    decode::merge_record(hosts, r);
    if hosts.len() > 64 {
        hosts.clear();
    }
}

fn record(line: &str) {
    let fields: Vec<(String, String)> = line
        .split(';')
        .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let Ok(c) = decode::stored_config(&fields) {
        let s = c.settings;
        assert!((1..=(1u64 << 53) - 1).contains(&c.version), "{line:?}");
        assert!(
            s.global_rate.is_finite() && s.global_rate > 0.0,
            "{line:?}: {s:?}"
        );
        assert!((100..=60_000).contains(&s.slice_ms), "{line:?}: {s:?}");
        assert!((1..=6).contains(&s.shards), "{line:?}: {s:?}");
    }
}

fn reply(line: &str) {
    let n: Vec<i64> = line
        .split_whitespace()
        .map(|w| {
            // A word that is no i64: one of the extremes.
            w.parse::<i64>()
                .unwrap_or(if w.len() % 2 == 0 { i64::MAX } else { i64::MIN })
        })
        .collect();
    let at = |i: usize| n.get(i).copied().unwrap_or(0);
    let (want, quota, redeem) = (
        at(0).clamp(0, 1 << 32) as u64,
        at(1).clamp(1, 1 << 32) as u64,
        at(2) == 1,
    );
    let mut r = [0i64; 10];
    for (i, v) in r.iter_mut().enumerate() {
        *v = at(3 + i);
    }
    if let Ok((granted, _left, slicing, version)) = decode::pull_reply_of(want, quota, redeem, r) {
        let bound = want + if redeem { quota } else { 0 };
        assert!(granted <= bound, "{line:?}: granted {granted}");
        if let Some(ms) = slicing {
            assert!((100..=60_000).contains(&ms), "{line:?}: slicing {ms}");
        }
        if let Some(v) = version {
            assert!(v < 1 << 53, "{line:?}: version {v}");
        }
    }
}

fn decision(line: &str) {
    if let Some(d) = decode::decision(line) {
        assert!(d.threshold.is_finite() && d.threshold > 0.0, "{line:?}");
        assert!(!d.manager.chars().any(char::is_control), "{line:?}");
        assert!(!d.reason.chars().any(char::is_control), "{line:?}");
    }
}

#[test]
fn fuzz_the_store_reply_decoders() {
    let kinds = ["census", "record", "reply", "decision"];
    // Splices come from every kind's lines.
    let all = text::corpus("store", true);
    // Each kind's own file, by name.
    let own = |kind: &str| -> Vec<Vec<u8>> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fuzz/corpus/store")
            .join(format!("{kind}.txt"));
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| l.as_bytes().to_vec())
            .collect()
    };
    let own = kinds.map(own);
    let mut run = text::Run::new(8_000);
    let mut rng = Rng::new(run.seed);
    let mut hosts = Vec::new();
    while run.more() {
        let k = rng.below(kinds.len() as u64) as usize;
        let entry = rng.pick(&own[k]).clone();
        let input = text::mutate(&mut rng, &entry, &all);
        let line = String::from_utf8_lossy(&input);
        match kinds[k] {
            "census" => census(&mut rng, &line, &mut hosts),
            "record" => record(&line),
            "reply" => reply(&line),
            _ => decision(&line),
        }
    }
    eprintln!(
        "fuzz (store): FLOWCTRL_FUZZ_SEED={} cases {}",
        run.seed, run.done
    );
}
