//! The lock-free admission checks. Each works on one atomic word in the task's
//! slot: a pure decision function plus a compare-and-swap loop around it, so
//! the arithmetic can be tested exhaustively apart from the atomics.

pub mod concurrency;
pub mod gcra;
pub mod ledger;
