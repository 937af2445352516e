//! `flowctrl keys TASK`: a keyed task's key file in numbers and its
//! hottest (or most refused) keys. Entries hold hashes; names come from
//! the key file's name cache (a key's first 40 bytes, kept when it got
//! its entry and when it was refused): a key whose name is not kept shows
//! as `#` and its hash.

use std::path::Path;

use flowctrl::{KeyInfo, KeyStats, View};
use serde_json::{Value, json};

use crate::{Result, invalid};

pub(crate) fn run(path: &Path, task: &str, top: usize, by: &str, json: bool) -> Result {
    let by_refused = match by {
        "admitted" => false,
        "refused" => true,
        other => {
            return Err(invalid(format!(
                "--by takes admitted or refused, not {other:?}"
            )));
        }
    };
    let view = View::open(path)?.snapshot()?;
    let Some(stats) = view.key_stats(task)? else {
        return Err(invalid(format!("task {task:?} has no key limits")));
    };
    let keys = view.top_keys(task, top, by_refused)?.unwrap_or_default();
    if json {
        let doc = json!({
            "task": task,
            "stats": stats_json(&stats),
            "by": by,
            "keys": keys.iter().map(key_json).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return Ok(());
    }
    println!(
        "task {}: {} keys of {} ({} live); inserted {}, reused {}, overflowed {}, \
         shadow refusals {}, refused by rate {}, by cap {}",
        escaped(task.as_bytes()),
        stats.keys,
        stats.capacity,
        stats.live,
        stats.inserted,
        stats.reused,
        stats.overflowed,
        stats.shadow_refused,
        stats.refused_rate,
        stats.refused_concurrency
    );
    println!(
        "{:<44} {:>12} {:>12} {:>9} {:>5}",
        "key", "admitted", "refused", "in flight", "live"
    );
    for k in &keys {
        println!(
            "{:<44} {:>12} {:>12} {:>9} {:>5}",
            name(k),
            k.admitted,
            k.refused,
            k.in_flight,
            if k.live { "yes" } else { "no" }
        );
    }
    Ok(())
}

/// A key as text: its kept bytes with control characters and non-UTF-8
/// escaped (a key is a caller's: it may hold anything), `…` when cut.
fn name(k: &KeyInfo) -> String {
    match &k.name {
        Some(bytes) => {
            let mut s = escaped(bytes);
            if !k.whole {
                s.push('…');
            }
            s
        }
        None => format!("#{:016x}", k.ident),
    }
}

pub(crate) fn escaped(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .flat_map(char::escape_debug)
        .collect()
}

pub(crate) fn stats_json(s: &KeyStats) -> Value {
    json!({
        "capacity": s.capacity,
        "keys": s.keys,
        "live": s.live,
        "inserted": s.inserted,
        "reused": s.reused,
        "overflowed": s.overflowed,
        "shadow_refused": s.shadow_refused,
        "refused_rate": s.refused_rate,
        "refused_concurrency": s.refused_concurrency,
        "records_full": s.records_full,
        "records_per_process": s.records,
    })
}

fn key_json(k: &KeyInfo) -> Value {
    json!({
        "key": k.name.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()),
        "whole": k.whole,
        "hash": format!("{:016x}", k.ident),
        "admitted": k.admitted,
        "refused": k.refused,
        "in_flight": k.in_flight,
        "live": k.live,
    })
}
