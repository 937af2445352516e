//! `flowctrl keys TASK`: a keyed task's key file in numbers and its
//! hottest (or most refused) keys. Entries hold hashes; names come from
//! the key file's name cache (a key's first 40 bytes, kept when it got
//! its entry and when it was refused): a key whose name is not kept shows
//! as `#` and its hash. A key's global rate is its override's, else the
//! task's: listed in a column of its own when any key has one.

use std::path::Path;

use flowctrl::{KeyGlobal, KeyInfo, KeyStats, View};
use serde_json::{Value, json};

use crate::{Result, invalid, usage};

pub(crate) fn run(path: &Path, task: &str, top: usize, by: &str, json: bool) -> Result {
    let by_refused = match by {
        "admitted" => false,
        "refused" => true,
        // A word of the command line, refused before the table is read.
        other => {
            return Err(usage(format!(
                "--by takes admitted or refused, not {other:?}"
            )));
        }
    };
    let view = View::open(path)?.snapshot()?;
    let Some(stats) = view.key_stats(task)? else {
        return Err(invalid(format!("task {task:?} has no key limits")));
    };
    let keys = view.top_keys(task, top, by_refused)?.unwrap_or_default();
    let default = view.key_config(task)?.unwrap_or_default().limits;
    let overrides = view.key_overrides(task)?.unwrap_or_default();
    // A key's limits: its override's, else the task's.
    let limits_of = |k: &KeyInfo| {
        overrides
            .iter()
            .find(|(ident, _)| *ident == k.ident)
            .map_or((default, false), |(_, l)| (*l, true))
    };
    let any_global = default.global.is_some() || overrides.iter().any(|(_, l)| l.global.is_some());
    if json {
        let doc = json!({
            "task": task,
            "stats": stats_json(&stats),
            "global": global_json(default.global),
            "by": by,
            "keys": keys
                .iter()
                .map(|k| {
                    let (limits, overridden) = limits_of(k);
                    let mut v = key_json(k);
                    v["overridden"] = overridden.into();
                    v["global"] = global_json(limits.global);
                    v["global_now"] = k.global.map_or(Value::Null, |g| {
                        json!({
                            "slice": g.slice,
                            "hot": g.hot,
                            "asked": g.asked,
                            "local": g.local,
                            "held": g.held,
                            "spent": g.spent,
                            "waiting": g.waiting,
                            "fallback": g.fallback,
                        })
                    });
                    v
                })
                .collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return Ok(());
    }
    println!(
        "task {}: {} keys of {} ({} live); inserted {}, reused {}, overflowed {}, \
         shadow refusals {}, refused by rate {}, by cap {}, by global rate {}",
        escaped(task.as_bytes()),
        stats.keys,
        stats.capacity,
        stats.live,
        stats.inserted,
        stats.reused,
        stats.overflowed,
        stats.shadow_refused,
        stats.refused_rate,
        stats.refused_concurrency,
        stats.refused_global
    );
    if any_global {
        println!(
            "key_global {} for every key without an override",
            crate::set_keys::global_text(default.global)
        );
    }
    if stats.record != 0 {
        println!(
            "key_global rates from the store's record, version {}",
            stats.record
        );
    }
    if stats.record_refused > stats.record {
        println!(
            "the store's record version {} was refused (see the log): the host keeps its own",
            stats.record_refused
        );
    }
    let global_column = |g: Option<KeyGlobal>| {
        if any_global {
            format!("  {}", crate::set_keys::global_text(g))
        } else {
            String::new()
        }
    };
    println!(
        "{:<44} {:>12} {:>12} {:>9} {:>5}{}",
        "key",
        "admitted",
        "refused",
        "in flight",
        "live",
        if any_global {
            "  global (rate; on this host now)"
        } else {
            ""
        }
    );
    for k in &keys {
        println!(
            "{:<44} {:>12} {:>12} {:>9} {:>5}{}",
            name(k),
            k.admitted,
            k.refused,
            k.in_flight,
            if k.live { "yes" } else { "no" },
            if any_global {
                global_column(limits_of(k).0.global) + &now_column(k)
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// A key's global rate on this host now: `on host` (within its
/// allowance), or `hot` with its chunk, and `spent`, `waiting` or
/// `fallback`; in the last slice it was asked in (low 24 bits of its id).
fn now_column(k: &KeyInfo) -> String {
    let Some(g) = k.global else {
        return String::new();
    };
    let mut s = if g.hot {
        format!("; hot, held {}", g.held)
    } else {
        format!("; on host, {} own", g.local)
    };
    for (on, word) in [
        (g.spent, "spent"),
        (g.waiting, "waiting"),
        (g.fallback, "fallback"),
    ] {
        if on {
            s += ", ";
            s += word;
        }
    }
    s + &format!(" (slice {}, asked {})", g.slice, g.asked)
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
        "refused_global": s.refused_global,
        "records_full": s.records_full,
        "records_per_process": s.records,
        "record": s.record,
        "record_refused": s.record_refused,
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

/// A global rate as the key file holds it (`null`: none): its rate as
/// read back (the slice's permits × period / slice), period and slice in
/// ms, permits a slice, the allowance a host passes on its own, fallback.
pub(crate) fn global_json(g: Option<KeyGlobal>) -> Value {
    match g {
        None => Value::Null,
        Some(g) => json!({
            "rate": g.rate.to_string(),
            "count": g.rate.count,
            "period_ms": g.rate.period.as_millis() as u64,
            "slice_ms": g.slice_in_force().as_millis() as u64,
            "permits_per_slice": g.permits(),
            "local": g.local,
            "fallback": g.fallback.to_string(),
        }),
    }
}
