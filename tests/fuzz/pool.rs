//! Damage to a pooled table's own regions: the pair map (which set a
//! (task, process) pair holds), the sets' owner words (which pair holds a
//! set), the fold record a reclaimer leaves when it is killed mid-fold, the
//! per-task totals beside the sets, and the header words that say the
//! table is pooled. Every word is read from the file: a hostile value must
//! be refused at open or bounded where it is used, never trusted.

use super::mutate::generic_value;
use super::{Geometry, Mutation, PROCESSES, TASKS, u32_at, word_at};
use crate::common::Rng;
use crate::common::layout::*;

/// A set's owner word: `(task + 1) << 32 | attachment`.
fn owner_word(task: u64, attach: u64) -> u64 {
    (task + 1) << 32 | attach
}

/// A pair; one time in three, of the slot a case's process will take (the
/// first free one), so that the damage is used and not only given back.
fn any_pair(rng: &mut Rng, bytes: &[u8], g: &Geometry) -> (usize, usize) {
    let free = (0..PROCESSES).find(|&a| word_at(bytes, g.attach(a) + A_STATE) & ATTACH_LIVE == 0);
    let a = match free {
        Some(a) if rng.one_in(3) => a,
        _ => rng.below(PROCESSES as u64) as usize,
    };
    (rng.below(TASKS as u64) as usize, a)
}

/// Pairs whose map entry is not 0 in `bytes`: (task, attachment, entry).
fn mapped_pairs(bytes: &[u8], g: &Geometry) -> Vec<(usize, usize, u32)> {
    (0..TASKS)
        .flat_map(|t| (0..PROCESSES).map(move |a| (t, a)))
        .map(|(t, a)| (t, a, u32_at(bytes, g.pair(t, a))))
        .filter(|(_, _, e)| *e != 0)
        .collect()
}

/// One word of the pool's regions, with values meaningful for it.
pub fn targeted(rng: &mut Rng, bytes: &[u8], g: &Geometry) -> Mutation {
    let sets = g.sets() as u64;
    let region = rng.below(100);
    if region < 30 {
        let (t, a) = any_pair(rng, bytes, g);
        let offset = g.pair(t, a);
        let old = u32_at(bytes, offset) as u64;
        let mapped = mapped_pairs(bytes, g);
        let value = match rng.below(8) {
            0 => 0,
            // A valid set, maybe one another pair holds or a free one.
            1 => 1 + rng.below(sets),
            2 => sets + 1,
            3 => sets + 1 + rng.below(1 << 20),
            4 => u32::MAX as u64,
            // Another pair's set: two pairs share one.
            5 | 6 if !mapped.is_empty() => rng.pick(&mapped).2 as u64,
            _ => generic_value(rng, old) & u32::MAX as u64,
        };
        return Mutation::new(offset, 4, value, format!("pair_map[{t}][{a}]"));
    }
    if region < 55 {
        let set = rng.below(sets) as usize;
        let offset = g.set_baseline(set) + S_OWNER;
        let old = word_at(bytes, offset);
        let (t, a) = any_pair(rng, bytes, g);
        let mapped = mapped_pairs(bytes, g);
        let value = match rng.below(9) {
            0 => 0,
            1 => owner_word(t as u64, a as u64),
            // The pair that holds another set (or this one).
            2 if !mapped.is_empty() => {
                let (t, a, _) = *rng.pick(&mapped);
                owner_word(t as u64, a as u64)
            }
            // Garbage task indices: past the table, u32::MAX, none (0).
            3 => owner_word(TASKS as u64 + rng.below(3), a as u64),
            4 => (u32::MAX as u64) << 32 | a as u64,
            5 => a as u64,
            // Garbage attachment indices.
            6 => owner_word(
                t as u64,
                *rng.pick(&[PROCESSES as u64, 1 << 16, u32::MAX as u64]),
            ),
            _ => generic_value(rng, old),
        };
        return Mutation::new(offset, 8, value, format!("set[{set}].owner"));
    }
    if region < 80 {
        let (field, name) = match rng.below(10) {
            0..=2 => (F_SET, "set".to_string()),
            3..=4 => (F_TASK, "task".to_string()),
            5..=6 => {
                let i = rng.below(TOTALS as u64) as usize;
                (F_BEFORE + 8 * i, format!("before[{i}]"))
            }
            7..=8 => {
                let i = rng.below(TOTALS as u64) as usize;
                (F_DELTA + 8 * i, format!("delta[{i}]"))
            }
            _ => (F_FOLDS, "folds".to_string()),
        };
        let offset = g.fold + field;
        let old = word_at(bytes, offset);
        let value = match (field, rng.below(3)) {
            (F_SET, 0) => 1 + rng.below(sets),
            (F_SET, 1) => *rng.pick(&[0, sets + 1, 1 << 32 | 1, u32::MAX as u64, u64::MAX]),
            (F_TASK, 0) => rng.below(TASKS as u64),
            (F_TASK, 1) => *rng.pick(&[TASKS as u64, 1 << 32, u32::MAX as u64, u64::MAX]),
            _ => generic_value(rng, old),
        };
        return Mutation::new(offset, 8, value, format!("fold_record.{name}"));
    }
    if region < 95 {
        let t = rng.below(TASKS as u64) as usize;
        let (field, name) = match rng.below(3) {
            0 => {
                let i = rng.below(TOTALS as u64) as usize;
                (LT_RETIRED + 8 * i, format!("retired[{i}]"))
            }
            1 => {
                let i = rng.below(8) as usize;
                (LT_UNLANED + 8 * i, format!("unlaned[{i}]"))
            }
            _ => (LT_UNLANED_REFUSED, "unlaned_refused".to_string()),
        };
        let offset = g.lane_totals(t) + field;
        let old = word_at(bytes, offset);
        let value = match rng.below(3) {
            0 => *rng.pick(&[u64::MAX, u64::MAX - 1, 1 << 63, old.wrapping_add(1 << 63)]),
            _ => generic_value(rng, old),
        };
        return Mutation::new(offset, 8, value, format!("lane_totals[{t}].{name}"));
    }
    // The claim hint, and the bytes of the map's padding.
    if rng.one_in(2) {
        let old = word_at(bytes, H_LANE_HINT);
        let generic = generic_value(rng, old);
        let value = *rng.pick(&[0, sets, sets - 1, u64::MAX, generic]);
        return Mutation::new(H_LANE_HINT, 8, value, "header.lane_hint");
    }
    let offset = g.pair_map + rng.below((g.fold - g.pair_map) as u64) as usize;
    Mutation::new(offset, 1, rng.below(256), "a byte of the pair map")
}

