//! The cost of sending one more request to a backend, and the estimates it is
//! made of. Pure functions of words read from the table and the time, so the
//! rules are tested with a fake clock.
//!
//! ```text
//! cost = max(rtt, RTT_FLOOR) × ((in_flight + 1) / (weight × ramp))^IN_FLIGHT_POWER × load_factor
//! ```
//!
//! The power (3/4) is the one departure from tower's and Finagle's
//! `rtt × (pending + 1)`: their linear factor prices a backend as if it
//! served one request at a time, so a fast backend with eight calls in
//! flight on eight free workers looks nine times slower than it is and loses
//! to a slow, idle one. The RTT estimate, fed by every process on the host,
//! already shows the queueing that does build up; the in-flight term is
//! kept to spread simultaneous picks and to react before RTTs show. A power
//! of 1/2 priced queues on fast backends too low (they grew for a second
//! before the RTT showed them) and 1 sent the slow backend too much: 3/4 had
//! the lower p99 in the balancing experiment. Under the power, picks still
//! even out `(in_flight + 1) / (weight × ramp)` between backends of equal
//! RTT, so weights and the slow-start ramp stay proportional shares.
//!
//! - `rtt`: the peak-EWMA of the round-trip time, decayed to now on read
//!   (nothing is written by a read: two picks never age it twice);
//! - `in_flight`: picks in flight on the backend from every process on the
//!   host, so the queue every process adds to is the one it sees;
//! - `ramp`: slow start, from `MIN_RAMP` to 1 over the slow-start period;
//! - `load_factor`: 1 + the server-reported load (clamped to 0..=1) while the
//!   report is fresh, else 1.

/// See the module's formula.
pub(crate) const IN_FLIGHT_POWER: f64 = 0.75;

/// Below this a measured RTT is clock and scheduling noise (100 µs): two
/// fast backends then compare on their in-flight counts alone.
pub(crate) const RTT_FLOOR_US: f64 = 100.0;
/// A failure is never recorded as less than this many times the backend's
/// current estimate, so a failure always makes the backend look worse.
pub(crate) const PENALTY_GROWTH: f64 = 2.0;
/// Penalty RTTs are capped (30 s) so a backend that recovers is tried again
/// within minutes, not never.
pub(crate) const MAX_PENALTY_US: f64 = 30e6;
/// The share of its weight a backend starts with in slow start (Envoy's
/// default minimum weight, 10 %): it is probed from its first second.
pub(crate) const MIN_RAMP: f64 = 0.1;
/// A server-reported load is trusted for 5 s after it arrives; older
/// reports are ignored, so a server that stops reporting cannot keep a
/// stale figure in force and herd every process towards or away from it.
pub(crate) const LOAD_FRESH_MS: u64 = 5_000;
/// How much a full server-reported load (1.0) multiplies the cost: at most
/// ×2. Bounded, because the caller's own measurements (RTT, in flight) are
/// fresher and cannot be gamed by the server.
pub(crate) const LOAD_GAIN: f64 = 1.0;

const US_MASK: u64 = u32::MAX as u64;

/// Milliseconds since `at`, both in the 32-bit wrapping time of the packed
/// words; a time in the future (damage, or a clock read late) counts as now.
fn age_ms(now_ms: u64, at: u64) -> u64 {
    let age = (now_ms as u32).wrapping_sub(at as u32);
    if age > u32::MAX / 2 { 0 } else { age as u64 }
}

/// The RTT word: time of the last sample (ms) and value (µs).
pub(crate) fn pack_rtt(now_ms: u64, us: f64) -> u64 {
    (now_ms & US_MASK) << 32 | us.clamp(0.0, US_MASK as f64) as u64
}

/// The RTT estimate at `now_ms`, in µs: the stored value decayed by
/// `exp(-age / decay)` towards zero, so a backend nobody has used for a while
/// looks cheap again and is probed.
pub(crate) fn decayed_rtt(word: u64, now_ms: u64, decay_ms: f64) -> f64 {
    let value = (word & US_MASK) as f64;
    value * (-(age_ms(now_ms, word >> 32) as f64) / decay_ms).exp()
}

/// The word after a sample of `sample_us`: a sample above the current
/// estimate replaces it (peak), one below is blended in with the weight its
/// time since the last sample earns (`1 - exp(-Δt/decay)`).
pub(crate) fn observe(word: u64, sample_us: f64, now_ms: u64, decay_ms: f64) -> u64 {
    let current = decayed_rtt(word, now_ms, decay_ms);
    if sample_us >= current {
        return pack_rtt(now_ms, sample_us);
    }
    let w = (-(age_ms(now_ms, word >> 32) as f64) / decay_ms).exp();
    let value = (word & US_MASK) as f64;
    pack_rtt(now_ms, value * w + sample_us * (1.0 - w))
}

/// A success rises towards a larger sample with this share of the decay's
/// time constant (200 ms of the default 10 s) instead of jumping to it: every
/// process on the host feeds the one estimate, so a backend taking 300
/// samples a second would otherwise be priced at the largest of them (its
/// tail, not its typical RTT), and a fast, busy backend would look
/// relatively slower than a slow, quiet one. A failure still jumps (see
/// [`penalty_rtt`]).
pub(crate) const RISE_SHARE: f64 = 0.02;

