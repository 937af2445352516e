//! Finding a balancer's slot by name or claiming one, like a task's (hash,
//! linear probing, a claim marked with its claimer's owner and taken over if
//! the claimer died), and the lock of its membership.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::config::Params;
use super::layout::{BalancerSlot, balancer_slot};
use crate::error::{Error, ErrorKind, Result};
use crate::shm::layout::{NAME_WORDS, TASK_CLAIMING, TASK_EMPTY, TASK_KIND, TASK_READY};
use crate::shm::{Owner, Shm};
use crate::task::{hash, name_words};

/// How long registration and membership changes wait for a live process
/// holding the slot's claim or lock.
const DEADLINE: Duration = Duration::from_secs(2);

fn holds(slot: &BalancerSlot, name: &str, words: &[u64; NAME_WORDS]) -> bool {
    slot.name_len.load(Ordering::Relaxed) == name.len() as u64
        && slot
            .name
            .iter()
            .zip(words)
            .all(|(w, v)| w.load(Ordering::Relaxed) == *v)
}

fn timeout(what: String) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!("{what} by a live process for over {DEADLINE:?}"),
    )
}

/// The slot of balancer `name`, claimed and published with `params` if it
/// is new. Returns the slot index and whether this call created it.
pub(crate) fn find_or_claim(shm: &Shm, name: &str, params: Params) -> Result<(u32, bool)> {
    let capacity = shm.geometry.balancer_capacity;
    if capacity == 0 {
        return Err(Error::new(
            ErrorKind::TableFull,
            format!(
                "{} has no balancer slots (created with balancers = 0 or by an older flowctrl)",
                shm.path().display()
            ),
        ));
    }
    let words = name_words(name);
    let start = (hash(name) % capacity as u64) as u32;
    let me = shm.owner()?;
    let began = Instant::now();
    for probe in 0..capacity {
        let index = (start + probe) % capacity;
        let slot = balancer_slot(shm, index);
        loop {
            let state = slot.state.load(Ordering::Acquire);
            let mine = match state & TASK_KIND {
                TASK_READY if state == TASK_READY => {
                    if holds(slot, name, &words) {
                        return Ok((index, false));
                    }
                    break;
                }
                TASK_EMPTY if state == TASK_EMPTY => claim(slot, state, me),
                TASK_CLAIMING => {
                    let claimer = Owner(state & !TASK_KIND);
                    if claimer != me && !shm.owner_alive(claimer) {
                        claim(slot, state, me)
                    } else if began.elapsed() > DEADLINE {
                        return Err(timeout(format!("balancer slot {index} has been claimed")));
                    } else {
                        std::thread::sleep(Duration::from_micros(100));
                        false
                    }
                }
                _ => {
                    return Err(Error::corrupt(format!(
                        "{}: balancer slot {index} has an unknown state {state:#x}",
                        shm.path().display()
                    )));
                }
            };
            if mine {
                publish(slot, name, &words, params);
                return Ok((index, true));
            }
        }
    }
    Err(Error::new(
        ErrorKind::TableFull,
        format!(
            "all {capacity} balancer slots of {} are taken; cannot register {name:?}",
            shm.path().display()
        ),
    ))
}

fn claim(slot: &BalancerSlot, seen: u64, me: Owner) -> bool {
    slot.state
        .compare_exchange(
            seen,
            TASK_CLAIMING | me.0,
            Ordering::Acquire,
            Ordering::Relaxed,
        )
        .is_ok()
}

/// Fills a claimed slot and publishes it. Its backends are empty: a slot is
/// never freed, and a claim taken over from a dead claimer never got as far
/// as adding any (membership needs the slot published).
fn publish(slot: &BalancerSlot, name: &str, words: &[u64; NAME_WORDS], params: Params) {
    for (w, v) in slot.name.iter().zip(words) {
        w.store(*v, Ordering::Relaxed);
    }
    slot.name_len.store(name.len() as u64, Ordering::Relaxed);
    slot.member_lock.store(0, Ordering::Relaxed);
    params.store(slot);
    slot.state.store(TASK_READY, Ordering::Release);
}

/// Runs `body` holding `lock` (an owner word): taken over from a dead
/// holder, waited for up to [`DEADLINE`] from a live one.
pub(crate) fn with_lock<T>(shm: &Shm, lock: &AtomicU64, body: impl FnOnce() -> T) -> Result<T> {
    let me = shm.owner()?;
    let start = Instant::now();
    loop {
        let current = lock.load(Ordering::Acquire);
        let free = current == 0 || (current != me.0 && !shm.owner_alive(Owner(current)));
        if free
            && lock
                .compare_exchange(current, me.0, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            let result = body();
            lock.store(0, Ordering::Release);
            return Ok(result);
        }
        if start.elapsed() > DEADLINE {
            return Err(timeout("the balancer's membership has been locked".into()));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}
