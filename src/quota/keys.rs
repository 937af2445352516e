//! The names of a task's keys in the store. Every key of one shard shares
//! a hash tag, so a Redis Cluster keeps it in one slot and a script call
//! may touch them all.

/// The task's record of its global numbers (`record`), a hash with the
/// task's hash tag; shard `i` past 0 has a copy with its own tag, for its
/// pulls to read in one slot.
pub(crate) fn record_key(prefix: &str, task: &str, shard: u32) -> String {
    match shard {
        0 => format!("{prefix}cfg:{{{task}}}"),
        i => format!("{prefix}cfg:{{{task}#{i}}}:shard{i}"),
    }
}

/// The slicing of the host that cut the shard's keys first (`record`).
pub(crate) fn shape_key(prefix: &str, task: &str, shard: u32) -> String {
    match shard {
        0 => format!("{prefix}{{{task}}}:shape"),
        i => format!("{prefix}{{{task}#{i}}}:shard{i}:shape"),
    }
}

/// The key of a task's slice in shard `shard`: a hash (see the pull script). The
/// hash tag is the task's name for shard 0 (the keys of a task that is not
/// spread) and `<task>#<i>` for shard `i`, so a Redis Cluster keeps a
/// shard's keys on one slot and puts shards on different ones. The shard
/// is also named outside the tag: a task named `x#1` has other keys than
/// shard 1 of `x`.
pub(crate) fn slice_key(prefix: &str, task: &str, shard: u32, slice: u32) -> String {
    match shard {
        0 => format!("{prefix}{{{task}}}:{slice}"),
        i => format!("{prefix}{{{task}#{i}}}:shard{i}:{slice}"),
    }
}
