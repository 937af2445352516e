//! The pull script's rules past 100 hosts, one call at a time: the crate's
//! own `pull.lua` over the model of Redis, at a fixed instant. The fleet
//! simulation shows what the rules buy; these show each rule does what the
//! README says it does.

use flowctrl::sim::Script;
use flowctrl_sim::lua::LuaStore;

const QUOTA: i64 = 100_000;
const SLICE: i64 = 1_900_000_000;

/// A fresh store at `ms` into the slice.
fn store_at(ms: i64) -> LuaStore {
    let store = LuaStore::new().unwrap();
    store
        .model
        .lock()
        .unwrap()
        .set_now_us(SLICE * 1_000_000 + ms * 1000);
    store
}

/// One pull: `host` asks `want` having taken `claimed` of the slice, at
/// `demand` requests a slice; `reserve` says it can keep a reservation.
/// The slice releases a burst of 1,000 at once and the rest evenly.
/// Returns {granted, left, sec, usec, hosts, conflict, wait ms, mismatch,
/// created, usable ms}.
fn pull(
    store: &LuaStore,
    host: &str,
    want: i64,
    claimed: i64,
    demand: i64,
    reserve: bool,
) -> Vec<i64> {
    let keys: Vec<String> = [
        format!("k:{SLICE}"),
        "cfg".into(),
        "shape".into(),
        format!("k:{}", SLICE - 1),
    ]
    .into();
    let args: Vec<String> = [
        QUOTA.to_string(),
        want.to_string(),
        "1000".into(),
        SLICE.to_string(),
        "4000".into(),
        host.into(),
        claimed.to_string(),
        "0".into(),
        "0".into(),
        "1000".into(),
        "0".into(),
        "1000".into(),
        "0".into(),
        demand.to_string(),
        "0".into(),
        "0".into(),
        "0".into(),
        "0".into(),
        if reserve { "1" } else { "0" }.into(),
    ]
    .into();
    store.eval(&keys, &args).unwrap()
}

/// 100 ms in, `big` took all the slice had released (11,000: the burst and
/// a tenth), then 150 hosts asking 1,000 a slice each were refused: the
/// fleet asks more than the slice holds, and its fair tails apply.
fn crowded(store: &LuaStore) {
    let r = pull(store, "big", 11_000, 0, 1_000, true);
    assert_eq!(r[0], 11_000, "{r:?}");
    for i in 0..150 {
        let r = pull(store, &format!("h{i}"), 1, 0, 1_000, false);
        assert_eq!(r[0], 0, "nothing is left to release: {r:?}");
    }
}

/// A host owed its whole ask by the fair tails (a small host, owed a
/// quarter slice ahead of its demand) is granted it at once, though the
/// slice has released nothing more; a host past its due asking the same is
/// queued behind the release (a reservation it may spend only later).
#[test]
fn a_host_owed_its_whole_ask_is_served_at_once() {
    let store = store_at(100);
    crowded(&store);
    // Demand 200 of an equal share of 657: owed 35 % of it by now, 70.
    let small = pull(&store, "small", 60, 0, 200, true);
    assert_eq!(small[4], 152, "hosts counted: {small:?}");
    assert_eq!(small[0], 60, "the owed ask granted whole: {small:?}");
    assert_eq!(small[9], 0, "and spendable at once: {small:?}");
    let big = pull(&store, "big", 60, 11_000, 1_000, true);
    assert_eq!(big[0], 60, "reserved: {big:?}");
    assert!(
        big[9] > 0,
        "a host past its due waits for the release: {big:?}"
    );
}

/// A reservation is made only of what the host spends by the slice's end
/// at its demand: one it could not spend would be quota stranded. Late in
/// the slice, two hosts past their due ask again: the one asking 1,000 a
/// slice is reserved its 40; the one asking 100 a slice (six tenths of a
/// slice for 60, after a wait) is refused instead, and told when to ask.
#[test]
fn only_what_the_host_spends_by_the_slice_end_is_reserved() {
    let store = store_at(700);
    // 700 ms in the slice has released 71,000: `slow` takes its demand,
    // `big` the rest.
    assert_eq!(pull(&store, "slow", 100, 0, 100, true)[0], 100);
    assert_eq!(pull(&store, "big", 70_900, 0, 1_000, true)[0], 70_900);
    for i in 0..150 {
        assert_eq!(pull(&store, &format!("h{i}"), 1, 0, 1_000, false)[0], 0);
    }
    let big = pull(&store, "big", 40, 70_900, 1_000, true);
    assert!(big[0] == 40 && big[9] > 0, "reserved: {big:?}");
    let slow = pull(&store, "slow", 60, 100, 100, true);
    assert_eq!(slow[0], 0, "{slow:?}");
    assert!(slow[6] > 0, "told when to ask again: {slow:?}");
}
