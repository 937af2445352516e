//! The bit layouts of a key's global words: each carries the slice it is
//! for (24 bits) and a tag of the key (12 bits); see the room's doc.

/// Bits of a slice id a word keeps.
pub(crate) const SLICE_BITS: u32 = 24;
pub(crate) const SLICE_MASK: u64 = (1 << SLICE_BITS) - 1;
/// The most a word holds of a key's slice: a larger chunk is asked again.
pub(crate) const MAX_HELD: u64 = 0xffff;

/// Whether a word's `word_slice` is later than `slice` (within half the
/// slice ids' range): a caller still at `slice` (a late answer, a thread
/// pre-empted across a slice's edge) must not write it back.
pub(crate) fn later(word_slice: u64, slice: u64) -> bool {
    let d = word_slice.wrapping_sub(slice) & SLICE_MASK;
    d != 0 && d < 1 << (SLICE_BITS - 1)
}

/// `now`: held 16 | local 5 | charged 5 | exhausted | fallback | slice 24 |
/// tag 12.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Now {
    pub tag: u64,
    pub slice: u64,
    pub held: u64,
    pub local: u64,
    pub charged: u64,
    pub exhausted: bool,
    pub fallback: bool,
}

impl Now {
    pub(crate) fn pack(&self) -> u64 {
        self.held
            | self.local << 16
            | self.charged << 21
            | (self.exhausted as u64) << 26
            | (self.fallback as u64) << 27
            | (self.slice & SLICE_MASK) << 28
            | self.tag << 52
    }

    pub(crate) fn unpack(w: u64) -> Self {
        Self {
            held: w & 0xffff,
            local: (w >> 16) & 0x1f,
            charged: (w >> 21) & 0x1f,
            exhausted: w >> 26 & 1 != 0,
            fallback: w >> 27 & 1 != 0,
            slice: (w >> 28) & SLICE_MASK,
            tag: w >> 52,
        }
    }

    pub(crate) fn is(&self, tag: u64, slice: u64) -> bool {
        self.tag == tag && self.slice == slice & SLICE_MASK
    }

    /// Whether the word is the key's, for a slice after `slice`.
    pub(crate) fn after(&self, tag: u64, slice: u64) -> bool {
        self.tag == tag && later(self.slice, slice)
    }
}

/// `next`: held 16 | exhausted (bit 26) | slice 24 | tag 12, as `now`.
pub(crate) fn next_word(tag: u64, slice: u64, held: u64, exhausted: bool) -> u64 {
    Now {
        tag,
        slice,
        held,
        exhausted,
        ..Now::default()
    }
    .pack()
}

/// Slices a key stays hot on a host after the last one it was hot in: a
/// key hot on many hosts, each asking a few a slice, is no host's
/// allowance each time one of them saw it less than twice.
pub(crate) const HOT_SLICES: u64 = 8;

/// `seen`: asked 16 | pulled | waits for the store | slices still hot 4
/// (bits 18..22) | slice 24 | tag 12.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    pub tag: u64,
    pub slice: u64,
    pub asked: u64,
    pub pulled: bool,
    /// A request needed the store since the host's last call to it.
    pub wants: bool,
    /// Slices the key is still hot in, from earlier ones (0: it is not).
    pub hot_for: u64,
}

impl Seen {
    pub(crate) fn pack(&self) -> u64 {
        self.asked.min(0xffff)
            | (self.pulled as u64) << 16
            | (self.wants as u64) << 17
            | self.hot_for.min(15) << 18
            | (self.slice & SLICE_MASK) << 28
            | self.tag << 52
    }

    pub(crate) fn unpack(w: u64) -> Self {
        Self {
            asked: w & 0xffff,
            pulled: w >> 16 & 1 != 0,
            wants: w >> 17 & 1 != 0,
            hot_for: (w >> 18) & 0xf,
            slice: (w >> 28) & SLICE_MASK,
            tag: w >> 52,
        }
    }

    pub(crate) fn is(&self, tag: u64, slice: u64) -> bool {
        self.tag == tag && self.slice == slice & SLICE_MASK
    }

    /// Whether the word is the key's, for a slice after `slice`.
    pub(crate) fn after(&self, tag: u64, slice: u64) -> bool {
        self.tag == tag && later(self.slice, slice)
    }

    /// Whether the key is hot on the host: it pulls, or it was asked past
    /// its allowance `local`.
    pub(crate) fn hot(&self, local: u64) -> bool {
        self.pulled || self.asked > local
    }

    /// Of the same key, the slices it is still hot in from this word's on,
    /// `slice` (a later one) included: [`HOT_SLICES`] after a hot one.
    pub(crate) fn hot_for_in(&self, local: u64, slice: u64) -> u64 {
        let gap = slice.wrapping_sub(self.slice) & SLICE_MASK;
        if self.hot(local) {
            (HOT_SLICES + 1).saturating_sub(gap)
        } else {
            self.hot_for.saturating_sub(gap)
        }
    }
}
