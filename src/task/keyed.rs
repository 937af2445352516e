//! A task's keyed acquires: the key's limits (`keyed`), then the task's
//! own, in one decision.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{OwnedPermit, Permit, RawPermit, Task};
use crate::error::{Error, ErrorKind, Result};
use crate::keyed::{
    KeyConfig, KeyGlobal, KeyInfo, KeyLimits, KeyRefusal, KeyRefused, KeyState, KeyStats, Keys,
};

/// The answer to a keyed acquire.
#[must_use]
pub enum KeyDecision<'a> {
    Admitted(Permit<'a>),
    Limited(KeyRefusal),
}

impl<'a> KeyDecision<'a> {
    pub fn permit(self) -> Option<Permit<'a>> {
        match self {
            KeyDecision::Admitted(p) => Some(p),
            KeyDecision::Limited(_) => None,
        }
    }
}

impl Task {
    /// Gives the task key limits, or changes them, for every process on
    /// the host. The first call makes the key file with `config.capacity`
    /// keys; later calls keep its capacity (a different one is an error,
    /// as the file cannot be resized while processes use it).
    pub fn set_keys(&self, config: &KeyConfig) -> Result<()> {
        self.write_keys(config, false)
    }

    /// [`Task::set_keys`] for every limit but the global rate, which stays
    /// as it is (set apart, by [`Task::set_key_global`] or the store's
    /// record): read and written under the key file's configuration lock,
    /// so a change of it meanwhile is never lost.
    pub fn set_keys_keeping_global(&self, config: &KeyConfig) -> Result<()> {
        self.write_keys(config, true)
    }

    fn write_keys(&self, config: &KeyConfig, keep_global: bool) -> Result<()> {
        // Out of range is an invalid argument, key file or not.
        crate::keyed::check_capacity(config.capacity)?;
        config.limits.validate()?;
        self.check_global(config.limits.global.as_ref())?;
        let keys = match self.keys_in_use() {
            Ok(k) => k.clone(),
            Err(_) => {
                let keys = Keys::open(&self.shm, self.index, config.capacity)?;
                self.hold_keys(keys).clone()
            }
        };
        let have = keys.region.entries();
        let asked = (config.capacity as u64).div_ceil(8) * 8;
        if asked != have as u64 {
            return Err(Error::new(
                ErrorKind::ConfigMismatch,
                format!(
                    "task {:?} holds {have} keys; its key capacity cannot change to {} while its \
                     key file exists (remove {} with the table to make it anew)",
                    self.name,
                    config.capacity,
                    keys.region.path.display()
                ),
            ));
        }
        keys.write_default(&self.shm, config, keep_global)?;
        self.shm
            .task_slot(self.index)
            .keyed
            .store(1, Ordering::Release);
        Ok(())
    }

    /// Gives `key` limits of its own (`Some`), or takes its override away
    /// (`None`): a premium caller, an internal one
    /// ([`KeyLimits::unlimited`]), a blocked one ([`KeyLimits::blocked`]).
    /// Applies to the next request of the key, in every process.
    pub fn set_key_override(&self, key: &[u8], limits: Option<&KeyLimits>) -> Result<()> {
        if let Some(l) = limits {
            l.validate()?;
            self.check_global(l.global.as_ref())?;
        }
        self.keys_in_use()?
            .write_override(&self.shm, key, limits, false)
    }

    /// [`Task::set_key_override`] keeping the global rate the key's
    /// override has (a new override has none, nor has a key made unlimited
    /// or blocked), under the configuration lock.
    pub fn set_key_override_keeping_global(
        &self,
        key: &[u8],
        limits: Option<&KeyLimits>,
    ) -> Result<()> {
        if let Some(l) = limits {
            l.validate()?;
        }
        self.keys_in_use()?
            .write_override(&self.shm, key, limits, true)
    }

    /// A global rate the table's store can keep: without a store the host
    /// alone holds a key's slice, at most `MAX_KEY_HELD` a slice.
    fn check_global(&self, global: Option<&KeyGlobal>) -> Result<()> {
        match global {
            Some(g) if !self.quota.keeps_keys() && g.permits() > crate::keyed::MAX_KEY_HELD => {
                Err(Error::invalid(format!(
                    "a key's global rate of {} gives {} permits a slice: without a store the \
                     host alone keeps a key's slice, at most {} (make the slice shorter)",
                    g.rate,
                    g.permits(),
                    crate::keyed::MAX_KEY_HELD
                )))
            }
            _ => Ok(()),
        }
    }

