//! `fleet`: a task's live hosts, from the census the pull script keeps in
//! the quota store ([`flowctrl::Store::fleet`]). Reads the store only; no
//! table is opened.

use std::time::Duration;

use flowctrl::{Store, StoreOptions};
use serde_json::json;

use crate::Result;
use crate::show::print_json;
use crate::text::{offset_us, table};

/// An operator's store may be a network away: a second per command and per
/// connection, unless the URL says otherwise (`?timeout_ms=`).
const TIMEOUT: Duration = Duration::from_secs(1);

pub(crate) fn run(url: &str, task: &str, slice_ms: Option<u32>, json: bool) -> Result {
    let options = StoreOptions {
        url: Some(url.to_string()),
        timeout: TIMEOUT,
        connect_timeout: TIMEOUT,
        ..StoreOptions::default()
    };
    let fleet = Store::open(&options)?.fleet(task, slice_ms)?;
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
                })
            })
            .collect();
        return print_json(json!({
            "task": fleet.task,
            "slice_ms": fleet.slice_ms,
            "slice": fleet.slice,
            "quota": fleet.quota,
            "hosts": hosts,
        }));
    }
    println!(
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
            ]
        })
        .collect();
    let header = [
        "HOST", "SLICE", "ASKED", "GRANTED", "CLAIMED", "DEMAND", "OFFSET",
    ];
    print!("{}", table(&header, &rows));
    Ok(())
}
