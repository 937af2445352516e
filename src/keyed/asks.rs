//! What a host's call asks of the store for one key: the current slice's
//! chunk of a key that waits for it, and the next slice's of a key hot on
//! the host (see `fleet`).

use std::sync::atomic::Ordering::Relaxed;

use super::Keys;
use super::fleet::Clock;
use super::global::{self, GlobalRule, MAX_HELD, Now, Seen};
use super::region::OVERFLOW;
use crate::format::{BUCKET_KEYS, GlobalWords, IDENT_LOCK};
use crate::quota::KeyAsk;

impl Keys {
    /// The asks of entry `index`'s key (with what it was asked in the
    /// slice, its entry and tag): for the current slice if it waits for
    /// the store, for the next if the slice's `last` window is on and the
    /// key is hot on the host. True if the ask ahead is a first-time
    /// key's single permit.
    pub(super) fn asks_of(
        &self,
        w: &GlobalWords,
        index: u32,
        clock: &Clock,
        (slice_ms, last, top_up): (u64, bool, bool),
        asks: &mut Vec<(u64, u32, u64, KeyAsk)>,
    ) -> bool {
        let seen = Seen::unpack(w.seen.load(Relaxed));
        let current = seen.slice == clock.slice & 0xff_ffff;
        if index == OVERFLOW || !(current && seen.wants || last) {
            return false;
        }
        let bucket = self.region.bucket(index / BUCKET_KEYS as u32);
        let ident = bucket.ident[index as usize % BUCKET_KEYS].load(Relaxed);
        if ident == 0 || ident & IDENT_LOCK != 0 || global::tag_of(ident) != seen.tag {
            return false;
        }
        let (rules, _) = self.rules(ident);
        let Some(rule) = GlobalRule::of(&rules) else {
            return false;
        };
        let rule = rule.among(self.region.header().global.hosts.load(Relaxed));
        if rule.slice_ms != slice_ms {
            return false;
        }
        let id = w.id.load(Relaxed);
        let now = Now::unpack(w.now.load(Relaxed));
        // A key on its fallback share keeps to it for the slice.
        if current
            && seen.wants
            && now.tag == seen.tag
            && now.slice == seen.slice
            && !now.exhausted
            && !now.fallback
        {
            asks.push((
                seen.asked,
                index,
                seen.tag,
                KeyAsk {
                    id,
                    permits: rule.permits,
                    // A top-up comes too early in the slice to tell its
                    // rate: it asks for the slice, and the store gives it
                    // its share among the key's askers.
                    want: if top_up {
                        rule.permits.min(MAX_HELD)
                    } else {
                        rule.want(seen.asked, clock.elapsed_ms, 1)
                    },
                    charge: now.local - now.charged.min(now.local),
                    next: false,
                    top_up,
                },
            ));
        }
        // A key still hot next slice has no allowance there: it is asked
        // ahead even if this slice did not see it.
        if last && seen.hot_for_in(rule.local, clock.slice + 1) > 0 {
            let asked = if current { seen.asked } else { 0 };
            // Hot here for the first time, and asked less than its slice:
            // the store cannot tell yet whether many hosts share the key
            // (their calls come together, the first would count one asker
            // and be given the whole slice), so one permit, as each host of
            // a key spread over many is given, and the rest at a call as
            // the next slice begins (see `call_if_due`).
            let first = current && seen.hot_for == 0 && asked < rule.permits;
            let want = if first {
                1
            } else {
                rule.want_ahead(asked, clock.elapsed_ms)
            };
            asks.push((
                asked,
                index,
                seen.tag,
                KeyAsk {
                    id,
                    permits: rule.permits,
                    want,
                    charge: 0,
                    next: true,
                    top_up: false,
                },
            ));
            return first;
        }
        false
    }
}
