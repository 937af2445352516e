//! The words' protocol, one host, one thread.

use super::*;

/// A request: counted, then decided.
fn ask(w: &GlobalWords, key: (u64, u64), slice: u64, rule: &GlobalRule, n: u64, at: u64) -> Step {
    note(w, key.0, slice, rule, n, &|| false);
    decide(w, (key.0, &|| key.1), slice, rule, (n, at), &|| false)
}

fn words() -> GlobalWords {
    // SAFETY: atomics are valid zeroed.
    unsafe { std::mem::zeroed() }
}

const RULE: GlobalRule = GlobalRule {
    permits: 10,
    local: 1,
    slice_ms: 1000,
    fallback: 0,
};
const KEY: (u64, u64) = (0x5a5, 77);

#[test]
fn words_round_trip_their_fields() {
    let now = Now {
        tag: 0xfff,
        slice: SLICE_MASK,
        held: MAX_HELD,
        local: 31,
        charged: 31,
        exhausted: true,
        fallback: true,
    };
    assert_eq!(Now::unpack(now.pack()), now);
    let seen = Seen {
        tag: 1,
        slice: 5,
        asked: 0xffff,
        pulled: true,
        wants: true,
        hot_for: 15,
    };
    assert_eq!(Seen::unpack(seen.pack()), seen);
}

#[test]
fn a_cold_key_passes_its_allowance_then_pulls_telling_the_store_of_it() {
    let w = words();
    assert_eq!(ask(&w, KEY, 100, &RULE, 1, 10), Step::Admit(Paid::Local(1)));
    let Step::Pull { want, charge } = ask(&w, KEY, 100, &RULE, 1, 10) else {
        panic!("past the allowance a key asks the store");
    };
    assert_eq!(charge, 1, "the allowance spent is charged before a grant");
    assert!((1..=10).contains(&want));
    deposit(&w, KEY, 100, 3, charge, false);
    for _ in 0..3 {
        assert_eq!(ask(&w, KEY, 100, &RULE, 1, 20), Step::Admit(Paid::Held(1)));
    }
    assert!(
        matches!(
            ask(&w, KEY, 100, &RULE, 1, 20),
            Step::Pull { charge: 0, .. }
        ),
        "charged once"
    );
    deposit(&w, KEY, 100, 0, 0, true);
    assert_eq!(ask(&w, KEY, 100, &RULE, 1, 20), Step::Refuse);
    // The next slice: hot before, so no allowance.
    assert!(matches!(
        ask(&w, KEY, 101, &RULE, 1, 0),
        Step::Pull { charge: 0, .. }
    ));
    // Hot for HOT_SLICES after the last hot one, then the allowance.
    assert!(matches!(
        ask(&w, KEY, 100 + HOT_SLICES, &RULE, 1, 0),
        Step::Pull { .. }
    ));
    assert_eq!(
        ask(&w, KEY, 101 + HOT_SLICES, &RULE, 1, 0),
        Step::Admit(Paid::Local(1))
    );
}

#[test]
fn a_chunk_asked_ahead_is_spent_in_its_slice_once() {
    let w = words();
    ask(&w, KEY, 100, &RULE, 1, 900);
    deposit_ahead(&w, KEY.0, 101, 4, false);
    assert_eq!(
        Now::unpack(w.now.load(Relaxed)).held,
        0,
        "not in this slice"
    );
    assert!(!pulled_in(&w, KEY.0, 101));
    for _ in 0..4 {
        assert_eq!(ask(&w, KEY, 101, &RULE, 1, 0), Step::Admit(Paid::Held(1)));
    }
    // The store counted the host in the slice: no allowance on top, and a
    // failing store leaves the key to what it was granted.
    assert!(pulled_in(&w, KEY.0, 101), "a chunk asked ahead is a pull");
    assert!(matches!(ask(&w, KEY, 101, &RULE, 1, 0), Step::Pull { .. }));
    assert_eq!(w.next.load(Relaxed), 0, "taken when the slice began");
    // Asked ahead after the slice began: straight into `now`.
    deposit_ahead(&w, KEY.0, 101, 2, true);
    assert_eq!(ask(&w, KEY, 101, &RULE, 1, 0), Step::Admit(Paid::Held(1)));
    ask(&w, KEY, 101, &RULE, 1, 0);
    assert_eq!(ask(&w, KEY, 101, &RULE, 1, 0), Step::Refuse);
}

