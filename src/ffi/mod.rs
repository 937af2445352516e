//! The C face: `include/flowctrl.h`, generated from this module by cbindgen.
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
//!   checked, never transmuted.
//!
//! # Safety
//!
//! One contract for every function, stated here instead of on each: a
//! pointer argument is NULL (answered with `FC_ERR_INVALID_ARGUMENT`) or
//! valid for its type; a string is NUL-terminated; a handle comes from its
//! constructor and is not used after its `_close`/`_free`.

#![allow(non_camel_case_types)]
#![allow(clippy::missing_safety_doc)]

mod api;
mod status;

pub use api::*;
pub use status::*;
