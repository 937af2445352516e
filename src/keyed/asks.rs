//! What a host's call asks of the store for one key: the current slice's
//! chunk of a key that waits for it, and the next slice's of a key hot on
//! the host (see `fleet`).

use std::sync::atomic::Ordering::Relaxed;

use super::Keys;
use super::fleet::Clock;
use super::global::{self, GlobalRule, Now, Seen};
use super::region::OVERFLOW;
use crate::format::{BUCKET_KEYS, GlobalWords, IDENT_LOCK};
use crate::quota::KeyAsk;

impl Keys {
    /// The asks of entry `index`'s key (with what it was asked in the
    /// slice, its entry and tag): for the current slice if it waits for
    /// the store, for the next if the slice's `last` window is on and the
    /// key is hot on the host.
    pub(super) fn asks_of(
        &self,
        w: &GlobalWords,
        index: u32,
        clock: &Clock,
        slice_ms: u64,
        last: bool,
        asks: &mut Vec<(u64, u32, u64, KeyAsk)>,
    ) {
        let seen = Seen::unpack(w.seen.load(Relaxed));
        let current = seen.slice == clock.slice & 0xff_ffff;
        if index == OVERFLOW || !(current && seen.wants || last) {
            return;
        }
        let bucket = self.region.bucket(index / BUCKET_KEYS as u32);
        let ident = bucket.ident[index as usize % BUCKET_KEYS].load(Relaxed);
        if ident == 0 || ident & IDENT_LOCK != 0 || global::tag_of(ident) != seen.tag {
            return;
        }
        let (rules, _) = self.rules(ident);
        let Some(rule) = GlobalRule::of(&rules) else {
            return;
        };
        let rule = rule.among(self.region.header().global.hosts.load(Relaxed));
        if rule.slice_ms != slice_ms {
            return;
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
                    want: rule.want(seen.asked, clock.elapsed_ms, 1),
                    charge: now.local - now.charged.min(now.local),
                    next: false,
                },
            ));
        }
        // A key still hot next slice has no allowance there: it is asked
        // ahead even if this slice did not see it. Not before its words
        // are its own (`now` rolled to its tag, which writes its id): an
        // entry just given to it still names the key before.
        if last && now.tag == seen.tag && seen.hot_for_in(rule.local, clock.slice + 1) > 0 {
            let asked = if current { seen.asked } else { 0 };
            asks.push((
                asked,
                index,
                seen.tag,
                KeyAsk {
                    id,
                    permits: rule.permits,
                    want: rule.want_ahead(asked, clock.elapsed_ms),
                    charge: 0,
                    next: true,
                },
            ));
        }
    }
}
