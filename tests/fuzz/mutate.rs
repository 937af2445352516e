//! What a case overwrites: words of every region, with arbitrary and
//! boundary values biased towards the words that matter (task states,
//! configuration, ledgers and intents, the in-flight word, counters, name
//! lengths, attachment states), and in a pooled table the pool's own
//! regions (`super::pool`).

use super::{Geometry, Mutation, PROCESSES, TASKS, pool, u32_at, word_at};
use crate::common::Rng;
use crate::common::layout::*;

/// Values that break assumptions about any word.
pub fn generic_value(rng: &mut Rng, old: u64) -> u64 {
    match rng.below(12) {
        0 => 0,
        1 => 1,
        2 => u64::MAX,
        3 => i64::MAX as u64,
        4 => 1 << 63,
        5 => old.wrapping_add(1),
        6 => old.wrapping_sub(1),
        7 => old ^ (1 << rng.below(64)),
        8 => {
            let shift = 8 * rng.below(8);
            (old & !(0xff << shift)) | (rng.below(256) << shift)
        }
        9 => u32::MAX as u64,
        10 => 1 << rng.below(64),
        _ => rng.next_u64(),
    }
}

/// An owner some slot of the table has, had or will have next.
pub fn plausible_owner(rng: &mut Rng, bytes: &[u8], g: &Geometry) -> u64 {
    let slot = rng.below(PROCESSES as u64 + 1) as u32; // one past the end too
    let epoch = if (slot as usize) < PROCESSES {
        word_at(bytes, g.attach(slot as usize)) >> 1
    } else {
        1
    };
    let epoch = match rng.below(4) {
        0 => epoch.wrapping_sub(1),
        1 => epoch,
        2 => epoch + 1, // the next claim of the slot: this process's, maybe
        _ => rng.below(1 << 46),
    };
    owner(slot, epoch)
}

