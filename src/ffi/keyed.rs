//! Keyed tasks (limits per caller) through the C ABI: thin conversions of
//! `Task::set_keys`, `set_key_override`, `set_key_global`,
//! `acquire_key_raw` and `key_state`.

use std::cell::Cell;
use std::ffi::c_char;
use std::time::Duration;

use super::args::{arg, out_arg, put, text_arg};
use super::sized::{Out, SizedStruct, init_sized};
use super::stats::FC_RETRY_UNKNOWN;
use super::status::{boundary, fc_status};
use super::task::task_of;
use super::types::{
    FC_FALLBACK_DENY, FC_FALLBACK_LOCAL, FC_FALLBACK_RATE, FC_FALLBACK_SHARE, FC_NO_CAP, fc_permit,
    fc_task,
};
use crate::error::Error;
use crate::{
    Fallback, KeyConfig, KeyGlobal, KeyLimits, KeyOverflow, KeyRate, KeyRefused, MAX_KEY_LEN,
};

/// `fc_task_set_keys` flags: shadow mode (count what the key limits would
/// refuse, admit).
pub const FC_KEYS_SHADOW: u32 = 1;
/// `fc_task_set_keys`: keys that find no entry pass the key limits
/// (default: they share one overflow state).
pub const FC_KEYS_OVERFLOW_ADMIT: u32 = 2;
/// `fc_task_set_key_override`: the key has no key limit.
pub const FC_KEY_UNLIMITED: u32 = 4;
/// `fc_task_set_key_override`: the key is refused (`FC_LIMITED_KEY_BLOCKED`).
pub const FC_KEY_BLOCKED: u32 = 8;
/// `fc_task_set_key_override`: the key's override is removed.
pub const FC_KEY_REMOVE: u32 = 16;

thread_local! {
    /// The last keyed refusal of this thread: (retry after ns, which limit).
    static LAST: Cell<(u64, u32)> = const { Cell::new((FC_RETRY_UNKNOWN, 0)) };
}

fn limits(rates: *const c_char, max_concurrency: u32, flags: u32) -> Result<KeyLimits, Error> {
    let mut l = if flags & FC_KEY_UNLIMITED != 0 {
        KeyLimits::unlimited()
    } else if flags & FC_KEY_BLOCKED != 0 {
        KeyLimits::blocked()
    } else {
        KeyLimits::new()
    };
    // Rates of an unlimited or blocked key are refused by the core.
    if !rates.is_null() {
        l = l.with_rates(unsafe { text_arg(rates, "rates") }?)?;
    }
    // 0 (the argument's default) and FC_NO_CAP: no cap per key.
    if max_concurrency != 0 && max_concurrency != FC_NO_CAP {
        l = l.max_concurrency(max_concurrency);
    }
    Ok(l.shadow(flags & FC_KEYS_SHADOW != 0))
}

unsafe fn key_arg<'a>(key: *const u8, len: usize) -> Result<&'a [u8], Error> {
    if len > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "a key of {len} bytes is longer than {MAX_KEY_LEN}"
        )));
    }
    if len == 0 {
        return Ok(&[]);
    }
    if key.is_null() {
        return Err(super::sized::null("key"));
    }
    // SAFETY: `len` readable bytes per the contract.
    Ok(unsafe { std::slice::from_raw_parts(key, len) })
}

/// Gives the task key limits for every process on the host, or changes
/// them: `rates` like `"10/second;1000/hour"` (NULL: none), a per-key
/// `max_concurrency` (0 or `FC_NO_CAP`: none; Python and the config file
/// refuse 0), `capacity` keys (0: 65,536; fixed when
/// the task's key file is made), `flags` `FC_KEYS_SHADOW`,
/// `FC_KEYS_OVERFLOW_ADMIT`. A global rate the task's keys have
/// (`fc_task_set_key_global`) is kept. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_set_keys(
    task: *const fc_task,
    rates: *const c_char,
    max_concurrency: u32,
    capacity: u32,
    flags: u32,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        if flags & !(FC_KEYS_SHADOW | FC_KEYS_OVERFLOW_ADMIT) != 0 {
            return Err(Error::invalid(format!(
                "fc_task_set_keys: unknown flags {flags:#x}"
            )));
        }
        let task = task_of(task);
        let mut config = KeyConfig::new(limits(rates, max_concurrency, flags)?);
        if capacity != 0 {
            config = config.capacity(capacity);
        }
        if flags & FC_KEYS_OVERFLOW_ADMIT != 0 {
            config = config.overflow(KeyOverflow::Admit);
        }
        // A global rate is set apart (fc_task_set_key_global): kept.
        task.set_keys_keeping_global(&config)?;
        Ok(fc_status::FC_OK)
    })
}

