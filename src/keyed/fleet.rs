//! Keys' global rates against the table's store. A host calls the store
//! at most once per call window (a slice, or a second of a longer one), at
//! four fifths of it: one call asks for the chunks of every key that waits
//! for the store in the current slice, and, in the slice's last window, for
//! the next slice's chunks of every key hot on the host. A request that
//! needs the store between calls is refused until the next one. A store
//! that fails leaves each key its fallback share (see `global` for the
//! words, `quota::keyed` for the store's side).
//!
//! Every answer lists the fleet's spread keys (asked of the store at least
//! twice per permit in a slice, and refused): a key on the list has no
//! allowance on any host from its next slice, so a key asked a few times
//! on each of a thousand hosts is exact once the hosts have called. The
//! keeper therefore makes the slice's last call even with nothing to ask,
//! if none was made since the call point: it is the host's heartbeat too.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::time::Duration;

use siphasher::sip::SipHasher13;

use super::global::{self, GlobalRule, Paid, Step};
use super::record::HEARTBEAT_MS;
use super::region::OVERFLOW;
use super::{KeyRefusal, KeyRefused, Keys};
use crate::format::{BUCKET_KEYS, KeyCounter};
use crate::quota::{KeyAsk, KeyName, KeyReply, MAX_KEY_BATCH, Quota, smooth_offset};

/// How long a failed store is left alone before a key asks it again.
const PROBE_MS: i64 = 1000;
/// The longest call window: a key waiting for the store waits at most
/// about this long, whatever its slice.
const WINDOW_MS: u64 = 1000;
/// Where in its window a call is made, in tenths: late enough that the
/// window's demand is known, early enough that the answer lands before the
/// next slice begins.
const CALL_AT_TENTHS: u64 = 8;

/// Keys a call names (the most asked): what the store keeps for the
/// fleet's view of its hot keys. The fleet's hot keys are each among the
/// most asked of the hosts that ask for them.
const NAMED: usize = 2;

/// A key's global payment, given back if the task's own limits refuse.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GlobalPaid {
    index: u32,
    tag: u16,
    /// The slice's low 32 bits (its words keep 24).
    slice: u32,
    paid: Paid,
}

/// The key's id in the store: the same on every host (a hash of the task
/// and the key; the key file's identities are keyed per file).
pub(crate) fn store_id(task: &str, key: &[u8]) -> u64 {
    let mut h = SipHasher13::new_with_keys(0x666c_6f77_6374_726c, 0x6b65_7973_2d76_3031);
    std::hash::Hasher::write(&mut h, task.as_bytes());
    std::hash::Hasher::write(&mut h, &[0xff]);
    std::hash::Hasher::write(&mut h, key);
    std::hash::Hasher::finish(&h)
}

/// Where the store's clock is for a key's slices.
pub(super) struct Clock {
    /// The store's ms, as this host estimates it.
    pub ms: u64,
    pub slice: u64,
    pub elapsed_ms: u64,
}

/// The call windows of slices of `slice_ms`.
fn window(slice_ms: u64) -> u64 {
    slice_ms.min(WINDOW_MS)
}

impl Keys {
    fn store_clock(&self, quota: &Quota, slice_ms: u64) -> Clock {
        let offset_us = self.region.header().global.offset_us.load(Relaxed) as i64;
        let ms = ((quota.host_us() + offset_us) / 1000).max(0) as u64;
        Clock {
            ms,
            slice: ms / slice_ms,
            elapsed_ms: ms % slice_ms,
        }
    }

