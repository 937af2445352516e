//! flowctrl's own limiter: the limit where the RTT is `tolerance ×` the
//! no-load RTT (see `docs/auto.md` for the measurements behind it).
//!
//! It measures two things, the window's RTT and the no-load RTT `R0`, and
//! relies on Little's law: while the limit `L` bounds the traffic, `L`
//! permits are in flight, so the throughput is `X = L / rtt` and the pipe
//! (permits the service and the caller's own time hold without a queue)
//! is `X × R0`. Aiming at `rtt = tolerance × R0` puts `(tolerance − 1) ×
//! X × R0` permits in a queue: enough to keep every slot busy while
//! permits spend time outside the server (the caller's own work, jitter),
//! and a queue delay of at most `(tolerance − 1) × R0` on average.
//!
//! - **Hold**: once per RTT, `L ← L × target/rtt` when the RTT is below
//!   the target (at least one permit more: growth off the floor), and
//!   `L × √(target/rtt)` when above (half the gain: what a window sees was
//!   admitted under the previous limit, and full gain would oscillate).
//! - **Drain** (`R0`): every `probe_interval`, or at once (at most once per
//!   four RTTs) when the RTT passes 1.5 × the target, lower `L` to 0.8
//!   × the pipe for one settling and one measuring window. Below the pipe
//!   no queue stands, so the measured RTT *is* `R0`: it replaces the old
//!   one, higher or lower (a baseline cannot get stuck), and `L` goes to
//!   `X × tolerance × R0` with the throughput `X` seen before the drain
//!   (after a capacity change, at once the right limit). If the RTT fell
//!   in proportion to the limit, every permit was still queued (`R0` was
//!   stale high, e.g. a start far above the capacity): drain again.
//! - Between drains a window RTT below `R0` lowers it at once.
//! - A window with drops multiplies `L` by `backoff` (at least one less).
//!
//! Defaults: initial 4, min 1, max 1000, `probe_interval` 3000 ms,
//! `tolerance` 1.25, `backoff` 0.9.

use super::{Spec, State, Window, positive};

pub const PARAMS: &[(&str, f64)] = &[
    ("probe_interval", 3000.0),
    ("tolerance", 1.25),
    ("backoff", 0.9),
];

/// Above this the queue would be several times the pipe: not a limiter.
pub const MAX_TOLERANCE: f64 = 4.0;

/// The longest window, whatever the RTT.
const MAX_WINDOW_NS: u64 = 10_000_000_000;
/// A drain goes to this share of the pipe: far enough below it that no
/// queue stands even if `R0` is a little stale high.
const DRAIN_TO: f64 = 0.8;
/// RTT over the target that starts a drain at once.
const EXCESS: f64 = 1.5;
/// A drain whose RTT fell to within this of the limit's fall found the
/// permits still queued.
const QUEUED: f64 = 1.1;

// aux words.
const PHASE: usize = 0;
const REF_LIMIT: usize = 1;
const REF_RTT: usize = 2;
const LAST_DRAIN: usize = 3;

// Phases.
const HOLD: f64 = 0.0;
const SETTLE: f64 = 1.0;
const MEASURE: f64 = 2.0;

pub fn update(spec: &Spec, s: &mut State, w: &Window) -> u64 {
    let (probe_ms, tolerance, backoff) = (spec.param(0), spec.param(1), spec.param(2));
    let now_ms = w.now_ns as f64 / 1e6;
    let window = spec.window_ns();
    if w.samples == 0 || !positive(w.rtt_ns) {
        return window;
    }
    let rtt = w.rtt_ns;
    // One RTT (f64 → u64 casts saturate: a damaged table cannot overflow).
    let one_rtt = window.max(rtt as u64).min(MAX_WINDOW_NS);
    let l = s.limit;
    let phase = s.aux[PHASE];
    if w.dropped > 0 {
        s.limit = spec.clamp((l * backoff).min(l - 1.0).floor());
        s.aux[PHASE] = HOLD;
        return window;
    }
    if !w.limit_bound(l) {
        // The demand, not the limit, bounded this window: a drain would
        // measure nothing, the law would move a limit nobody uses.
        if phase != HOLD {
            s.limit = spec.clamp(s.aux[REF_LIMIT]);
            s.aux[PHASE] = HOLD;
        }
        return window;
    }
    if phase == SETTLE {
        s.aux[PHASE] = MEASURE;
        return one_rtt;
    }
    if phase == MEASURE {
        return measured(spec, s, now_ms, rtt, tolerance, one_rtt);
    }
    s.aux[PHASE] = HOLD;
    if !positive(s.baseline_ns) || rtt < s.baseline_ns {
        s.baseline_ns = rtt;
    }
    let target = tolerance * s.baseline_ns;
    let since = now_ms - s.aux[LAST_DRAIN];
    let due = !(0.0..probe_ms).contains(&since);
    let excess = rtt > EXCESS * target;
    // At most one drain per four RTTs for an excess (it costs two).
    if due || (excess && since >= (4.0 * rtt / 1e6).min(probe_ms / 4.0)) {
        drain(spec, s, l, rtt);
        return one_rtt;
    }
    if excess {
        // A queue or a slower service: the next drain tells which.
        return one_rtt;
    }
    let ratio = target / rtt;
    s.limit = spec.clamp(if ratio >= 1.0 {
        (l * ratio).round().max(l + 1.0)
    } else {
        (l * ratio.max(0.25).sqrt()).floor()
    });
    one_rtt
}

/// The end of a drain's measuring window, whose RTT was `rtt`.
fn measured(spec: &Spec, s: &mut State, now_ms: f64, rtt: f64, tol: f64, one_rtt: u64) -> u64 {
    let (ref_limit, ref_rtt) = (s.aux[REF_LIMIT], s.aux[REF_RTT]);
    let l = s.limit;
    s.aux[LAST_DRAIN] = now_ms;
    s.aux[PHASE] = HOLD;
    if !(positive(ref_limit) && positive(ref_rtt)) {
        // A damaged table: start over from the RTT at this limit.
        s.baseline_ns = rtt;
        return one_rtt;
    }
    if rtt <= QUEUED * ref_rtt * l / ref_limit && l < ref_limit && l > spec.min as f64 {
        s.baseline_ns = rtt;
        drain(spec, s, l, rtt);
        return one_rtt;
    }
    s.baseline_ns = rtt.min(ref_rtt);
    let throughput = ref_limit / ref_rtt;
    s.limit = spec.clamp((throughput * tol * s.baseline_ns).round());
    one_rtt
}

/// Lowers the limit below the pipe `l × R0 / rtt` to measure `R0`.
fn drain(spec: &Spec, s: &mut State, l: f64, rtt: f64) {
    s.aux[PHASE] = SETTLE;
    s.aux[REF_LIMIT] = l;
    s.aux[REF_RTT] = rtt;
    let pipe = l * s.baseline_ns / rtt;
    s.limit = spec.clamp((DRAIN_TO * pipe).floor().min(l - 1.0));
}

#[cfg(test)]
mod tests;