/// Values meaningful for the word at `offset` (a task's state, a ledger, ...).
fn targeted(rng: &mut Rng, bytes: &[u8], g: &Geometry) -> Mutation {
    let region = rng.below(100);
    let (offset, width, what, value): (usize, usize, String, u64);
    if region < 12 {
        // Header fields.
        let fields: [(usize, usize, &str); 17] = [
            (H_MAGIC, 8, "magic"),
            (H_VERSION, 4, "layout_version"),
            (
                H_HEADER_SIZE + 4 * rng.below(5) as usize,
                4,
                "a struct size",
            ),
            (H_TASK_CAPACITY, 4, "task_capacity"),
            (H_ATTACH_CAPACITY, 4, "attach_capacity"),
            (H_CLOCK_KIND, 4, "clock_kind"),
            (H_TICKS, 8, "ticks_per_sec"),
            (H_TOTAL_SIZE, 8, "total_size"),
            (H_TABLE_ID, 8, "table_id"),
            (H_BALANCER_CAPACITY, 4, "balancer_capacity"),
            (H_BACKEND_CAPACITY, 4, "backend_capacity"),
            (H_BALANCER_SLOT_SIZE, 4, "balancer_slot_size"),
            (H_BACKEND_SLOT_SIZE, 4, "backend_slot_size"),
            (H_LAST_REAP, 8, "last_reap"),
            (H_LANE_SETS, 4, "lane_sets"),
            (H_LANE_HINT, 8, "lane_hint"),
            (H_LANE_SKETCH_SIZE, 4, "lane_sketch_size"),
        ];
        let (o, w, name) = *rng.pick(&fields);
        offset = o;
        width = w;
        what = format!("header.{name}");
        let old = if w == 8 {
            word_at(bytes, o)
        } else {
            u32_at(bytes, o) as u64
        };
        value = match rng.below(4) {
            // Pool sizes around this table's, and past its pairs.
            0 if o == H_LANE_SETS => {
                let sets = g.sets() as u64;
                *rng.pick(&[0, 1, sets - 1, sets + 1, 16, 17, u32::MAX as u64])
            }
            0 => *rng.pick(&[
                0,
                1,
                2,
                3,
                4,
                5,
                7,
                64,
                4096,
                4097,
                65536,
                65537,
                u32::MAX as u64,
            ]),
            1 => *rng.pick(&[
                g.total as u64,
                g.total as u64 + 64,
                g.total as u64 - 64,
                1_000,
                1 << 40,
                1 << 41,
            ]),
            _ => generic_value(rng, old),
        };
    } else if region < 50 {
        let t = rng.below(TASKS as u64) as usize;
        let base = g.task(t);
        let pick = rng.below(100);
        let (field, name): (usize, String) = match pick {
            0..=19 => (T_STATE, "state".into()),
            20..=29 => (T_NAME_LEN, "name_len".into()),
            30..=37 => (T_CONFIG_LOCK, "config_lock".into()),
            38..=42 => (T_NAME + 8 * rng.below(8) as usize, "name".into()),
            43..=49 => (T_CONFIG_VERSION, "config_version".into()),
            50..=69 => {
                let i = rng.below(6) as usize;
                (
                    T_CONFIG + 8 * i,
                    format!(
                        "config[{}].{}",
                        i / 3,
                        ["interval", "rate_bits", "limits"][i % 3]
                    ),
                )
            }
            70..=77 => (T_TAT, "tat".into()),
            78..=89 => {
                let w = rng.below(T_ADAPTIVE_WORDS as u64) as usize;
                (T_ADAPTIVE + 8 * w, format!("adaptive[{w}]"))
            }
            _ => (T_IN_FLIGHT, "in_flight".into()),
        };
        offset = base + field;
        width = 8;
        what = format!("task[{t}].{name}");
        let old = word_at(bytes, offset);
        value = if rng.one_in(3) {
            generic_value(rng, old)
        } else {
            match field {
                T_STATE => match rng.below(6) {
                    0 => 0,
                    1 => TASK_READY,
                    2 => 3 << 62,
                    3 => TASK_READY | rng.below(1 << 20),
                    _ => TASK_CLAIMING | plausible_owner(rng, bytes, g),
                },
                T_NAME_LEN => *rng.pick(&[0, 1, 4, 5, 6, 62, 63, 64, 65, u64::MAX, 1 << 32 | 5]),
                T_CONFIG_LOCK => match rng.below(3) {
                    0 => 0,
                    _ => plausible_owner(rng, bytes, g),
                },
                T_CONFIG_VERSION => *rng.pick(&[0, 1, 2, old + 1, u64::MAX, old ^ 1]),
                f if (T_CONFIG..T_CONFIG + 48).contains(&f) => match (f - T_CONFIG) / 8 % 3 {
                    0 => *rng.pick(&[0, 1, 2, 1 << 62, u64::MAX, 1_000_000]),
                    1 => {
                        let rate: f64 = *rng.pick(&[
                            0.0,
                            1.0,
                            1e-9,
                            1e300,
                            -1.0,
                            f64::NAN,
                            f64::INFINITY,
                            f64::MIN_POSITIVE,
                        ]);
                        rate.to_bits()
                    }
                    _ => {
                        let burst = *rng.pick(&[0u64, 1, 2, 3, 5, 100, u32::MAX as u64]);
                        let cap = *rng.pick(&[
                            0u64,
                            1,
                            3,
                            5,
                            100,
                            COUNT_MASK,
                            COUNT_MASK + 1,
                            u32::MAX as u64,
                        ]);
                        burst | (cap << 32)
                    }
                },
                T_TAT => *rng.pick(&[
                    0,
                    1,
                    u64::MAX,
                    u64::MAX - 1,
                    1 << 62,
                    old.wrapping_add(1 << 40),
                ]),
                T_IN_FLIGHT => in_flight_value(rng, bytes, g, t, old),
                _ => generic_value(rng, old),
            }
        };
    } else if region < 62 {
        let a = rng.below(PROCESSES as u64) as usize;
        let (field, name) = if rng.one_in(4) {
            (A_PID, "pid")
        } else {
            (A_STATE, "state")
        };
        offset = g.attach(a) + field;
        width = 8;
        what = format!("attach[{a}].{name}");
        let old = word_at(bytes, offset);
        value = match (field, rng.below(3)) {
            (A_STATE, 0) => {
                ((*rng.pick(&[0u64, 1, 2, 3, (1 << 45) - 1, (1 << 46) - 1, u64::MAX >> 1])) << 1)
                    | ATTACH_LIVE
            }
            (A_STATE, 1) => old ^ ATTACH_LIVE,
            (A_PID, 0) => *rng.pick(&[0, 1, std::process::id() as u64, u32::MAX as u64, u64::MAX]),
            _ => generic_value(rng, old),
        };
    } else if region < 90 {
        // A task's lane in a table with a set per pair; in a pooled one,
        // any set's (held or free).
        let (lane, where_) = if g.pooled() {
            let set = rng.below(g.sets() as u64) as usize;
            let l = rng.below(LANES as u64) as usize;
            (g.set_lane(set, l), format!("set[{set}].lane[{l}]"))
        } else {
            let t = rng.below(TASKS as u64) as usize;
            let id = rng.below((PROCESSES * LANES) as u64) as usize;
            (
                g.set_lane(t * PROCESSES + id / LANES, id % LANES),
                format!("task[{t}].lane[{id}]"),
            )
        };
        let pick = rng.below(10);
        let (field, name) = match pick {
            0..=3 => (L_LEDGER, "ledger".to_string()),
            4..=6 => (L_INTENT, "intent".to_string()),
            7 => (L_RECLAIMED, "reclaimed".to_string()),
            _ => {
                let c = rng.below(8) as usize;
                (L_COUNTERS + 8 * c, format!("counters[{c}]"))
            }
        };
        offset = lane + field;
        width = 8;
        what = format!("{where_}.{name}");
        let old = word_at(bytes, offset);
        let seq = (word_at(bytes, lane + L_LEDGER) >> 32) & SEQ_MASK;
        let held = *rng.pick(&[0i32, 1, -1, 2, 3, 100, i32::MAX, i32::MIN, 1 << 24]);
        value = if rng.one_in(3) {
            generic_value(rng, old)
        } else {
            match field {
                L_LEDGER => {
                    let s = *rng.pick(&[seq, seq + 1, SEQ_MASK, 0]);
                    let busy = if rng.one_in(2) { BUSY } else { 0 };
                    busy | (s & SEQ_MASK) << 32 | held as u32 as u64
                }
                L_INTENT => {
                    let s = *rng.pick(&[seq + 1, seq, SEQ_MASK]);
                    (s & SEQ_MASK) << 32 | held as u32 as u64
                }
                L_RECLAIMED => {
                    (rng.below(1 << 24) << 40)
                        | *rng.pick(&[0, 1, (1 << 40) - 1, held as u32 as u64])
                }
                _ => *rng.pick(&[u64::MAX, u64::MAX - 1, old.wrapping_add(1 << 63), 0]),
            }
        };
    } else if region < 95 {
        // Counters and the reclaimed total (a pooled set's queue words
        // too: its owner word is `pool`'s).
        let set = rng.below(g.sets() as u64) as usize;
        let w = rng.below(if g.pooled() { 11 } else { 9 }) as usize;
        offset = g.set_baseline(set) + 8 * w;
        width = 8;
        what = format!("baseline of set {set}.word{w}");
        value = generic_value(rng, word_at(bytes, offset));
    } else if region < 98 {
        offset = rng.below(g.file as u64) as usize;
        width = 1;
        what = "a byte".into();
        value = rng.below(256);
    } else {
        offset = 8 * rng.below(g.file as u64 / 8) as usize;
        width = 8;
        what = "a word".into();
        value = generic_value(rng, word_at(bytes, offset));
    }
    Mutation {
        offset,
        width,
        value,
        what,
    }
}