    /// A call for `slice` (of `slice_ms`) sent at `sent_us` (host µs)
    /// answered: the store's clock, the hosts it counts, the record's
    /// version (the next heartbeat due a second after the send, so the
    /// keeper's next call point finds it due), and the spread keys if the
    /// store was in that slice. The offset follows as a task's does (see
    /// `quota::smooth_offset`): a slow answer's noise never moves the
    /// host's slice edges.
    pub(super) fn note_answer(
        &self,
        quota: &Quota,
        sent_us: i64,
        (slice, slice_ms): (u64, u64),
        reply: &KeyReply,
    ) {
        let g = &self.region.header().global;
        let back = quota.host_us();
        // The store answers whole ms: its clock was within that ms.
        let measured = reply.store_ms * 1000 + 500 - (sent_us + back) / 2;
        let old = g.offset_us.load(Relaxed) as i64;
        g.offset_us
            .store(smooth_offset(old, measured, back - sent_us) as u64, Relaxed);
        g.hosts.store(reply.hosts, Relaxed);
        g.failed_until_ms.store(0, Relaxed);
        self.note_record(reply.record, (sent_us / 1000).max(0) as u64);
        if reply.slice == slice {
            self.note_spread(slice, slice_ms, &reply.spread);
        }
    }

    /// Decides `n` of a key's global rate (its local limits admitted it):
    /// `Ok(Some(paid))`, `Ok(None)` (admitted without a payment: the
    /// fallback's local limits, or shadow mode), or the refusal.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn take_global(
        &self,
        quota: &Quota,
        task: &str,
        (index, ident): (u32, u64),
        key: &[u8],
        rule: &GlobalRule,
        shadow: bool,
        n: u32,
    ) -> Result<Option<GlobalPaid>, KeyRefusal> {
        let Some(w) = self.region.globals(index) else {
            return Ok(None);
        };
        // Keys on the shared overflow state share its words as one key.
        let tag = if index == OVERFLOW {
            0
        } else {
            global::tag_of(ident)
        };
        // The key's store id is hashed only when its words start a slice.
        let id = || store_id(task, key);
        let n = n as u64;
        let rule = &rule.among(self.region.header().global.hosts.load(Relaxed));
        let keeps = quota.keeps_keys();
        if keeps {
            self.call_if_due(quota, task, rule.slice_ms);
        }
        let mut clock = self.store_clock(quota, rule.slice_ms);
        // Read when the key's words start a slice, as its id is.
        let spread = |slice| self.spread(slice, rule.slice_ms, id());
        global::note(w, tag, clock.slice, rule, n, &|| spread(clock.slice));
        let mut wait = rule.slice_ms - clock.elapsed_ms;
        for _ in 0..3 {
            let step = global::decide(
                w,
                (tag, &id),
                clock.slice,
                rule,
                (n, clock.elapsed_ms),
                &|| spread(clock.slice),
            );
            match step {
                Step::Admit(paid) => {
                    return Ok(Some(GlobalPaid {
                        index,
                        tag: tag as u16,
                        slice: clock.slice as u32,
                        paid,
                    }));
                }
                Step::Refuse => break,
                Step::Pull { .. } => {}
            }
            let g = &self.region.header().global;
            if !keeps {
                // The embedded store: the host is the fleet, its slice all
                // the host's.
                global::grant_whole(w, (tag, id()), clock.slice, rule.permits);
                continue;
            }
            if g.failed_until_ms.load(Relaxed) > clock.ms {
                // A key that pulled in this slice falls back from the next:
                // the host does not count what the store gave it.
                if global::pulled_in(w, tag, clock.slice) {
                    break;
                }
                match rule.fallback_share(g.hosts.load(Relaxed), spread(clock.slice)) {
                    None => return Ok(None),
                    Some(share) => global::fall_back(w, (tag, id()), clock.slice, share),
                }
                continue;
            }
            global::wait_for_store(w, tag, clock.slice);
            if !self.call_if_due(quota, task, rule.slice_ms) {
                let next = g.ahead.load(Relaxed);
                wait = next.saturating_sub(clock.ms).max(1);
                break;
            }
            // The call took a round trip: the slice may have moved on.
            clock = self.store_clock(quota, rule.slice_ms);
            wait = rule.slice_ms - clock.elapsed_ms;
        }
        if shadow {
            self.region.count(KeyCounter::ShadowRefused, n);
            return Ok(None);
        }
        self.region.count(KeyCounter::RefusedGlobal, n);
        Err(KeyRefusal {
            by: KeyRefused::Global,
            retry_after: Some(Duration::from_millis(wait.max(1))),
        })
    }

    /// Gives back a global payment.
    pub(crate) fn give_back_global(&self, p: GlobalPaid) {
        if let Some(w) = self.region.globals(p.index) {
            global::give_back(w, p.tag as u64, p.slice as u64, p.paid);
        }
    }

    /// The keeper's part, for a task whose default limits have a global
    /// rate (by their slice): the window's call if it is due and no request
    /// came to make it (keys that wait for the store are asked, and in the
    /// slice's last window the hot ones ahead), or a call with nothing to
    /// ask, so the host learns the fleet's spread keys before the next
    /// slice's first request. It is the host's heartbeat too (see
    /// `record`): one a second. The keeper takes no window while overrides
    /// count in other slices: their keys' requests take the windows they
    /// need. Returns whether it serves the heartbeat (false: the task's
    /// keeper makes a plain one).
    pub(crate) fn call_when_due(&self, quota: &Quota, task: &str) -> bool {
        if self.region.header().any_global.load(Acquire) == 0 {
            return false;
        }
        let Some((slice_ms, one)) = self.global_slicing() else {
            return false;
        };
        if one {
            self.call_if_due(quota, task, slice_ms);
        }
        self.empty_call_if_due(quota, task, slice_ms);
        true
    }

    /// The keeper's call with nothing to ask, a tenth of a window past the
    /// latest call point if no call was sent since: in the slice's last
    /// window with slices of a second or more (its answer lists the fleet's
    /// spread keys), or when the heartbeat is due (once a second); never to
    /// a store taken as down. One process of the host makes it.
    fn empty_call_if_due(&self, quota: &Quota, task: &str, slice_ms: u64) {
        let clock = self.store_clock(quota, slice_ms);
        let w = window(slice_ms);
        let mut point = clock.ms / w * w + w * CALL_AT_TENTHS / 10;
        if clock.ms < point {
            point = point.saturating_sub(w);
        }
        let h = self.region.header();
        let called = h.fleet.called.load(Acquire);
        // A tenth of a window after the point: a request past it makes the
        // window's call first. (A mark ahead of the clock by more than a
        // window is one the store's clock jumped back from: stale.)
        if clock.ms < point + w / 10 || called >= point && called <= clock.ms + w {
            return;
        }
        let last = point % slice_ms >= slice_ms - w + w * CALL_AT_TENTHS / 10;
        let due = last && slice_ms >= HEARTBEAT_MS || self.heartbeat_due(quota);
        if !due || h.global.failed_until_ms.load(Relaxed) > clock.ms {
            return;
        }
        if h.fleet
            .called
            .compare_exchange(called, clock.ms, AcqRel, Relaxed)
            .is_ok()
        {
            self.call_part(quota, task, &clock, slice_ms, &[]);
        }
    }

    /// Makes the host's call to the store if one is due (the first process
    /// of the host to see it due makes it; `GlobalHeader::ahead` holds when
    /// the next is due, store ms): true if this process claimed it. With
    /// nothing to ask no call is made (see `empty_call_if_due`).
    fn call_if_due(&self, quota: &Quota, task: &str, slice_ms: u64) -> bool {
        let clock = self.store_clock(quota, slice_ms);
        let due = &self.region.header().global.ahead;
        let at = due.load(Acquire);
        let w = window(slice_ms);
        let this = clock.ms / w * w + w * CALL_AT_TENTHS / 10;
        // A host's first call is at its first window's call point. A due
        // time more than two windows ahead is one the store's clock jumped
        // back from: due now.
        if clock.ms < at && at <= clock.ms + 2 * w || (at == 0 && clock.ms < this) {
            return false;
        }
        let next = this + if clock.ms < this { 0 } else { w };
        if due.compare_exchange(at, next, AcqRel, Acquire).is_err() {
            return false;
        }
        // Asked ahead only from the last window's call point: a call late
        // for an earlier window would ask before the slice's demand is
        // known, and before the store counted the key's askers.
        let last = clock.elapsed_ms >= slice_ms - w + w * CALL_AT_TENTHS / 10;
        self.call(quota, task, &clock, slice_ms, last);
        true
    }

    /// One call: the current slice's chunks of the keys waiting for the
    /// store, and (in the slice's `last` window) the next slice's of the
    /// keys hot on the host; the most asked first. A process killed
    /// meanwhile leaves its keys waiting, and the grants unspent (less
    /// admitted, never more).
    fn call(&self, quota: &Quota, task: &str, clock: &Clock, slice_ms: u64, last: bool) {
        let mut asks: Vec<(u64, u32, u64, KeyAsk)> = Vec::new();
        for index in 0..self.region.entries() {
            let Some(w) = self.region.globals(index) else {
                break;
            };
            self.asks_of(w, index, clock, slice_ms, last, &mut asks);
        }
        if asks.is_empty() {
            return;
        }
        asks.sort_unstable_by_key(|a| std::cmp::Reverse(a.0));
        for part in asks.chunks(MAX_KEY_BATCH) {
            if !self.call_part(quota, task, clock, slice_ms, part) {
                return;
            }
        }
    }

    /// One round trip of a call: false when the store failed.
    fn call_part(
        &self,
        quota: &Quota,
        task: &str,
        clock: &Clock,
        slice_ms: u64,
        asks: &[(u64, u32, u64, KeyAsk)],
    ) -> bool {
        let batch: Vec<KeyAsk> = asks.iter().map(|a| a.3).collect();
        self.region
            .header()
            .fleet
            .called
            .fetch_max(clock.ms, AcqRel);
        let names = self.names_of(asks);
        let sent = quota.host_us();
        let g = &self.region.header().global;
        match quota.pull_keys(task, (clock.slice, slice_ms as u32), &batch, &names) {
            Some(Ok(reply)) => {
                self.note_answer(quota, sent, (clock.slice, slice_ms), &reply);
                for ((_, index, tag, ask), &(granted, left)) in asks.iter().zip(&reply.grants) {
                    let Some(w) = self.region.globals(*index) else {
                        continue;
                    };
                    if ask.next {
                        global::deposit_ahead(w, *tag, clock.slice + 1, granted, left == 0);
                    } else {
                        let key = (*tag, ask.id);
                        global::deposit(w, key, clock.slice, granted, ask.charge, left == 0);
                    }
                }
            }
            Some(Err(e)) => {
                g.failed_until_ms.store(clock.ms + PROBE_MS as u64, Relaxed);
                crate::events::report(
                    crate::events::Event::StoreFailed,
                    task,
                    format_args!("task {task:?}: keys' global rates fall back: {e}"),
                );
                return false;
            }
            None => {}
        }
        true
    }

    /// The names of the [`NAMED`] most asked keys of a call (`asks` come
    /// most asked first), each for the slice its ask is for, as the key
    /// file keeps them.
    fn names_of(&self, asks: &[(u64, u32, u64, KeyAsk)]) -> Vec<KeyName> {
        asks.iter()
            .take(NAMED)
            .filter_map(|&(_, index, _, ask)| {
                let bucket = self.region.bucket(index / BUCKET_KEYS as u32);
                let ident = bucket.ident[index as usize % BUCKET_KEYS].load(Relaxed);
                let (name, _) = super::names::name_of(&self.region, ident)?;
                Some(KeyName {
                    id: ask.id,
                    next: ask.next,
                    name,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_store_id_is_the_same_on_every_host_and_apart_per_task() {
        assert_eq!(store_id("api", b"k1"), store_id("api", b"k1"));
        assert_ne!(store_id("api", b"k1"), store_id("api", b"k2"));
        assert_ne!(store_id("api", b"k1"), store_id("ap", b"ik1"));
    }
}