/// Gives `key` (`key_len` bytes) limits of its own, live: `rates` and
/// `max_concurrency` as `fc_task_set_keys`, or `flags` `FC_KEY_UNLIMITED`,
/// `FC_KEY_BLOCKED` (neither takes rates or a cap), `FC_KEY_REMOVE` (back
/// to the task's; alone, with NULL rates and no cap), with
/// `FC_KEYS_SHADOW`. A global rate the key's override has
/// (`fc_task_set_key_override_global`) is kept, unless the key becomes
/// unlimited or blocked; a new override has none (an override's limits are
/// all its own). Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_set_key_override(
    task: *const fc_task,
    key: *const u8,
    key_len: usize,
    rates: *const c_char,
    max_concurrency: u32,
    flags: u32,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let key = unsafe { key_arg(key, key_len) }?;
        let known = FC_KEYS_SHADOW | FC_KEY_UNLIMITED | FC_KEY_BLOCKED | FC_KEY_REMOVE;
        if flags & !known != 0 || (flags & FC_KEY_UNLIMITED != 0 && flags & FC_KEY_BLOCKED != 0) {
            return Err(Error::invalid(format!(
                "fc_task_set_key_override: flags {flags:#x} are unknown or contradict"
            )));
        }
        let no_cap = max_concurrency == 0 || max_concurrency == FC_NO_CAP;
        if flags & FC_KEY_REMOVE != 0 && (flags != FC_KEY_REMOVE || !rates.is_null() || !no_cap) {
            return Err(Error::invalid(
                "fc_task_set_key_override: FC_KEY_REMOVE takes no rates, cap or other flag",
            ));
        }
        let task = task_of(task);
        let l = if flags & FC_KEY_REMOVE != 0 {
            None
        } else {
            Some(limits(rates, max_concurrency, flags)?)
        };
        // The override's own global rate is kept (not the task's).
        task.set_key_override_keeping_global(key, l.as_ref())?;
        Ok(fc_status::FC_OK)
    })
}

/// A global rate from C's arguments; `None` for `count` 0 (every other
/// argument 0 too).
pub(super) fn global(
    count: f64,
    period_ms: u64,
    slice_ms: u64,
    local: u32,
    fallback: u32,
) -> Result<Option<KeyGlobal>, Error> {
    if count == 0.0 {
        if period_ms != 0 || slice_ms != 0 || local != 0 || fallback != 0 {
            return Err(Error::invalid(
                "count 0 takes the key's global rate away: pass 0 for every other argument"
                    .to_string(),
            ));
        }
        return Ok(None);
    }
    let fallback = match fallback {
        FC_FALLBACK_SHARE => Fallback::Share,
        FC_FALLBACK_LOCAL => Fallback::Local,
        FC_FALLBACK_DENY => Fallback::Deny,
        FC_FALLBACK_RATE => {
            return Err(Error::invalid(
                "a key's global fallback is FC_FALLBACK_SHARE, _LOCAL or _DENY: \
                 FC_FALLBACK_RATE has no rate to name here"
                    .to_string(),
            ));
        }
        other => {
            return Err(Error::invalid(format!(
                "fallback must be FC_FALLBACK_SHARE, _LOCAL or _DENY, not {other}"
            )));
        }
    };
    let mut g = KeyGlobal::new(KeyRate::new(count, Duration::from_millis(period_ms)))
        .local(local)
        .fallback(fallback);
    if slice_ms != 0 {
        g = g.slice(Duration::from_millis(slice_ms));
    }
    KeyLimits::new().global(g).validate()?;
    Ok(Some(g))
}

/// A global rate as C's values: count, period_ms, slice_ms (in force),
/// local, fallback; all 0 for none.
pub(super) fn global_values(g: Option<KeyGlobal>) -> (f64, u64, u64, u32, u32) {
    let ms = |d: Duration| d.as_millis().min(u64::MAX as u128) as u64;
    match g {
        None => (0.0, 0, 0, 0, 0),
        Some(g) => (
            g.rate.count,
            ms(g.rate.period),
            ms(g.slice_in_force()),
            g.local,
            match g.fallback {
                Fallback::Local => FC_FALLBACK_LOCAL,
                Fallback::Deny => FC_FALLBACK_DENY,
                _ => FC_FALLBACK_SHARE,
            },
        ),
    }
}

