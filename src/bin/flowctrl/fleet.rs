//! `fleet`: a task's live hosts, from the census the pull script keeps in
//! the quota store ([`flowctrl::Store::fleet`]). Reads the store only; no
//! table is opened.

use std::fmt::Write;
use std::time::Duration;

use flowctrl::manage::{HOT_KEYS, fleet_alarms};
use flowctrl::{HotKeys, Store, StoreOptions};
use serde_json::json;

use crate::Result;
use crate::json::print_json;
use crate::keys::escaped;
use crate::text::{offset_us, table};

/// An operator's store may be a network away: a second per command and per
/// connection, unless the URL says otherwise (`?timeout_ms=`).
const TIMEOUT: Duration = Duration::from_secs(1);

/// The skew beyond which a host's clock is an alarm (the manager's default).
const SKEW: Duration = Duration::from_millis(50);

pub(crate) fn run(url: &str, task: &str, slice_ms: Option<u32>, json: bool) -> Result {
    let options = StoreOptions {
        url: Some(url.to_string()),
        timeout: TIMEOUT,
        connect_timeout: TIMEOUT,
        ..StoreOptions::default()
    };
    let store = Store::open(&options)?;
    let fleet = store.fleet(task, slice_ms)?;
    let decisions = store.decisions(task)?;
    let alarms = fleet_alarms(&fleet, SKEW);
    let hot = hot_keys(&store, task, slice_ms)?;
    if json {
        let hosts: Vec<_> = fleet
            .hosts
            .iter()
            .map(|h| {
                json!({
                    "host": h.host,
                    "slice": h.slice,
                    "asked": h.asked,
                    "granted": h.granted,
                    "claimed": h.claimed,
                    "demand": h.demand,
                    "offset_us": h.offset_us,
                    "success": h.health.success,
                    "dropped": h.health.dropped,
                    "mean_us": h.health.mean_us,
                    "p99_us": h.health.p99_us,
                    "own_quota": h.own_quota,
                })
            })
            .collect();
        return print_json(json!({
            "task": fleet.task,
            "slice_ms": fleet.slice_ms,
            "slice": fleet.slice,
            "quota": fleet.quota,
            "hosts": hosts,
            "alarms": alarms.iter().map(|a| json!({"kind": a.kind(), "text": a.to_string()})).collect::<Vec<_>>(),
            "decisions": decisions.iter().map(|d| json!({
                "threshold": d.threshold,
                "reason": d.reason,
                "at_ms": d.at_ms,
                "manager": d.manager,
            })).collect::<Vec<_>>(),
            "hot_keys": hot.as_ref().map(|hot| json!({
                "slice_ms": hot.slice_ms,
                "slice": hot.slice,
                "keys": hot.keys,
                "top": hot.top.iter().map(|k| json!({
                    "key": k.name.as_ref().map(|n| String::from_utf8_lossy(n).into_owned()),
                    "id": format!("{:016x}", k.id),
                    "given": k.given,
                    "asks": k.asks,
                })).collect::<Vec<_>>(),
            })),
        }));
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "task {}: slice {} of {} ms, quota {} per slice, {} live host(s)",
        fleet.task,
        fleet.slice,
        fleet.slice_ms,
        fleet.quota.map_or("-".to_string(), |q| q.to_string()),
        fleet.hosts.len()
    );
    let rows: Vec<Vec<String>> = fleet
        .hosts
        .iter()
        .map(|h| {
            vec![
                h.host.clone(),
                h.slice.to_string(),
                h.asked.to_string(),
                h.granted.to_string(),
                h.claimed.to_string(),
                h.demand.to_string(),
                offset_us(h.offset_us),
                format!("{}/{}", h.health.success, h.health.dropped),
                match h.health.p99_us {
                    0 => "-".to_string(),
                    us => format!("{:.1}ms", us as f64 / 1000.0),
                },
            ]
        })
        .collect();
    let header = [
        "HOST", "SLICE", "ASKED", "GRANTED", "CLAIMED", "DEMAND", "OFFSET", "OK/DROP", "P99",
    ];
    out.push_str(&table(&header, &rows));
    for alarm in &alarms {
        let _ = writeln!(out, "alarm: {alarm}");
    }
    if let Some(last) = decisions.first() {
        let _ = writeln!(
            out,
            "threshold {:.1}/s by manager {} ({}); {} change(s) logged",
            last.threshold,
            last.manager,
            last.reason,
            decisions.len()
        );
        for d in decisions.iter().take(5) {
            let _ = writeln!(
                out,
                "  at {} ms: {:.1}/s, {}",
                d.at_ms, d.threshold, d.reason
            );
        }
    }
    match &hot {
        None => {
            let _ = writeln!(
                out,
                "keys' global rates: hot keys not read: no keys' record names their slice, \
                 and {} ms is not a key's (10 ms to a day)",
                fleet.slice_ms
            );
        }
        Some(hot) if hot.keys > 0 => {
            let _ = writeln!(
                out,
                "keys' global rates: {} key(s) pulled in slice {} of {} ms; given most:",
                hot.keys, hot.slice, hot.slice_ms
            );
            let rows: Vec<Vec<String>> = hot
                .top
                .iter()
                .map(|k| {
                    vec![
                        k.name
                            .as_ref()
                            .map_or(format!("#{:016x}", k.id), |n| escaped(n)),
                        k.given.to_string(),
                        k.asks.to_string(),
                    ]
                })
                .collect();
            out.push_str(&table(&["KEY", "GIVEN", "ASKS"], &rows));
        }
        Some(_) => {}
    }
    crate::text::print(&out);
    Ok(())
}

/// The slices a key's global rate can have, in ms (10 ms to a day): the
/// only slices the store counts keys in, and the range
/// [`Store::hot_keys`] takes.
const KEY_SLICE_MS: std::ops::RangeInclusive<u32> = 10..=86_400_000;

/// The task's hot keys in the store's current slice of its keys' global
/// rate: the record's default slice, else `slice_ms`, else 1 s. `None`
/// (nothing asked) when that is `slice_ms` and outside a key's slices: the
/// task's own slices (`--slice-ms 5`) need not be one, and no key is
/// counted in them.
fn hot_keys(store: &Store, task: &str, slice_ms: Option<u32>) -> Result<Option<HotKeys>> {
    let record_slice = store
        .key_record(task)
        .ok()
        .flatten()
        .and_then(|(_, r)| r.default.map(|g| g.slice_in_force().as_millis() as u32));
    let slice_ms = record_slice.or(slice_ms).unwrap_or(1000);
    if !KEY_SLICE_MS.contains(&slice_ms) {
        return Ok(None);
    }
    Ok(Some(store.hot_keys(task, slice_ms, HOT_KEYS)?))
}
