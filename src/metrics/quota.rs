//! The global quota's metric families: one sample per task that has a
//! global rate.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Unit;

use super::families::{Labels, counter, gauge, seconds, task, with};
use crate::quota::QuotaState;
use crate::view::TaskSnapshot;

/// The global quota of the tasks that have a global rate.
pub(super) fn quota(tasks: &[TaskSnapshot], e: &mut DescriptorEncoder) -> fmt::Result {
    let global: Vec<_> = tasks.iter().filter(|t| t.quota.state.is_some()).collect();
    let each = |f: &dyn Fn(&TaskSnapshot) -> u64| -> Vec<(Labels, u64)> {
        global.iter().map(|t| (task(t), f(t))).collect()
    };
    let mut states = Vec::new();
    let mut times = Vec::new();
    for t in &global {
        for (name, state, ms) in [
            ("open", QuotaState::Open, t.quota.open_ms),
            ("limited", QuotaState::Limited, t.quota.limited_ms),
            ("failed", QuotaState::Failed, t.quota.failed_ms),
        ] {
            let on = u64::from(t.quota.state == Some(state));
            states.push((with(task(t), "state", name), on));
            times.push((with(task(t), "state", name), ms as f64 / 1e3));
        }
    }
    gauge(
        e,
        "flowctrl_quota_state",
        "1 for the state the task's global quota is in on this host (open, limited: \
         the slice is used up, failed: the store fails), 0 for the others.",
        None,
        states,
    )?;
    counter(
        e,
        "flowctrl_quota_state_time",
        "Time the task's global quota spent in each state.",
        Some(Unit::Seconds),
        times,
    )?;
    counter(
        e,
        "flowctrl_quota_pulls",
        "Round trips to the quota store, failed ones included.",
        None,
        each(&|t| t.quota.pulls),
    )?;
    counter(
        e,
        "flowctrl_quota_failed_pulls",
        "Round trips to the quota store that failed or timed out.",
        None,
        each(&|t| t.quota.failed_pulls),
    )?;
    counter(
        e,
        "flowctrl_quota_pull_time",
        "Time spent pulling from the store, summed.",
        Some(Unit::Seconds),
        global
            .iter()
            .map(|t| (task(t), seconds(t.quota.pull_ns_sum)))
            .collect(),
    )?;
    gauge(
        e,
        "flowctrl_quota_pull_time_max",
        "The longest pull.",
        Some(Unit::Seconds),
        global
            .iter()
            .map(|t| (task(t), seconds(t.quota.pull_ns_max)))
            .collect(),
    )?;
    counter(
        e,
        "flowctrl_quota_granted",
        "Permits the store granted this host.",
        None,
        each(&|t| t.quota.granted),
    )?;
    counter(
        e,
        "flowctrl_quota_reserved",
        "Permits the store granted ahead of the slice's release, spendable after a wait.",
        None,
        each(&|t| t.quota.reserved),
    )?;
    counter(
        e,
        "flowctrl_quota_returned",
        "Permits given back to the store while this host was idle.",
        None,
        each(&|t| t.quota.returned),
    )?;
    counter(
        e,
        "flowctrl_quota_stranded",
        "Permits pulled but left unspent when their slice ended.",
        None,
        each(&|t| t.quota.stranded),
    )?;
    gauge(
        e,
        "flowctrl_quota_clock_offset",
        "The store's clock minus this host's, as last measured.",
        Some(Unit::Seconds),
        global
            .iter()
            .map(|t| (task(t), t.quota.clock_offset_us as f64 / 1e6))
            .collect(),
    )?;
    gauge(
        e,
        "flowctrl_quota_hosts",
        "Hosts the store counted in the task's slice at the last pull.",
        None,
        each(&|t| t.quota.hosts_seen),
    )?;
    counter(
        e,
        "flowctrl_quota_host_conflicts",
        "Pulls that found another table pulling under this host's id.",
        None,
        each(&|t| t.quota.host_conflicts),
    )?;
    counter(
        e,
        "flowctrl_quota_config_conflicts",
        "Pulls from a slice created with another threshold than this host's.",
        None,
        each(&|t| t.quota.config_conflicts),
    )?;
    counter(
        e,
        "flowctrl_quota_keys_created",
        "Slice keys this host's pulls created in the store (none while a manager writes them ahead).",
        None,
        each(&|t| t.quota.keys_created),
    )?;
    gauge(
        e,
        "flowctrl_quota_shards_down",
        "Shards of a task spread over several whose node this host last found down.",
        None,
        each(&|t| t.quota.shards_down.count_ones() as u64),
    )
}
