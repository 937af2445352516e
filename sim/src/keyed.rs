//! Keys' global rates across a simulated fleet: each host a real table with
//! one keyed task whose keys carry a global rate, pulling from the real
//! `keyed.lua` over the model of Redis. Requests land on hosts at random
//! (as a load balancer spreads them) or on one host, for keys drawn by Zipf
//! or one key alone.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use flowctrl::{KeyConfig, KeyGlobal, KeyLimits, KeyRate, Outcome, Table, Task, TaskConfig};

use crate::Result;
use crate::fleet::{Dir, Rng, table_options};
use crate::lua::LuaStore;

const BASE_US: i64 = 1_900_000_000_000_000;
const TICK_US: i64 = 1000;
/// How often each host's keeper looks (`quota::keeper::EVERY`), µs.
const KEEPER_US: i64 = 10_000;
const SLICE_MS: i64 = 1000;

/// Where a key's requests land.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Spread {
    /// On a host drawn at random for each request.
    Everywhere,
    /// On host 0 alone.
    OneHost,
    /// Each key on one host of its own, as a load balancer hashing the key
    /// sends it.
    Pinned,
}

#[derive(Clone, Debug)]
pub struct KeyScenario {
    pub name: String,
    pub hosts: usize,
    /// Keys, drawn by Zipf(`zipf`) (one key: that key alone).
    pub keys: usize,
    pub zipf: f64,
    /// Requests per second, fleet-wide.
    pub offered: f64,
    /// Each key's global rate, per second.
    pub limit: f64,
    /// Each key's allowance per host and slice.
    pub local: u32,
    pub spread: Spread,
    /// Slices judged (after a first, cold one).
    pub slices: u32,
    /// Keys each host's key file holds: enough that no key a host asks
    /// within a slice is evicted, and no more. Each host's file is about
    /// 160 bytes a key, and a run's 1,000 hosts keep theirs on disk at once.
    pub capacity: u32,
    pub seed: u64,
    /// The store restarted empty at (slice, ms into it), if at all.
    pub restart: Option<(i64, i64)>,
}

/// What one slice did.
#[derive(Clone, Debug, Default)]
pub struct KeySlice {
    pub asked: u64,
    pub admitted: u64,
    /// Keys asked more than their limit, and of them the most admitted
    /// (÷ the limit), and how many passed limit × 1.01.
    pub over_keys: u64,
    pub worst_over: f64,
    pub keys_past: u64,
    /// Admitted past limit × 1.01, summed over keys.
    pub excess: u64,
    /// Keys asked at most their limit: admitted ÷ asked over them all, and
    /// how many got less than 0.99 of what they asked.
    pub under_ratio: f64,
    pub under_short: u64,
    /// Store round trips, and fields the store's key hashes hold at the
    /// slice's end (keys that pulled in this slice or the last).
    pub ops: u64,
    pub fields: usize,
    /// Of a scenario of one key: its admissions.
    pub one_key: u64,
}

pub struct KeyRun {
    pub scenario: KeyScenario,
    pub slices: Vec<KeySlice>,
}

struct Host {
    _table: Table,
    task: Task,
}

/// The cumulative Zipf weights of `keys` ranks.
fn zipf_cdf(keys: usize, s: f64) -> Vec<f64> {
    let mut acc = 0.0;
    let mut cdf: Vec<f64> = (1..=keys)
        .map(|r| {
            acc += (r as f64).powf(-s);
            acc
        })
        .collect();
    cdf.iter_mut().for_each(|c| *c /= acc);
    cdf
}