#[test]
fn a_chunk_asked_ahead_of_a_slice_not_begun_on_the_key_is_kept() {
    let w = words();
    ask(&w, KEY, 100, &RULE, 1, 900);
    deposit_ahead(&w, KEY.0, 101, 1, false);
    // The key's first request of 101 comes after the next call, which
    // asked ahead for 102.
    deposit_ahead(&w, KEY.0, 102, 3, false);
    assert_eq!(ask(&w, KEY, 101, &RULE, 1, 950), Step::Admit(Paid::Held(1)));
    for _ in 0..3 {
        assert_eq!(ask(&w, KEY, 102, &RULE, 1, 0), Step::Admit(Paid::Held(1)));
    }
}

#[test]
fn another_keys_words_read_as_empty() {
    let w = words();
    deposit(&w, KEY, 100, 5, 0, false);
    let other = (0x123, 9);
    assert_eq!(
        ask(&w, other, 100, &RULE, 1, 0),
        Step::Admit(Paid::Local(1)),
        "a key given the entry of another does not spend its chunk"
    );
    assert_eq!(w.id.load(Relaxed), 9);
}

#[test]
fn the_fallback_gives_its_share_once_a_slice_less_the_allowance_spent() {
    let w = words();
    ask(&w, KEY, 100, &RULE, 1, 0);
    assert_eq!(RULE.fallback_share(4, false), Some(2));
    assert_eq!(
        RULE.fallback_share(100, false),
        Some(1),
        "at least the allowance"
    );
    assert_eq!(
        RULE.fallback_share(100, true),
        Some(0),
        "a spread key's share alone"
    );
    assert_eq!(RULE.fallback_share(4, true), Some(2));
    assert_eq!(
        RULE.fallback_share(0, false),
        Some(1),
        "no hosts counted yet: the allowance, not the whole slice"
    );
    assert_eq!(RULE.fallback_share(0, true), Some(0));
    fall_back(&w, KEY, 100, 2);
    fall_back(&w, KEY, 100, 2);
    assert_eq!(ask(&w, KEY, 100, &RULE, 1, 0), Step::Admit(Paid::Held(1)));
    assert!(matches!(ask(&w, KEY, 100, &RULE, 1, 0), Step::Pull { .. }));
}

#[test]
fn a_give_back_returns_to_what_paid_within_the_slice_only() {
    let w = words();
    deposit(&w, KEY, 100, 2, 0, false);
    let Step::Admit(paid) = ask(&w, KEY, 100, &RULE, 2, 0) else {
        panic!()
    };
    give_back(&w, KEY.0, 100, paid);
    assert_eq!(Now::unpack(w.now.load(Relaxed)).held, 2);
    ask(&w, KEY, 101, &RULE, 1, 0);
    give_back(&w, KEY.0, 100, paid);
    assert_eq!(Now::unpack(w.now.load(Relaxed)).held, 0, "another slice");
}

#[test]
fn the_allowance_grows_to_half_the_slice_over_the_hosts() {
    let rule = GlobalRule {
        permits: 20,
        ..RULE
    };
    assert_eq!(rule.among(0).local, 1, "hosts unknown: as configured");
    assert_eq!(rule.among(3).local, 3);
    assert_eq!(rule.among(1000).local, 1);
    let big = GlobalRule {
        permits: 100_000,
        ..RULE
    };
    assert_eq!(big.among(2).local, MAX_LOCAL as u64);
}

#[test]
fn chunks_follow_the_rate_seen_and_never_pass_the_slice() {
    assert_eq!(RULE.want(1, 500, 1), 3);
    assert_eq!(RULE.want(100, 500, 1), 10);
    assert_eq!(RULE.want(0, 0, 1), 1);
    assert_eq!(RULE.want_ahead(2, 800), 8);
    assert_eq!(RULE.want_ahead(0, 800), 2);
}

