//! Structs that can grow: the ones C allocates and passes in or out carry
//! their own size as their first field, so a later version of the library
//! can add fields at their end and still serve callers compiled against an
//! older, smaller header.
//!
//! The rule, for every such struct and every function taking one: the
//! library reads and writes only the first `min(size, its own size_of)` bytes
//! of the caller's struct. Fields past the caller's `size` take their
//! defaults when read and are not written. Bytes past the library's own
//! struct (a caller compiled against a newer header) are neither read nor
//! written. A `size` below the smallest version of the struct, or above
//! [`MAX_SIZE`] (never a real struct: uninitialised memory), is refused.
//!
//! Every version of such a struct is free of padding, at the end too: a
//! field added later must never land in bytes an older caller counts in its
//! `size` but never set.

use crate::Error;

/// The largest `size` accepted: anything larger is uninitialised memory.
/// The error for a NULL argument, naming it.
pub(super) fn null(what: &str) -> Error {
    Error::invalid(format!("{what} is NULL"))
}

pub(crate) const MAX_SIZE: usize = 4096;

/// A struct of the C face that starts with `size: u32`.
///
/// # Safety
///
/// The implementor is `#[repr(C)]`, its first field is `size: u32`, it has
/// no padding, and every bit pattern of its bytes is a valid value (integers
/// and floats only). [`read_sized`] copies raw bytes into it.
pub(crate) unsafe trait SizedStruct: Copy {
    /// Its name in C, for error messages.
    const NAME: &'static str;
    /// The function that fills it, for error messages.
    const INIT: &'static str;
    /// The size of its smallest version, which every caller has: at least
    /// its `size` field, at most the whole struct.
    const MIN_SIZE: usize;
    /// What a field the caller does not have is taken to be.
    fn defaults() -> Self;
}

/// How many bytes of the caller's struct the library may touch, given the
/// `size` it claims; refuses a size no version of the struct has.
fn usable<T: SizedStruct>(size: usize) -> Result<usize, Error> {
    const { assert!(T::MIN_SIZE >= size_of::<u32>() && T::MIN_SIZE <= size_of::<T>()) };
    if size < T::MIN_SIZE {
        return Err(Error::invalid(format!(
            "{}: size {size} is smaller than the struct has ever been ({} bytes): \
             fill it with {}(&s, sizeof s) first",
            T::NAME,
            T::MIN_SIZE,
            T::INIT
        )));
    }
    if size > MAX_SIZE {
        return Err(Error::invalid(format!(
            "{}: size {size} is over {MAX_SIZE} bytes, so the struct is not initialised: \
             fill it with {}(&s, sizeof s) first",
            T::NAME,
            T::INIT
        )));
    }
    Ok(size.min(size_of::<T>()))
}

/// The size the caller's struct at `ptr` claims, checked: the bytes of it
/// the library may touch. `ptr` is non-NULL.
unsafe fn claimed<T: SizedStruct>(ptr: *const T) -> Result<usize, Error> {
    // SAFETY: the caller's struct is valid for at least its first field.
    let size = unsafe { ptr.cast::<u32>().read() };
    usable::<T>(size as usize)
}

/// Reads the caller's struct: its first `size` bytes over the defaults.
pub(crate) unsafe fn read_sized<T: SizedStruct>(ptr: *const T, what: &str) -> Result<T, Error> {
    if ptr.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-NULL, valid for its type per the contract.
    let len = unsafe { claimed(ptr) }?;
    let mut value = T::defaults();
    // SAFETY: `len` is within both structs; any bytes are a valid `T`.
    unsafe { std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), (&raw mut value).cast::<u8>(), len) };
    Ok(value)
}

/// The caller's output struct, its size checked before any work is done so
/// that a refused one is refused before anything happens.
pub(crate) struct Out<T: SizedStruct> {
    ptr: *mut T,
    len: usize,
}

impl<T: SizedStruct> Out<T> {
    /// Checks the output struct at `ptr`, whose `size` the caller set.
    pub(crate) unsafe fn new(ptr: *mut T, what: &str) -> Result<Self, Error> {
        if ptr.is_null() {
            return Err(null(what));
        }
        // SAFETY: non-NULL, valid for its type per the contract.
        let len = unsafe { claimed(ptr) }?;
        Ok(Self { ptr, len })
    }

