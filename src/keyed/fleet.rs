//! Keys' global rates against the table's store: a request of a key that
//! needs the store asks for that key alone; near a slice's end one process
//! of the host asks ahead, in one call, for every key hot on the host; a
//! store that fails leaves each key its fallback share (see `global` for
//! the words, `quota::keyed` for the store's side).

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::time::Duration;

use siphasher::sip::SipHasher13;

use super::global::{self, GlobalRule, Paid, Seen, Step};
use super::region::OVERFLOW;
use super::{KeyRefusal, KeyRefused, Keys};
use crate::format::{BUCKET_KEYS, GlobalWords, IDENT_LOCK};
use crate::quota::{KeyAsk, MAX_KEY_BATCH, Quota};

/// How long a failed store is left alone before a key asks it again.
const PROBE_MS: i64 = 1000;
/// How far into a slice the host asks ahead for the next one, in tenths:
/// late enough that the slice's demand is known, early enough that the
/// answer lands before the next slice begins.
const AHEAD_AT_TENTHS: u64 = 8;

/// A key's global payment, given back if the task's own limits refuse.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GlobalPaid {
    index: u32,
    tag: u64,
    slice: u64,
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
struct Clock {
    slice: u64,
    elapsed_ms: u64,
}

impl Keys {
    fn store_clock(&self, quota: &Quota, slice_ms: u64) -> Clock {
        let offset = self.region.header().global.offset_ms.load(Relaxed) as i64;
        let ms = (quota.host_ms() + offset).max(0) as u64;
        Clock {
            slice: ms / slice_ms,
            elapsed_ms: ms % slice_ms,
        }
    }

    fn note_reply(&self, quota: &Quota, sent_ms: i64, store_ms: i64, hosts: u64) {
        let g = &self.region.header().global;
        let mid = (sent_ms + quota.host_ms()) / 2;
        g.offset_ms.store((store_ms - mid) as u64, Relaxed);
        g.hosts.store(hosts, Relaxed);
        g.failed_until_ms.store(0, Relaxed);
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
        let (tag, id) = (global::tag_of(ident), store_id(task, key));
        let n = n as u64;
        let mut clock = self.store_clock(quota, rule.slice_ms);
        self.ask_ahead(quota, task, &clock, rule.slice_ms);
        for _ in 0..3 {
            let step = global::decide(w, (tag, id), clock.slice, rule, n, clock.elapsed_ms);
            let (want, charge) = match step {
                Step::Admit(paid) => {
                    return Ok(Some(GlobalPaid {
                        index,
                        tag,
                        slice: clock.slice,
                        paid,
                    }));
                }
                Step::Refuse => break,
                Step::Pull { want, charge } => (want, charge),
            };
            let g = &self.region.header().global;
            let store_ms = quota.host_ms() + g.offset_ms.load(Relaxed) as i64;
            if g.failed_until_ms.load(Relaxed) as i64 > store_ms {
                match rule.fallback_share(g.hosts.load(Relaxed)) {
                    None => return Ok(None),
                    Some(share) => global::fall_back(w, (tag, id), clock.slice, share),
                }
                continue;
            }
            let asks = [KeyAsk {
                id,
                permits: rule.permits,
                want,
                charge,
            }];
            let sent = quota.host_ms();
            match quota.pull_keys(task, (clock.slice, rule.slice_ms as u32), &asks) {
                // The embedded store: the host is the fleet, its slice all
                // the host's.
                None => global::deposit(
                    w,
                    (tag, id),
                    clock.slice,
                    rule.permits.saturating_sub(charge),
                    charge,
                    true,
                ),
                Some(Ok(reply)) => {
                    self.note_reply(quota, sent, reply.store_ms, reply.hosts);
                    match reply.grants.first() {
                        Some(&(granted, left)) => {
                            global::deposit(w, (tag, id), clock.slice, granted, charge, left == 0)
                        }
                        // Another slice: the offset is corrected.
                        None => clock = self.store_clock(quota, rule.slice_ms),
                    }
                }
                Some(Err(e)) => {
                    g.failed_until_ms
                        .store((store_ms + PROBE_MS) as u64, Relaxed);
                    crate::events::report(
                        crate::events::Event::StoreFailed,
                        task,
                        format_args!("task {task:?}: keys' global rates fall back: {e}"),
                    );
                }
            }
        }
        if shadow {
            return Ok(None);
        }
        let wait = rule.slice_ms.saturating_sub(clock.elapsed_ms).max(1);
        Err(KeyRefusal {
            by: KeyRefused::Global,
            retry_after: Some(Duration::from_millis(wait)),
        })
    }

