//! flowctrl's own limiter: the limit where the RTT is `tolerance ×` the
//! no-load RTT `R0` (see `docs/reference/auto.md` for why, `benches/AUTO.md` for the
//! measurements).
//!
//! Little's law: while the limit `L` bounds the traffic, the throughput
//! `X` (the window's releases per second, at most `L / rtt`) times `R0` is
//! the *pipe*: the permits the service and the caller's own time hold
//! without a queue, which is more than the slot count when callers hold
//! permits outside the server. Aiming at `rtt = tolerance × R0`, i.e.
//! `L = tolerance × X × R0`, keeps `(tolerance − 1)` pipes queued: every
//! slot stays busy through the jitter of the callers' time outside, at a
//! mean queue delay of `(tolerance − 1) × R0`.
//!
//! - **Hold**: once per RTT, if the RTT is more than 10 % off the target
//!   (or `(tolerance − 1) / 2`, if less), `L ← X × target` (at least one
//!   permit, and down at most to half: a window whose releases stalled
//!   reads a throughput far below the permits in use). Until the first
//!   window with a queue (RTT 5 % over `R0`) or a limit the demand did
//!   not fill: twice the permits in use (slow start). Inside the band,
//!   under the target: one more permit while the target is nearer it.
//!   The window after a change is skipped: it was admitted under the old
//!   limit (acting on it would oscillate). Growth needs a refusal.
//! - **Drain** (measures `R0`): every `probe_interval` unless nothing moved
//!   since the last one (below), or at once (at most once per four RTTs)
//!   when the RTT passes 1.5 × the target or falls 10 % below `R0`: lower
//!   `L` to 0.9 × the pipe (not below `L/2`) for one
//!   settling and one measuring window. Below the pipe no queue stands, so
//!   the measured RTT *is* `R0`: it replaces the old one, higher or lower
//!   (a baseline cannot get stuck), and `L` goes to `X × tolerance × R0`
//!   with the `X` seen before the drain (after a capacity change, the
//!   right limit in one step). If the RTT fell in proportion to the limit
//!   (from the higher of the RTTs before the drain and in its settling
//!   window), every permit was still queued (`R0` was stale high, or the
//!   slots fell): drain again. If it rose over either, the capacity fell
//!   meanwhile: measure again at this limit.
//! - **Skip**: a due drain waits while the law holds the limit the last
//!   drain started from, or the one it set (within less than the band;
//!   either is where the law held with the `R0` it measured): the law
//!   moves the limit whenever the RTT leaves its band, so nothing it sees
//!   moved, and a drain would measure what the last one did. As soon as
//!   the limit moves the drain runs; after four intervals it runs anyway.
//! - A window with drops multiplies `L` by `backoff` (at least one less).
//!
//! Defaults: initial 4, min 1, max 1000, `probe_interval` 5000 ms,
//! `tolerance` 1.25, `backoff` 0.9.

use super::{Spec, State, Window, positive};

pub const PARAMS: &[(&str, f64)] = &[
    ("probe_interval", 5000.0),
    // 0.3's `baseline_window`, retired: the slot keeps its old default so a
    // 0.3 process sharing the table reads a valid spec, and this version
    // reads a 0.3 process's `auto` (its tolerance is in the next slot).
    ("_baseline_window", 2000.0),
    ("tolerance", 1.25),
    ("backoff", 0.9),
];

/// Above this the queue would be several times the pipe: not a limiter.
pub const MAX_TOLERANCE: f64 = 4.0;

/// The longest window, whatever the RTT.
const MAX_WINDOW_NS: u64 = 10_000_000_000;
/// A drain goes to this share of the pipe: below it, so no queue stands,
/// and no further: the pipe left unfilled for the drain's two windows is
/// what a drain costs (0.8 cost 32 × 200 ms about 27 admissions of its
/// 800 in a 5 s span). A stale-high `R0` shows as an RTT that fell in
/// proportion to the limit, and the drain steps on.
const DRAIN_TO: f64 = 0.9;
/// RTT over the target that starts a drain at once.
const EXCESS: f64 = 1.5;
/// Within this of the target (or half the tolerance's excess, if less)
/// the limit stays: a window's RTT is a mean of a few dozen samples, and
/// chasing its noise is a queue that comes and goes.
const BAND: f64 = 0.1;
/// A drain whose RTT fell to within this of the limit's fall found the
/// permits still queued.
const QUEUED: f64 = 1.1;
/// A baseline nothing contradicted is re-measured after this many
/// `probe_interval`s anyway (a change that moves neither the limit, the
/// throughput nor the RTT: more slots, each slower, at the same capacity).
const TRUSTED: f64 = 4.0;