/// A fold recorded and not finished, as a reclaimer killed in it would
/// leave it — or as no reclaimer would: a set in range, a task in range or
/// not, and the before and delta words written up to some word only (the
/// rest stale, or garbage).
pub fn recorded_fold(rng: &mut Rng, bytes: &[u8], g: &Geometry) -> Vec<Mutation> {
    let set = rng.below(g.sets() as u64);
    let task = match rng.below(4) {
        0 => *rng.pick(&[TASKS as u64, u32::MAX as u64, 1 << 32, u64::MAX]),
        _ => rng.below(TASKS as u64),
    };
    let mut out = vec![
        Mutation::new(g.fold + F_SET, 8, set + 1, "fold_record.set (a fold)"),
        Mutation::new(g.fold + F_TASK, 8, task, "fold_record.task (a fold)"),
    ];
    let written = rng.below(2 * TOTALS as u64 + 1) as usize;
    for i in 0..2 * TOTALS {
        let (field, name) = match i < TOTALS {
            true => (F_BEFORE + 8 * i, format!("before[{i}]")),
            false => (F_DELTA + 8 * (i - TOTALS), format!("delta[{}]", i - TOTALS)),
        };
        let value = if i >= written {
            if !rng.one_in(3) {
                continue; // stale
            }
            generic_value(rng, word_at(bytes, g.fold + field))
        } else if i < TOTALS && (task as usize) < TASKS {
            // The task's totals now, as the record's `before`.
            word_at(bytes, g.lane_totals(task as usize) + LT_RETIRED + 8 * i)
        } else {
            rng.below(1000)
        };
        out.push(Mutation::new(
            g.fold + field,
            8,
            value,
            format!("fold_record.{name} (a fold)"),
        ));
    }
    out
}

/// A header that describes another lane layout: version, pool size and
/// total size changed together (mostly consistently), so that the file is
/// read as a pooled table it is not (or a pooled one as a table with a set
/// per pair) wherever it is large enough.
pub fn relayout(rng: &mut Rng, g: &Geometry) -> Vec<Mutation> {
    let sets = g.sets() as u64;
    let lane_sets = *rng.pick(&[0, 1, 2, sets - 1, sets, sets + 1, 16, 17]);
    let consistent = if lane_sets == 0 {
        VERSION
    } else {
        POOLED_VERSION
    };
    let version = match rng.below(5) {
        0 => *rng.pick(&[VERSION, POOLED_VERSION]),
        _ => consistent,
    };
    let total = Geometry::new(lane_sets as usize).total as u64;
    let total = match rng.below(6) {
        0 => g.total as u64,
        _ => total,
    };
    vec![
        Mutation::new(
            H_VERSION,
            4,
            version as u64,
            "header.layout_version (relayout)",
        ),
        Mutation::new(H_LANE_SETS, 4, lane_sets, "header.lane_sets (relayout)"),
        Mutation::new(H_TOTAL_SIZE, 8, total, "header.total_size (relayout)"),
    ]
}
