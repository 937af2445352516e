//! The quota's policies as plain functions of plain values: how much a
//! host asks for, when it pulls ahead, what its fallback allows, how its
//! clock offset moves, when it probes. No atomics, no store: the callers
//! read the words (`account`) and act on the answers (`pull`).
//!
//! Every constant is named once here, with what it protects; the measured
//! effect of each rule is in the decision log (docs/design/quota.md).

use std::time::Duration;

/// Chunks a host aims for per slice at steady demand: fewer is fewer
/// round trips, more leaves less stranded when the host goes quiet.
pub(super) const PULLS_PER_SLICE: u64 = 3;

/// The next chunk is pulled when this fraction (1/n) of the last ask is
/// left, so the other processes do not run dry while it is in flight.
const LOW_WATER_DIV: u64 = 4;

/// Past this many hosts per slice (an equal share under 1 % of it, see
/// [`many_hosts`]) shares are small: no floor on an ask, and the slice's
/// last chunk lasts the host to its end.
const FEW_HOSTS_FLOOR_DIV: u64 = 100;

/// Pulls one request makes before it is refused as `Global`: a pull that
/// grants nothing twice running means the slice is being shared out.
pub(super) const MAX_PULLS_PER_TAKE: u32 = 3;

/// How often a process waiting for another's pull looks again.
pub(super) const WAIT_POLL: Duration = Duration::from_micros(20);

/// Answers from another slice (or a refreshed record) a pull follows
/// before it gives up for this call.
pub(super) const SLICE_RETRIES: usize = 4;

/// The longest a reply may pace a host: a store's wait past this is noise
/// or an attack, not a schedule.
pub(super) const MAX_PACE: Duration = Duration::from_secs(60);

/// How much of a slice a fresh slice's pace is measured over before it is
/// trusted (1/n): the first requests of a slice are not a flood.
const PACE_MIN_DIV: u64 = 10;

/// What a pace measured over less than 1/n of a slice is spread over.
const RATE_MIN_DIV: u64 = 20;

/// A give-back is worth at least 1/n of an equal share: less is not worth
/// its round trip, nor the others' asking for it.
const GIVE_BACK_FLOOR_DIV: u64 = 8;

/// A measured clock offset that the kept one contradicts by more than its
/// own error plus this is taken whole (a clock was stepped).
const OFFSET_JUMP_US: i64 = 20_000;
/// An answer slower than this does not move the offset (its error is too
/// large); a faster one moves it by 1/[`OFFSET_STEP_DIV`] of the difference.
const OFFSET_RTT_MAX_US: i64 = 4_000;
const OFFSET_STEP_DIV: i64 = 8;

/// What the host measured of its pace in the current slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Pace {
    /// Past [`FEW_HOSTS_FLOOR_DIV`] hosts: shares are small.
    pub many: bool,
    /// Permits/s the host spent, in this slice so far or in the last.
    pub rate: u64,
    pub slice_us: u64,
    /// µs to the slice's end.
    pub left_us: u64,
    /// Permits of the slice the host holds.
    pub held: u64,
    /// The slice, by the store's clock as this host has it.
    pub slice: u32,
    /// A host without a last slice, among few hosts: what it kept of this
    /// one so far, spent or held (0 otherwise). Its rate over the slice so
    /// far undercounts it when it started late in the slice, so it asks at
    /// least this much again (past many hosts, what it is asked for does
    /// that: `pace_rate`).
    pub fresh_kept: u64,
}

impl Pace {
    /// Past many hosts, in the slice's second half: the next chunk is its
    /// last.
    pub(super) fn last(self) -> bool {
        self.many && self.left_us <= self.slice_us / 2
    }

    /// What the host spends by the slice's end at its rate.
    pub(super) fn to_end(self) -> u64 {
        self.rate.saturating_mul(self.left_us) / 1_000_000
    }
}

/// Whether shares are small: an equal share's chunk under 1 % of the slice.
pub(super) fn many_hosts(quota: u64, hosts: u64) -> bool {
    quota / hosts.max(1) / PULLS_PER_SLICE < quota / FEW_HOSTS_FLOOR_DIV
}

/// A rate, permits/s, from `count` over `elapsed_us` of a slice (at least
/// 1/[`RATE_MIN_DIV`] of it).
pub(super) fn rate_of(count: u64, elapsed_us: u64, slice_us: u64) -> u64 {
    count * 1_000_000 / elapsed_us.max(slice_us / RATE_MIN_DIV)
}

/// The pace a host sizes its chunk by: its spend now or in the last slice,
/// and past many hosts what it is asked for (up to an equal share): a host
/// refused more than it spent (it joined, or came back) would ramp up from
/// one permit while the slice's release goes to the others.
pub(super) fn pace_rate(now: u64, before: u64, asked: u64, many: bool, equal: u64) -> u64 {
    let asked = if many { asked.min(equal) } else { 0 };
    now.max(before).max(asked)
}

