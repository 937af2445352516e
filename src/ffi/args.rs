//! Pointer and argument helpers of the C face: the one place for null
//! checks, C strings, "unset" sentinels and enum values that arrive as
//! plain integers. A leaf: it imports nothing else of the face but its
//! constants.

use std::ffi::c_char;
use std::time::Duration;

use super::sized::null;
use super::types::{
    FC_OUTCOME_DROPPED, FC_OUTCOME_IGNORED, FC_OUTCOME_SUCCESS, FC_RATE_UNSET, FC_UNSET, fc_outcome,
};
use crate::{Error, ErrorKind, NAME_MAX, Outcome};

/// Borrows `*ptr`, or fails naming the argument.
pub(super) unsafe fn arg<'a, T>(ptr: *const T, what: &str) -> Result<&'a T, Error> {
    // SAFETY: the caller passes a pointer that is NULL or valid.
    unsafe { ptr.as_ref() }.ok_or_else(|| null(what))
}

/// Borrows `*ptr` mutably (caller memory the library updates in place).
pub(super) unsafe fn arg_mut<'a, T>(ptr: *mut T, what: &str) -> Result<&'a mut T, Error> {
    // SAFETY: the caller passes a pointer that is NULL or valid, and no
    // other thread uses the memory during the call.
    unsafe { ptr.as_mut() }.ok_or_else(|| null(what))
}

/// Checks an out-pointer before any work is done.
pub(super) fn out_arg<T>(ptr: *mut T, what: &str) -> Result<*mut T, Error> {
    if ptr.is_null() {
        return Err(null(what));
    }
    Ok(ptr)
}

/// Writes `value` to `out` (checked non-NULL before any work was done).
pub(super) unsafe fn put<T>(out: *mut T, value: T) {
    // SAFETY: checked non-NULL by the caller; C owns the memory.
    unsafe { out.write(value) }
}

/// A NUL-terminated UTF-8 string of at most `max` bytes; never scanned past
/// `max + 1` bytes. Too long or not UTF-8 is an error of `kind`.
unsafe fn c_str<'a>(
    text: *const c_char,
    max: usize,
    what: &str,
    kind: ErrorKind,
) -> Result<&'a str, Error> {
    if text.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-NULL and NUL-terminated per the contract.
    let len = unsafe { libc::strnlen(text, max + 1) };
    if len > max {
        return Err(Error::new(
            kind,
            format!("{what} is longer than {max} bytes"),
        ));
    }
    // SAFETY: `len` bytes were just scanned and are readable.
    let bytes = unsafe { std::slice::from_raw_parts(text.cast::<u8>(), len) };
    std::str::from_utf8(bytes).map_err(|e| Error::new(kind, format!("{what} is not UTF-8: {e}")))
}

/// A name (`what`: "task name", "backend address"); the core validates
/// the rest.
pub(super) unsafe fn name_arg<'a>(name: *const c_char, what: &str) -> Result<&'a str, Error> {
    unsafe { c_str(name, NAME_MAX, what, ErrorKind::InvalidName) }
}

/// An option string of at most 4 KiB.
pub(super) unsafe fn text_arg<'a>(text: *const c_char, what: &str) -> Result<&'a str, Error> {
    unsafe { c_str(text, 4096, what, ErrorKind::InvalidArgument) }
}

/// A NUL-terminated string inside a fixed array of the caller's struct.
pub(super) fn array_str<'a>(array: &'a [c_char], what: &str) -> Result<&'a str, Error> {
    // SAFETY: c_char and u8 have the same size and alignment.
    let bytes = unsafe { std::slice::from_raw_parts(array.as_ptr().cast::<u8>(), array.len()) };
    std::ffi::CStr::from_bytes_until_nul(bytes)
        .map_err(|_| Error::invalid(format!("{what} is not NUL-terminated")))?
        .to_str()
        .map_err(|_| Error::invalid(format!("{what} is not UTF-8")))
}

/// `text` into a fixed array, NUL-terminated, cut to fit.
pub(super) fn to_array<const N: usize>(text: &str) -> [c_char; N] {
    let mut out = [0; N];
    let len = text.len().min(N - 1);
    for (dst, src) in out.iter_mut().zip(&text.as_bytes()[..len]) {
        *dst = *src as c_char;
    }
    out
}

/// `FC_UNSET` → `None`.
pub(super) fn set(value: u32) -> Option<u32> {
    (value != FC_UNSET).then_some(value)
}

/// `FC_RATE_UNSET` → `None` (exactly that value).
pub(super) fn rate(value: f64) -> Option<f64> {
    (value.to_bits() != FC_RATE_UNSET.to_bits()).then_some(value)
}

/// A field that must be 0 (room for a later version).
pub(super) fn reserved(value: u32, what: &str) -> Result<(), Error> {
    if value != 0 {
        return Err(Error::invalid(format!("{what} must be 0, not {value}")));
    }
    Ok(())
}

/// Milliseconds, 0 = `default`.
pub(super) fn ms_or(value: u32, default: Duration) -> Duration {
    if value == 0 {
        default
    } else {
        Duration::from_millis(value as u64)
    }
}

/// An `FC_OUTCOME_*` value, checked (C may pass any integer).
pub(super) fn outcome_of(outcome: fc_outcome) -> Result<Outcome, Error> {
    match outcome {
        FC_OUTCOME_SUCCESS => Ok(Outcome::Success),
        FC_OUTCOME_DROPPED => Ok(Outcome::Dropped),
        FC_OUTCOME_IGNORED => Ok(Outcome::Ignored),
        other => Err(Error::invalid(format!("unknown outcome {other}"))),
    }
}
