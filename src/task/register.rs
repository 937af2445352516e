//! Task names, and finding a task's slot by name or claiming one for a new
//! task (the probing and claiming are `shm::named`'s, shared with
//! balancers).

use std::sync::atomic::Ordering;

use super::config::{self, TaskSettings};
use crate::error::{Error, ErrorKind, Result};
use crate::shm::Shm;
use crate::shm::layout::{NAME_MAX, TaskSlot};
use crate::shm::named::{self, Named};

/// Checks a task name: 1–63 bytes of UTF-8, not blank, with no control,
/// format or invisible characters (bidi overrides, zero-width characters,
/// BOM): two names that print the same must be the same name.
pub fn validate_name(name: &str) -> Result<()> {
    let invalid = |why: String| Err(Error::new(ErrorKind::InvalidName, why));
    if name.is_empty() || name.len() > NAME_MAX {
        return invalid(format!(
            "task name must be 1..={NAME_MAX} bytes, not {}",
            name.len()
        ));
    }
    if let Some(c) = name.chars().find(|c| c.is_control() || is_invisible(*c)) {
        return invalid(format!(
            "task name must be printable, found U+{:04X} in {:?}",
            c as u32,
            name.escape_default().to_string()
        ));
    }
    if name.chars().all(char::is_whitespace) {
        return invalid("task name must not be blank".into());
    }
    Ok(())
}

/// Unicode format (Cf) and other invisible characters that make two
/// different names look the same.
fn is_invisible(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x034F | 0x061C | 0x115F | 0x1160 | 0x17B4 | 0x17B5 | 0x180B..=0x180F
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F
        | 0xFEFF | 0xFFA0 | 0xFFF0..=0xFFFB | 0x0600..=0x0605 | 0x06DD | 0x070F | 0x0890 | 0x0891
        | 0x08E2 | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A | 0xE0000..=0xE0FFF)
}

/// The name a slot holds, if it is readable (for reports).
pub(crate) fn slot_name(slot: &TaskSlot) -> Option<String> {
    let len = usize::try_from(slot.name_len.load(Ordering::Relaxed)).ok()?;
    if len > NAME_MAX {
        return None;
    }
    let bytes: Vec<u8> = slot
        .name
        .iter()
        .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
        .take(len)
        .collect();
    String::from_utf8(bytes).ok()
}

/// Finds the slot of `name`, or claims an empty one and publishes it with
/// `settings` (already validated). Returns the slot index.
pub(crate) fn find_or_claim(shm: &Shm, name: &str, settings: TaskSettings) -> Result<u32> {
    let limits = settings.limits(&shm.clock)?;
    let named = |index| named(shm.task_slot(index));
    let capacity = shm.geometry.task_capacity;
    let (index, _) = named::find_or_claim(shm, "task", capacity, name, named, |index| {
        // Nobody reads an unpublished slot's configuration: it is written
        // without the configuration lock.
        let slot = shm.task_slot(index);
        let named = named(index);
        named.write_name(name);
        slot.config_lock.store(0, Ordering::Relaxed);
        config::write(slot, limits, settings.local_rate, &settings.limiter);
        named.publish();
    })?;
    Ok(index)
}

fn named(slot: &TaskSlot) -> Named<'_> {
    Named {
        state: &slot.state,
        name_len: &slot.name_len,
        name: &slot.name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_print_alike_or_blank_are_refused() {
        for good in ["backend", "db-1", "ключ", "a b", "名前"] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            " ",
            "\u{3000}",
            "a\u{202E}b",
            "a\u{200B}",
            "\u{FEFF}x",
            "x\ny",
            "x\u{7f}",
            "x\u{2066}",
            "x\u{E0041}",
        ] {
            let err = validate_name(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidName, "{bad:?}");
        }
        assert!(validate_name(&"x".repeat(63)).is_ok());
        assert!(validate_name(&"x".repeat(64)).is_err());
    }
}