    /// Gives the task's key limits (`key` `None`) or `key`'s override a
    /// rate across the fleet ([`KeyGlobal`]), or takes it away (`global`
    /// `None`), keeping their other limits, for every process on the host.
    /// A key without an override is refused: give it one first.
    pub fn set_key_global(&self, key: Option<&[u8]>, global: Option<&KeyGlobal>) -> Result<()> {
        if let Some(g) = global {
            KeyLimits::new().global(*g).validate()?;
        }
        self.check_global(global)?;
        self.keys_in_use()?
            .write_global(&self.shm, key, global.copied())
    }

    /// Makes `overrides` the task's overrides as a whole (what a config
    /// file lists); false if they were so already.
    pub fn replace_key_overrides(&self, overrides: &[(&[u8], KeyLimits)]) -> Result<bool> {
        for (_, l) in overrides {
            l.validate()?;
            self.check_global(l.global.as_ref())?;
        }
        self.keys_in_use()?.replace_overrides(&self.shm, overrides)
    }

    /// `limits` as the key file would hold them (for comparisons).
    pub(crate) fn normalized_key_limits(&self, limits: &KeyLimits) -> KeyLimits {
        crate::keyed::normalized(limits, &self.shm.clock)
    }

    /// The task's key limits, if it has any.
    pub fn key_config(&self) -> Result<Option<KeyConfig>> {
        Ok(self
            .keys_if_keyed()?
            .map(|k| k.default_config(&self.shm.clock)))
    }

    /// The limits that apply to `key` (its override's, or the task's) and
    /// whether they are an override.
    pub fn key_limits(&self, key: &[u8]) -> Result<(KeyLimits, bool)> {
        self.keys_in_use()?.limits_of(&self.shm.clock, key)
    }

    /// The key file, mapped (an error for a task without key limits).
    pub(crate) fn keys_in_use(&self) -> Result<&Arc<Keys>> {
        self.keys_if_keyed()?.ok_or_else(|| {
            Error::invalid(format!(
                "task {:?} has no key limits (give it some with set_keys, or key_rate in the \
                 config file)",
                self.name
            ))
        })
    }

    fn keys_if_keyed(&self) -> Result<Option<&Arc<Keys>>> {
        if let Some(k) = self.keys.get() {
            return Ok(Some(k));
        }
        if self.shm.task_slot(self.index).keyed.load(Ordering::Acquire) == 0 {
            return Ok(None);
        }
        let keys = Keys::open(&self.shm, self.index, crate::keyed::DEFAULT_KEY_CAPACITY)?;
        Ok(Some(self.hold_keys(keys)))
    }

    /// This handle's key file, opened once: the table's keeper tends it
    /// (the store's record of the keys' global rates) while it is held.
    fn hold_keys(&self, keys: Arc<Keys>) -> &Arc<Keys> {
        self.keys.get_or_init(|| {
            let tended: std::sync::Weak<dyn crate::quota::Tend> = Arc::downgrade(&keys) as _;
            crate::quota::Keeper::tend(&self.quota, self.index, &self.name, tended);
            keys
        })
    }

    /// Whether `acquire_key(_, n)` may now make a round trip to the store:
    /// [`Task::may_pull`], or the task's keys have a global rate and the
    /// store keeps keys (the host's call for them may be due). A few loads;
    /// the asyncio face runs such an acquire off the event loop.
    pub fn may_pull_key(&self, n: u32) -> bool {
        self.may_pull(n)
            || self.quota.keeps_keys()
                && matches!(self.keys_if_keyed(), Ok(Some(k))
                    if k.region.header().any_global.load(Ordering::Acquire) != 0)
    }

