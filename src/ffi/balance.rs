//! The C face of balancers: its handle, the structs C allocates, and the
//! functions. Thin like the rest of `ffi`: check, convert, call
//! `crate::Balancer`.

use std::ffi::c_char;
use std::time::Duration;

use super::args::{arg, arg_mut, name_arg, out_arg, outcome_of, put, to_array};
use super::sized::{Out, SizedStruct, init_sized, null, read_sized};
use super::status::{boundary, fc_status};
use super::types::*;
use crate::{Balancer, BalancerConfig, Error, PickOptions, RawPick};

/// The longest backend address, in bytes (without the terminating NUL).
pub const FC_ADDRESS_MAX: u32 = 63;

/// A registered balancer. Thread-safe, like `fc_table`; it keeps its table
/// mapped and attached.
pub struct fc_balancer {
    balancer: Balancer,
}

/// A balancer's configuration. Fill it with
/// `fc_balancer_config_init(&config, sizeof config)`, which sets the
/// defaults, then change fields. Every process registering the balancer
/// must pass the same configuration (else `FC_ERR_CONFIG_MISMATCH`).
///
/// It grows at its end in later versions: the library reads only the first
/// `size` bytes, and fields past them take their defaults. Accepted sizes:
/// 56 to 4096.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fc_balancer_config {
    /// `sizeof` the struct as the caller compiled it.
    pub size: u32,
    /// Must be 0.
    pub reserved: u32,
    /// Time constant of the RTT estimate's decay, ms (default 10000).
    pub decay_ms: u64,
    /// The RTT a failed call records at least, ms (default 5000).
    pub failure_penalty_ms: u64,
    /// Ramp-up period of a new backend, ms (default 30000; 0 = off).
    pub slow_start_ms: u64,
    /// The RTT assumed before any sample, µs (default 100000).
    pub default_rtt_us: u64,
    /// Retries allowed as a share of the last 10 s of picks (default 0.2).
    pub retry_ratio: f64,
    /// Retries allowed per second on top (default 10).
    pub retry_min_per_sec: f64,
}

/// What a pick must avoid. Fill it with
/// `fc_pick_options_init(&options, sizeof options)`. Accepted sizes: 16 to
/// 4096.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fc_pick_options {
    /// `sizeof` the struct as the caller compiled it.
    pub size: u32,
    /// Number of indices in `exclude`.
    pub exclude_count: u32,
    /// Backend indices not to choose (NULL when `exclude_count` is 0).
    pub exclude: *const u32,
}

/// A chosen backend, in caller memory, like `fc_permit`: 128 bytes, never
/// changes, no init call. `backend` (the index) and `address` (NUL-terminated)
/// are for the caller to read; the rest is opaque. Pass it to
/// `fc_pick_done` once, in the same process.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fc_pick {
    /// The backend's index (what `fc_pick_options.exclude` takes).
    pub backend: u32,
    /// Bytes of `address` before its NUL.
    pub address_len: u32,
    /// The backend's address, NUL-terminated.
    pub address: [c_char; 64],
    pub picked_at: u64,
    pub owner: u64,
    pub balancer: u32,
    pub generation: u32,
    pub flags: u32,
    pub reserved0: u32,
    pub check: u64,
    pub reserved: [u64; 2],
}

/// One backend's statistics, host-wide. Fill each element of the array
/// passed to `fc_balancer_stats` with `fc_backend_stats_init` (all with the
/// same size). Accepted sizes: 160 (before `successes`) to 4096: the
/// library writes only the fields the caller's size covers.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fc_backend_stats {
    /// `sizeof` the struct as the caller compiled it.
    pub size: u32,
    /// The backend's index.
    pub index: u32,
    pub weight: u32,
    /// 1 = in the set; 0 = removed (its picks in flight still end).
    pub active: u32,
    /// Picks in flight on it from every process on the host.
    pub in_flight: u64,
    /// Picks of it since it joined.
    pub picked: u64,
    /// The RTT estimate now (decayed), ns.
    pub rtt_ns: u64,
    /// Successes and failures in the last 10 s.
    pub recent_successes: u64,
    pub recent_failures: u64,
    /// How long it stays ejected, ns (0 = not ejected).
    pub ejected_for_ns: u64,
    /// Ejections in a row.
    pub ejections: u32,
    /// Written as 0.
    pub reserved: u32,
    /// Time since it joined, ns.
    pub age_ns: u64,
    /// Its slow-start share of its weight now (1 = full).
    pub ramp: f64,
    /// The load its server last reported, if fresh; -1 = none.
    pub load: f64,
    /// Its address, NUL-terminated.
    pub address: [c_char; 64],
    /// Successes, failures and ejections since it joined: counters (the
    /// `flowctrl_backend_successes_total`, `_failures_total` and
    /// `_ejections_started_total` of `flowctrl metrics`).
    pub successes: u64,
    pub failures: u64,
    pub ejections_total: u64,
}

