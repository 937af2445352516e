//! The limiter fields of a task's configuration: the algorithm asked for
//! and its bounds, laid over the limiter in force.

use super::Spec;

/// The limiter asked for when registering or updating a task; `None`
/// keeps the current value (or the default) and is not compared.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LimiterConfig {
    /// The algorithm that sets the concurrency limit and its parameters
    /// (default `fixed`: `max_concurrency` is the cap). Changing the
    /// algorithm resets the bounds below to its defaults unless they are set.
    pub spec: Option<Spec>,
    /// The adaptive limit's floor, ceiling and starting point.
    pub min_limit: Option<u32>,
    pub max_limit: Option<u32>,
    pub initial_limit: Option<u32>,
}

impl LimiterConfig {
    /// The limiter this asks for over `base`: a new algorithm brings its
    /// default bounds; bounds that are set override.
    pub(crate) fn over(&self, base: Spec) -> Spec {
        let mut spec = match self.spec {
            Some(asked) if asked.algorithm != base.algorithm => asked,
            Some(asked) => Spec {
                window_ms: asked.window_ms,
                params: asked.params,
                ..base
            },
            None => base,
        };
        if spec.is_adaptive() {
            spec.min = self.min_limit.unwrap_or(spec.min);
            spec.max = self.max_limit.unwrap_or(spec.max);
            spec.initial = self.initial_limit.unwrap_or(spec.initial);
            if self.initial_limit.is_none() {
                spec.initial = spec.initial.clamp(spec.min, spec.max.max(spec.min));
            }
        }
        spec
    }

    /// Describes where this differs from the limiter in force. A window
    /// or parameter asked at its default is not compared, like a field left
    /// unset: a task registered by a version with other defaults (0.3's
    /// `auto`) is attached to, not refused.
    pub(crate) fn mismatches(&self, spec: &Spec, out: &mut Vec<String>) {
        if let Some(a) = self.spec
            && a.differs_where_set(spec)
        {
            out.push(format!("limiter \"{spec}\" (asked \"{a}\")"));
        }
        for (name, value, want) in [
            ("min_limit", spec.min, self.min_limit),
            ("max_limit", spec.max, self.max_limit),
            ("initial_limit", spec.initial, self.initial_limit),
        ] {
            if let Some(w) = want.filter(|w| *w != value) {
                out.push(format!("{name} {value} (asked {w})"));
            }
        }
    }
}
