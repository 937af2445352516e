//! One step of an active manager: judge each task's last full slice (one
//! pipeline of census reads), then write what is due (one pipeline of
//! script calls): the current slice if it has no key yet, the slices up to
//! `ahead` past it, and the record and the decision when they changed.

use std::collections::{BTreeMap, BTreeSet};

use super::policy::{HostSlice, Observed, Reason, decide, served};
use super::report::Decision;
use super::write::{Write, decision_key};
use super::{Alarm, Manager, ManagerConfig, fleet_alarms};
use crate::error::Result;
use crate::quota::{Fleet, HostRecord, merge_record, parse_record, slice_key, wall_ms};

/// Slices of silence after which a host is forgotten.
const FORGET_SLICES: u64 = 1000;

/// A managed task's run-time state.
#[derive(Debug, Default)]
pub(super) struct TaskState {
    /// Requests/s in force.
    threshold: f64,
    /// The last slice written ahead, with which threshold, and the last
    /// judged.
    written_to: Option<u64>,
    written_at: f64,
    judged: Option<u64>,
    /// Clean slices in a row (the probe doubles with each).
    clean: u32,
    /// The first slice to judge: the first one to run the threshold in
    /// force (a change reaches the slice after next), or the second after a
    /// cut (the first drains the old threshold's backlog).
    judge_from: u64,
    /// The record's version as this manager last wrote or found it.
    version: u64,
    /// A change not yet in the store's log.
    pending: Option<Decision>,
    /// The last slice each host pulled in, and whether it is alarmed silent.
    seen: BTreeMap<String, (u64, bool)>,
    /// The slice length the slice numbers above count in (ms).
    slice_ms: u32,
    /// The spread of the last write (0: none yet).
    shards: u32,
    /// The alarms raised at the last judgement (logged when they appear).
    alarms: BTreeSet<String>,
}

impl TaskState {
    /// Forgets what was written: the next step writes every slice ahead.
    pub(super) fn rewrite(&mut self) {
        self.written_to = None;
    }
}

/// The states for `config`'s tasks: those of `old` carried over (their
/// threshold kept within the new bounds), new ones at their global_rate.
/// Another slice length numbers slices anew: what counts slices is reset.
pub(super) fn states(
    config: &ManagerConfig,
    mut old: BTreeMap<String, TaskState>,
) -> BTreeMap<String, TaskState> {
    config
        .tasks
        .iter()
        .map(|(name, task)| {
            let rate = task.global.global_rate;
            let mut state = old.remove(name).unwrap_or_default();
            state.threshold = match &task.policy {
                Some(p) if state.threshold > 0.0 => state.threshold.clamp(p.min_rate, p.max_rate),
                _ => rate,
            };
            if state.slice_ms != task.global.slice_ms {
                state.slice_ms = task.global.slice_ms;
                (state.judge_from, state.judged, state.clean) = (0, None, 0);
                state.seen.clear();
            }
            state.written_to = None;
            state.version = 0;
            (name.clone(), state)
        })
        .collect()
}

/// At an acquisition: dynamic tasks resume from the threshold the last
/// active manager decided (within this one's bounds), judged as after a
/// cut of its own (its first slice drains the old threshold's backlog),
/// and every task's slices ahead are written anew.
pub(super) fn resume(m: &mut Manager) -> Result<()> {
    let now_ms = (wall_ms() + m.offset_ms).max(0) as u64;
    let prefix = m.config.store.key_prefix.clone();
    let names: Vec<String> = m.tasks.keys().cloned().collect();
    let last: Vec<Option<String>> = m.store.redis().round_trip("read the decisions", |conn| {
        let mut pipe = redis::pipe();
        for name in &names {
            pipe.hget(decision_key(&prefix, name), "threshold");
        }
        pipe.query(conn)
    })?;
    for (name, text) in names.iter().zip(last) {
        let state = m.tasks.get_mut(name).expect("a task of the list");
        state.written_to = None;
        state.version = 0;
        let threshold = text.as_deref().and_then(stored_threshold);
        if let (Some(text), None) = (&text, threshold) {
            log::warn!(
                task = name.as_str();
                "task {name:?}: the last decision's threshold {} is not a rate: skipped",
                crate::words::echo(text)
            );
        }
        let task = &m.config.tasks[name];
        if let (Some(p), Some(t)) = (&task.policy, threshold) {
            state.threshold = t.clamp(p.min_rate, p.max_rate);
            let current = now_ms / task.global.slice_ms as u64;
            state.judge_from = state.judge_from.max(current + 2);
        }
    }
    Ok(())
}

