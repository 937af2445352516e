//! Adaptive concurrency limits: pure state machines that turn one window of
//! release samples into the next limit. Nothing here touches shared memory
//! or reads a clock: the host-wide driver (`task::adaptive`) sums the lanes'
//! counters into a [`Window`], keeps each algorithm's [`State`] in the task's
//! slot, and feeds the one to the other. Tests drive them with a fake clock.
//!
//! Every algorithm works on windows, as the reference implementations do
//! when wrapped in a windowed limit: the RTT of a window is the mean of the
//! acquire→release times released in it (success and dropped).

mod aimd;
mod auto;
mod baseline;
mod config;
mod gradient;
mod gradient2;
mod spec;
mod vegas;

pub use config::LimiterConfig;
pub use spec::{Algorithm, Spec};

/// Words of algorithm state kept in the table (f64 bits each).
pub const STATE_WORDS: usize = 10;

/// An algorithm's state. `limit`, `baseline_ns` and `recent_ns` are what
/// every algorithm reports; `aux` is its own.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct State {
    /// The current limit (a whole number of permits, as f64 so that
    /// smoothing algorithms keep their fraction).
    pub limit: f64,
    /// The no-load RTT estimate (ns); 0 = none yet.
    pub baseline_ns: f64,
    /// The RTT of the last window with samples (ns); 0 = none yet.
    pub recent_ns: f64,
    pub aux: [f64; STATE_WORDS - 3],
}

impl State {
    pub fn to_words(self) -> [u64; STATE_WORDS] {
        let mut w = [0; STATE_WORDS];
        w[0] = self.limit.to_bits();
        w[1] = self.baseline_ns.to_bits();
        w[2] = self.recent_ns.to_bits();
        for (i, a) in self.aux.iter().enumerate() {
            w[3 + i] = a.to_bits();
        }
        w
    }

    /// From table words: anything not finite (a damaged table) reads as 0.
    pub fn from_words(w: [u64; STATE_WORDS]) -> Self {
        let f = |i: usize| {
            let v = f64::from_bits(w[i]);
            if v.is_finite() { v } else { 0.0 }
        };
        Self {
            limit: f(0),
            baseline_ns: f(1),
            recent_ns: f(2),
            aux: std::array::from_fn(|i| f(3 + i)),
        }
    }
}

/// What the releases of one window said, summed over every process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Window {
    /// Host clock at the window's end (ns; any origin, monotonic).
    pub now_ns: u64,
    /// The window's length (ns).
    pub elapsed_ns: u64,
    /// Permits released as success or dropped (each one an RTT sample).
    pub samples: u64,
    /// Of those, released as dropped (a loss signal).
    pub dropped: u64,
    /// Mean acquire→release time of the samples (ns); 0 without samples.
    pub rtt_ns: f64,
    /// Acquires refused by the concurrency limit in the window: demand
    /// exceeded the limit (the limit, not the demand, bounded throughput).
    pub rejected: u64,
    /// Permits in flight when the window closed.
    pub in_flight: u64,
}

impl Window {
    /// Whether the limit was what bounded the window: requests were refused,
    /// or at least half the limit was in use (the reference algorithms'
    /// "app-limited" guard, `2 × in_flight ≥ limit`).
    pub fn limit_bound(&self, limit: f64) -> bool {
        self.rejected > 0 || 2.0 * self.in_flight as f64 >= limit
    }
}

/// The first state of `spec`: its initial limit, no baseline.
pub fn initial(spec: &Spec) -> State {
    State {
        limit: spec.clamp(spec.initial as f64),
        ..State::default()
    }
}

/// Applies one window; returns the length of the next window (ns).
pub fn update(spec: &Spec, state: &mut State, w: &Window) -> u64 {
    if w.samples > 0 && w.rtt_ns > 0.0 {
        state.recent_ns = w.rtt_ns;
    }
    let window = spec.window_ns();
    match spec.algorithm {
        Algorithm::Fixed => {
            state.limit = spec.clamp(spec.initial as f64);
            window
        }
        Algorithm::Aimd => {
            aimd::update(spec, state, w);
            window
        }
        Algorithm::Vegas => {
            vegas::update(spec, state, w);
            window
        }
        Algorithm::Gradient => {
            gradient::update(spec, state, w);
            window
        }
        Algorithm::Gradient2 => {
            gradient2::update(spec, state, w);
            window
        }
        Algorithm::Auto => auto::update(spec, state, w),
    }
}