const _: () = {
    assert!(size_of::<fc_balancer_config>() == 56);
    assert!(size_of::<fc_pick_options>() == 16);
    assert!(size_of::<fc_pick>() == 128);
    assert!(size_of::<fc_backend_stats>() == 184);
};

// SAFETY: repr(C), `size: u32` first, plain integers, floats and (for the
// options) a pointer; no padding (the sizes above are the sums of the fields).
unsafe impl SizedStruct for fc_balancer_config {
    const NAME: &'static str = "fc_balancer_config";
    const INIT: &'static str = "fc_balancer_config_init";
    const MIN_SIZE: usize = 56;
    fn defaults() -> Self {
        let d = BalancerConfig::default();
        Self {
            size: size_of::<Self>() as u32,
            reserved: 0,
            decay_ms: d.decay.as_millis() as u64,
            failure_penalty_ms: d.failure_penalty.as_millis() as u64,
            slow_start_ms: d.slow_start.as_millis() as u64,
            default_rtt_us: d.default_rtt.as_micros() as u64,
            retry_ratio: d.retry_ratio,
            retry_min_per_sec: d.retry_min_per_sec,
        }
    }
}

// SAFETY: as above.
unsafe impl SizedStruct for fc_pick_options {
    const NAME: &'static str = "fc_pick_options";
    const INIT: &'static str = "fc_pick_options_init";
    const MIN_SIZE: usize = 16;
    fn defaults() -> Self {
        Self {
            size: size_of::<Self>() as u32,
            exclude_count: 0,
            exclude: std::ptr::null(),
        }
    }
}

// SAFETY: as above.
unsafe impl SizedStruct for fc_backend_stats {
    const NAME: &'static str = "fc_backend_stats";
    const INIT: &'static str = "fc_backend_stats_init";
    const MIN_SIZE: usize = 160;
    fn defaults() -> Self {
        Self {
            size: size_of::<Self>() as u32,
            index: 0,
            weight: 0,
            active: 0,
            in_flight: 0,
            picked: 0,
            rtt_ns: 0,
            recent_successes: 0,
            recent_failures: 0,
            ejected_for_ns: 0,
            ejections: 0,
            reserved: 0,
            age_ns: 0,
            ramp: 0.0,
            load: -1.0,
            address: [0; 64],
            successes: 0,
            failures: 0,
            ejections_total: 0,
        }
    }
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// Fills `*config` (pass `sizeof *config`) with its size and the defaults.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_balancer_config_init(
    config: *mut fc_balancer_config,
    size: usize,
) -> fc_status {
    boundary(|| {
        unsafe { init_sized(config, size, "config") }?;
        Ok(fc_status::FC_OK)
    })
}

/// Fills `*options` (pass `sizeof *options`) with its size and no exclusion.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_pick_options_init(
    options: *mut fc_pick_options,
    size: usize,
) -> fc_status {
    boundary(|| {
        unsafe { init_sized(options, size, "options") }?;
        Ok(fc_status::FC_OK)
    })
}

/// Fills `*stats` (pass `sizeof *stats`) with its size and zeros.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_backend_stats_init(
    stats: *mut fc_backend_stats,
    size: usize,
) -> fc_status {
    boundary(|| {
        unsafe { init_sized(stats, size, "stats") }?;
        Ok(fc_status::FC_OK)
    })
}

/// Registers the balancer `name` host-wide, or attaches to it. `config`
/// NULL = the defaults. A table with no balancer slots left (or created
/// with none) answers `FC_ERR_TABLE_FULL`. On `FC_OK`, `*out` is a new
/// handle, freed with `fc_balancer_free`. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_balancer_register(
    table: *const fc_table,
    name: *const c_char,
    config: *const fc_balancer_config,
    out: *mut *mut fc_balancer,
) -> fc_status {
    boundary(|| {
        let table = unsafe { arg(table, "table") }?;
        let out = out_arg(out, "out")?;
        let name = unsafe { name_arg(name, "balancer name") }?;
        let config = if config.is_null() {
            BalancerConfig::default()
        } else {
            let c = unsafe { read_sized(config, "config") }?;
            if c.reserved != 0 {
                return Err(Error::invalid("fc_balancer_config.reserved must be 0"));
            }
            BalancerConfig {
                decay: Duration::from_millis(c.decay_ms),
                failure_penalty: Duration::from_millis(c.failure_penalty_ms),
                slow_start: Duration::from_millis(c.slow_start_ms),
                default_rtt: Duration::from_micros(c.default_rtt_us),
                retry_ratio: c.retry_ratio,
                retry_min_per_sec: c.retry_min_per_sec,
            }
        };
        let balancer = table.table.balancer(name, &config)?;
        unsafe { put(out, Box::into_raw(Box::new(fc_balancer { balancer }))) };
        Ok(fc_status::FC_OK)
    })
}

