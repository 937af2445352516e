//! The lock-free admission checks, on words of a task's slot: the GCRA rate
//! (one word, a pure decision plus a compare-and-swap loop) and the
//! crash-exact concurrency ledger; and the adaptive limit algorithms (pure
//! state machines that the task layer drives over windows of samples).

pub mod adaptive;
pub mod gcra;
pub mod ledger;

/// The concurrency limit a task decides by (0: none): its cap, or its
/// adaptive limit (at least 1) within the cap.
pub(crate) fn cap_in_force(cap: u32, adaptive: Option<u32>) -> u32 {
    match adaptive {
        Some(limit) if cap != 0 => limit.clamp(1, cap),
        Some(limit) => limit.max(1),
        None => cap,
    }
}