/// `x > 0`, false for NaN: a damaged table's word is not a measurement.
pub(crate) fn positive(x: f64) -> bool {
    x > 0.0
}

/// A fraction in [0, 1) from the clock: probes and resets of different
/// tasks and hosts do not fall in step.
pub(crate) fn unit_jitter(now_ns: u64) -> f64 {
    let h = now_ns.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// `max(1, floor(log10 x))`, the reference's step function for Vegas.
pub(crate) fn log10root(x: f64) -> f64 {
    x.log10().floor().max(1.0)
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A fake service of `slots` servers taking `service_ms` each, fed
    /// more than it can take: the window a limit of `limit` would see.
    pub fn overloaded(now_ms: u64, limit: f64, slots: f64, service_ms: f64) -> Window {
        held(now_ms, limit, slots, service_ms, 0.0)
    }

    /// The same, with the caller holding each permit `outside_ms` more
    /// outside the server: the pipe is `slots × (service + outside) /
    /// service` permits, beyond the slot count.
    pub fn held(now_ms: u64, limit: f64, slots: f64, service_ms: f64, outside_ms: f64) -> Window {
        let l = limit.floor().max(1.0);
        let rtt_ms = (service_ms + outside_ms).max(service_ms * l / slots);
        let per_s = l * 1000.0 / rtt_ms;
        Window {
            now_ns: now_ms * 1_000_000,
            elapsed_ns: 100_000_000,
            samples: (per_s / 10.0).round() as u64,
            dropped: 0,
            rtt_ns: rtt_ms * 1e6,
            rejected: 10,
            in_flight: l as u64,
        }
    }

    /// Runs `spec` against the fake service from `state` for `ms`
    /// milliseconds; returns the state and the mean limit of the last half.
    pub fn run(
        spec: &Spec,
        state: State,
        start_ms: u64,
        ms: u64,
        slots: f64,
        service_ms: f64,
    ) -> (State, f64) {
        run_held(spec, state, start_ms, ms, (slots, service_ms, 0.0))
    }

    /// [`run`] against [`held`]'s service of `(slots, service_ms, outside_ms)`.
    pub fn run_held(
        spec: &Spec,
        mut state: State,
        start_ms: u64,
        ms: u64,
        (slots, service_ms, outside_ms): (f64, f64, f64),
    ) -> (State, f64) {
        // The host clock is far from 0 (the first probe is not delayed).
        let start_ms = start_ms + 100_000;
        let mut now = start_ms;
        let (mut sum, mut n) = (0.0, 0.0);
        while now < start_ms + ms {
            let w = held(now, state.limit, slots, service_ms, outside_ms);
            let next = update(spec, &mut state, &w);
            now += (next / 1_000_000).max(1);
            if now > start_ms + ms / 2 {
                sum += state.limit.floor();
                n += 1.0;
            }
        }
        (state, sum / n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A damaged table can hand any state and any window to an algorithm:
    /// it must neither panic nor produce a limit outside the bounds.
    #[test]
    fn garbage_in_gives_a_limit_within_bounds() {
        let values = [
            0.0,
            -1.0,
            1e-300,
            1.0,
            1e30,
            f64::MAX,
            f64::NAN,
            f64::INFINITY,
        ];
        let counts = [0, 1, 1 << 40, u64::MAX];
        for algorithm in Algorithm::ALL {
            let spec = Spec::parse(algorithm.name()).unwrap();
            for (i, v) in values.iter().enumerate() {
                for c in counts {
                    let words = [v.to_bits(); STATE_WORDS];
                    let mut state = State::from_words(words);
                    state.aux[i % 7] = *v;
                    state.aux[3] = (i % 8) as f64;
                    state.aux[0] = (i % 3) as f64; // every phase of auto
                    let w = Window {
                        now_ns: c,
                        elapsed_ns: c,
                        samples: c,
                        dropped: c / 2,
                        rtt_ns: *v,
                        rejected: c,
                        in_flight: c,
                    };
                    let next = update(&spec, &mut state, &w);
                    let limit = spec.clamp(state.limit);
                    assert!(limit.is_finite(), "{algorithm:?} {v} {c}");
                    assert!(next > 0 || algorithm == Algorithm::Fixed || spec.window_ns() == 0);
                }
            }
        }
    }
}
