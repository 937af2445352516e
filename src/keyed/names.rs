//! Display names of keys, for the views: an entry holds a hash only, so a
//! key's first bytes are kept in a small cache of name slots (4,096 of 64
//! bytes a key file). A key has two slots; it takes an empty one when it
//! gets an entry, and when it is refused it takes one even from another
//! key (the most refused keys are the ones an operator looks for). A
//! reader checks the name against the slot's hash, so a torn or stale
//! name is never shown as another key's.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

use super::region::KeyRegion;
use crate::format::NAME_BYTES;

fn slots_of(ident: u64) -> [u32; 2] {
    [(ident >> 20) as u32, (ident >> 40) as u32 ^ 1]
}

/// Keeps `key`'s name for `ident`, unless one of its slots holds it: in an
/// empty one, or with `take`, in its second slot whatever it holds.
pub(crate) fn note(region: &KeyRegion, ident: u64, key: &[u8], take: bool) {
    let [a, b] = slots_of(ident).map(|i| region.name_slot(i));
    let (ha, hb) = (a.hash.load(Relaxed), b.hash.load(Relaxed));
    if ha == ident || hb == ident {
        return;
    }
    let slot = match (ha, hb) {
        (0, _) => a,
        (_, 0) => b,
        _ if take => b,
        _ => return,
    };
    let v = slot.version.load(Acquire);
    // Odd while written; a writer that died leaves it odd, and the next
    // one takes it over (the hash check keeps readers right meanwhile).
    let writing = (v | 1).wrapping_add(2);
    if slot
        .version
        .compare_exchange(v, writing, AcqRel, Relaxed)
        .is_err()
    {
        return;
    }
    slot.hash.store(0, Relaxed);
    let mut bytes = [0u8; NAME_BYTES];
    let n = key.len().min(NAME_BYTES);
    bytes[..n].copy_from_slice(&key[..n]);
    for (w, chunk) in slot.bytes.iter().zip(bytes.chunks(8)) {
        w.store(
            u64::from_le_bytes(chunk.try_into().unwrap_or_default()),
            Relaxed,
        );
    }
    slot.len.store(key.len() as u64, Relaxed);
    slot.hash.store(ident, Relaxed);
    let _ = slot
        .version
        .compare_exchange(writing, writing + 1, Release, Relaxed);
}

/// The name kept for `ident`: its first bytes and whether they are all of
/// it; `None` if the slot holds another key's.
pub(crate) fn name_of(region: &KeyRegion, ident: u64) -> Option<(Vec<u8>, bool)> {
    slots_of(ident)
        .into_iter()
        .find_map(|i| read(region.name_slot(i), region, ident))
}

fn read(slot: &crate::format::NameSlot, region: &KeyRegion, ident: u64) -> Option<(Vec<u8>, bool)> {
    for _ in 0..4 {
        let v = slot.version.load(Acquire);
        if v & 1 != 0 {
            continue;
        }
        let hash = slot.hash.load(Relaxed);
        let len = slot.len.load(Relaxed) as usize;
        let mut bytes: Vec<u8> = slot
            .bytes
            .iter()
            .flat_map(|w| w.load(Relaxed).to_le_bytes())
            .collect();
        std::sync::atomic::fence(Acquire);
        if slot.version.load(Relaxed) != v || hash != ident {
            return None;
        }
        let whole = len <= NAME_BYTES;
        bytes.truncate(len.min(NAME_BYTES));
        // A hostile file may claim anything: a whole name must hash to
        // its identity.
        if whole && super::map::hash(region, &bytes).ident != ident {
            return None;
        }
        return Some((bytes, whole));
    }
    None
}