/// A decision's threshold as the store holds it: a finite rate above 0,
/// else none.
fn stored_threshold(text: &str) -> Option<f64> {
    text.parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && *t > 0.0)
}

/// Permits per slice of `rate`.
fn quota_of(rate: f64, slice_ms: u32) -> u64 {
    ((rate * slice_ms as f64 / 1000.0).floor() as u64).clamp(1, 1 << 30)
}

/// One step under `token`; whether a newer token fenced us out.
pub(super) fn run(m: &mut Manager, token: u64) -> Result<bool> {
    let now_ms = (wall_ms() + m.offset_ms).max(0) as u64;
    let current = |slice_ms: u32| now_ms / slice_ms as u64;
    let due: Vec<(String, u64)> = m
        .tasks
        .iter()
        .filter_map(|(name, state)| {
            let last = current(m.config.tasks[name].global.slice_ms).checked_sub(1)?;
            (state.judged != Some(last)).then(|| (name.clone(), last))
        })
        .collect();
    if !due.is_empty() {
        let prefix = m.config.store.key_prefix.clone();
        // Every shard's key of each task, in one pipeline.
        let keys: Vec<(usize, String)> = due
            .iter()
            .enumerate()
            .flat_map(|(at, (name, slice))| {
                let shards = m.config.tasks[name].global.shards.max(1);
                let prefix = &prefix;
                (0..shards).map(move |i| (at, slice_key(prefix, name, i, shards, *slice as u32)))
            })
            .collect();
        let read = m.store.redis().round_trip("read the census", |conn| {
            let mut pipe = redis::pipe();
            for (_, key) in &keys {
                pipe.hgetall(key);
            }
            pipe.query::<Vec<Vec<(String, String)>>>(conn)
        });
        match read {
            Ok(hashes) => {
                let mut by_task: Vec<Vec<(String, String)>> = vec![Vec::new(); due.len()];
                for ((at, _), fields) in keys.iter().zip(hashes) {
                    by_task[*at].extend(fields);
                }
                for ((name, slice), fields) in due.iter().zip(by_task) {
                    judge(m, name, *slice, &fields, now_ms);
                }
            }
            Err(e) => {
                m.report.lock().store_errors += 1;
                log::warn!("manager {}: {e}", m.config.id);
                return Ok(false);
            }
        }
    }
    write(m, token, &current)
}

/// A slice's census from its shards' keys' `fields`, one after the other:
/// their quotas add up to the slice's, a host's records (one per shard it
/// pulled from) merge. Sums saturate: the store's numbers are anyone's.
fn census(slice: u64, fields: &[(String, String)]) -> (Option<u64>, Vec<HostRecord>) {
    let mut quota: Option<u64> = None;
    let mut hosts: Vec<HostRecord> = Vec::new();
    for (field, value) in fields {
        match field.as_str() {
            "quota" => {
                if let Ok(q) = value.parse::<u64>() {
                    quota = Some(quota.unwrap_or(0).saturating_add(q));
                }
            }
            "left" | "demand" => {}
            host => {
                if let Some(r) = parse_record(host, slice, value).filter(|r| r.asked > 0) {
                    merge_record(&mut hosts, r);
                }
            }
        }
    }
    (quota, hosts)
}

/// `count` of every host, added with saturation.
fn total(hosts: &[HostRecord], count: impl Fn(&HostRecord) -> u64) -> u64 {
    hosts.iter().map(count).fold(0, u64::saturating_add)
}

