//! The C face: `include/flowctrl.h`, generated from this module by cbindgen.
//! Not part of the Rust API (hidden from its docs): the module is public only
//! so that cbindgen and the linker see the `fc_*` functions.
//!
//! Thin by rule: each function checks its pointers, converts arguments, calls
//! the Rust API and converts the result. Conventions:
//!
//! - every fallible function returns an `fc_status` (0 = `FC_OK`); outputs go
//!   through out-pointers and are written only on `FC_OK`;
//! - decisions (`FC_LIMITED_*`, 1–99) are not errors; errors are ≥ 100 and
//!   leave a human-readable reason in the thread-local `fc_last_error()`;
//! - no panic crosses the boundary: one is caught and answered with
//!   `FC_ERR_INTERNAL`;
//! - values C passes in for Rust enums arrive as plain integers and are
//!   checked, never transmuted;
//! - the structs C allocates and passes in or out start with their own
//!   `size` and grow only at their end (see `sized`); `fc_permit` is the
//!   exception, fixed at 64 bytes for good;
//! - `fc_last_error()` works at any time, in thread-local destructors too.
//! - log lines reach C through `fc_set_log_callback` (`logging`), called
//!   with no flowctrl lock held, so the callback may call any `fc_*`.
//!
//! # Safety
//!
//! One contract for every function, stated here instead of on each: a
//! pointer argument is NULL (answered with `FC_ERR_INVALID_ARGUMENT`) or
//! valid for its type — for a struct with a `size` field, for the `size`
//! bytes it claims, as its `_init` function set it; a string is
//! NUL-terminated; a handle comes from its constructor and is not used after
//! its `_close`/`_free`.

#![doc(hidden)]
#![allow(non_camel_case_types)]
#![allow(clippy::missing_safety_doc)]

mod args;
mod balance;
mod check;
mod config;
mod keyed;
mod logging;
mod sized;
mod stats;
mod status;
mod store;
mod store_keys;
mod table;
mod task;
mod types;
mod waiting;

pub use balance::*;
pub use check::*;
pub use keyed::*;
pub use logging::*;
pub use stats::*;
pub use status::*;
pub use store::*;
pub use store_keys::*;
pub use table::*;
pub use task::*;
pub use types::*;
pub use waiting::*;
