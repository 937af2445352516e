//! The names of a task's keys in the store. Every key of one shard shares
//! a hash tag, so a Redis Cluster keeps it in one slot and a script call
//! may touch them all.
//!
//! **Shards spread over the masters.** A Cluster made the usual way
//! (`redis-cli --cluster create`) gives its N masters N equal runs of the
//! 16,384 slots. Shard 0's tag is the task's name (the keys of a task that
//! is not spread); shard i's is `<task>#<i>.<n>` with the first n whose
//! slot lies in the middle half of the run i runs after shard 0's, the slot
//! space cut into `shards` runs as redis-cli cuts it. So with as many
//! shards as masters each master serves one shard, and with fewer the
//! shards are still a run apart. A resharded cluster keeps every shard's
//! keys in one slot (the slices stay exact) but may have moved two shards'
//! slots to one master.

/// The slots of a Redis Cluster.
const SLOTS: u32 = 16_384;

/// The Cluster slot of hash tag `tag` (CRC16/XMODEM, as Redis computes it).
fn slot(tag: &str) -> u32 {
    crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) as u32 % SLOTS
}

/// The first slot of run `i` of `runs`, as `redis-cli --cluster create`
/// cuts the slot space (run i ends at `round((i + 1) × per − 1)`).
fn run_start(i: u32, runs: u32) -> u32 {
    let per = SLOTS as f64 / runs as f64;
    match i {
        0 => 0,
        i if i >= runs => SLOTS,
        i => (i as f64 * per - 1.0).round() as u32 + 1,
    }
}

/// The run of `runs` that slot `s` lies in.
fn run_of(s: u32, runs: u32) -> u32 {
    (0..runs)
        .rev()
        .find(|&i| s >= run_start(i, runs))
        .unwrap_or(0)
}

/// The hash tag of shard `shard` of a task spread over `shards` keys (see
/// the module doc).
pub(crate) fn shard_tag(task: &str, shard: u32, shards: u32) -> String {
    if shard == 0 {
        return task.to_string();
    }
    let runs = shards.max(shard + 1);
    let run = (run_of(slot(task), runs) + shard) % runs;
    let (lo, hi) = (run_start(run, runs), run_start(run + 1, runs));
    let middle = lo + (hi - lo) / 4..hi - (hi - lo) / 4;
    // One try in 2 × runs lands there: 4,096 tries miss with odds below
    // 10^-150.
    (0..4096)
        .map(|n| format!("{task}#{shard}.{n}"))
        .find(|tag| middle.contains(&slot(tag)))
        .unwrap_or_else(|| format!("{task}#{shard}"))
}

/// The keys of shard `shard` (of `shards`) are named `<prefix>{<tag>}…`;
/// past shard 0 the shard is also named outside the tag, so a task whose
/// name looks like a tag (`x#1.0`) has other keys than a shard of `x`.
fn shard_key(prefix: &str, task: &str, shard: u32, shards: u32, what: &str) -> String {
    match shard {
        0 => format!("{prefix}{{{task}}}:{what}"),
        i => format!("{prefix}{{{}}}:shard{i}:{what}", shard_tag(task, i, shards)),
    }
}

/// The task's record of its global numbers (`record`), a hash with the
/// task's hash tag; shard `i` past 0 has a copy with its own tag, for its
/// pulls to read in one slot.
pub(crate) fn record_key(prefix: &str, task: &str, shard: u32, shards: u32) -> String {
    match shard {
        0 => format!("{prefix}cfg:{{{task}}}"),
        i => format!("{prefix}cfg:{{{}}}:shard{i}", shard_tag(task, i, shards)),
    }
}

/// The copies of `task`'s record past shard 0, of every spread it may have
/// had.
pub(crate) fn record_copies(prefix: &str, task: &str) -> Vec<String> {
    (2..=crate::format::MAX_SHARDS)
        .flat_map(|shards| (1..shards).map(move |i| (i, shards)))
        .map(|(i, shards)| record_key(prefix, task, i, shards))
        .collect()
}

/// The slicing of the host that cut the shard's keys first (`record`).
pub(crate) fn shape_key(prefix: &str, task: &str, shard: u32, shards: u32) -> String {
    shard_key(prefix, task, shard, shards, "shape")
}

/// The key of a task's slice in shard `shard`: a hash (see the pull
/// script).
pub(crate) fn slice_key(prefix: &str, task: &str, shard: u32, shards: u32, slice: u32) -> String {
    shard_key(prefix, task, shard, shards, &slice.to_string())
}

/// A key of the manager's (`what`: its fence, lease, change log) in shard
/// `shard`'s slot.
pub(crate) fn manager_key(prefix: &str, task: &str, shard: u32, shards: u32, what: &str) -> String {
    shard_key(prefix, task, shard, shards, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_own() {
        // The examples of Redis' CLUSTER KEYSLOT documentation.
        assert_eq!(slot("somekey"), 11_058);
        assert_eq!(slot("hash_tag"), 2_515);
    }

    #[test]
    fn runs_are_cut_as_redis_cli_cuts_them() {
        // redis-cli --cluster create with 3 masters: 0-5460, 5461-10922,
        // 10923-16383.
        assert_eq!(
            (0..4).map(|i| run_start(i, 3)).collect::<Vec<_>>(),
            [0, 5461, 10923, SLOTS]
        );
        assert_eq!(
            (run_of(5460, 3), run_of(5461, 3), run_of(16383, 3)),
            (0, 1, 2)
        );
    }

    /// With as many masters as shards, made the usual way, every master
    /// holds one shard of every task.
    #[test]
    fn shards_land_on_distinct_masters_of_a_cluster_made_the_usual_way() {
        for shards in 2..=crate::format::MAX_SHARDS {
            for n in 0..500 {
                let task = format!("task{n}");
                let masters: std::collections::BTreeSet<u32> = (0..shards)
                    .map(|i| run_of(slot(&shard_tag(&task, i, shards)), shards))
                    .collect();
                assert_eq!(masters.len() as u32, shards, "{task} over {shards} shards");
            }
        }
    }

    #[test]
    fn a_shards_keys_share_its_tag_and_name_it() {
        let tag = shard_tag("api", 2, 3);
        assert!(tag.starts_with("api#2."), "{tag}");
        assert_eq!(
            slice_key("p:", "api", 2, 3, 7),
            format!("p:{{{tag}}}:shard2:7")
        );
        assert_eq!(
            record_key("p:", "api", 2, 3),
            format!("p:cfg:{{{tag}}}:shard2")
        );
        assert_eq!(shape_key("p:", "api", 0, 3), "p:{api}:shape");
        assert_eq!(slice_key("p:", "api", 0, 1, 7), "p:{api}:7");
    }
}