/// The chunk to ask for: the host's rate times a third of a slice (never
/// past its end), and a host without a last slice at least what it kept
/// of this one (what it has doubles each pull, however late in the slice
/// it started); past many hosts in a slice's second half, what it spends
/// by the end less what it holds. A host whose demand comes in busy
/// spells: the rest of one like its last (`spell`), in one chunk when that
/// is at most two. Between a floor (1 % of the slice, at most a third of a
/// slice at the host's rate; one past many hosts or without history) and a
/// quarter of the slice, at most the burst, at least the request.
pub(super) fn chunk(p: &Pace, quota: u64, burst: u64, n: u32, spell_rest: Option<u64>) -> u64 {
    let want = if p.last() {
        p.to_end().saturating_sub(p.held)
    } else {
        let horizon = p.left_us.min(p.slice_us / PULLS_PER_SLICE);
        (p.rate.saturating_mul(horizon) / 1_000_000).max(p.fresh_kept)
    };
    let floor = match p.rate {
        0 => 1,
        _ if p.many => 1,
        rate => (quota / FEW_HOSTS_FLOOR_DIV)
            .min(rate.saturating_mul(p.slice_us / PULLS_PER_SLICE) / 1_000_000),
    }
    .max(1);
    let want = match spell_rest {
        Some(rest) => {
            let rest = rest.saturating_sub(p.held).max(1);
            if rest <= want.saturating_mul(2) {
                rest
            } else {
                want
            }
        }
        None => want,
    };
    want.clamp(floor, (quota / 4).max(floor))
        .min(burst)
        .max(n as u64)
}

/// The low-water mark after asking for `want`: pull again when this much
/// is left, unless what the host holds lasts it to the slice's end (or to
/// the end of a busy spell like its last): then when it runs dry.
pub(super) fn low_water(want: u64, p: &Pace, spell_rest: Option<u64>) -> u64 {
    let covered =
        p.last() && p.held >= p.to_end().max(1) || spell_rest.is_some_and(|rest| p.held >= rest);
    if covered { 0 } else { want / LOW_WATER_DIV }
}

/// Requests per slice a host reports as its demand: its last full slice's,
/// or this slice's so far at its pace if more (once a tenth is over).
pub(super) fn demand(before: u64, asked_now: u64, elapsed_us: u64, slice_us: u64) -> u64 {
    let pace = if elapsed_us >= slice_us / PACE_MIN_DIV {
        asked_now.saturating_mul(slice_us) / elapsed_us
    } else {
        0
    };
    before.max(pace)
}

/// The least a give-back is worth (see [`GIVE_BACK_FLOOR_DIV`]).
pub(super) fn give_back_floor(quota: u64, hosts: u64) -> u64 {
    (quota / hosts.clamp(1, 1 << 20) / GIVE_BACK_FLOOR_DIV).max(1)
}

/// The clock offset to keep after measuring `measured` over a round trip
/// of `rtt_us` (the truth is within ±rtt/2): a first one or a jump is
/// taken as it is; otherwise a fast answer moves the kept one by a
/// fraction and a slow one not at all, so noise does not move the host's
/// slice edges. A fast answer that the kept offset misses by more than a
/// fast answer's error is taken whole too: the kept one came from a slow
/// answer (a first one, under load), and would shift the host's slices
/// against the others' for many answers.
pub(crate) fn smooth_offset(old: i64, measured: i64, rtt_us: i64) -> i64 {
    let off = (measured - old).abs();
    if old == 0
        || off > OFFSET_JUMP_US + rtt_us / 2
        || rtt_us <= OFFSET_RTT_MAX_US && off > OFFSET_RTT_MAX_US
    {
        measured
    } else if rtt_us > OFFSET_RTT_MAX_US {
        old
    } else {
        old + (measured - old) / OFFSET_STEP_DIV
    }
}

/// How long a pull may hold its lock before anyone breaks it: one connect
/// and four commands (a connect, a script load and two calls), and slack.
pub(super) fn stale_after(connect: Duration, command: Duration) -> Duration {
    connect + 4 * command + Duration::from_millis(20)
}

/// Shard `i`'s part of `total` spread over `shards`: equal parts, the
/// remainder to the first, so the parts add up to the whole.
pub(crate) fn part(total: u64, shards: u32, i: u32) -> u64 {
    let n = shards.max(1) as u64;
    total / n + u64::from((i as u64) < total % n)
}