pub fn run(s: &KeyScenario) -> Result<KeyRun> {
    let store = Arc::new(LuaStore::new()?);
    flowctrl::sim::install(store.clone());
    let set_now = |us: i64| {
        flowctrl::clock::sim::set_now_us(us);
        store.model.lock().unwrap().set_now_us(us);
    };
    set_now(BASE_US);
    let dir = Dir::new(&s.name)?;
    let limits =
        KeyLimits::new().global(KeyGlobal::new(KeyRate::per_second(s.limit)).local(s.local));
    let keys = KeyConfig::new(limits).capacity(s.capacity);
    let mut hosts = Vec::with_capacity(s.hosts);
    for i in 0..s.hosts {
        let table = Table::open(dir.0.join(format!("h{i:04}")), &table_options(i))?;
        let task = table.task("keys", &TaskConfig::new())?;
        task.set_keys(&keys)?;
        hosts.push(Host {
            _table: table,
            task,
        });
    }
    let cdf = zipf_cdf(s.keys, s.zipf);
    let mut rng = Rng(s.seed);
    let per_tick = s.offered * TICK_US as f64 / 1e6;
    assert!(
        s.spread != Spread::OneHost || per_tick <= 1.0,
        "{}: a key on one host gets at most a request a tick",
        s.name
    );
    let limit = (s.limit * SLICE_MS as f64 / 1000.0).round() as u64;
    let mut asked = vec![0u32; s.keys];
    let mut admitted = vec![0u32; s.keys];
    let mut touched: Vec<u32> = Vec::new();
    let mut out = Vec::new();
    let mut carry = 0.0;
    let mut key = String::new();
    for k in 0..=s.slices as i64 {
        let start = BASE_US + k * SLICE_MS * 1000;
        let ops_before = store.evals.load(Ordering::Relaxed);
        let mut t = start;
        while t < start + SLICE_MS * 1000 {
            set_now(t + TICK_US / 2);
            if s.restart == Some((k, (t - start) / 1000)) {
                store.model.lock().unwrap().flush();
            }
            if (t - start) % KEEPER_US == 0 {
                for h in &hosts {
                    h.task.tend_keys();
                }
            }
            // A key on one host gets a request in a tick by chance: its
            // arrivals are random, as a client's are (evenly spaced, a
            // host's projection of its rate would be exact). Elsewhere the
            // key or the host of each request is drawn at random already.
            carry += if s.spread == Spread::OneHost {
                let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                if u < per_tick { 1.0 } else { 0.0 }
            } else {
                per_tick
            };
            while carry >= 1.0 {
                carry -= 1.0;
                let rank = if s.keys == 1 {
                    0
                } else {
                    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                    cdf.partition_point(|&c| c < u).min(s.keys - 1)
                };
                let host = match s.spread {
                    Spread::Everywhere => rng.below(s.hosts as u64) as usize,
                    Spread::OneHost => 0,
                    Spread::Pinned => {
                        (Rng(rank as u64 ^ 0x5eed).next_u64() % s.hosts as u64) as usize
                    }
                };
                use std::fmt::Write;
                key.clear();
                let _ = write!(key, "k{rank}");
                if asked[rank] == 0 {
                    touched.push(rank as u32);
                }
                asked[rank] += 1;
                let task = &hosts[host].task;
                if let Ok(mut permit) = task.acquire_key_raw(key.as_bytes(), 1)? {
                    admitted[rank] += 1;
                    task.release_raw(&mut permit, Outcome::Success)?;
                }
            }
            t += TICK_US;
        }
        let mut f = KeySlice {
            ops: store.evals.load(Ordering::Relaxed) - ops_before,
            fields: store
                .model
                .lock()
                .unwrap()
                .hash_fields("flowctrl:{keys}:k:"),
            one_key: admitted[0] as u64,
            ..KeySlice::default()
        };
        let (mut under_asked, mut under_admitted) = (0u64, 0u64);
        for &r in &touched {
            let (a, d) = (asked[r as usize] as u64, admitted[r as usize] as u64);
            f.asked += a;
            f.admitted += d;
            if a > limit {
                f.over_keys += 1;
                f.worst_over = f.worst_over.max(d as f64 / limit as f64);
                let bound = (limit as f64 * 1.01).floor() as u64;
                if d > bound {
                    f.keys_past += 1;
                    f.excess += d - bound;
                }
            } else {
                under_asked += a;
                under_admitted += d;
                if (d as f64) < 0.99 * a as f64 {
                    f.under_short += 1;
                }
            }
            asked[r as usize] = 0;
            admitted[r as usize] = 0;
        }
        touched.clear();
        f.under_ratio = under_admitted as f64 / under_asked.max(1) as f64;
        out.push(f);
    }
    flowctrl::clock::sim::set_now_us(0);
    Ok(KeyRun {
        scenario: s.clone(),
        slices: out,
    })
}