// aux words.
const PHASE: usize = 0;
const REF_LIMIT: usize = 1;
const REF_RTT: usize = 2;
const LAST_DRAIN: usize = 3;
/// 1 once a window saw a queue (the end of slow start).
const FOUND: usize = 4;
/// The throughput (per ns) of the window before a drain.
const REF_X: usize = 5;
/// The limit the last completed drain started from (0: none); during a
/// drain, the RTT of its settling window (0: none yet).
const HELD: usize = 6;
/// After a drain, the limit it set (during one, the limit it started
/// from: [`REF_LIMIT`], the same word).
const SET: usize = REF_LIMIT;

// Phases.
const HOLD: f64 = 0.0;
const SETTLE: f64 = 1.0;
const MEASURE: f64 = 2.0;
/// The window after a change: its RTTs were admitted under the old limit.
const RESUME: f64 = 3.0;

pub fn update(spec: &Spec, s: &mut State, w: &Window) -> u64 {
    let (probe_ms, tolerance, backoff) = (spec.param(0), spec.param(2), spec.param(3));
    let now_ms = w.now_ns as f64 / 1e6;
    let window = spec.window_ns();
    if w.samples == 0 || !positive(w.rtt_ns) {
        return window;
    }
    let rtt = w.rtt_ns;
    // One RTT (f64 → u64 casts saturate: a damaged table cannot overflow).
    let one_rtt = window.max(rtt as u64).min(MAX_WINDOW_NS);
    let l = s.limit;
    let x = throughput(w, l);
    let phase = s.aux[PHASE];
    if w.dropped > 0 {
        s.limit = spec.clamp((l * backoff).min(l - 1.0).floor());
        s.aux[PHASE] = HOLD;
        s.aux[HELD] = 0.0;
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
        // Its RTTs were admitted under the limit before the drain: when a
        // queue was still rising in the window that started the drain
        // (slots lost), they are the queue it had, the one to compare with.
        s.aux[HELD] = rtt;
        s.aux[PHASE] = MEASURE;
        return one_rtt;
    }
    if phase == MEASURE {
        return measured(spec, s, (now_ms, rtt, x), tolerance, one_rtt);
    }
    s.aux[PHASE] = HOLD;
    if !positive(s.baseline_ns) {
        // The first window: its RTT is the baseline until the first drain.
        s.baseline_ns = rtt;
        s.aux[LAST_DRAIN] = now_ms;
    }
    if phase == RESUME {
        return one_rtt;
    }
    let target = tolerance * s.baseline_ns;
    let band = BAND.min((tolerance - 1.0) / 2.0);
    let since = now_ms - s.aux[LAST_DRAIN];
    // Nothing moved since the last drain: the law, which moves the limit
    // whenever the RTT leaves its band, holds the limit it held then. A
    // drain would measure the same `R0`. (A window's RTT or throughput is
    // a mean of a few dozen samples, as noisy as the band: not compared.)
    // Or the limit that drain set: where the law would have come back to.
    let held = near(l, s.aux[HELD], band) || (positive(s.aux[HELD]) && near(l, s.aux[SET], band));
    let unmoved = (0.0..TRUSTED * probe_ms).contains(&since) && held;
    let due = !(0.0..probe_ms).contains(&since) && !unmoved;
    // A queue, a slower service, or a faster one: a drain tells which.
    let off = rtt > EXCESS * target || rtt < (1.0 - band) * s.baseline_ns;
    // At most one drain per four RTTs for that (it costs two).
    if due || (off && since >= (4.0 * rtt / 1e6).min(probe_ms / 4.0)) {
        drain(spec, s, l, rtt, x);
        return one_rtt;
    }
    if off {
        return one_rtt;
    }
    let ratio = target / rtt;
    // Growth needs the limit to have refused someone (or to be full): a
    // demand that half-fills it says nothing about the permits above.
    let full = w.rejected > 0 || w.in_flight as f64 >= l;
    if ratio > 1.0 && !full {
        return one_rtt;
    }
    if (ratio - 1.0).abs() <= band {
        if ratio > 1.0 && s.aux[FOUND] == 1.0 && (x * target).round() > l {
            // Under the target, inside the band: one more permit while the
            // target is nearer the next one. The law would stop at the
            // band's lower edge, where a small pipe loses most (4 × 20 ms:
            // 7 permits at 19 ms of a 21 ms target, 4 % under fixed-8).
            // Not a change the skip should re-measure: the approach to
            // the target the last drain's `R0` set.
            if held {
                s.aux[SET] = l + 1.0;
            }
            s.limit = spec.clamp(l + 1.0);
            s.aux[PHASE] = RESUME;
        }
        return one_rtt;
    }
    let used = x * rtt;
    if rtt > (1.0 + band / 2.0) * s.baseline_ns || used < 0.75 * l {
        // A queue, or the last doubling was not filled: the pipe is here.
        s.aux[FOUND] = 1.0;
    }
    let want = x * target;
    let next = if s.aux[FOUND] != 1.0 {
        // Before the first queue the pipe is further up: double what was
        // in use (Little's law: `x × rtt`), as TCP's slow start does. Only
        // at the start: later, a lull in the demand looks the same.
        (2.0 * used).round().max(l + 1.0)
    } else if ratio > 1.0 {
        // At least one more (growth off the floor), unless the permits in
        // use already make the target (the demand or the last change has
        // not filled the limit yet).
        if want > l {
            want.round().max(l + 1.0)
        } else {
            l
        }
    } else {
        // Not below half in one step (as a drain): a window whose releases
        // stalled (the service slowed: none ended for a service time) has
        // `X × RTT` far below the permits in use, and would empty the pipe.
        want.max(l / 2.0).floor().min(l - 1.0)
    };
    s.limit = spec.clamp(next);
    if s.limit != l {
        // What the next window sees was admitted under the old limit.
        s.aux[PHASE] = RESUME;
    }
    one_rtt
}

