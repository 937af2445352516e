//! What a run comes to, against the budgets of the simulation.

use std::fmt::Write;

use crate::scenario::{Demand, Run, Scenario};

/// Admitted over quota in every full slice: within these.
pub const ADMITTED: (f64, f64) = (0.98, 1.01);
/// Store round trips per admitted request.
pub const OPS_PER_ADMITTED: f64 = 0.01;
/// Quota granted and left unspent, over the quota.
pub const STRANDED: f64 = 0.02;
/// Under a moving threshold ([`Demand::Moving`]), the host furthest under
/// its max-min fair share gets at least this much of it in every slice:
/// equal hosts stay equal while the threshold moves.
pub const WORST_WHILE_MOVING: f64 = 0.9;

/// Budgets the simulation shows missed in tests/budgets.rs's runs (1,000
/// hosts, three full slices), with why (see benches/GLOBAL.md, "The
/// simulation", and benches/SIMULATION.md): (scenario, the start of the
/// miss line). The test holds every other budget, and fails when one of
/// these starts to hold, so the list is kept true. None now.
pub const KNOWN_MISSES: &[(&str, &str)] = &[];

/// The scenarios of the report: five shapes of demand at `hosts` hosts, and
/// the seed's deployment (30 hosts × 50 processes). All at 500 k/s.
pub fn scenarios(hosts: usize, slices: u32, overload: f64) -> Vec<Scenario> {
    let at = |name: &str, hosts: usize, processes: u32, demand: Demand| Scenario {
        name: name.into(),
        hosts,
        processes,
        demand,
        rate: 500_000.0,
        overload,
        slice_ms: 1000,
        slices,
        seed: 0x5eed,
    };
    vec![
        at("uniform", hosts, 1, Demand::Uniform),
        at("zipf", hosts, 1, Demand::Zipf),
        at("bursty", hosts, 1, Demand::Bursty),
        at("churn", hosts, 1, Demand::Churn),
        at("skewed", hosts, 1, Demand::Skewed),
        at("moving", hosts, 1, Demand::Moving),
        at("seed", 30, 50, Demand::Uniform),
    ]
}

/// Scenarios run by name only (`--only`), outside the budgets: two hosts
/// offering 300/s each under a threshold of 600/s that moves down to half
/// of it and back (a rate whose chunks are a few permits: its store
/// operations per admission are not the budget's fleet); and two hosts of
/// three processes asking three times a task of 10,000/s (the Redis
/// commands benchmark's fleet, whose pulls `FLOWCTRL_SIM_TRACE` shows).
pub fn extras(slices: u32) -> Vec<Scenario> {
    vec![
        Scenario {
            name: "moving-2".into(),
            hosts: 2,
            processes: 1,
            demand: Demand::Moving,
            rate: 600.0,
            overload: 1.0,
            slice_ms: 1000,
            slices,
            seed: 0x5eed,
        },
        Scenario {
            name: "saturated-2".into(),
            hosts: 2,
            processes: 3,
            demand: Demand::Uniform,
            rate: 10_000.0,
            overload: 3.0,
            slice_ms: 1000,
            slices,
            seed: 0x5eed,
        },
    ]
}

/// A run's figures over its full slices.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Admitted over quota: min, median, max.
    pub admitted: (f64, f64, f64),
    pub cold_admitted: f64,
    /// Stranded over quota, all full slices together, and the worst slice.
    pub stranded: f64,
    pub stranded_max: f64,
    pub ops_per_admitted: f64,
    /// The smallest host's admitted over its fair share: min and median.
    pub smallest: (f64, f64),
    /// The host furthest under its fair share, over all slices.
    pub worst: f64,
    pub asked_over_quota: f64,
    pub moving: bool,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