#[test]
fn a_key_the_fleet_lists_as_spread_starts_its_slice_without_an_allowance() {
    let (w, asked) = (words(), std::cell::Cell::new(0));
    let listed = || {
        asked.set(asked.get() + 1);
        true
    };
    let spread = |w: &GlobalWords, slice| {
        note(w, KEY.0, slice, &RULE, 1, &listed);
        decide(w, (KEY.0, &|| KEY.1), slice, &RULE, (1, 10), &listed)
    };
    assert!(matches!(spread(&w, 5), Step::Pull { charge: 0, .. }));
    assert!(matches!(spread(&w, 5), Step::Pull { charge: 0, .. }));
    // Asked once, when the words started the slice.
    assert_eq!(asked.get(), 1);
    // Not listed: the allowance, as ever.
    let other = words();
    assert_eq!(
        ask(&other, KEY, 5, &RULE, 1, 10),
        Step::Admit(Paid::Local(1))
    );
}

#[test]
fn a_caller_late_across_a_slice_edge_never_sets_the_words_back() {
    // A key hot in slice 100 with a chunk asked ahead for 101; a thread
    // rolls it into 101. A caller still at 100 (its answer came late, or
    // it was pre-empted across the edge) writes nothing back.
    let w = words();
    assert_eq!(ask(&w, KEY, 100, &RULE, 1, 10), Step::Admit(Paid::Local(1)));
    let Step::Pull { charge, .. } = ask(&w, KEY, 100, &RULE, 1, 10) else {
        panic!("past the allowance a key asks the store");
    };
    deposit(&w, KEY, 100, 1, charge, false);
    deposit_ahead(&w, KEY.0, 101, 4, false);
    assert_eq!(ask(&w, KEY, 101, &RULE, 1, 0), Step::Admit(Paid::Held(1)));
    let (now, seen) = (w.now.load(Acquire), w.seen.load(Acquire));

    assert_eq!(ask(&w, KEY, 100, &RULE, 1, 999), Step::Refuse);
    deposit(&w, KEY, 100, 5, 0, false);
    deposit_ahead(&w, KEY.0, 100, 5, false);
    fall_back(&w, KEY, 100, 5);
    assert_eq!(w.now.load(Acquire), now, "the chunk of 101 is kept");
    assert_eq!(w.seen.load(Acquire), seen, "and so is its hotness");
    for _ in 0..3 {
        assert_eq!(ask(&w, KEY, 101, &RULE, 1, 5), Step::Admit(Paid::Held(1)));
    }
    assert!(
        matches!(ask(&w, KEY, 101, &RULE, 1, 5), Step::Pull { .. }),
        "hot in 101: no allowance once its chunk is spent"
    );
}

#[test]
fn later_counts_half_the_slice_ids_ahead_and_wraps() {
    assert!(later(101, 100));
    assert!(!later(100, 100));
    assert!(!later(99, 100));
    assert!(later(0, SLICE_MASK), "across the wrap");
    assert!(!later(SLICE_MASK, 0));
}

#[test]
fn the_embedded_grant_is_given_once_however_many_race_to_it() {
    let w = words();
    assert_eq!(ask(&w, KEY, 100, &RULE, 1, 10), Step::Admit(Paid::Local(1)));
    // Two processes past the allowance both go for the grant.
    for _ in 0..2 {
        assert!(matches!(ask(&w, KEY, 100, &RULE, 1, 10), Step::Pull { .. }));
    }
    grant_whole(&w, KEY, 100, RULE.permits);
    grant_whole(&w, KEY, 100, RULE.permits);
    let now = Now::unpack(w.now.load(Acquire));
    assert_eq!(
        now.held, 9,
        "the slice less the one admitted on the host's own"
    );
    assert!(now.exhausted);
    for _ in 0..9 {
        assert_eq!(ask(&w, KEY, 100, &RULE, 1, 20), Step::Admit(Paid::Held(1)));
    }
    assert_eq!(ask(&w, KEY, 100, &RULE, 1, 20), Step::Refuse);
}