/// In-flight words: odd counts, and tags naming ops of real lanes (pending
/// or not), of lanes past the table, and of no lane.
fn in_flight_value(rng: &mut Rng, bytes: &[u8], g: &Geometry, t: usize, old: u64) -> u64 {
    let count = *rng.pick(&[0, 1, 2, 3, 4, 5, 100, COUNT_MASK, old & COUNT_MASK]);
    let id = *rng.pick(&[0u64, 1, 3, 4, 5, 8, 15, 16, 17, 4096, 0xffff]);
    let lane = (id as usize) < PROCESSES * LANES;
    let seq = match lane.then(|| g.lane(bytes, t, id as usize)).flatten() {
        Some(lane) => (word_at(bytes, lane + L_LEDGER) >> 32) & SEQ_MASK,
        None => rng.below(4),
    };
    let seq = *rng.pick(&[seq, seq + 1, seq + 2, SEQ_MASK]) & SEQ_MASK;
    let tag = match rng.below(4) {
        0 => 0,
        1 => old >> COUNT_BITS,
        _ => ((id + 1) << 24) | seq,
    };
    (tag << COUNT_BITS) | count
}

pub fn mutations(rng: &mut Rng, bytes: &[u8], g: &Geometry) -> Vec<Mutation> {
    let n = if rng.one_in(8) {
        4 + rng.below(13)
    } else {
        1 + rng.below(3)
    };
    let mut out: Vec<_> = (0..n)
        .map(|_| match g.pooled() && rng.one_in(4) {
            true => pool::targeted(rng, bytes, g),
            false => targeted(rng, bytes, g),
        })
        .collect();
    // Damage of several words at once: a fold recorded half-way, a header
    // that describes another layout consistently.
    if g.pooled() && rng.one_in(10) {
        out.extend(pool::recorded_fold(rng, bytes, g));
    }
    if rng.one_in(30) {
        out.extend(pool::relayout(rng, g));
    }
    out
}