/// Judges `task`'s slice `slice` from its key's `fields`.
fn judge(m: &mut Manager, task: &str, slice: u64, fields: &[(String, String)], now_ms: u64) {
    let config = &m.config.tasks[task];
    let slice_ms = config.global.slice_ms;
    let state = m.tasks.get_mut(task).expect("a managed task");
    state.judged = Some(slice);
    let (quota, hosts) = census(slice, fields);
    let per_s = |permits: u64| permits as f64 * 1000.0 / slice_ms as f64;
    // The slice ran the threshold in force if its key holds its quota.
    let threshold = match quota {
        Some(q) if q == quota_of(state.threshold, slice_ms) => state.threshold,
        Some(q) => per_s(q),
        None => 0.0,
    };
    let per_host: Vec<HostSlice> = hosts
        .iter()
        .map(|h| HostSlice {
            admitted: per_s(h.claimed),
            success: per_s(h.health.success),
            dropped: per_s(h.health.dropped),
        })
        .collect();
    let target = config.policy.as_ref().and_then(|p| p.dropped_ratio);
    let observed = Observed {
        threshold,
        admitted: per_s(total(&hosts, |h| h.claimed)),
        success: total(&hosts, |h| h.health.success),
        dropped: total(&hosts, |h| h.health.dropped),
        p99_us: hosts.iter().map(|h| h.health.p99_us).max().unwrap_or(0),
        served: target.map_or(0.0, |t| served(threshold, t, &per_host)),
    };
    let mut report = m.report.lock();
    let r = report.tasks.entry(task.to_string()).or_default();
    if config.policy.is_some() {
        for word in Reason::CHANGE_WORDS {
            r.changes.entry(word.to_string()).or_default();
        }
    }
    if let Some(policy) = &config.policy
        && slice >= state.judge_from
    {
        let (next, why) = decide(policy, state.threshold, &mut state.clean, &observed);
        if next != state.threshold {
            log::info!(
                task = task;
                "task {task:?}: threshold {:.1} -> {next:.1} requests/s ({why})",
                state.threshold
            );
            let decision = Decision {
                threshold: next,
                reason: why.to_string(),
                at_ms: now_ms as i64,
                manager: m.config.id.clone(),
            };
            *r.changes.entry(why.word()).or_default() += 1;
            r.last_change = Some(decision.clone());
            state.pending = Some(decision);
            // A raise is judged from its first slice; a cut from its
            // second (the old threshold's backlog drains in the first).
            state.judge_from = slice + if next > state.threshold { 2 } else { 3 };
            state.threshold = next;
        }
    }
    r.threshold = state.threshold;
    r.slice = slice;
    r.hosts = hosts.len() as u64;
    r.admitted = observed.admitted;
    (r.success, r.dropped, r.p99_us) = (observed.success, observed.dropped, observed.p99_us);
    r.offsets_us = hosts
        .iter()
        .map(|h| (h.host.clone(), h.offset_us))
        .collect();
    // Alarms: the census's, then hosts gone silent.
    for h in &hosts {
        state.seen.insert(h.host.clone(), (slice, false));
    }
    let fleet = Fleet {
        task: task.to_string(),
        slice_ms,
        slice: slice + 1,
        quota,
        hosts,
    };
    let mut alarms = fleet_alarms(&fleet, m.config.skew_alarm);
    let silent_slices = (m.config.silent_alarm.as_millis() as u64).div_ceil(slice_ms as u64);
    state.seen.retain(|host, (last, alarmed)| {
        let quiet = slice.saturating_sub(*last);
        if quiet >= silent_slices && !*alarmed {
            *alarmed = true;
            alarms.push(Alarm::Silent {
                host: host.clone(),
                silent_ms: quiet * slice_ms as u64,
            });
        }
        // Never forgotten before its silence is told.
        quiet < FORGET_SLICES.max(silent_slices + 1)
    });
    let raised: BTreeSet<String> = alarms.iter().map(|a| a.to_string()).collect();
    for alarm in &alarms {
        // Skew and configuration alarms repeat each slice while true: log
        // one when it appears. Silence is raised once per silence.
        let text = alarm.to_string();
        if !state.alarms.contains(&text) {
            *report.alarms.entry(alarm.kind()).or_default() += 1;
            log::warn!(task = task; "task {task:?}: alarm: {text}");
        }
    }
    state.alarms = raised;
}

