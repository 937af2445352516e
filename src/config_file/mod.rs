//! A host's limits from a file: one TOML file describes the table (its
//! path, store and capacities), its tasks and its balancers, so a service
//! gains rates, caps, an adaptive limiter or a global limit by editing a
//! file, with no rebuild. Found through `TableOptions::config` (C
//! `fc_table_options.config_path`, Python `Table(config=...)`) or the
//! `FLOWCTRL_CONFIG` environment variable.
//!
//! Precedence, field by field: the store's record of a task (global fields)
//! wins over the file, the file over the fields set in code, and those over
//! what the table already holds. A registration whose code disagrees with
//! the table on a field the file sets is not a mismatch: the file's value
//! is applied host-wide. `watch` re-reads the file while processes run.

mod keys;
mod lines;
mod parse;
mod section;
mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::balance::BalancerConfig;
use crate::error::{Error, Result};
use crate::task::TaskConfig;
pub use keys::KeySection;
pub(crate) use keys::apply_keys;
pub(crate) use section::Section;
pub(crate) use watch::{Live, apply, update_if_needed};

/// The environment variable naming a config file when the options do not.
pub const CONFIG_ENV: &str = "FLOWCTRL_CONFIG";

/// A parsed and checked config file.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// The `[table]` section: the fields it sets.
    pub table: TableSection,
    /// `[tasks."name"]`: each task's fields (unset ones are `None`).
    pub tasks: BTreeMap<String, TaskConfig>,
    /// Each task's limits per caller (`key_rate`, `key_overrides`, ...).
    pub keys: BTreeMap<String, KeySection>,
    /// `[balancers."name"]`: options, and the backends with their weights
    /// (`None`: the file does not manage the balancer's membership).
    pub balancers: BTreeMap<String, BalancerSection>,
    /// Where each `[table]` key the file sets is ("file:line:column"), for
    /// a refusal of its value at open to name it.
    pub(crate) table_at: BTreeMap<&'static str, String>,
    /// `[manager]`: `flowctrl manage`'s, which hosts do not read.
    pub(crate) manager: Option<Section>,
    /// Each task's `managed` and `policy` fields (the manager's).
    pub(crate) managed: BTreeMap<String, Managed>,
    /// FNV-1a of the file's bytes: which version a table applied.
    pub(crate) hash: u64,
}

/// The `[table]` section: what it sets over the options given in code.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TableSection {
    pub path: Option<PathBuf>,
    pub store: Option<String>,
    pub key_prefix: Option<String>,
    pub store_timeout_ms: Option<u32>,
    pub connect_timeout_ms: Option<u32>,
    pub probe_interval_ms: Option<u32>,
    pub host_id: Option<String>,
    pub capacity: Option<u32>,
    pub max_processes: Option<u32>,
    /// `TableOptions::lanes`.
    pub lanes: Option<u32>,
    pub balancers: Option<u32>,
    pub backends_per_balancer: Option<u32>,
    pub mode: Option<u32>,
    pub shared: Option<bool>,
}

/// What a task's section tells the manager (see `manage::config`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Managed {
    /// Where the task's section is ("file:line:column").
    pub at: String,
    pub managed: Option<bool>,
    /// `[tasks."name".policy]`.
    pub policy: Option<Section>,
}

/// A `[balancers."name"]` section.
#[derive(Clone, Debug, PartialEq)]
pub struct BalancerSection {
    pub config: BalancerConfig,
    pub backends: Option<Vec<(String, u32)>>,
}