/// The shard a host's fallback admissions are claimed from: from its id
/// (FNV-1a), so hosts spread over the shards.
pub(super) fn home(host: &str, shards: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    (h % shards.max(1) as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(rate: u64, elapsed_ms: u64, many: bool) -> Pace {
        Pace {
            many,
            rate,
            slice_us: 1_000_000,
            left_us: 1_000_000 - elapsed_ms * 1000,
            held: 0,
            slice: 7,
            fresh_kept: 0,
        }
    }

    #[test]
    fn a_chunk_is_a_third_of_a_slice_at_the_hosts_rate() {
        // 3,000/s on a slice of 100,000: a third of a second's worth.
        assert_eq!(
            chunk(&pace(3_000, 0, false), 100_000, 100_000, 1, None),
            999
        );
        // Near the slice's end, the floor still: a sliver is not worth a
        // round trip.
        assert_eq!(
            chunk(&pace(3_000, 900, false), 100_000, 100_000, 1, None),
            999
        );
        // No history: one.
        assert_eq!(chunk(&pace(0, 0, false), 100_000, 100_000, 1, None), 1);
        // Never more than a quarter of the slice, nor than the burst, nor
        // less than the request.
        assert_eq!(
            chunk(&pace(10_000_000, 0, false), 100_000, 100_000, 1, None),
            25_000
        );
        assert_eq!(chunk(&pace(3_000, 0, false), 100_000, 500, 1, None), 500);
        assert_eq!(chunk(&pace(0, 0, false), 100_000, 100_000, 40, None), 40);
    }

    #[test]
    fn a_host_without_a_last_slice_doubles_what_it_has() {
        // Started 900 ms into the slice and kept 100 already: its rate
        // over the slice (111/s) would ask for 37.
        let mut late = pace(111, 900, false);
        late.fresh_kept = 100;
        assert_eq!(chunk(&late, 100_000, 100_000, 1, None), 100);
        // Still within the quarter of the slice and the burst.
        late.fresh_kept = 90_000;
        assert_eq!(chunk(&late, 100_000, 100_000, 1, None), 25_000);
        assert_eq!(chunk(&late, 100_000, 700, 1, None), 700);
    }

    #[test]
    fn a_slow_host_asks_at_least_a_floor_and_many_hosts_none() {
        // 30/s of 100,000: 1 % would strand, a third of a slice is 9.
        assert_eq!(chunk(&pace(30, 0, false), 100_000, 100_000, 1, None), 9);
        assert_eq!(chunk(&pace(3_000, 0, false), 1_000, 1_000, 1, None), 250);
        // Past many hosts, the second half: what the host spends to the end.
        let mut late = pace(300, 600, true);
        late.held = 20;
        assert_eq!(chunk(&late, 100_000, 100_000, 1, None), 100);
        assert!(many_hosts(100_000, 1_000) && !many_hosts(100_000, 10));
    }

    #[test]
    fn a_spell_sizes_the_chunk_when_it_is_at_most_two() {
        let p = pace(3_000, 0, false);
        assert_eq!(chunk(&p, 100_000, 100_000, 1, Some(1_500)), 1_500);
        assert_eq!(chunk(&p, 100_000, 100_000, 1, Some(2_500)), 999);
        assert_eq!(low_water(1_000, &p, None), 250);
        let mut last = pace(300, 600, true);
        last.held = 120;
        assert_eq!(
            low_water(1_000, &last, None),
            0,
            "holds what it spends to the end"
        );
        assert_eq!(low_water(1_000, &p, Some(0)), 0);
    }

    #[test]
    fn a_give_back_is_worth_an_eighth_of_an_equal_share() {
        assert_eq!(give_back_floor(500_000, 1_000), 62);
        assert_eq!(give_back_floor(5, 0), 1);
    }

    #[test]
    fn demand_is_the_last_slice_or_this_ones_pace() {
        assert_eq!(demand(500, 300, 50_000, 1_000_000), 500);
        assert_eq!(demand(500, 300, 300_000, 1_000_000), 1_000);
        assert_eq!(demand(0, 0, 0, 1_000_000), 0);
    }

    #[test]
    fn the_offset_follows_fast_answers_slowly_and_jumps_whole() {
        assert_eq!(smooth_offset(0, 5_000, 100), 5_000);
        assert_eq!(smooth_offset(5_000, 5_800, 100), 5_100);
        assert_eq!(smooth_offset(5_000, 5_800, 5_000), 5_000);
        assert_eq!(smooth_offset(5_000, 60_000, 100), 60_000);
        // A kept offset a fast answer finds 10 ms off: taken whole.
        assert_eq!(smooth_offset(5_000, 15_000, 1_000), 15_000);
        assert_eq!(
            smooth_offset(5_000, 15_000, 5_000),
            5_000,
            "a slow one: kept"
        );
    }

    #[test]
    fn parts_add_up_to_the_whole() {
        for (total, shards) in [(2000, 3), (10, 6), (7, 1), (5, 6)] {
            let parts: Vec<u64> = (0..shards).map(|i| part(total, shards, i)).collect();
            assert_eq!(parts.iter().sum::<u64>(), total, "{parts:?}");
            assert!(parts.iter().max().unwrap() - parts.iter().min().unwrap() <= 1);
        }
        assert!((0..3).any(|s| home("a", 3) == s));
    }
}
