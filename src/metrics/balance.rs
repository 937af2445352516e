//! The load balancers' families: each backend's picks, outcomes and
//! ejections, and each balancer's retry budget.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Unit;

use super::families::{Labels, counter, gauge};
use crate::view::BalancerSnapshot;

/// Every balancer's backends and retry budget.
pub(super) fn balancers(balancers: &[BalancerSnapshot], e: &mut DescriptorEncoder) -> fmt::Result {
    let rows: Vec<(Labels, &crate::BackendStats)> = balancers
        .iter()
        .flat_map(|b| {
            b.stats.backends.iter().map(|k| {
                let labels = vec![("balancer", b.name.clone()), ("backend", k.address.clone())];
                (labels, k)
            })
        })
        .collect();
    let each = |f: &dyn Fn(&crate::BackendStats) -> f64| -> Vec<(Labels, f64)> {
        rows.iter().map(|(l, k)| (l.clone(), f(k))).collect()
    };
    counter(
        e,
        "flowctrl_backend_picks",
        "Picks of the backend since it joined, host-wide.",
        None,
        rows.iter().map(|(l, k)| (l.clone(), k.picked)).collect(),
    )?;
    gauge(
        e,
        "flowctrl_backend_in_flight",
        "Picks of the backend in flight now, host-wide.",
        None,
        each(&|k| k.in_flight as f64),
    )?;
    gauge(
        e,
        "flowctrl_backend_rtt",
        "The backend's RTT estimate now (peak EWMA, decayed).",
        Some(Unit::Seconds),
        each(&|k| k.rtt.as_secs_f64()),
    )?;
    gauge(
        e,
        "flowctrl_backend_weight",
        "The backend's weight.",
        None,
        each(&|k| k.weight as f64),
    )?;
    gauge(
        e,
        "flowctrl_backend_active",
        "1 while the backend is in the set, 0 once removed (its picks still end).",
        None,
        each(&|k| f64::from(u8::from(k.active))),
    )?;
    gauge(
        e,
        "flowctrl_backend_ejected",
        "1 while the backend is ejected for failing.",
        None,
        each(&|k| f64::from(u8::from(!k.ejected_for.is_zero()))),
    )?;
    gauge(
        e,
        "flowctrl_backend_consecutive_ejections",
        "Ejections of the backend in a row (0 once a success ends the series).",
        None,
        each(&|k| k.ejections as f64),
    )?;
    gauge(
        e,
        "flowctrl_backend_ejections",
        "Deprecated (removed after this version): the old name of \
         flowctrl_backend_consecutive_ejections, a gauge and no count.",
        None,
        each(&|k| k.ejections as f64),
    )?;
    let total = |f: &dyn Fn(&crate::BackendStats) -> u64| -> Vec<(Labels, u64)> {
        rows.iter().map(|(l, k)| (l.clone(), f(k))).collect()
    };
    counter(
        e,
        "flowctrl_backend_successes",
        "Calls to the backend that succeeded since it joined, host-wide.",
        None,
        total(&|k| k.successes),
    )?;
    counter(
        e,
        "flowctrl_backend_failures",
        "Calls to the backend that failed (dropped) since it joined, host-wide.",
        None,
        total(&|k| k.failures),
    )?;
    counter(
        e,
        "flowctrl_backend_ejections_started",
        "Ejections of the backend for failing since it joined, host-wide.",
        None,
        total(&|k| k.ejections_total),
    )?;
    gauge(
        e,
        "flowctrl_backend_recent_successes",
        "Calls to the backend that succeeded in the last 10 s.",
        None,
        each(&|k| k.recent_successes as f64),
    )?;
    gauge(
        e,
        "flowctrl_backend_recent_failures",
        "Calls to the backend that failed in the last 10 s.",
        None,
        each(&|k| k.recent_failures as f64),
    )?;
    let budget = |f: &dyn Fn(&BalancerSnapshot) -> u64| -> Vec<(Labels, u64)> {
        balancers
            .iter()
            .map(|b| (vec![("balancer", b.name.clone())], f(b)))
            .collect()
    };
    gauge(
        e,
        "flowctrl_balancer_recent_picks",
        "Picks the balancer's retry budget counted in the last 10 s.",
        None,
        budget(&|b| b.stats.recent_picks),
    )?;
    gauge(
        e,
        "flowctrl_balancer_recent_retries",
        "Retries the balancer's retry budget allowed in the last 10 s.",
        None,
        budget(&|b| b.stats.recent_retries),
    )
}