/// The end of a drain's measuring window, whose RTT and throughput were
/// `rtt` and `x`.
fn measured(
    spec: &Spec,
    s: &mut State,
    (now_ms, rtt, x): (f64, f64, f64),
    tol: f64,
    one_rtt: u64,
) -> u64 {
    let (ref_limit, ref_rtt, ref_x) = (s.aux[REF_LIMIT], s.aux[REF_RTT], s.aux[REF_X]);
    let l = s.limit;
    // The settling window's RTT (the window before the drain's, if none).
    let settled = if positive(s.aux[HELD]) {
        s.aux[HELD]
    } else {
        ref_rtt
    };
    s.aux[HELD] = 0.0;
    s.aux[LAST_DRAIN] = now_ms;
    s.aux[PHASE] = HOLD;
    if !(positive(ref_limit) && positive(ref_rtt) && positive(ref_x)) {
        // A damaged table: start over from the RTT at this limit.
        s.baseline_ns = rtt;
        return one_rtt;
    }
    // Against the larger queue of the two windows admitted under the old
    // limit; a rise against either is a capacity that fell meanwhile.
    let queued = rtt <= QUEUED * ref_rtt.max(settled) * l / ref_limit && l < ref_limit;
    if queued && l > spec.min as f64 {
        s.baseline_ns = rtt;
        drain(spec, s, l, rtt, x);
        return one_rtt;
    }
    if rtt > (1.0 + BAND) * ref_rtt.min(settled) {
        // The capacity fell during the drain: what was seen before it is
        // stale. Measure again at this limit, against this window.
        (s.aux[REF_LIMIT], s.aux[REF_RTT], s.aux[REF_X]) = (l, rtt, x);
        s.aux[PHASE] = MEASURE;
        return one_rtt;
    }
    s.aux[PHASE] = RESUME;
    s.baseline_ns = rtt.min(ref_rtt);
    // Not below the drained limit: a throughput caught in a transient (a
    // capacity change, fewer releases) would empty the pipe; a limit
    // still above it is what the hold law and its drains come down from.
    s.limit = spec.clamp((ref_x * tol * s.baseline_ns).round().max(l));
    s.aux[HELD] = ref_limit;
    s.aux[SET] = s.limit;
    one_rtt
}

/// `v` within less than `band` of `of` (false for a missing or damaged
/// `of`): up to a limit of ten, one permit is a move.
fn near(v: f64, of: f64, band: f64) -> bool {
    positive(of) && (v / of - 1.0).abs() < band
}

/// The window's throughput (per ns): the releases counted, and at most
/// what Little's law allows `l` permits (a short or damaged window).
fn throughput(w: &Window, l: f64) -> f64 {
    let counted = w.samples as f64 / w.elapsed_ns as f64;
    let bound = l / w.rtt_ns;
    if counted.is_finite() {
        counted.min(bound)
    } else {
        bound
    }
}

/// Lowers the limit below the pipe `x × R0` to measure `R0`.
fn drain(spec: &Spec, s: &mut State, l: f64, rtt: f64, x: f64) {
    s.aux[PHASE] = SETTLE;
    // Until it is measured, no limit was set by this drain.
    s.aux[HELD] = 0.0;
    s.aux[REF_LIMIT] = l;
    s.aux[REF_RTT] = rtt;
    s.aux[REF_X] = x;
    let pipe = x * s.baseline_ns;
    // Never below half the limit in one step: a throughput or baseline
    // misread must not empty the pipe (a drain still queued chains on).
    let to = (DRAIN_TO * pipe).max(l / 2.0);
    s.limit = spec.clamp(to.floor().min(l - 1.0));
}

#[cfg(test)]
mod tests;
