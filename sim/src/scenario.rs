//! Scenarios and the run loop: the simulated clock advances in 1 ms ticks;
//! at each tick every host (in a new random order) issues the requests its
//! demand brings, through its real table. Slices are counted by the store's
//! clock (the true one); a skewed host's own clock is off by its skew.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use flowctrl::TaskConfig;

use crate::Result;
use crate::fleet::{Dir, Host, Rng, Tally};
use crate::lua::LuaStore;

/// How the hosts' demand is shaped.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Demand {
    /// Every host asks the same.
    Uniform,
    /// Host i asks in proportion to 1/(i+1) (Zipf, s = 1).
    Zipf,
    /// Each host asks 5× its mean for 100 ms of every 500, at a random phase.
    Bursty,
    /// A tenth of the hosts is away at any time; each slice a twentieth of
    /// those present leaves and as many join, at random instants.
    Churn,
    /// Uniform, with a tenth of the hosts' clocks 200 ms ahead.
    Skewed,
    /// Uniform, under a threshold that moves every slice as a manager
    /// moves it: mid-slice, the task's record and the next slices' keys
    /// are written with the next threshold (see [`threshold`]).
    Moving,
}

/// The threshold of slice `k` of a [`Demand::Moving`] run, as a fraction
/// of the task's rate: down and up by up to half, never twice the same.
pub fn threshold(k: i64) -> f64 {
    const STEPS: [f64; 6] = [1.0, 0.6, 0.8, 0.5, 0.9, 0.7];
    STEPS[k.rem_euclid(STEPS.len() as i64) as usize]
}

/// What `flowctrl manage` writes when it moves a threshold: the record
/// (its version `version`) and the keys of `slices` written ahead, each
/// only while no host has pulled from it.
fn write_ahead(store: &LuaStore, s: &Scenario, version: u64, quota: u64, slices: &[u32]) {
    let mut model = store.model.lock().unwrap();
    let rate = (quota as f64 * 1000.0 / s.slice_ms as f64).to_string();
    let record = format!("flowctrl:cfg:{{{}}}", crate::fleet::TASK);
    let slice_ms = s.slice_ms.to_string();
    let mut call = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        model
            .call(&args)
            .expect("the model takes the manager's writes");
    };
    call(&[
        "HSET",
        &record,
        "version",
        &version.to_string(),
        "global_rate",
        &rate,
        "slice_ms",
        &slice_ms,
        "chunk",
        "0",
        "fallback",
        "share",
        "global_burst",
        "0",
        "shards",
        "1",
    ]);
    for slice in slices {
        let key = format!("flowctrl:{{{}}}:{slice}", crate::fleet::TASK);
        let q = quota.to_string();
        call(&["HSET", &key, "left", &q, "quota", &q]);
        call(&["PEXPIRE", &key, "60000"]);
    }
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub hosts: usize,
    /// Processes per host (callers of its table; see `fleet`).
    pub processes: u32,
    pub demand: Demand,
    /// The task's `global_rate`, requests/s for the whole fleet.
    pub rate: f64,
    /// Offered load over the rate.
    pub overload: f64,
    pub slice_ms: u32,
    /// Slices measured, after the first (cold) one.
    pub slices: u32,
    pub seed: u64,
}

/// One slice's figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct Slice {
    pub quota: u64,
    pub asked: u64,
    pub admitted: u64,
    /// Granted by the store to the hosts in the slice, less what they
    /// admitted: left unspent at its end.
    pub stranded: u64,
    /// Script calls (store round trips) in the slice.
    pub ops: u64,
    /// The host asking least: admitted over its max-min fair share (of the
    /// hosts present the whole slice).
    pub smallest_share: f64,
    /// The host furthest under its fair share: admitted over it.
    pub worst_share: f64,
    /// Hosts that asked in the slice.
    pub hosts: usize,
}

pub struct Run {
    pub scenario: Scenario,
    /// The cold first slice (no host has history), then the measured ones.
    pub cold: Slice,
    pub slices: Vec<Slice>,
}

/// An instant far from the epoch and on a slice edge.
const BASE_US: i64 = 1_900_000_000_000_000;
const TICK_US: i64 = 1000;

