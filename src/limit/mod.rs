//! The lock-free admission checks, on words of a task's slot: the GCRA rate
//! (one word, a pure decision plus a compare-and-swap loop) and the
//! crash-exact concurrency ledger; and the adaptive limit algorithms (pure
//! state machines that the task layer drives over windows of samples).

pub mod adaptive;
pub mod gcra;
pub mod ledger;