    /// The bytes of the struct the caller has that this library knows.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Writes `value` into the bytes the caller has, leaving its `size` as
    /// it is.
    pub(crate) fn write(self, value: &T) {
        let skip = size_of::<u32>();
        // SAFETY: `len` bytes are within both structs (checked in `new`);
        // the caller's struct is valid for writes per the contract.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (value as *const T).cast::<u8>().add(skip),
                self.ptr.cast::<u8>().add(skip),
                self.len - skip,
            )
        };
    }
}

/// Fills the caller's struct of `size` bytes with the defaults and that size.
pub(crate) unsafe fn init_sized<T: SizedStruct>(
    ptr: *mut T,
    size: usize,
    what: &str,
) -> Result<(), Error> {
    if ptr.is_null() {
        return Err(null(what));
    }
    let len = usable::<T>(size)?;
    // SAFETY: the caller's struct has `size` >= `len` bytes, valid for writes.
    unsafe { ptr.cast::<u32>().write(size as u32) };
    Out { ptr, len }.write(&T::defaults());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in that grew: v1 was `size` and `a` (8 bytes).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Grown {
        size: u32,
        a: u32,
        b: u64,
    }

    // SAFETY: repr(C), size first, integers only, no padding (16 bytes).
    unsafe impl SizedStruct for Grown {
        const NAME: &'static str = "grown";
        const INIT: &'static str = "grown_init";
        const MIN_SIZE: usize = 8;
        fn defaults() -> Self {
            Self {
                size: 16,
                a: 1,
                b: 2,
            }
        }
    }

    /// The struct's memory with a canary after it.
    #[repr(C)]
    struct Guarded {
        value: Grown,
        canary: [u8; 16],
    }

    fn guarded(size: u32) -> Guarded {
        Guarded {
            value: Grown { size, a: 10, b: 20 },
            canary: [0xc5; 16],
        }
    }

    #[test]
    fn a_smaller_struct_is_read_over_the_defaults() {
        let g = guarded(8);
        let read = unsafe { read_sized(&g.value, "x") }.unwrap();
        assert_eq!(
            read,
            Grown {
                size: 8,
                a: 10,
                b: 2
            }
        );
        let g = guarded(16);
        assert_eq!(unsafe { read_sized(&g.value, "x") }.unwrap(), g.value);
        let g = guarded(4000);
        assert_eq!(unsafe { read_sized(&g.value, "x") }.unwrap(), g.value);
    }

    #[test]
    fn sizes_no_version_has_are_refused() {
        for size in [0, 4, 7, 4097, u32::MAX] {
            let mut g = guarded(size);
            let e = unsafe { read_sized(&g.value, "x") }.unwrap_err();
            assert!(e.message().contains("grown_init"), "{e}");
            assert!(unsafe { Out::new(&mut g.value, "x") }.is_err());
            assert!(unsafe { init_sized(&mut g.value, size as usize, "x") }.is_err());
            assert_eq!(
                g.value,
                guarded(size).value,
                "nothing written for size {size}"
            );
        }
        assert!(unsafe { read_sized(std::ptr::null::<Grown>(), "x") }.is_err());
    }

    #[test]
    fn writes_stay_within_the_callers_size_and_keep_it() {
        let mut g = guarded(8);
        let out = unsafe { Out::new(&mut g.value, "x") }.unwrap();
        out.write(&Grown {
            size: 16,
            a: 7,
            b: 9,
        });
        assert_eq!(
            g.value,
            Grown {
                size: 8,
                a: 7,
                b: 20
            }
        );
        assert_eq!(g.canary, [0xc5; 16]);

        let mut g = guarded(99);
        unsafe { init_sized(&mut g.value, 8, "x") }.unwrap();
        assert_eq!(
            g.value,
            Grown {
                size: 8,
                a: 1,
                b: 20
            }
        );
        unsafe { init_sized(&mut g.value, 32, "x") }.unwrap();
        assert_eq!(
            g.value,
            Grown {
                size: 32,
                a: 1,
                b: 2
            }
        );
        assert_eq!(
            g.canary, [0xc5; 16],
            "nothing past the library's own struct"
        );
    }
}
