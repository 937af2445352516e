//! governor's direct rate limiter (its default clock, quanta) for a C
//! program: a cdylib, so that the benchmark calls it through the same kind
//! of call (a shared library's PLT) as `fc_acquire` in `libflowctrl.so`.

use std::num::NonZeroU32;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// A limiter of `per_second` with `burst`, or NULL if either is 0.
#[unsafe(no_mangle)]
pub extern "C" fn gov_new(per_second: u32, burst: u32) -> *mut DefaultDirectRateLimiter {
    let (Some(rate), Some(burst)) = (NonZeroU32::new(per_second), NonZeroU32::new(burst)) else {
        return std::ptr::null_mut();
    };
    Box::into_raw(Box::new(RateLimiter::direct(
        Quota::per_second(rate).allow_burst(burst),
    )))
}

/// `check()`: 1 admitted, 0 limited.
///
/// # Safety
/// `limiter` came from `gov_new` and was not freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gov_check(limiter: *const DefaultDirectRateLimiter) -> i32 {
    // SAFETY: per the contract above.
    unsafe { &*limiter }.check().is_ok() as i32
}

/// Frees a limiter from `gov_new` (NULL is ignored).
///
/// # Safety
/// `limiter` came from `gov_new` and is freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gov_free(limiter: *mut DefaultDirectRateLimiter) {
    if !limiter.is_null() {
        // SAFETY: per the contract above.
        drop(unsafe { Box::from_raw(limiter) });
    }
}