/// The word after a successful call's RTT: rises with time constant
/// `decay × RISE_SHARE`, falls with `decay`, both weighted by the time since
/// the last sample (so the result does not depend on the call rate).
pub(crate) fn observe_success(word: u64, sample_us: f64, now_ms: u64, decay_ms: f64) -> u64 {
    let current = decayed_rtt(word, now_ms, decay_ms);
    if sample_us <= current {
        return observe(word, sample_us, now_ms, decay_ms);
    }
    let dt = age_ms(now_ms, word >> 32) as f64;
    let gain = 1.0 - (-dt / (decay_ms * RISE_SHARE)).exp();
    pack_rtt(now_ms, current + (sample_us - current) * gain)
}

/// The RTT a failure records: the time it took, the configured penalty, or
/// twice the current estimate, whichever is largest, capped. A failure is
/// never a fast success, so a backend that fails fast cannot attract the
/// traffic its short "RTT" would otherwise earn.
pub(crate) fn penalty_rtt(elapsed_us: f64, current_us: f64, penalty_us: f64) -> f64 {
    elapsed_us
        .max(penalty_us)
        .max(current_us * PENALTY_GROWTH)
        .min(MAX_PENALTY_US)
}

/// Slow start: the share of its weight a backend `age_ms` old gets, linear
/// from `MIN_RAMP` to 1 over `slow_start_ms` (0 = no slow start).
pub(crate) fn ramp(age_ms: u64, slow_start_ms: u64) -> f64 {
    if slow_start_ms == 0 || age_ms >= slow_start_ms {
        return 1.0;
    }
    (age_ms as f64 / slow_start_ms as f64).max(MIN_RAMP)
}

/// The load word: time of the report (ms) and the load (f32).
pub(crate) fn pack_load(now_ms: u64, load: f64) -> u64 {
    (now_ms & US_MASK) << 32 | (load as f32).to_bits() as u64
}

/// The server-reported load if fresh, clamped to 0..=1.
pub(crate) fn fresh_load(word: u64, now_ms: u64) -> Option<f64> {
    if word == 0 || age_ms(now_ms, word >> 32) > LOAD_FRESH_MS {
        return None;
    }
    let load = f32::from_bits(word as u32) as f64;
    Some(if load.is_nan() {
        0.0
    } else {
        load.clamp(0.0, 1.0)
    })
}

/// What the cost is made of, for one backend at one instant.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inputs {
    pub rtt_us: f64,
    pub in_flight: u64,
    pub weight: u64,
    pub ramp: f64,
    pub load: Option<f64>,
}

/// The cost (lower is better; see the module's formula).
pub(crate) fn cost(i: Inputs) -> f64 {
    let load_factor = 1.0 + LOAD_GAIN * i.load.unwrap_or(0.0);
    let share = (i.in_flight as f64 + 1.0) / (i.weight.max(1) as f64 * i.ramp);
    i.rtt_us.max(RTT_FLOOR_US) * share.powf(IN_FLIGHT_POWER) * load_factor
}

#[cfg(test)]
mod tests {
    use super::*;

    const DECAY: f64 = 10_000.0;

    #[test]
    fn peaks_replace_and_lower_samples_blend_by_time() {
        let w = pack_rtt(1_000, 20_000.0);
        assert_eq!(decayed_rtt(w, 1_000, DECAY), 20_000.0);
        // A peak replaces at once.
        let w = observe(w, 80_000.0, 1_001, DECAY);
        assert_eq!(decayed_rtt(w, 1_001, DECAY), 80_000.0);
        // A lower sample 10 s later moves it 1 - 1/e of the way.
        let w = observe(w, 20_000.0, 11_001, DECAY);
        let expect = 80_000.0 / std::f64::consts::E + 20_000.0 * (1.0 - 1.0 / std::f64::consts::E);
        assert!((decayed_rtt(w, 11_001, DECAY) - expect).abs() < 1.0);
    }

    #[test]
    fn successes_rise_by_time_not_by_count() {
        let w = pack_rtt(1_000, 20_000.0);
        let rise = DECAY * RISE_SHARE;
        // A sample of 100 ms 1 ms later moves the estimate by 1 ms / 200 ms...
        let one = observe_success(w, 100_000.0, 1_001, DECAY);
        let moved = decayed_rtt(one, 1_001, DECAY) - 20_000.0;
        assert!((350.0..450.0).contains(&moved), "{moved}");
        // ...while 200 ms of them move it 1 - 1/e of the way.
        let later = observe_success(w, 100_000.0, 1_000 + rise as u64, DECAY);
        let start = 20_000.0 * (-rise / DECAY).exp();
        let expect = start + (100_000.0 - start) * (1.0 - (-1.0f64).exp());
        assert!((decayed_rtt(later, 1_200, DECAY) - expect).abs() < 1.0);
        // After a long quiet spell the first sample is the estimate.
        let fresh = observe_success(w, 50_000.0, 100_000, DECAY);
        assert!((decayed_rtt(fresh, 100_000, DECAY) - 50_000.0).abs() < 1.0);
    }