/// Gives every key of the task a rate across the fleet, or changes it:
/// `count` requests per `period_ms`, kept in slices of `slice_ms` (0: the
/// period; whole ms from 10 ms to a day, with 1 to 2^31 permits a slice),
/// of which a host admits `local` (0 to 31; 0 is none, where Python and
/// the config file default to 1) a slice without the store
/// while the key is not hot there, and `fallback` `FC_FALLBACK_SHARE`,
/// `FC_FALLBACK_LOCAL` or `FC_FALLBACK_DENY` while the store fails.
/// `count` 0 (every other argument 0) takes it away. The task's other key
/// limits are kept; it needs key limits first (`fc_task_set_keys`). A
/// table without a store URL is a fleet of one: the host decides alone.
/// Refusals are `FC_LIMITED_KEY_GLOBAL`. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_task_set_key_global(
    task: *const fc_task,
    count: f64,
    period_ms: u64,
    slice_ms: u64,
    local: u32,
    fallback: u32,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let g = global(count, period_ms, slice_ms, local, fallback)?;
        task_of(task).set_key_global(None, g.as_ref())?;
        Ok(fc_status::FC_OK)
    })
}

/// As `fc_task_set_key_global`, for `key`'s override alone (`key_len`
/// bytes), keeping its other limits: a key without an override is refused
/// (give it one with `fc_task_set_key_override` first). Thread-safe.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fc_task_set_key_override_global(
    task: *const fc_task,
    key: *const u8,
    key_len: usize,
    count: f64,
    period_ms: u64,
    slice_ms: u64,
    local: u32,
    fallback: u32,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let key = unsafe { key_arg(key, key_len) }?;
        let g = global(count, period_ms, slice_ms, local, fallback)?;
        task_of(task).set_key_global(Some(key), g.as_ref())?;
        Ok(fc_status::FC_OK)
    })
}

/// The global rate in force for `key` (its override's, or the task's),
/// as the key file holds it: `*count` per `*period_ms` (0: none, and every
/// other value 0), in slices of `*slice_ms`, `*local`, `*fallback`
/// (`FC_FALLBACK_*`). The count is the slice's permits × period / slice:
/// 1000 per hour in slices of a minute is 16 a slice, read as 960. Any
/// pointer may be NULL. Thread-safe.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fc_key_global_get(
    task: *const fc_task,
    key: *const u8,
    key_len: usize,
    count: *mut f64,
    period_ms: *mut u64,
    slice_ms: *mut u64,
    local: *mut u32,
    fallback: *mut u32,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let key = unsafe { key_arg(key, key_len) }?;
        let values = global_values(task_of(task).key_limits(key)?.0.global);
        unsafe {
            if !count.is_null() {
                put(count, values.0);
            }
            if !period_ms.is_null() {
                put(period_ms, values.1);
            }
            if !slice_ms.is_null() {
                put(slice_ms, values.2);
            }
            if !local.is_null() {
                put(local, values.3);
            }
            if !fallback.is_null() {
                put(fallback, values.4);
            }
        }
        Ok(fc_status::FC_OK)
    })
}

/// Asks for `n` permits for `key` (`key_len` bytes, at most 4,096): `FC_OK`
/// with `*permit` filled (release it with `fc_release`) only if the key's
/// limits and the task's own admit it; a refusal spends neither.
/// `FC_LIMITED_KEY_RATE`, `_KEY_CONCURRENCY`, `_KEY_BLOCKED`, `_KEY_GLOBAL`
/// for the key's limits, the task's own `FC_LIMITED_*` for its;
/// `fc_last_refusal` then says when an identical request can pass.
/// Thread-safe. No allocation but in a call to the store, which a key's
/// global rate may make on the way (a round trip).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_acquire_key(
    task: *const fc_task,
    key: *const u8,
    key_len: usize,
    n: u32,
    permit: *mut fc_permit,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let key = unsafe { key_arg(key, key_len) }?;
        let permit = out_arg(permit, "permit")?;
        Ok(match task_of(task).acquire_key_raw(key, n)? {
            Ok(raw) => {
                unsafe { put(permit, raw.into()) };
                fc_status::FC_OK
            }
            Err(refusal) => {
                let (status, which) = match refusal.by {
                    KeyRefused::Task(limited) => (limited.into(), 0),
                    KeyRefused::Rate(i) => (fc_status::FC_LIMITED_KEY_RATE, i as u32),
                    KeyRefused::Concurrency | KeyRefused::Records => {
                        (fc_status::FC_LIMITED_KEY_CONCURRENCY, 0)
                    }
                    KeyRefused::Blocked => (fc_status::FC_LIMITED_KEY_BLOCKED, 0),
                    KeyRefused::Global => (fc_status::FC_LIMITED_KEY_GLOBAL, 0),
                };
                let ns = refusal.retry_after.map_or(FC_RETRY_UNKNOWN, |d| {
                    d.as_nanos().min(u64::MAX as u128 - 1) as u64
                });
                LAST.with(|l| l.set((ns, which)));
                status
            }
        })
    })
}