/// Writes every task whose slices ahead or decision are due.
fn write(m: &mut Manager, token: u64, current: &dyn Fn(u32) -> u64) -> Result<bool> {
    let mut names = Vec::new();
    let mut writes = Vec::new();
    for (name, state) in &m.tasks {
        let task = &m.config.tasks[name];
        let slice_ms = task.global.slice_ms;
        let ahead = m.config.ahead_for(slice_ms) as u64;
        let through = current(slice_ms) + ahead;
        if state.written_to == Some(through) && state.pending.is_none() {
            continue;
        }
        // Only the new slices, unless the threshold moved since. Another
        // spread: not the current slice, whose old key (pulled) keeps its
        // quota while the new shards' keys would add theirs.
        let shards = task.global.shards.max(1);
        let first = match state.written_to {
            _ if ![0, shards].contains(&state.shards) => current(slice_ms) + 1,
            Some(w) if state.written_at == state.threshold && w >= current(slice_ms) => w + 1,
            _ => current(slice_ms),
        };
        names.push((name.clone(), through, shards));
        writes.push(Write {
            task: name,
            settings: &task.global,
            first: first as u32,
            count: (through + 1).saturating_sub(first) as u32,
            quota: quota_of(state.threshold, slice_ms),
            decision: state.pending.as_ref().map(Decision::encode),
            version: state.version,
        });
    }
    let written = match m.writer.write(m.store.redis(), token, &writes) {
        Ok(written) => written,
        Err(e) => {
            m.report.lock().store_errors += 1;
            log::warn!("manager {}: {e}", m.config.id);
            return Ok(false);
        }
    };
    let mut report = m.report.lock();
    let mut fenced = false;
    for ((name, through, shards), w) in names.into_iter().zip(written) {
        if w.fenced {
            report.writes_fenced += 1;
            fenced = true;
            continue;
        }
        report.writes += 1;
        report.keys_written += w.keys;
        report.slices_late += w.late;
        let state = m.tasks.get_mut(&name).expect("a managed task");
        // A store that lost the task lost the slices written ahead too:
        // the next step writes them all again.
        state.written_to = (!w.lost).then_some(through);
        state.written_at = state.threshold;
        state.shards = shards;
        state.version = w.version;
        state.pending = None;
    }
    Ok(fenced)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(slice_ms: u32) -> ManagerConfig {
        let text = format!(
            "[table]\nstore = \"redis://127.0.0.1:1\"\n[tasks.\"api\"]\nglobal_rate = 400\n\
             slice_ms = {slice_ms}\n[tasks.\"api\".policy]\nmin_rate = 50\nmax_rate = 1000\n\
             dropped_ratio = 0.1\n"
        );
        ManagerConfig::parse(std::path::Path::new("m.toml"), &text).unwrap()
    }

    #[test]
    fn another_slice_length_resets_what_counts_slices() {
        let mut states = states(&config(100), BTreeMap::new());
        let state = states.get_mut("api").unwrap();
        state.threshold = 300.0;
        (state.judge_from, state.judged, state.clean) = (20_000_003, Some(20_000_000), 2);
        state.seen.insert("h".into(), (20_000_000, false));
        // The same length: carried over.
        let states = super::states(&config(100), states);
        assert_eq!(states["api"].judge_from, 20_000_003);
        assert_eq!(states["api"].seen.len(), 1);
        // Ten times longer: slices count ten times fewer.
        let s = &super::states(&config(1000), states)["api"];
        assert_eq!((s.judge_from, s.judged, s.clean), (0, None, 0));
        assert!(s.seen.is_empty());
        assert_eq!(s.threshold, 300.0, "the threshold stays");
    }

    #[test]
    fn census_numbers_near_the_top_add_up_with_saturation() {
        let max = i64::MAX.to_string();
        let record = format!("1 {max} {max} {max} 0 {max} {max} {max} 0 0");
        let mut fields = vec![("quota".to_string(), u64::MAX.to_string()); 2];
        for host in ["a", "b", "c"] {
            fields.push((host.to_string(), record.clone()));
        }
        let (quota, hosts) = census(7, &fields);
        assert_eq!((quota, hosts.len()), (Some(u64::MAX), 3));
        assert_eq!(total(&hosts, |h| h.claimed), u64::MAX);
        assert_eq!(total(&hosts, |h| h.health.success), u64::MAX);
        assert_eq!(total(&hosts, |h| h.health.dropped), u64::MAX);
    }
}