/// Sets the balancer's backends for every process on the host: `count`
/// NUL-terminated addresses (1–63 bytes, no spaces, no duplicates) and their
/// weights (`weights` NULL = all 1; each 1..=1000000). Backends that stay
/// keep their statistics; the others are not picked again (their picks in
/// flight end normally); new ones ramp up. An empty list is refused. Waits
/// up to 2 s for another process changing them. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_balancer_set_backends(
    balancer: *const fc_balancer,
    addresses: *const *const c_char,
    weights: *const u32,
    count: usize,
) -> fc_status {
    boundary(|| {
        let b = unsafe { arg(balancer, "balancer") }?;
        if count > 0 && addresses.is_null() {
            return Err(null("addresses"));
        }
        b.balancer.check_backend_count(count)?;
        let mut list = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: `count` readable pointers per the contract.
            let a = unsafe { *addresses.add(i) };
            let address = unsafe { name_arg(a, "backend address") }
                .map_err(|e| Error::new(e.kind(), format!("address {i}: {}", e.message())))?;
            // SAFETY: NULL or `count` readable weights per the contract.
            let weight = if weights.is_null() {
                1
            } else {
                unsafe { *weights.add(i) }
            };
            list.push((address, weight));
        }
        b.balancer.set_backends(&list)?;
        Ok(fc_status::FC_OK)
    })
}

/// Chooses a backend for one request and fills `*pick` (caller memory, no
/// allocation); finish it with `fc_pick_done`. `options` NULL = no
/// exclusion. Excluding every backend, or a balancer without backends, is
/// `FC_ERR_INVALID_ARGUMENT`. Thread-safe; no system call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_pick(
    balancer: *const fc_balancer,
    options: *const fc_pick_options,
    pick: *mut fc_pick,
) -> fc_status {
    boundary(|| {
        let b = unsafe { arg(balancer, "balancer") }?;
        let pick = out_arg(pick, "pick")?;
        let o = if options.is_null() {
            fc_pick_options::defaults()
        } else {
            unsafe { read_sized(options, "options") }?
        };
        let exclude: &[u32] = match (o.exclude_count, o.exclude.is_null()) {
            (0, _) => &[],
            (_, true) => return Err(null("options.exclude")),
            // SAFETY: `exclude_count` readable indices per the contract.
            (n, false) => unsafe { std::slice::from_raw_parts(o.exclude, n as usize) },
        };
        let raw = b.balancer.pick_raw(&PickOptions { exclude })?;
        unsafe { put(pick, raw.into()) };
        Ok(fc_status::FC_OK)
    })
}

fn done(
    balancer: *const fc_balancer,
    pick: *mut fc_pick,
    outcome: fc_outcome,
    rtt: Option<Duration>,
    load: Option<f64>,
) -> Result<fc_status, Error> {
    let b = unsafe { arg(balancer, "balancer") }?;
    let p = unsafe { arg_mut(pick, "pick") }?;
    let outcome = outcome_of(outcome)?;
    let mut raw = RawPick::from(*p);
    b.balancer.done_raw(&mut raw, outcome, rtt, load)?;
    p.flags = raw.flags;
    Ok(fc_status::FC_OK)
}

/// Records how the call to the picked backend ended (`FC_OUTCOME_*`: a
/// dropped call is a failure) and marks `*pick` done; the RTT is measured
/// since `fc_pick`. Refused with `FC_ERR_INVALID_ARGUMENT`: a pick done
/// already, one of another balancer or process, altered bytes, a backend
/// index this process holds no pick on, an unknown outcome. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_pick_done(
    balancer: *const fc_balancer,
    pick: *mut fc_pick,
    outcome: fc_outcome,
) -> fc_status {
    boundary(|| done(balancer, pick, outcome, None, None))
}

