//! The lock-free admission checks, on words of a task's slot: the GCRA rate
//! (one word, a pure decision plus a compare-and-swap loop) and the
//! crash-exact concurrency ledger.

pub mod adaptive;
pub mod gcra;
pub mod ledger;