    /// Asks for `n` permits for `key`: admitted only if the key's limits
    /// and the task's own admit it; a refusal by either spends neither.
    pub fn acquire_key(&self, key: &[u8], n: u32) -> Result<KeyDecision<'_>> {
        Ok(match self.acquire_key_raw(key, n)? {
            Ok(raw) => KeyDecision::Admitted(Permit::new(self, raw)),
            Err(refusal) => KeyDecision::Limited(refusal),
        })
    }

    /// [`Task::acquire_key`] for faces that keep the permit themselves
    /// (release it with [`Task::release_raw`]).
    #[inline]
    pub fn acquire_key_raw(
        &self,
        key: &[u8],
        n: u32,
    ) -> Result<std::result::Result<RawPermit, KeyRefusal>> {
        if n == 0 {
            return Err(Error::invalid(format!(
                "task {:?}: n must be at least 1",
                self.name
            )));
        }
        let keys = self.keys_in_use()?;
        let owner = self.shm.owner()?;
        let attach = owner.index().unwrap_or(0);
        let who = (attach, owner.compact());
        let taken = match keys.take(&self.shm, who, (&self.quota, &self.name), key, n)? {
            Ok(t) => t,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let decided = match self.decide(n, false) {
            Ok(Err(why)) => self.refused(n, why),
            other => other,
        };
        match decided {
            Ok(Ok(raw)) => {
                let record = taken.record();
                drop(taken);
                Ok(Ok(if record != 0 {
                    raw.with_key_record(&self.shm, record)
                } else {
                    raw
                }))
            }
            Ok(Err(limited)) => {
                taken.undo();
                Ok(Err(KeyRefusal {
                    by: KeyRefused::Task(limited),
                    retry_after: self.task_retry_after(limited),
                }))
            }
            Err(e) => {
                taken.undo();
                Err(e)
            }
        }
    }

    /// Waits up to `timeout` for `n` permits for `key`: a refusal by the
    /// key's rate sleeps until the time it names, one by a cap or by the
    /// task's limits retries after a short pause. Waiters of one key are
    /// admitted in no particular order.
    pub fn acquire_key_timeout(
        &self,
        key: &[u8],
        n: u32,
        timeout: Duration,
    ) -> Result<KeyDecision<'_>> {
        Ok(match self.acquire_key_raw_timeout(key, n, timeout)? {
            Ok(raw) => KeyDecision::Admitted(Permit::new(self, raw)),
            Err(refusal) => KeyDecision::Limited(refusal),
        })
    }

    /// [`Task::acquire_key`] giving a permit that owns a handle of the task.
    pub fn acquire_key_owned(
        &self,
        key: &[u8],
        n: u32,
    ) -> Result<std::result::Result<OwnedPermit, KeyRefusal>> {
        Ok(self
            .acquire_key_raw(key, n)?
            .map(|raw| OwnedPermit::new(self.clone(), raw)))
    }

    /// [`Task::acquire_key_timeout`] giving a permit that owns a handle of
    /// the task.
    pub fn acquire_key_owned_timeout(
        &self,
        key: &[u8],
        n: u32,
        timeout: Duration,
    ) -> Result<std::result::Result<OwnedPermit, KeyRefusal>> {
        Ok(self
            .acquire_key_raw_timeout(key, n, timeout)?
            .map(|raw| OwnedPermit::new(self.clone(), raw)))
    }

    fn acquire_key_raw_timeout(
        &self,
        key: &[u8],
        n: u32,
        timeout: Duration,
    ) -> Result<std::result::Result<RawPermit, KeyRefusal>> {
        let deadline = super::wait::deadline_after(timeout);
        loop {
            match self.acquire_key_raw(key, n)? {
                Ok(raw) => return Ok(Ok(raw)),
                Err(refusal) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let pause = match refusal.by {
                        KeyRefused::Blocked => return Ok(Err(refusal)),
                        _ => refusal
                            .retry_after
                            .unwrap_or(Duration::from_micros(500))
                            .max(Duration::from_micros(50)),
                    };
                    if left.is_zero() || pause > left {
                        return Ok(Err(refusal));
                    }
                    std::thread::sleep(pause);
                }
            }
        }
    }

    /// When a request refused by the task's own limit can succeed, where
    /// the task knows it (its local rate); `None` otherwise.
    fn task_retry_after(&self, limited: crate::Limited) -> Option<Duration> {
        self.retry_after(limited, 1)
    }

    /// The state of `key` for the answers a refusal needs, spending
    /// nothing (`RateLimit-*` headers, a `test` before the work).
    pub fn key_state(&self, key: &[u8]) -> Result<KeyState> {
        self.keys_in_use()?.state(&self.shm, key)
    }

    /// The versions of the store's record of the keys' global rates in
    /// force on the host and last refused (0: none; see [`KeyStats`]), from
    /// the key file's header: no scan of its keys. `None`: no key limits.
    pub fn key_record_versions(&self) -> Result<Option<(u64, u64)>> {
        Ok(self
            .keys_if_keyed()?
            .map(|k| crate::keyed::record_versions(&k.region)))
    }

    /// The key file's counters (`None`: the task has no key limits).
    pub fn key_stats(&self) -> Result<Option<KeyStats>> {
        Ok(self
            .keys_if_keyed()?
            .map(|k| crate::keyed::key_stats(&k.region, self.shm.clock.now())))
    }

    /// The `top` keys by admissions (or refusals), most first.
    pub fn top_keys(&self, top: usize, by_refused: bool) -> Result<Vec<KeyInfo>> {
        let keys = self.keys_in_use()?;
        Ok(crate::keyed::key_infos(
            &keys.region,
            self.shm.clock.now(),
            top,
            by_refused,
        ))
    }

    /// Keys whose count of permits in flight differs from what the
    /// processes' records hold: (entry, counted, recorded). Empty when
    /// exact; for checks and tests.
    pub fn key_drift(&self) -> Result<Vec<(u32, u64, i64)>> {
        Ok(self.keys_if_keyed()?.map(|k| k.drift()).unwrap_or_default())
    }
}