impl ConfigFile {
    /// Reads and checks the file at `path`: a syntax error, an unknown key
    /// or a bad value is refused with the file, the line and the key.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path)
            .map_err(|e| Error::io(format!("config file {}", path.display()), e))?;
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            // Where the first byte that is not UTF-8 is.
            let good = std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default();
            Error::invalid(format!(
                "{}: not UTF-8 (byte {:#04x}): a config file is UTF-8 text",
                lines::Lines::new(path, good).at(good.len()),
                bytes[e.valid_up_to()]
            ))
        })?;
        Self::parse(path, text)
    }

    /// Where the file sets `[table]`'s `field` ("file:line:column"), if it
    /// does.
    pub(crate) fn table_at(&self, field: &str) -> Option<&str> {
        self.table_at.get(field).map(String::as_str)
    }

    /// Whether the file has anything of `flowctrl manage`'s: a `[manager]`
    /// section, a task's `policy` or `managed = true`. `flowctrl config
    /// check` then runs the manager's checks too.
    pub fn has_manager(&self) -> bool {
        self.manager.is_some()
            || self
                .managed
                .values()
                .any(|m| m.policy.is_some() || m.managed == Some(true))
    }

    /// Parses and checks `text` as the file at `path` would be.
    pub fn parse(path: &Path, text: &str) -> Result<Self> {
        parse::parse(path, text)
    }

    /// The file at `path`, else the one `FLOWCTRL_CONFIG` names; `None`
    /// when neither names one.
    pub(crate) fn find(path: Option<&Path>) -> Result<Option<Self>> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => match std::env::var_os(CONFIG_ENV) {
                Some(p) if !p.is_empty() => PathBuf::from(p),
                _ => return Ok(None),
            },
        };
        Self::load(path).map(Some)
    }

    /// Whether the table holds this version of the file (applied by some
    /// process), or none yet.
    pub(crate) fn is_applied(&self, shm: &crate::shm::Shm) -> bool {
        let applied = shm
            .header()
            .config_applied
            .load(std::sync::atomic::Ordering::Acquire);
        applied == self.hash || applied == 0
    }

    /// What a registration of `name` asks for: the file's fields over the
    /// code's.
    pub(crate) fn task_over(&self, name: &str, code: &TaskConfig) -> TaskConfig {
        match self.tasks.get(name) {
            Some(file) => over(file, code),
            None => *code,
        }
    }
}

/// `code` without the fields `file` sets: what a registration still
/// compares with the table.
pub(crate) fn not_in(file: &TaskConfig, code: &TaskConfig) -> TaskConfig {
    fn clear<T>(set: &Option<T>, field: &mut Option<T>) {
        if set.is_some() {
            *field = None;
        }
    }
    let (l, g, a) = (&file.local, &file.global, &file.limiter);
    let mut out = *code;
    clear(&l.local_rate, &mut out.local.local_rate);
    clear(&l.burst, &mut out.local.burst);
    clear(&l.max_concurrency, &mut out.local.max_concurrency);
    clear(&l.wait_order, &mut out.local.wait_order);
    clear(&l.barging, &mut out.local.barging);
    clear(&l.shadow, &mut out.local.shadow);
    clear(&g.global_rate, &mut out.global.global_rate);
    clear(&g.slice_ms, &mut out.global.slice_ms);
    clear(&g.chunk, &mut out.global.chunk);
    clear(&g.fallback, &mut out.global.fallback);
    clear(&g.global_burst, &mut out.global.global_burst);
    clear(&g.shards, &mut out.global.shards);
    clear(&a.spec, &mut out.limiter.spec);
    clear(&a.min_limit, &mut out.limiter.min_limit);
    clear(&a.max_limit, &mut out.limiter.max_limit);
    clear(&a.initial_limit, &mut out.limiter.initial_limit);
    out
}

/// The fields `file` sets, over `code`'s.
pub(crate) fn over(file: &TaskConfig, code: &TaskConfig) -> TaskConfig {
    let (l, g, a) = (&file.local, &file.global, &file.limiter);
    let (cl, cg, ca) = (&code.local, &code.global, &code.limiter);
    let mut out = *code;
    out.local.local_rate = l.local_rate.or(cl.local_rate);
    out.local.burst = l.burst.or(cl.burst);
    out.local.max_concurrency = l.max_concurrency.or(cl.max_concurrency);
    out.local.wait_order = l.wait_order.or(cl.wait_order);
    out.local.barging = l.barging.or(cl.barging);
    out.local.shadow = l.shadow.or(cl.shadow);
    out.global.global_rate = g.global_rate.or(cg.global_rate);
    out.global.slice_ms = g.slice_ms.or(cg.slice_ms);
    out.global.chunk = g.chunk.or(cg.chunk);
    out.global.fallback = g.fallback.or(cg.fallback);
    out.global.global_burst = g.global_burst.or(cg.global_burst);
    out.global.shards = g.shards.or(cg.shards);
    out.limiter.spec = a.spec.or(ca.spec);
    out.limiter.min_limit = a.min_limit.or(ca.min_limit);
    out.limiter.max_limit = a.max_limit.or(ca.max_limit);
    out.limiter.initial_limit = a.initial_limit.or(ca.initial_limit);
    out
}

/// FNV-1a, stable across builds: the version of a file the table applied.
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}