/// The scenarios `flowctrl-sim keys` runs; `local` replaces each one's
/// allowance.
pub fn scenarios(hosts: usize, slices: u32, local: Option<u32>) -> Vec<KeyScenario> {
    let base = KeyScenario {
        name: String::new(),
        hosts,
        keys: 1,
        zipf: 0.0,
        offered: 0.0,
        limit: 10.0,
        local: local.unwrap_or(1),
        spread: Spread::Everywhere,
        slices,
        capacity: 16,
        seed: 7,
        restart: None,
    };
    vec![
        KeyScenario {
            name: "zipf-keys".into(),
            keys: 1_000_000,
            zipf: 1.1,
            offered: 500_000.0,
            // A host asks about 2,800 distinct keys a slice: at 1,024 the
            // hottest are evicted between their asks and pass their limit.
            capacity: 4096,
            ..base.clone()
        },
        KeyScenario {
            name: "zipf-keys-pinned".into(),
            keys: 1_000_000,
            zipf: 1.1,
            offered: 500_000.0,
            spread: Spread::Pinned,
            // Keys on one host each are exact with any allowance below
            // their limit, and the largest (the limit less one) spares
            // the call-window wait to every key asked at most that often
            // a slice: under-limit keys admitted 0.992-0.994 from the
            // fourth slice, against 0.984-0.987 with 5.
            local: local.unwrap_or(9),
            // Each host asks only its own keys' share: 1,024 evicts none
            // (the same figures as 4,096).
            capacity: 1024,
            ..base.clone()
        },
        KeyScenario {
            name: "one-host-key".into(),
            offered: 100.0,
            spread: Spread::OneHost,
            ..base.clone()
        },
        KeyScenario {
            name: "one-host-under".into(),
            limit: 100.0,
            offered: 50.0,
            spread: Spread::OneHost,
            ..base.clone()
        },
        KeyScenario {
            name: "spread-key".into(),
            offered: 5.0 * hosts as f64,
            ..base.clone()
        },
        KeyScenario {
            name: "thin-key".into(),
            offered: 0.2 * hosts as f64,
            ..base
        },
    ]
}

/// The budgets a run misses, one line each. Every full slice (after the
/// cold first) is judged:
/// - a key on one host, and one asked 5 a slice on every host: its limit
///   within [0.98, 1.01] (the spread key from the third slice: the store
///   lists it, and every host learns it before the slice begins; in the
///   second, the first callers of the fleet's burst take it whole);
/// - a key on one host asked half its limit: ≥ 0.99 of what it asked;
/// - a key asked 0.2 a slice on every host (20 times its limit, each host
///   within its allowance): at most twice its limit from the fifth slice
///   (listed once enough hosts pulled it; before the list, 18 times);
/// - keys on one host each (Zipf): none past 1.01 × its limit; under-limit
///   keys admitted ≥ 0.99 of what they asked from the fourth slice on (a
///   fleet started cold learns which keys are hot where in three);
/// - keys spread at random (Zipf): under-limit keys admitted ≥ 0.99;
/// - every Zipf run: at most 0.01 store round trips per admission.
pub fn misses(run: &KeyRun) -> Vec<String> {
    let s = &run.scenario;
    let limit = s.limit;
    let mut out = Vec::new();
    for (k, f) in run.slices.iter().enumerate().skip(1) {
        let mut miss = |why: String| out.push(format!("slice {k}: {why}"));
        let one = f.one_key as f64;
        let learnt = k >= 3;
        match s.name.as_str() {
            "thin-key" if k >= 4 && one > 2.0 * limit => {
                miss(format!("the thin key admitted {one} of {limit}"));
            }
            "one-host-under" if f.under_ratio < 0.99 => {
                miss(format!(
                    "the key under its limit admitted {:.4}",
                    f.under_ratio
                ));
            }
            "thin-key" | "one-host-under" => {}
            "spread-key" if k < 2 => {}
            _ if s.keys == 1 && !(0.98 * limit..=1.01 * limit).contains(&one) => {
                miss(format!("one key admitted {one} of {limit}"));
            }
            _ => {}
        }
        if s.keys > 1 {
            let rt = f.ops as f64 / f.admitted.max(1) as f64;
            if rt > 0.01 {
                miss(format!("{rt:.4} round trips per admission"));
            }
            if (learnt || s.spread != Spread::Pinned) && f.under_ratio < 0.99 {
                miss(format!("under-limit keys admitted {:.4}", f.under_ratio));
            }
            if s.spread == Spread::Pinned && f.keys_past > 0 {
                miss(format!("{} keys past 1.01 × their limit", f.keys_past));
            }
        }
    }
    out
}

pub const HEADER: &str = "| scenario | hosts | local | slice | asked | admitted | keys over limit | worst over ÷ limit | keys past 1.01 × limit | excess ÷ admitted | under-limit keys admitted | short under-limit keys | round trips ÷ admission | store fields | one key admitted |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|";

pub fn rows(run: &KeyRun) -> String {
    let s = &run.scenario;
    let mut out = String::new();
    for (k, f) in run.slices.iter().enumerate() {
        out += &format!(
            "| {} | {} | {} | {k} | {} | {} | {} | {:.2} | {} | {:.5} | {:.4} | {} | {:.5} | {} | {} |\n",
            s.name,
            s.hosts,
            s.local,
            f.asked,
            f.admitted,
            f.over_keys,
            f.worst_over,
            f.keys_past,
            f.excess as f64 / f.admitted.max(1) as f64,
            f.under_ratio,
            f.under_short,
            f.ops as f64 / f.admitted.max(1) as f64,
            f.fields,
            f.one_key,
        );
    }
    out
}