    /// Gives back a global payment.
    pub(crate) fn give_back_global(&self, p: GlobalPaid) {
        if let Some(w) = self.region.globals(p.index) {
            global::give_back(w, p.tag, p.slice, p.paid);
        }
    }

    /// Past [`AHEAD_AT_TENTHS`] of a slice, the first process of the host
    /// to get here asks the store, in one call, for the next slice's chunks
    /// of the keys hot on the host (the most asked first). Its answer goes
    /// to the keys' `next` words. A process killed meanwhile leaves the
    /// keys to ask when the slice begins.
    fn ask_ahead(&self, quota: &Quota, task: &str, clock: &Clock, slice_ms: u64) {
        if clock.elapsed_ms * 10 < slice_ms * AHEAD_AT_TENTHS {
            return;
        }
        let next = clock.slice + 1;
        let ahead = &self.region.header().global.ahead;
        let old = ahead.load(Acquire);
        if old >= next || ahead.compare_exchange(old, next, AcqRel, Acquire).is_err() {
            return;
        }
        let mut hot: Vec<(u64, u32, u64, KeyAsk)> = Vec::new();
        for index in 0..self.region.entries() {
            let Some(w) = self.region.globals(index) else {
                break;
            };
            if let Some((tag, asked, ask)) = self.hot_ask(w, index, clock, slice_ms) {
                hot.push((asked, index, tag, ask));
            }
        }
        if hot.is_empty() {
            return;
        }
        hot.sort_unstable_by_key(|h| std::cmp::Reverse(h.0));
        hot.truncate(MAX_KEY_BATCH);
        let asks: Vec<KeyAsk> = hot.iter().map(|h| h.3).collect();
        let sent = quota.host_ms();
        let Some(Ok(reply)) = quota.pull_keys(task, (next, slice_ms as u32), &asks) else {
            return;
        };
        self.note_reply(quota, sent, reply.store_ms, reply.hosts);
        for ((_, index, tag, _), (granted, left)) in hot.iter().zip(&reply.grants) {
            if let Some(w) = self.region.globals(*index) {
                global::deposit_ahead(w, *tag, next, *granted, *left == 0);
            }
        }
    }

    /// The ask ahead for entry `index`, if its key is hot on the host now
    /// (with its tag and what it was asked in the slice).
    fn hot_ask(
        &self,
        w: &GlobalWords,
        index: u32,
        clock: &Clock,
        slice_ms: u64,
    ) -> Option<(u64, u64, KeyAsk)> {
        let seen = Seen::unpack(w.seen.load(Relaxed));
        if seen.slice != clock.slice & 0xff_ffff || index == OVERFLOW {
            return None;
        }
        let bucket = self.region.bucket(index / BUCKET_KEYS as u32);
        let ident = bucket.ident[index as usize % BUCKET_KEYS].load(Relaxed);
        if ident == 0 || ident & IDENT_LOCK != 0 || global::tag_of(ident) != seen.tag {
            return None;
        }
        let (rules, _) = self.rules(ident);
        let rule = GlobalRule::of(&rules)?;
        if rule.slice_ms != slice_ms || !seen.hot(&rule) {
            return None;
        }
        Some((
            seen.tag,
            seen.asked,
            KeyAsk {
                id: w.id.load(Relaxed),
                permits: rule.permits,
                want: rule.want_ahead(seen.asked, clock.elapsed_ms),
                charge: 0,
            },
        ))
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