/// Max-min fair shares of `quota` among `demands` (water filling).
pub fn fair_shares(quota: f64, demands: &[u64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by_key(|&i| demands[i]);
    let mut shares = vec![0.0; demands.len()];
    let mut left = quota;
    for (k, &i) in order.iter().enumerate() {
        let level = left / (order.len() - k) as f64;
        let share = (demands[i] as f64).min(level);
        shares[i] = share;
        left -= share;
    }
    shares
}

/// Requests/s host `i` asks at `t_us` into the run.
fn rate_of(
    s: &Scenario,
    weights: &[f64],
    phases: &[i64],
    present: &[bool],
    i: usize,
    t_us: i64,
) -> f64 {
    if !present[i] {
        return 0.0;
    }
    let mean = s.rate * s.overload * weights[i];
    match s.demand {
        Demand::Bursty => {
            if (t_us + phases[i]).rem_euclid(500_000) < 100_000 {
                5.0 * mean
            } else {
                0.0
            }
        }
        _ => mean,
    }
}

/// Runs `s` from a fresh store: `slices + 1` slices, the first one cold.
pub fn run(s: &Scenario) -> Result<Run> {
    let store = Arc::new(LuaStore::new()?);
    flowctrl::sim::install(store.clone());
    let set_now = |us: i64| {
        flowctrl::clock::sim::set_now_us(us);
        store.model.lock().unwrap().set_now_us(us);
    };
    set_now(BASE_US);
    let dir = Dir::new(&s.name)?;
    let config = TaskConfig::new().global_rate(s.rate).slice_ms(s.slice_ms);
    let mut rng = Rng(s.seed);
    let n = s.hosts;
    let mut hosts = Vec::with_capacity(n);
    for i in 0..n {
        let skew = if s.demand == Demand::Skewed && i % 10 == 0 {
            200
        } else {
            0
        };
        hosts.push(Host::open(&dir.0, i, &config, skew)?);
    }
    let mut weights: Vec<f64> = match s.demand {
        Demand::Zipf => (0..n).map(|i| 1.0 / (i + 1) as f64).collect(),
        _ => vec![1.0; n],
    };
    let mut present = vec![true; n];
    if s.demand == Demand::Churn {
        for i in 0..n / 10 {
            present[(i * 10 + 5) % n] = false;
        }
    }
    let total: f64 = (0..n).filter(|&i| present[i]).map(|i| weights[i]).sum();
    weights.iter_mut().for_each(|w| *w /= total);
    let phases: Vec<i64> = (0..n).map(|_| rng.below(500_000) as i64).collect();
    // Churn: (instant, host, arrives) of the next slice.
    let mut moves: Vec<(i64, usize, bool)> = Vec::new();
    let slice_us = s.slice_ms as i64 * 1000;
    let quota_at = |k: i64| {
        let f = if s.demand == Demand::Moving {
            threshold(k)
        } else {
            1.0
        };
        (s.rate * f * s.slice_ms as f64 / 1000.0).round() as u64
    };
    let mut acc = vec![0.0f64; n];
    let mut order: Vec<usize> = (0..n).collect();
    let mut out = Vec::new();
    // Granted and not given back (see `Host::keep`).
    let kept = |h: &Host| {
        let s = h.stats();
        s.granted - s.returned
    };
    let mut before: Vec<u64> = hosts.iter().map(kept).collect();
    for k in 0..=s.slices as i64 {
        let start = BASE_US + k * slice_us;
        if s.demand == Demand::Churn && k > 0 {
            let (here, away): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| present[i]);
            let swaps = here.len() / 20;
            moves.clear();
            for j in 0..swaps {
                let at = start + rng.below(slice_us as u64) as i64;
                moves.push((at, here[(rng.below(here.len() as u64)) as usize], false));
                moves.push((at, away[j % away.len().max(1)], true));
            }
            moves.sort_by_key(|m| m.0);
        }
        let ops_before = store.evals.load(Ordering::Relaxed);
        let kinds_before: Vec<u64> = store
            .kinds
            .iter()
            .map(|k| k.load(Ordering::Relaxed))
            .collect();
        let mut tally = vec![Tally::default(); n];
        // Hosts that join or leave in the slice: not judged for their share
        // (a host there for a millisecond may have asked once).
        let moved: Vec<bool> = (0..n).map(|i| moves.iter().any(|m| m.1 == i)).collect();
        let quota = quota_at(k);
        let mut t = start;
        let mut next_move = 0;
        // `FLOWCTRL_SIM_RELEASE=1`: how far the fleet's admissions ran ahead
        // of the slice's release (the burst, a quarter of the rate, at once
        // and the rest evenly), and the most admitted in any 50 ms.
        let release = std::env::var_os("FLOWCTRL_SIM_RELEASE").is_some();
        let (mut ahead, mut window, mut marks) = (0i64, 0u64, Vec::new());
        while t < start + slice_us {
            set_now(t + TICK_US / 2);
            if s.demand == Demand::Moving && t == start + slice_us / 2 {
                let next = (start / slice_us + 1) as u32;
                write_ahead(&store, s, k as u64 + 1, quota_at(k + 1), &[next, next + 1]);
            }
            while next_move < moves.len() && moves[next_move].0 <= t {
                let (_, host, arrives) = moves[next_move];
                present[host] = arrives;
                next_move += 1;
            }
            rng.shuffle(&mut order);
            for &i in &order {
                acc[i] +=
                    rate_of(s, &weights, &phases, &present, i, t - BASE_US) * TICK_US as f64 / 1e6;
                while acc[i] >= 1.0 {
                    acc[i] -= 1.0;
                    hosts[i].request(&mut tally[i])?;
                }
            }
            if (t - BASE_US) % crate::fleet::KEEP_EVERY_US == 0
                && std::env::var_os("FLOWCTRL_SIM_NO_KEEP").is_none()
            {
                for h in &hosts {
                    h.keep();
                }
            }
            t += TICK_US;
            if release {
                let admitted: u64 = tally.iter().map(|t| t.admitted).sum();
                let released =
                    (quota / 4 + quota * (t - start) as u64 / slice_us as u64).min(quota);
                ahead = ahead.max(admitted as i64 - released as i64);
                marks.push(admitted);
                let back = marks.len().saturating_sub(1 + 50_000 / TICK_US as usize);
                window = window.max(admitted - marks[back]);
            }
        }
        if release {
            eprintln!(
                "{} slice {k}: ahead of the release at most {:.2} % of the quota, 50 ms at most {:.2} %",
                s.name,
                ahead as f64 * 100.0 / quota as f64,
                window as f64 * 100.0 / quota as f64
            );
        }
        let granted: Vec<u64> = hosts.iter().map(kept).collect();
        let mut slice = Slice {
            quota,
            ops: store.evals.load(Ordering::Relaxed) - ops_before,
            ..Slice::default()
        };
        for i in 0..n {
            slice.asked += tally[i].asked;
            slice.admitted += tally[i].admitted;
            slice.stranded += (granted[i] - before[i]).saturating_sub(tally[i].admitted);
        }
        before = granted;
        let asking: Vec<usize> = (0..n).filter(|&i| tally[i].asked > 0).collect();
        let demands: Vec<u64> = asking.iter().map(|&i| tally[i].asked).collect();
        let fair = fair_shares(quota as f64, &demands);
        slice.hosts = asking.len();
        slice.worst_share = f64::INFINITY;
        let mut smallest = (u64::MAX, 0.0);
        let mut worst_host = 0;
        for (j, &i) in asking.iter().enumerate() {
            if moved[i] {
                continue;
            }
            let ratio = tally[i].admitted as f64 / fair[j].max(1.0);
            if ratio < slice.worst_share {
                worst_host = i;
            }
            slice.worst_share = slice.worst_share.min(ratio);
            if demands[j] < smallest.0 {
                smallest = (demands[j], ratio);
            }
        }
        slice.smallest_share = smallest.1;
        if std::env::var_os("FLOWCTRL_SIM_SHARES").is_some() {
            let mut r: Vec<f64> = asking
                .iter()
                .enumerate()
                .filter(|(_, i)| !moved[**i])
                .map(|(j, &i)| tally[i].admitted as f64 / fair[j].max(1.0))
                .collect();
            r.sort_by(f64::total_cmp);
            let q = |p: f64| {
                r.get(((r.len() as f64 - 1.0) * p) as usize)
                    .copied()
                    .unwrap_or(0.0)
            };
            eprintln!(
                "{} slice {k}: quota {quota} hosts {} share q0 {:.2} q1 {:.2} q5 {:.2} q10 {:.2} q25 {:.2} q50 {:.2} q90 {:.2} max {:.2}",
                s.name,
                r.len(),
                q(0.0),
                q(0.01),
                q(0.05),
                q(0.1),
                q(0.25),
                q(0.5),
                q(0.9),
                q(1.0)
            );
        }
        if std::env::var_os("FLOWCTRL_SIM_PROGRESS").is_some() {
            eprintln!(
                "{} slice {k}: admitted/quota {:.4}, {} store ops (whole, part, held, used up: {:?}; left {}), stranded {} (the hosts' count so far {}); worst host h{worst_host:04}: {} of {} asked",
                s.name,
                slice.admitted as f64 / quota as f64,
                slice.ops,
                store
                    .kinds
                    .iter()
                    .zip(&kinds_before)
                    .map(|(k, b)| k.load(Ordering::Relaxed) - b)
                    .collect::<Vec<_>>(),
                store.last_left.load(Ordering::Relaxed),
                slice.stranded,
                hosts.iter().map(|h| h.stats().stranded).sum::<u64>(),
                tally[worst_host].admitted,
                tally[worst_host].asked,
            );
            if n <= 4 {
                let each: Vec<String> = (0..n)
                    .map(|i| format!("h{i} {}/{}", tally[i].admitted, tally[i].asked))
                    .collect();
                eprintln!("  quota {quota}: {}", each.join(", "));
            }
        }
        out.push(slice);
    }
    if std::env::var_os("FLOWCTRL_SIM_PROGRESS").is_some() {
        let offsets: Vec<i64> = hosts.iter().map(|h| h.stats().clock_offset_us).collect();
        eprintln!(
            "{}: measured clock offsets {}..{} µs",
            s.name,
            offsets.iter().min().unwrap_or(&0),
            offsets.iter().max().unwrap_or(&0)
        );
    }
    flowctrl::clock::sim::set_now_us(0);
    let cold = out.remove(0);
    Ok(Run {
        scenario: s.clone(),
        cold,
        slices: out,
    })
}