/// `fc_pick_done` with the RTT the caller measured (`rtt_ns` 0 = measure
/// since the pick) and the load the server reported with its response
/// (0 = idle … 1 = saturated; negative or NaN = no report).
/// `FC_OUTCOME_IGNORED` records neither.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_pick_done_with(
    balancer: *const fc_balancer,
    pick: *mut fc_pick,
    outcome: fc_outcome,
    rtt_ns: u64,
    load: f64,
) -> fc_status {
    boundary(|| {
        let rtt = (rtt_ns != 0).then(|| Duration::from_nanos(rtt_ns));
        let load = (load >= 0.0).then_some(load);
        done(balancer, pick, outcome, rtt, load)
    })
}

/// `*allowed` = 1 if the host-wide retry budget allows one more retry now
/// (and counts it), else 0. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_retry_allowed(
    balancer: *const fc_balancer,
    allowed: *mut u32,
) -> fc_status {
    boundary(|| {
        let b = unsafe { arg(balancer, "balancer") }?;
        let allowed = out_arg(allowed, "allowed")?;
        let yes = b.balancer.retry_allowed();
        unsafe { put(allowed, yes as u32) };
        Ok(fc_status::FC_OK)
    })
}

/// Reads the backends' statistics into `out[0..capacity]`, an array whose
/// elements were each filled by `fc_backend_stats_init` with one size (its
/// elements are `out[0].size` bytes apart). `*count` = the number of
/// backends (active and removed); only the first `capacity` are written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_balancer_stats(
    balancer: *const fc_balancer,
    out: *mut fc_backend_stats,
    capacity: usize,
    count: *mut usize,
) -> fc_status {
    boundary(|| {
        let b = unsafe { arg(balancer, "balancer") }?;
        let count = out_arg(count, "count")?;
        let stats = b.balancer.stats();
        if capacity > 0 {
            // Checks the first element's size (and that `out` is not NULL).
            unsafe { Out::new(out, "out") }?;
            // SAFETY: checked above: non-NULL, starting with a valid size.
            let stride = unsafe { out.cast::<u32>().read() } as usize;
            for (i, s) in stats.backends.iter().take(capacity).enumerate() {
                // SAFETY: `capacity` elements of `stride` bytes per the contract.
                let at = unsafe { out.cast::<u8>().add(i * stride) }.cast::<fc_backend_stats>();
                let o = unsafe { Out::new(at, "out element") }?;
                o.write(&fc_backend_stats {
                    size: size_of::<fc_backend_stats>() as u32,
                    index: s.index,
                    weight: s.weight,
                    active: s.active as u32,
                    in_flight: s.in_flight,
                    picked: s.picked,
                    rtt_ns: nanos(s.rtt),
                    recent_successes: s.recent_successes,
                    recent_failures: s.recent_failures,
                    ejected_for_ns: nanos(s.ejected_for),
                    ejections: s.ejections,
                    reserved: 0,
                    age_ns: nanos(s.age),
                    ramp: s.ramp,
                    load: s.load.unwrap_or(-1.0),
                    address: to_array(&s.address),
                    successes: s.successes,
                    failures: s.failures,
                    ejections_total: s.ejections_total,
                });
            }
        }
        unsafe { put(count, stats.backends.len()) };
        Ok(fc_status::FC_OK)
    })
}

/// Frees a balancer handle (NULL is ignored). Picks still in flight through
/// it stay held until this process detaches or dies.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fc_balancer_free(balancer: *mut fc_balancer) {
    if !balancer.is_null() {
        boundary(|| {
            // SAFETY: from fc_balancer_register, freed once.
            drop(unsafe { Box::from_raw(balancer) });
            Ok(fc_status::FC_OK)
        });
    }
}

// `fc_pick` is `RawPick` field for field: C's copy of the core's token.
impl From<RawPick> for fc_pick {
    fn from(r: RawPick) -> Self {
        Self {
            backend: r.backend,
            address_len: r.addr_len,
            address: r.addr.map(|b| b as c_char),
            picked_at: r.picked_at,
            owner: r.owner,
            balancer: r.balancer,
            generation: r.generation,
            flags: r.flags,
            reserved0: r.reserved0,
            check: r.check,
            reserved: r.reserved,
        }
    }
}

impl From<fc_pick> for RawPick {
    fn from(p: fc_pick) -> Self {
        Self {
            backend: p.backend,
            addr_len: p.address_len,
            addr: p.address.map(|b| b as u8),
            picked_at: p.picked_at,
            owner: p.owner,
            balancer: p.balancer,
            generation: p.generation,
            flags: p.flags,
            reserved0: p.reserved0,
            check: p.check,
            reserved: p.reserved,
        }
    }
}