    #[test]
    fn reads_decay_without_writing_and_future_times_count_as_now() {
        let w = pack_rtt(5_000, 10_000.0);
        let later = decayed_rtt(w, 15_000, DECAY);
        assert!((later - 10_000.0 / std::f64::consts::E).abs() < 1.0);
        // Reading twice gives the same figure: nothing was written.
        assert_eq!(later, decayed_rtt(w, 15_000, DECAY));
        assert_eq!(decayed_rtt(w, 4_000, DECAY), 10_000.0);
        // The 32-bit time wraps without a jump.
        let w = pack_rtt(u32::MAX as u64, 10_000.0);
        assert!(decayed_rtt(w, u32::MAX as u64 + 10_001, DECAY) < 3_700.0);
    }

    #[test]
    fn a_failure_costs_more_than_any_success() {
        // A 1 ms failure of a 20 ms backend records the 5 s penalty.
        assert_eq!(penalty_rtt(1_000.0, 20_000.0, 5e6), 5e6);
        // A backend penalised already doubles.
        assert_eq!(penalty_rtt(1_000.0, 8e6, 5e6), 16e6);
        assert_eq!(penalty_rtt(1_000.0, 20e6, 5e6), MAX_PENALTY_US);
        // After it, the failing backend loses to a loaded healthy one.
        let now = 0;
        let bad = Inputs {
            rtt_us: decayed_rtt(
                pack_rtt(now, penalty_rtt(500.0, 20_000.0, 5e6)),
                now + 1_000,
                DECAY,
            ),
            in_flight: 0,
            weight: 1,
            ramp: 1.0,
            load: None,
        };
        let busy = Inputs {
            rtt_us: 20_000.0,
            in_flight: 20,
            ..bad
        };
        assert!(cost(bad) > cost(busy));
    }

    #[test]
    fn cost_grows_with_in_flight_and_shrinks_with_weight_and_ramp() {
        let base = Inputs {
            rtt_us: 10_000.0,
            in_flight: 0,
            weight: 1,
            ramp: 1.0,
            load: None,
        };
        let near = |a: f64, b: f64| (a - b).abs() < 1e-6 * b;
        let p = IN_FLIGHT_POWER;
        assert!(near(cost(base), 10_000.0));
        assert!(near(
            cost(Inputs {
                in_flight: 15,
                ..base
            }),
            10_000.0 * 16f64.powf(p)
        ));
        assert!(near(
            cost(Inputs { weight: 2, ..base }),
            10_000.0 * 0.5f64.powf(p)
        ));
        assert!(near(
            cost(Inputs { ramp: 0.5, ..base }),
            10_000.0 * 2f64.powf(p)
        ));
        let floor = Inputs {
            rtt_us: RTT_FLOOR_US,
            ..base
        };
        assert!(near(
            cost(Inputs {
                rtt_us: 1.0,
                ..base
            }),
            cost(floor)
        ));
        assert!(near(
            cost(Inputs {
                load: Some(1.0),
                ..base
            }),
            20_000.0
        ));
        // Three times the weight carries three times the in-flight.
        let light = Inputs {
            in_flight: 1,
            ..base
        };
        assert!(near(
            cost(Inputs {
                weight: 3,
                in_flight: 5,
                ..base
            }),
            cost(light)
        ));
        // Twice the RTT weighs as 2^(1/p) ≈ 2.5 times the in-flight.
        let slow = Inputs {
            rtt_us: 20_000.0,
            ..base
        };
        assert!(
            cost(Inputs {
                in_flight: 1,
                ..base
            }) < cost(slow)
        );
        assert!(
            cost(Inputs {
                in_flight: 2,
                ..base
            }) > cost(slow)
        );
    }

    #[test]
    fn slow_start_ramps_linearly_from_the_minimum() {
        assert_eq!(ramp(0, 30_000), MIN_RAMP);
        assert_eq!(ramp(1_500, 30_000), MIN_RAMP);
        assert_eq!(ramp(15_000, 30_000), 0.5);
        assert_eq!(ramp(30_000, 30_000), 1.0);
        assert_eq!(ramp(0, 0), 1.0);
    }

    #[test]
    fn server_load_is_bounded_and_expires() {
        let w = pack_load(1_000, 0.5);
        assert_eq!(fresh_load(w, 1_000), Some(0.5));
        assert_eq!(fresh_load(w, 1_000 + LOAD_FRESH_MS), Some(0.5));
        assert_eq!(fresh_load(w, 1_001 + LOAD_FRESH_MS), None);
        assert_eq!(fresh_load(pack_load(1_000, 7.0), 1_000), Some(1.0));
        assert_eq!(fresh_load(pack_load(1_000, -3.0), 1_000), Some(0.0));
        assert_eq!(fresh_load(pack_load(1_000, f64::NAN), 1_000), Some(0.0));
        assert_eq!(fresh_load(0, 1_000), None);
    }
}