/// The last keyed refusal of this thread: when an identical request can
/// pass (`*retry_after_ns`; `FC_RETRY_UNKNOWN` if no time is known: a cap, a
/// blocked key, a task's limit other than its local rate) and,
/// for `FC_LIMITED_KEY_RATE`, which of the key's rates refused (0-based,
/// in the order given). Either pointer may be NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_last_refusal(
    retry_after_ns: *mut u64,
    which_rate: *mut u32,
) -> fc_status {
    boundary(|| {
        let (ns, which) = LAST.with(Cell::get);
        if !retry_after_ns.is_null() {
            unsafe { put(retry_after_ns, ns) };
        }
        if !which_rate.is_null() {
            unsafe { put(which_rate, which) };
        }
        Ok(fc_status::FC_OK)
    })
}

/// A key's state for `Retry-After` and the `RateLimit-*` headers, read
/// without spending. Fill it with `fc_key_state_init(&s, sizeof s)`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fc_key_state {
    /// `sizeof` the struct as the caller compiled it.
    pub size: u32,
    /// 1 if the key holds an entry now.
    pub present: u32,
    /// The tightest of the key's rates on the host: its limit (its burst;
    /// 0: the key has none), and what it admits now. A global rate is not
    /// one of them: its slice is the fleet's (`fc_key_global_get` reads
    /// its settings; a refusal by it says when to retry).
    pub limit: u32,
    pub remaining: u32,
    /// When that rate is whole again, and when one request can pass the
    /// key's rates on the host, ns.
    pub reset_after_ns: u64,
    pub retry_after_ns: u64,
    /// Permits of the key in flight on the host, and its cap (0: none).
    pub in_flight: u32,
    pub max_concurrency: u32,
    /// 1 if an override applies; 1 if the key is blocked; 1 if unlimited.
    pub overridden: u32,
    pub blocked: u32,
    pub unlimited: u32,
    /// Written as 0.
    pub reserved: u32,
}

// The size is ABI; a field appended later leaves MIN_SIZE where it is.
const _: () = assert!(size_of::<fc_key_state>() == 56);

unsafe impl SizedStruct for fc_key_state {
    const NAME: &'static str = "struct fc_key_state";
    const INIT: &'static str = "fc_key_state_init";
    const MIN_SIZE: usize = 56;
    fn defaults() -> Self {
        Self {
            size: size_of::<Self>() as u32,
            present: 0,
            limit: 0,
            remaining: 0,
            reset_after_ns: 0,
            retry_after_ns: 0,
            in_flight: 0,
            max_concurrency: 0,
            overridden: 0,
            blocked: 0,
            unlimited: 0,
            reserved: 0,
        }
    }
}

/// Fills `*state`, a struct of `size` bytes (pass `sizeof *state`), with
/// its size and zeros.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_key_state_init(state: *mut fc_key_state, size: usize) -> fc_status {
    boundary(|| {
        unsafe { init_sized(state, size, "state") }?;
        Ok(fc_status::FC_OK)
    })
}

/// Reads `key`'s state into `*out` (filled by `fc_key_state_init`),
/// spending nothing. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_key_state_get(
    task: *const fc_task,
    key: *const u8,
    key_len: usize,
    out: *mut fc_key_state,
) -> fc_status {
    boundary(|| {
        let task = unsafe { arg(task, "task") }?;
        let key = unsafe { key_arg(key, key_len) }?;
        let out = unsafe { Out::new(out, "out") }?;
        let s = task_of(task).key_state(key)?;
        let ns = |d: std::time::Duration| d.as_nanos().min(u64::MAX as u128) as u64;
        out.write(&fc_key_state {
            size: size_of::<fc_key_state>() as u32,
            present: s.present as u32,
            limit: s.limit,
            remaining: s.remaining,
            reset_after_ns: ns(s.reset_after),
            retry_after_ns: ns(s.retry_after),
            in_flight: s.in_flight,
            max_concurrency: s.max_concurrency,
            overridden: s.overridden as u32,
            blocked: s.blocked as u32,
            unlimited: s.unlimited as u32,
            reserved: 0,
        });
        Ok(fc_status::FC_OK)
    })
}
