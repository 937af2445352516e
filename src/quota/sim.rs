//! The simulator's store (feature `sim`, the `sim/` crate): the pull goes to
//! a [`Script`] the simulator installed, which runs the real [`PULL_SCRIPT`]
//! over its model of Redis, with the KEYS and ARGV the Redis store sends
//! and its reply read the same way (`redis::pull_call`, `pull_reply`). A
//! table opened with the store URL `sim:` pulls from it.

use std::sync::Arc;

use parking_lot::Mutex;

use super::keyed::{KeyBatch, KeyReply, key_call, key_reply};
pub use super::script::ScriptValue;
use super::script::{Carried, PULL, PULL_SECTIONS, pull_call};
use super::store::{Ask, QuotaStore, Reply};
use crate::error::{Error, ErrorKind, Result};

/// The pull script, as Redis runs it.
pub const PULL_SCRIPT: &str = PULL;

/// The pull script's sections by file name, in the order Redis runs them
/// (their concatenation is [`PULL_SCRIPT`]).
pub const PULL_SCRIPT_SECTIONS: &[(&str, &str)] = PULL_SECTIONS;

/// The store URL of the installed [`Script`].
pub const URL: &str = "sim:";

/// What runs the pull script for the simulator.
pub trait Script: Send + Sync {
    /// Runs [`PULL_SCRIPT`] with these KEYS and ARGV, as EVALSHA would; the
    /// reply's integers and strings.
    fn eval(&self, keys: &[String], args: &[String]) -> Result<Vec<ScriptValue>>;
    /// The fields of hash `key` (HGETALL), for the task's record; none by
    /// default (the hosts keep their own numbers).
    fn hash(&self, _key: &str) -> Result<Vec<(String, String)>> {
        Ok(Vec::new())
    }
    /// Runs [`KEYED_SCRIPT`] with these KEYS and ARGV; the reply's integers.
    fn eval_keyed(&self, _keys: &[String], _args: &[String]) -> Result<Vec<i64>> {
        Err(Error::new(
            ErrorKind::Store,
            "the simulated store runs no key script",
        ))
    }
}

/// The keys' global-rate script, as Redis runs it.
pub const KEYED_SCRIPT: &str = super::keyed::KEYED;

static INSTALLED: Mutex<Option<Arc<dyn Script>>> = Mutex::new(None);

/// Tables opened after this with the store [`URL`] pull through `script`.
pub fn install(script: Arc<dyn Script>) {
    *INSTALLED.lock() = Some(script);
}

/// A store on the installed script.
pub(super) fn open(options: &super::StoreOptions) -> Result<Box<dyn QuotaStore>> {
    let script = INSTALLED
        .lock()
        .clone()
        .ok_or_else(|| Error::invalid("store sim: no simulated store is installed"))?;
    Ok(Box::new(SimStore {
        script,
        prefix: options.key_prefix.clone(),
        carried: Carried::default(),
    }))
}

struct SimStore {
    script: Arc<dyn Script>,
    prefix: String,
    carried: Carried,
}

impl QuotaStore for SimStore {
    fn pull(&self, ask: &Ask<'_>) -> Result<Reply> {
        let (keys, args) = pull_call(&self.prefix, ask);
        self.carried.reply(ask, &self.script.eval(&keys, &args)?)
    }

    fn pull_keys(&self, batch: &KeyBatch<'_>) -> Option<Result<KeyReply>> {
        let (keys, args) = key_call(&self.prefix, batch);
        Some(
            self.script
                .eval_keyed(&keys, &args)
                .and_then(|r| key_reply(batch, &r)),
        )
    }

    /// The simulator calls `Task::return_idle_quota` on its own clock: a
    /// keeper thread on the real one would race it.
    fn keeper(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        "the simulated store".into()
    }

    fn record_at(&self, task: &str, version: u64) -> Result<Option<Vec<(String, String)>>> {
        self.carried.record_at(task, version, || self.record(task))
    }

    fn record(&self, task: &str) -> Result<Option<Vec<(String, String)>>> {
        let fields = self
            .script
            .hash(&super::keys::record_key(&self.prefix, task, 0, 1))?;
        Ok((!fields.is_empty()).then_some(fields))
    }
}
