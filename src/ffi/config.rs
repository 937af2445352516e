//! `fc_task_config` both ways: C's fields to the core's `TaskConfig` (its
//! three parts one to one; `FC_UNSET` / `FC_RATE_UNSET` = unset), and the
//! settings in force back into C's fields.

use super::args::{array_str, rate, reserved, set, to_array};
use super::types::*;
use crate::{
    Error, Fallback, GlobalConfig, GlobalSource, LimiterConfig, LimiterSpec, LocalConfig,
    TaskConfig, TaskSettings, WaitOrder,
};

/// The size of `fc_task_config` from which on no cap is `FC_NO_CAP`, both
/// ways: a caller compiled against a header that has `FC_NO_CAP` asks for
/// no cap with it (its 0 is refused) and reads no cap back as it, so what
/// `fc_task_config_get` wrote registers and updates as it is. A caller of
/// an older, smaller layout keeps what its header said: 0 = no cap. Fixed
/// at the layout that brought `FC_NO_CAP` (`types` asserts the struct's
/// size); a larger one has it too.
const NO_CAP_LAYOUT: usize = 224;
const _: () = assert!(size_of::<fc_task_config>() >= NO_CAP_LAYOUT);

/// The core configuration the caller's struct asks for.
pub(super) fn config_of(c: &fc_task_config) -> Result<TaskConfig, Error> {
    reserved(c.reserved, "fc_task_config.reserved")?;
    reserved(c.reserved2, "fc_task_config.reserved2")?;
    reserved(c.reserved3, "fc_task_config.reserved3")?;
    reserved(c.reserved4, "fc_task_config.reserved4")?;
    if c.global_source > FC_SOURCE_STORE {
        return Err(Error::invalid(format!(
            "fc_task_config.global_source must be FC_SOURCE_LOCAL or FC_SOURCE_STORE, not {}",
            c.global_source
        )));
    }
    let limiter = array_str(&c.limiter, "fc_task_config.limiter")?;
    Ok(TaskConfig {
        local: LocalConfig {
            local_rate: rate(c.local_rate),
            burst: set(c.burst),
            max_concurrency: match set(c.max_concurrency) {
                Some(FC_NO_CAP) => Some(crate::NO_CAP),
                Some(0) if (c.size as usize) < NO_CAP_LAYOUT => Some(crate::NO_CAP),
                asked => asked,
            },
            wait_order: match c.wait_order {
                FC_UNSET => None,
                FC_WAIT_FIFO => Some(WaitOrder::Fifo),
                FC_WAIT_LIFO => Some(WaitOrder::Lifo),
                other => {
                    return Err(Error::invalid(format!(
                        "fc_task_config.wait_order must be FC_WAIT_FIFO, FC_WAIT_LIFO or \
                         FC_UNSET, not {other}"
                    )));
                }
            },
            barging: match c.barging {
                FC_UNSET => None,
                0 => Some(false),
                1 => Some(true),
                other => {
                    return Err(Error::invalid(format!(
                        "fc_task_config.barging must be 0, 1 or FC_UNSET, not {other}"
                    )));
                }
            },
            // Set through the config file and `flowctrl set`: the C
            // struct keeps its size.
            shadow: None,
        },
        global: GlobalConfig {
            global_rate: rate(c.global_rate),
            slice_ms: set(c.slice_ms),
            chunk: set(c.chunk),
            fallback: fallback_of(c.fallback, rate(c.fallback_rate))?,
            global_burst: set(c.global_burst),
            shards: set(c.shards),
        },
        limiter: LimiterConfig {
            spec: match limiter {
                "" => None,
                text => Some(LimiterSpec::parse(text)?),
            },
            min_limit: set(c.min_limit),
            max_limit: set(c.max_limit),
            initial_limit: set(c.initial_limit),
        },
    })
}

/// The settings in force as the caller's struct of `size` bytes: every
/// field set (bounds of a non-adaptive limiter read as 0; no cap as
/// `FC_NO_CAP`, or 0 for a layout older than [`NO_CAP_LAYOUT`]).
pub(super) fn config_fields(s: &TaskSettings, size: usize) -> fc_task_config {
    let spec = &s.limiter;
    let (min_limit, max_limit, initial_limit) = if spec.is_adaptive() {
        (spec.min, spec.max, spec.initial)
    } else {
        (0, 0, 0)
    };
    fc_task_config {
        size: size_of::<fc_task_config>() as u32,
        burst: s.local.burst,
        local_rate: s.local.local_rate,
        max_concurrency: match s.local.max_concurrency {
            0 if size >= NO_CAP_LAYOUT => FC_NO_CAP,
            cap => cap,
        },
        reserved: 0,
        global_rate: s.global.global_rate,
        slice_ms: s.global.slice_ms,
        chunk: s.global.chunk,
        fallback_rate: match s.global.fallback {
            Fallback::Rate(r) => r,
            _ => 0.0,
        },
        limiter: to_array(&spec.canonical()),
        min_limit,
        max_limit,
        initial_limit,
        reserved2: 0,
        fallback: match s.global.fallback {
            Fallback::Share => FC_FALLBACK_SHARE,
            Fallback::Local => FC_FALLBACK_LOCAL,
            Fallback::Deny => FC_FALLBACK_DENY,
            Fallback::Rate(_) => FC_FALLBACK_RATE,
        },
        reserved3: 0,
        global_burst: s.global.global_burst,
        global_source: match s.global_source {
            GlobalSource::Local => FC_SOURCE_LOCAL,
            GlobalSource::Store => FC_SOURCE_STORE,
        },
        shards: s.global.shards,
        reserved4: 0,
        wait_order: match s.local.wait_order {
            WaitOrder::Fifo => FC_WAIT_FIFO,
            WaitOrder::Lifo => FC_WAIT_LIFO,
        },
        barging: s.local.barging as u32,
    }
}

/// C's two fallback fields as the core's policy. Unset `fallback` with a
/// rate is that rate (0: the default policy), as in 0.3.
fn fallback_of(code: u32, rate: Option<f64>) -> Result<Option<Fallback>, Error> {
    let policy = match code {
        FC_UNSET => return Ok(rate.map(Fallback::Rate)),
        FC_FALLBACK_SHARE => Fallback::Share,
        FC_FALLBACK_LOCAL => Fallback::Local,
        FC_FALLBACK_DENY => Fallback::Deny,
        FC_FALLBACK_RATE => match rate {
            Some(r) if r != 0.0 => return Ok(Some(Fallback::Rate(r))),
            _ => {
                return Err(Error::invalid(
                    "fc_task_config.fallback FC_FALLBACK_RATE needs a fallback_rate above 0",
                ));
            }
        },
        other => {
            return Err(Error::invalid(format!(
                "fc_task_config.fallback must be an FC_FALLBACK_* value or FC_UNSET, not {other}"
            )));
        }
    };
    match rate {
        Some(r) if r != 0.0 => Err(Error::invalid(format!(
            "fc_task_config.fallback_rate {r} is only for FC_FALLBACK_RATE"
        ))),
        _ => Ok(Some(policy)),
    }
}
