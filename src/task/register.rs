//! Finding a task's slot by name, or claiming one for a new task.
//!
//! Names are spread over the slots by an FNV-1a hash with linear probing. A
//! slot being filled is marked with its claimer's [`Owner`] (slot and epoch):
//! a claim whose owner died is taken over, one whose owner lives is waited
//! for up to a deadline, then an error — never an endless spin.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::config::{self, TaskSettings};
use crate::error::{Error, ErrorKind, Result};
use crate::shm::layout::{
    NAME_MAX, NAME_WORDS, TASK_CLAIMING, TASK_EMPTY, TASK_KIND, TASK_READY, TaskSlot,
};
use crate::shm::{Owner, Shm};

/// How long registration waits for another live process filling a slot.
const CLAIM_DEADLINE: Duration = Duration::from_secs(2);

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

pub(crate) fn name_words(name: &str) -> [u64; NAME_WORDS] {
    let mut bytes = [0u8; NAME_WORDS * 8];
    bytes[..name.len()].copy_from_slice(name.as_bytes());
    std::array::from_fn(|i| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap()))
}

/// FNV-1a: spreads names over the slots; collisions probe linearly.
pub(crate) fn hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn holds(slot: &TaskSlot, name: &str, words: &[u64; NAME_WORDS]) -> bool {
    slot.name_len.load(Ordering::Relaxed) == name.len() as u64
        && slot
            .name
            .iter()
            .zip(words)
            .all(|(w, v)| w.load(Ordering::Relaxed) == *v)
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
    let words = name_words(name);
    let capacity = shm.geometry.task_capacity;
    let start = (hash(name) % capacity as u64) as u32;
    let me = shm.owner()?;
    let began = Instant::now();
    for probe in 0..capacity {
        let index = (start + probe) % capacity;
        let slot = shm.task_slot(index);
        loop {
            let state = slot.state.load(Ordering::Acquire);
            match state & TASK_KIND {
                TASK_READY if state == TASK_READY => {
                    if holds(slot, name, &words) {
                        return Ok(index);
                    }
                    break;
                }
                TASK_EMPTY if state == TASK_EMPTY => {
                    if claim(slot, state, me) {
                        publish(slot, name, &words, limits, &settings);
                        return Ok(index);
                    }
                }
                TASK_CLAIMING => {
                    let claimer = Owner(state & !TASK_KIND);
                    if claimer != me && !shm.owner_alive(claimer) {
                        // Died half-way: the slot is ours to fill.
                        if claim(slot, state, me) {
                            publish(slot, name, &words, limits, &settings);
                            return Ok(index);
                        }
                    } else if began.elapsed() > CLAIM_DEADLINE {
                        return Err(Error::new(
                            ErrorKind::Timeout,
                            format!(
                                "task slot {index} of {} has been being registered by a live \
                                 process for over {CLAIM_DEADLINE:?}",
                                shm.path().display()
                            ),
                        ));
                    } else {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
                _ => {
                    return Err(Error::corrupt(format!(
                        "{}: task slot {index} has an unknown state {state:#x}",
                        shm.path().display()
                    )));
                }
            }
        }
    }
    Err(Error::new(
        ErrorKind::TableFull,
        format!(
            "all {capacity} task slots of {} are taken; cannot register {name:?}",
            shm.path().display()
        ),
    ))
}

fn claim(slot: &TaskSlot, seen: u64, me: Owner) -> bool {
    slot.state
        .compare_exchange(
            seen,
            TASK_CLAIMING | me.0,
            Ordering::Acquire,
            Ordering::Relaxed,
        )
        .is_ok()
}

/// Fills a claimed slot and publishes it. Nobody reads an unpublished slot's
/// configuration, so it is written without the configuration lock.
fn publish(
    slot: &TaskSlot,
    name: &str,
    words: &[u64; NAME_WORDS],
    limits: config::Limits,
    settings: &TaskSettings,
) {
    for (w, v) in slot.name.iter().zip(words) {
        w.store(*v, Ordering::Relaxed);
    }
    slot.name_len.store(name.len() as u64, Ordering::Relaxed);
    slot.config_lock.store(0, Ordering::Relaxed);
    config::write(slot, limits, settings.local_rate, &settings.limiter);
    slot.state.store(TASK_READY, Ordering::Release);
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
