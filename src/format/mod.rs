//! The table file's format: the one place that says what every byte of a
//! table is. Everything here is `#[repr(C)]`, fixed size and made of atomics
//! only — padding included — with no pointers: each process maps the file at
//! its own address, processes of different languages and releases read it,
//! and a hostile writer can change any byte at any time. Anything that
//! changes a struct here bumps [`LAYOUT_VERSION`].
//!
//! ```text
//! [ Header                                          header.rs   4 KiB
//! | TaskSlot × tasks                                task.rs     1280 B each
//! |     (its QuotaSlot at 320, AdaptiveSlot at 704) quota.rs, adaptive.rs
//! | AttachSlot × processes                          lane.rs     64 B
//! | Lane × sets × LANES                             lane.rs     128 B
//! | Baseline × sets                                 lane.rs     128 B
//! |   (sets = tasks × processes, or `lane_sets` in a pooled table, which
//! |   adds: a u32 per (task, process), FoldRecord, LaneTotals × tasks)
//! | BalancerSlot × balancers                        balance.rs  320 B
//! | BackendSlot × balancers × backends              balance.rs  384 B
//! | PickLedger × balancers × processes × backends   balance.rs  16 B
//! |   (the header's `total_size` ends here: what 0.3.0 reads)
//! | LaneSketch × sets × LANES ]                     lane.rs     160 B
//! ```
//!
//! `geometry.rs` computes where each region starts; `versioned.rs` is the one
//! reader of the double-buffered copies (a task's configuration, its
//! adaptive window). Each copy's encode/decode sits beside its struct, in
//! the plain values the features validate (`Local`, `Global`, the limiter
//! `Spec`). This room knows bytes, not behaviour: it imports only the
//! algorithms' value types (`limit`).

mod adaptive;
mod balance;
mod geometry;
mod header;
mod keys;
mod lane;
mod quota;
mod task;
mod versioned;

pub(crate) use adaptive::*;
pub(crate) use balance::*;
pub use geometry::Geometry;
pub(crate) use geometry::{
    MAX_ATTACH_CAPACITY, MAX_BACKEND_CAPACITY, MAX_BALANCER_CAPACITY, MAX_TASK_CAPACITY,
};
pub(crate) use header::*;
pub(crate) use keys::*;
pub(crate) use lane::*;
pub use quota::Fallback;
pub(crate) use quota::*;
pub(crate) use task::*;
pub(crate) use versioned::{commit, next_copy, read_versioned};

/// "FLOWCTRL" — the first eight bytes of every table.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"FLOWCTRL");
/// Bumped on any change to the structs of this room.
pub(crate) const LAYOUT_VERSION: u32 = 3;
/// The version of a table whose lanes come from a pool (`Geometry::lane_sets`):
/// the same structs, and the pool's regions after the baselines.
pub(crate) const POOLED_LAYOUT_VERSION: u32 = 4;
/// Words of a name (a task's, a balancer's, a backend's address): 64 bytes
/// with its length kept beside it.
pub(crate) const NAME_WORDS: usize = 8;

const _: () = assert!(crate::words::NAME_MAX < NAME_WORDS * 8);

/// An acquire load of a table word that is also defined on a read-only
/// mapping: Rust defines only *relaxed* atomic loads on memory mapped
/// without write permission, and a relaxed load followed by an acquire
/// fence orders as an acquire load does. The readers views share with
/// attached handles (statistics, settings, checks) load through this or
/// with `Relaxed`, never with `Acquire`, so they stay defined on any
/// mapping of the file (views themselves read private copies:
/// `shm::ReadOnly`).
#[inline(always)]
pub(crate) fn load_acquire(word: &std::sync::atomic::AtomicU64) -> u64 {
    let value = word.load(std::sync::atomic::Ordering::Relaxed);
    std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
    value
}
