//! A manager's exposition (`flowctrl manage --metrics ADDR`): its lease,
//! its writes, each managed task's threshold and changes, and the fleet as
//! it last judged it (hosts, admitted, health, clock offsets, alarms).

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::{Registry, Unit};

use super::families::{Labels, build_info, counter, gauge};
use crate::manage::ManagerReport;

/// The exposition of `report`.
pub fn render_manager(report: &ManagerReport) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Report(report.clone())));
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
        .expect("encoding into a String cannot fail");
    out
}

#[derive(Debug)]
struct Report(ManagerReport);

impl Collector for Report {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        let r = &self.0;
        let one = |v: u64| vec![(Labels::new(), v)];
        build_info(&mut e, None)?;
        gauge(
            &mut e,
            "flowctrl_manager_active",
            "1 while this instance holds the lease.",
            None,
            one(r.active as u64),
        )?;
        gauge(
            &mut e,
            "flowctrl_manager_token",
            "The fencing token of the lease this instance holds (0: none).",
            None,
            one(r.token),
        )?;
        counter(
            &mut e,
            "flowctrl_manager_acquisitions",
            "Times this instance took the lease.",
            None,
            one(r.acquisitions),
        )?;
        counter(
            &mut e,
            "flowctrl_manager_step_downs",
            "Times this instance lost the lease or was fenced out.",
            None,
            one(r.step_downs),
        )?;
        counter(
            &mut e,
            "flowctrl_manager_writes",
            "Task writes the store accepted.",
            None,
            one(r.writes),
        )?;
        counter(
            &mut e,
            "flowctrl_manager_writes_fenced",
            "Task writes the store refused for an older token.",
            None,
            one(r.writes_fenced),
        )?;
        counter(
            &mut e,
            "flowctrl_manager_key_records_written",
            "Keyed tasks' records of their keys' global rates written (on a change, or \
             to a store that lost one).",
            None,
            one(r.key_records_written),
        )?;
        counter(
            &mut e,
            "flowctrl_manager_keys_written",
            "Slice keys written ahead.",
            None,
            one(r.keys_written),
        )?;
        counter(
            &mut e,
            "flowctrl_manager_slices_late",
            "Slices that had begun before their key was written.",
            None,
            one(r.slices_late),
        )?;
        counter(
            &mut e,
            "flowctrl_manager_store_errors",
            "Reads and writes the store did not answer.",
            None,
            one(r.store_errors),
        )?;
        gauge(
            &mut e,
            "flowctrl_manager_tick",
            "The last step's duration.",
            Some(Unit::Seconds),
            vec![(Labels::new(), r.tick_seconds_last)],
        )?;
        let alarms = r
            .alarms
            .iter()
            .map(|(k, v)| (vec![("kind", k.to_string())], *v))
            .collect();
        counter(
            &mut e,
            "flowctrl_manager_alarms",
            "Alarms raised, by kind (skew, configs, silent).",
            None,
            alarms,
        )?;
        let task = |name: &str| vec![("task", name.to_string())];
        let per = |f: &dyn Fn(&crate::manage::TaskReport) -> f64| {
            r.tasks
                .iter()
                .map(|(n, t)| (task(n), f(t)))
                .collect::<Vec<_>>()
        };
        gauge(
            &mut e,
            "flowctrl_manager_threshold",
            "The task's threshold in force, requests/s.",
            None,
            per(&|t| t.threshold),
        )?;
        let changes = r
            .tasks
            .iter()
            .flat_map(|(n, t)| {
                t.changes
                    .iter()
                    .map(move |(why, c)| (vec![("task", n.clone()), ("reason", why.clone())], *c))
            })
            .collect();
        counter(
            &mut e,
            "flowctrl_manager_threshold_changes",
            "Threshold changes, by reason.",
            None,
            changes,
        )?;
        gauge(
            &mut e,
            "flowctrl_fleet_hosts",
            "Hosts that pulled in the last judged slice.",
            None,
            per(&|t| t.hosts as f64),
        )?;
        gauge(
            &mut e,
            "flowctrl_fleet_admitted",
            "Requests/s the fleet admitted in the last judged slice.",
            None,
            per(&|t| t.admitted),
        )?;
        gauge(
            &mut e,
            "flowctrl_fleet_released_success",
            "Permits released as success in the last judged slice.",
            None,
            per(&|t| t.success as f64),
        )?;
        gauge(
            &mut e,
            "flowctrl_fleet_released_dropped",
            "Permits released as dropped in the last judged slice.",
            None,
            per(&|t| t.dropped as f64),
        )?;
        gauge(
            &mut e,
            "flowctrl_fleet_rtt_p99",
            "The highest of the hosts' p99 round-trip times in the last judged slice.",
            Some(Unit::Seconds),
            per(&|t| t.p99_us as f64 / 1e6),
        )?;
        let offsets = r
            .tasks
            .iter()
            .flat_map(|(n, t)| {
                t.offsets_us.iter().map(move |(h, us)| {
                    (
                        vec![("task", n.clone()), ("host", h.clone())],
                        *us as f64 / 1e6,
                    )
                })
            })
            .collect();
        gauge(
            &mut e,
            "flowctrl_fleet_host_clock_offset",
            "Each host's clock offset to the store's.",
            Some(Unit::Seconds),
            offsets,
        )?;
        gauge(
            &mut e,
            "flowctrl_fleet_pulled_keys",
            "Keys of a keyed task some host pulled chunks of in the last slice of their \
             global rate.",
            None,
            r.hot_keys.iter().map(|(n, h)| (task(n), h.keys)).collect(),
        )?;
        let hot = r
            .hot_keys
            .iter()
            .flat_map(|(n, h)| {
                h.top.iter().map(move |k| {
                    let key = match &k.name {
                        Some(name) => String::from_utf8_lossy(name).into_owned(),
                        None => format!("#{:016x}", k.id),
                    };
                    (vec![("task", n.clone()), ("key", key)], k.given)
                })
            })
            .collect();
        gauge(
            &mut e,
            "flowctrl_fleet_hot_key_given",
            "What the last slice gave fleet-wide of a keyed task's hot keys (the ten \
             given most; a key a host never named is #<its store id>).",
            None,
            hot,
        )
    }
}