impl Summary {
    pub fn of(run: &Run) -> Self {
        let s = &run.slices;
        let ratio =
            |f: &dyn Fn(&crate::scenario::Slice) -> f64| -> Vec<f64> { s.iter().map(f).collect() };
        let mut admitted = ratio(&|x| x.admitted as f64 / x.quota as f64);
        let mut smallest = ratio(&|x| x.smallest_share);
        let quota: u64 = s.iter().map(|x| x.quota).sum();
        let sum = |f: &dyn Fn(&crate::scenario::Slice) -> u64| -> f64 {
            s.iter().map(f).sum::<u64>() as f64
        };
        Self {
            admitted: (
                admitted.iter().copied().fold(f64::INFINITY, f64::min),
                median(&mut admitted),
                admitted.iter().copied().fold(0.0, f64::max),
            ),
            cold_admitted: run.cold.admitted as f64 / run.cold.quota as f64,
            stranded: sum(&|x| x.stranded) / quota as f64,
            stranded_max: ratio(&|x| x.stranded as f64 / x.quota as f64)
                .into_iter()
                .fold(0.0, f64::max),
            ops_per_admitted: sum(&|x| x.ops) / sum(&|x| x.admitted).max(1.0),
            smallest: (
                smallest.iter().copied().fold(f64::INFINITY, f64::min),
                median(&mut smallest),
            ),
            worst: s
                .iter()
                .map(|x| x.worst_share)
                .fold(f64::INFINITY, f64::min),
            asked_over_quota: sum(&|x| x.asked) / quota as f64,
            moving: run.scenario.demand == Demand::Moving,
        }
    }

    /// The budgets this run misses, named.
    pub fn misses(&self) -> Vec<String> {
        let mut out = Vec::new();
        let (lo, _, hi) = self.admitted;
        if lo < ADMITTED.0 || hi > ADMITTED.1 {
            out.push(format!(
                "admitted/quota {lo:.4}..{hi:.4} outside [0.98, 1.01]"
            ));
        }
        if self.ops_per_admitted > OPS_PER_ADMITTED {
            out.push(format!(
                "store ops per admitted {:.5} > {OPS_PER_ADMITTED}",
                self.ops_per_admitted
            ));
        }
        if self.moving && self.worst < WORST_WHILE_MOVING {
            out.push(format!(
                "worst host / fair share {:.2} < {WORST_WHILE_MOVING} while the threshold moves",
                self.worst
            ));
        }
        if self.stranded > STRANDED {
            out.push(format!(
                "stranded {:.2} % > {} %",
                self.stranded * 100.0,
                STRANDED * 100.0
            ));
        }
        out
    }
}

pub const HEADER: &str = "| scenario | hosts × processes | asked/quota | admitted/quota min / median / max | cold slice | stranded % (worst slice) | store ops per admitted | smallest host / fair share min / median | worst host / fair |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|";

/// One markdown row of the results table.
pub fn row(run: &Run, m: &Summary) -> String {
    let s = &run.scenario;
    let mut out = String::new();
    let _ = write!(
        out,
        "| {} | {} × {} | {:.2} | {:.4} / {:.4} / {:.4} | {:.4} | {:.2} ({:.2}) | {:.5} | {:.2} / {:.2} | {:.2} |",
        s.name,
        s.hosts,
        s.processes,
        m.asked_over_quota,
        m.admitted.0,
        m.admitted.1,
        m.admitted.2,
        m.cold_admitted,
        m.stranded * 100.0,
        m.stranded_max * 100.0,
        m.ops_per_admitted,
        m.smallest.0,
        m.smallest.1,
        m.worst,
    );
    out
}

/// Per-slice lines for the plot: scenario, slice, admitted/quota,
/// stranded/quota, ops per admitted, smallest host / fair share.
pub fn csv(run: &Run) -> String {
    let mut out = String::new();
    for (k, x) in std::iter::once(&run.cold).chain(&run.slices).enumerate() {
        let _ = writeln!(
            out,
            "{},{k},{:.5},{:.5},{:.6},{:.4}",
            run.scenario.name,
            x.admitted as f64 / x.quota as f64,
            x.stranded as f64 / x.quota as f64,
            x.ops as f64 / x.admitted.max(1) as f64,
            x.smallest_share,
        );
    }
    out
}
