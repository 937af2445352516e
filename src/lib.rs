//! flowctrl: host-wide flow control shared by every process on a host.
//!
//! All worker processes, in any language, map one shared-memory task table
//! and take admit/reject decisions from the same atomic counters, so a limit
//! of 1,000 requests/s for a task means 1,000 for the whole host.
//!
//! ```no_run
//! use flowctrl::{Decision, Outcome, Table, TableOptions, TaskConfig};
//!
//! let table = Table::open("/dev/shm/my-service", &TableOptions::default())?;
//! let task = table.task("backend", &TaskConfig::new().local_rate(1000.0).max_concurrency(64))?;
//! match task.acquire(1)? {
//!     Decision::Admitted(permit) => {
//!         // ... serve the request ...
//!         permit.release(Outcome::Success)?;
//!     }
//!     Decision::Limited(why) => eprintln!("rejected: {why:?}"),
//! }
//! # Ok::<(), flowctrl::Error>(())
//! ```

//! What an operator should know (the quota store failing and recovering,
//! hosts disagreeing on a task's numbers, the table file replaced, a dead
//! process's permits given back) is logged through the `log` crate under the
//! targets `flowctrl::store` and `flowctrl::table`, at most one line per kind
//! of event and task every 10 s; install any logger to see it. Nothing is
//! logged on the request path.

#[cfg(not(all(target_has_atomic = "64", target_pointer_width = "64")))]
compile_error!(
    "flowctrl needs a 64-bit target with native 64-bit atomics: shared-memory counters cannot be emulated"
);

#[cfg(not(target_os = "linux"))]
compile_error!("flowctrl needs Linux: liveness rests on open-file-description locks");

// The Rust examples of the README and of the guide to per-caller limits
// compile as doctests (`cargo test --doc`); tests/docs.rs checks that the
// README's stay here. The crate ships both files (`include` in Cargo.toml).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
#[cfg(doctest)]
#[doc = include_str!("../docs/guide/limits-per-caller.md")]
mod guide_limits_per_caller {}
// The tower example (`cargo test --features tower --doc`).
#[cfg(all(doctest, feature = "tower"))]
#[doc = include_str!("../docs/guide/middleware.md")]
mod guide_middleware {}

mod balance;
pub mod clock;
mod config_file;
mod error;
mod events;
pub mod ffi;
mod format;
mod keyed;
mod limit;
pub mod manage;
#[cfg(feature = "metrics")]
pub mod metrics;
mod quota;
mod shm;
pub mod table;
mod task;
mod token;
#[cfg(feature = "tower")]
pub mod tower;
mod view;
mod words;

pub use balance::{
    BackendStats, Balancer, BalancerConfig, BalancerStats, MAX_WEIGHT, OwnedPick, Pick,
    PickOptions, RawPick,
};
pub use config_file::{BalancerSection, CONFIG_ENV, ConfigFile, TableSection};
pub use error::{Error, ErrorKind, Result};
/// Log lines' times (RFC 3339, UTC): the C library's and `flowctrl`'s.
#[doc(hidden)]
pub use events::rfc3339;
pub use keyed::{
    DEFAULT_KEY_CAPACITY, KeyConfig, KeyGlobal, KeyGlobalNow, KeyInfo, KeyLimits, KeyOverflow,
    KeyRate, KeyRecord, KeyRefusal, KeyRefused, KeyState, KeyStats, MAX_KEY_CAPACITY, MAX_KEY_LEN,
    MAX_LOCAL,
};
pub use limit::adaptive::{Algorithm as LimiterAlgorithm, LimiterConfig, Spec as LimiterSpec};
/// The fuzzers' seam (`tests/fuzz_store.rs`): the store's reply decoders.
#[doc(hidden)]
pub mod decode {
    pub use crate::quota::decode::*;

    /// A manager's threshold change as the store's change log holds it.
    pub fn decision(text: &str) -> Option<crate::manage::Decision> {
        crate::manage::Decision::decode(text)
    }
}
/// The simulator's seam (feature `sim`, the `sim/` crate): its store.
#[cfg(feature = "sim")]
#[doc(hidden)]
pub use quota::sim;
pub use quota::{
    Fallback, Fleet, GlobalConfig, GlobalSettings, GlobalSource, HostHealth, HostRecord, HotKey,
    HotKeys, MAX_HOT_KEYS, QuotaState, QuotaStats, Store, StoreOptions, StoredConfig,
};
pub use table::{Table, TableCheck, TableOptions};
#[cfg(feature = "async")]
pub use task::Acquire;
pub use task::{
    Consistency, Decision, Histogram, KeyDecision, LocalConfig, LocalSettings, NO_CAP, OwnedPermit,
    PERMIT_ALTERED, Permit, ProcessStats, RawPermit, Task, TaskConfig, TaskSettings, TaskStats,
    parse_cap,
};
pub use token::{Finish, Guard, Issuer};
pub use view::{AttachedProcess, BalancerSnapshot, TableSnapshot, TaskSnapshot, View};
pub use words::{Limited, NAME_MAX, Outcome, WaitOrder, validate_name};

/// The crate version, as the C face reports it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The version of the table file layout this build reads and writes.
pub const LAYOUT_VERSION: u32 = format::LAYOUT_VERSION;
