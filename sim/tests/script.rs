//! The pull script's rules past 100 hosts, one call at a time: the crate's
//! own pull script over the model of Redis, at a fixed instant. The fleet
//! simulation shows what the rules buy; these show each rule does what
//! docs/guide/global-limits.md says it does.

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
/// `demand` requests a slice; `reserve`: it can keep a reservation;
/// `given`: what it gave back while idle (a host that gives back sends
/// it); `redeem`: a puller of the host died. The slice releases a burst
/// of 1,000 at once and the rest evenly.
#[derive(Default)]
struct Ask<'a> {
    host: &'a str,
    want: i64,
    claimed: i64,
    demand: i64,
    reserve: bool,
    given: Option<i64>,
    redeem: bool,
    /// The threshold and burst the host holds (default: the key's,
    /// [`QUOTA`] and 1,000).
    numbers: Option<(i64, i64)>,
    /// The record version the host last saw and its flags (ARGV 11, 13;
    /// default 0 and 0).
    record: (i64, u8),
}

/// Runs `ask`: {granted, left, sec, usec, hosts, conflict, wait ms,
/// mismatch, created, usable ms}.
fn ask(store: &LuaStore, ask: Ask) -> Vec<i64> {
    let keys: Vec<String> = [
        format!("k:{SLICE}"),
        "cfg".into(),
        "shape".into(),
        format!("k:{}", SLICE - 1),
    ]
    .into();
    let flag = |on: bool| if on { "1" } else { "0" }.to_string();
    let (quota, burst) = ask.numbers.unwrap_or((QUOTA, 1000));
    let args: Vec<String> = [
        quota.to_string(),
        ask.want.to_string(),
        "1000".into(),
        SLICE.to_string(),
        "4000".into(),
        ask.host.into(),
        ask.claimed.to_string(),
        "0".into(),
        flag(ask.redeem),
        burst.to_string(),
        ask.record.0.to_string(),
        "1000".into(),
        ask.record.1.to_string(),
        ask.demand.to_string(),
        "0".into(),
        "0".into(),
        "0".into(),
        "0".into(),
        flag(ask.reserve),
    ]
    .into_iter()
    .chain(ask.given.map(|g| g.to_string()))
    .collect();
    flowctrl_sim::lua::ints(store.eval(&keys, &args).unwrap())
}

/// The common ask: [`Ask`] without a give-back or a redeem.
fn pull(
    store: &LuaStore,
    host: &str,
    want: i64,
    claimed: i64,
    demand: i64,
    reserve: bool,
) -> Vec<i64> {
    let a = Ask {
        host,
        want,
        claimed,
        demand,
        reserve,
        ..Ask::default()
    };
    ask(store, a)
}

/// A Redis command on the model.
fn command(store: &LuaStore, args: &[&str]) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    store.model.lock().unwrap().call(&args).unwrap();
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

/// A host owed its whole ask by the fair tails (a small host, owed its
/// next chunk, 5/12 of a slice, ahead of its demand) is granted it at once, though the slice has
/// released nothing more; a host past its due asking the same is queued
/// behind the release (a reservation it may spend only later); a host past
/// its whole entitlement over the slice gets nothing while the others'
/// rests need all the key has left.
#[test]
fn a_host_owed_its_whole_ask_is_served_at_once() {
    let store = store_at(100);
    crowded(&store);
    // Demand 200 below a level of 657: owed a tenth and 5/12 of it by now,
    // 103.
    let small = pull(&store, "small", 60, 0, 200, true);
    assert_eq!(small[4], 152, "hosts counted: {small:?}");
    assert_eq!(small[0], 60, "the owed ask granted whole: {small:?}");
    assert_eq!(small[9], 0, "and spendable at once: {small:?}");
    // Demand 1,000 above the level: owed a tenth of it by now (65), which
    // it is granted; then past its due.
    let mid = pull(&store, "mid", 65, 0, 1_000, true);
    assert_eq!((mid[0], mid[9]), (65, 0), "owed: granted at once: {mid:?}");
    let mid = pull(&store, "mid", 60, 65, 1_000, true);
    assert_eq!(mid[0], 60, "reserved: {mid:?}");
    assert!(
        mid[9] > 0,
        "a host past its due waits for the release: {mid:?}"
    );
    let big = pull(&store, "big", 60, 11_000, 1_000, true);
    assert_eq!(big[0], 0, "11,000 had of an entitlement of 657: {big:?}");
    assert!(big[6] > 0, "told when to ask again: {big:?}");
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
    // `big` the rest; 150 hosts that ask little are refused.
    assert_eq!(pull(&store, "slow", 100, 0, 100, true)[0], 100);
    assert_eq!(pull(&store, "big", 70_900, 0, 1_000, true)[0], 70_900);
    for i in 0..150 {
        assert_eq!(pull(&store, &format!("h{i}"), 1, 0, 1, false)[0], 0);
    }
    let big = pull(&store, "big", 40, 70_900, 1_000, true);
    assert!(big[0] == 40 && big[9] > 0, "reserved: {big:?}");
    let slow = pull(&store, "slow", 60, 100, 100, true);
    assert_eq!(slow[0], 0, "{slow:?}");
    assert!(slow[6] > 0, "told when to ask again: {slow:?}");
}

/// A process of an older build on the host's table (the layout is the
/// same) pulls with a script that knows no give-backs: its claim counts
/// what the host gave back, its charge for it stops at an empty key, and
/// it rewrites the host's record without what the store was told. The
/// host's next pull must not put that give-back into the key again: the
/// key would hand out what the old charge never took (490 here).
#[test]
fn a_give_back_is_not_put_back_twice_after_an_older_script() {
    let store = store_at(990);
    // A takes 1,000, admits 10 and gives 990 back; B takes all but 500.
    assert_eq!(pull(&store, "a", 1_000, 0, 0, false)[0], 1_000);
    let gives = |want, redeem| Ask {
        host: "a",
        want,
        claimed: 1_000,
        given: Some(990),
        redeem,
        ..Ask::default()
    };
    let r = ask(&store, gives(0, false));
    assert_eq!(r[1], 99_990, "{r:?}");
    assert_eq!(pull(&store, "b", 99_490, 0, 0, false)[0], 99_490);
    // The older script's pull of A: claimed 1,000 against a charge of 10
    // takes what is left (500 of 990) and writes an 11-field record.
    let key = format!("k:{SLICE}");
    command(&store, &["HSET", &key, "left", "0"]);
    command(
        &store,
        &["HSET", &key, "a", "1000 1000 1000 1000 0 0 0 0 0 0 0"],
    );
    // A's next pull (a redeem too, as after a dead puller): nothing is
    // left to grant, and nothing comes back.
    let r = ask(&store, gives(100, false));
    assert_eq!(&r[..2], &[0, 0], "{r:?}");
    // Nor through the redeem's credit.
    command(
        &store,
        &["HSET", &key, "a", "1000 1000 1000 1000 0 0 0 0 0 0 0"],
    );
    let r = ask(&store, gives(100, true));
    assert_eq!(&r[..2], &[0, 0], "{r:?}");
}

/// A host back from a fallback claims what it admitted meanwhile, and
/// keeps to its share for the rest of the slice. The fair tails count that
/// claim as what it has had: were it owed its share again, what it cannot
/// take would be held for it to the slice's end, and the busy host, past
/// its own due, could not take it either (the recovery slice came out
/// short).
#[test]
fn a_claim_counts_as_had_for_the_fair_tails() {
    let store = store_at(100);
    let at = |ms: i64| {
        store
            .model
            .lock()
            .unwrap()
            .set_now_us(SLICE * 1_000_000 + ms * 1000)
    };
    assert_eq!(pull(&store, "busy", 11_000, 0, 300_000, false)[0], 11_000);
    at(500);
    assert_eq!(
        pull(&store, "busy", 40_000, 11_000, 300_000, false)[0],
        40_000
    );
    // Back from its fallback: 40,000 admitted meanwhile, 43,000 its share.
    at(900);
    let back = pull(&store, "returning", 1_000, 40_000, 43_000, false);
    assert_eq!(back[1], 9_000, "its claim deducted: {back:?}");
    // The slice has released 96,000 by 950 ms, 91,000 of it taken: the
    // back host is owed 3,000 more at most, and the busy host may take
    // the rest (nothing, were the back host owed its 43,000 again).
    at(950);
    let busy = pull(&store, "busy", 1_500, 51_000, 300_000, false);
    assert_eq!(busy[0], 1_500, "{busy:?}");
}

/// A host back from a fallback spends its last grant and, at its share,
/// asks no more: its record's claim is from before that grant. The fair
/// tails count what the key charged it (claim and grants), so nothing is
/// held for it that it will never take.
#[test]
fn a_last_grant_spent_without_asking_again_counts_as_had() {
    let store = store_at(100);
    let at = |ms: i64| {
        store
            .model
            .lock()
            .unwrap()
            .set_now_us(SLICE * 1_000_000 + ms * 1000)
    };
    assert_eq!(pull(&store, "busy", 11_000, 0, 300_000, false)[0], 11_000);
    at(500);
    assert_eq!(
        pull(&store, "busy", 40_000, 11_000, 300_000, false)[0],
        40_000
    );
    // Back with 20,000 admitted meanwhile; its share of 40,000 is done
    // with this grant.
    at(900);
    let back = pull(&store, "returning", 20_000, 20_000, 40_000, false);
    assert_eq!(back[0], 20_000, "{back:?}");
    at(960);
    let busy = pull(&store, "busy", 5_000, 51_000, 300_000, false);
    assert_eq!(
        busy[0], 5_000,
        "nothing held for the returning host: {busy:?}"
    );
}

/// Two hosts asking twice the slice between them: the first to pull 300 ms
/// in takes only its half of what is released (the burst is the other's
/// too), and the second, asking far more than is released, is granted
/// what it is owed rather than nothing for want of half its ask.
#[test]
fn a_host_asking_more_than_twice_the_release_gets_what_it_is_owed() {
    let store = store_at(300);
    // Released 31,000 (the burst and 30 %); each host owed 15,500 of its
    // equal share of 50,000.
    // b has asked for one permit already: both hosts are in the key.
    assert_eq!(pull(&store, "b", 1, 0, 100_000, false)[0], 1);
    let first = pull(&store, "a", 30_000, 0, 100_000, false);
    assert_eq!(first[0], 15_500, "its half of the release: {first:?}");
    let second = pull(&store, "b", 40_000, 1, 100_000, false);
    assert_eq!(second[0], 15_499, "what b is owed: {second:?}");
    assert!(second[6] > 0, "and told when to ask again: {second:?}");
}

/// A shard of a task spread over three is asked for the host's whole ask
/// (it takes what one shard has), but paces the host by the ask's third:
/// a key releasing its part at a third of the task's pace would otherwise
/// hold the host three times as long, and a host spending its grant at
/// once ran dry for most of each wait (a slice of 2,000 came out at 1,942,
/// its host 941 of 1,000, with the other shards' rests unasked).
#[test]
fn a_shard_paces_a_host_by_its_asks_share_of_the_shard() {
    let asks = |flags: u8| {
        let store = store_at(300);
        let a = |claimed| Ask {
            host: "a",
            want: 40_000,
            claimed,
            record: (0, flags),
            ..Ask::default()
        };
        let first = ask(&store, a(0));
        assert_eq!(first[0], 31_000, "the release so far: {first:?}");
        // Back when told: granted what was released meanwhile (a third of
        // the ask is worth its round trip on a shard of three).
        let back = SLICE * 1_000_000 + (300 + first[6]) * 1000;
        store.model.lock().unwrap().set_now_us(back);
        let second = ask(&store, a(31_000));
        (first[6], second[0])
    };
    // One key: until 71,000 (the grant and another whole ask) is released.
    assert_eq!(asks(2), (400, 40_000));
    // A shard of three (flags 4 × 3): until another third of the ask is.
    assert_eq!(asks(12), (134, 13_400));
    // An older host sends no count of shards: as one key.
    assert_eq!(asks(0), (400, 40_000));
    // A count of shards past any a task has is one.
    assert_eq!(asks(4 * 60), (400, 40_000));
}

/// The pull script of release 0.3: same keys, arguments and reply.
const SCRIPT_0_3: &str = include_str!("data/pull-0.3.lua");

/// Redis commands the model has run so far.
fn commands(store: &LuaStore) -> u64 {
    store.model.lock().unwrap().commands
}

/// A host's first pull in a slice checks the task's shape key (GET, and
/// renews its TTL); its later pulls in the slice read the slice key once
/// (HSCAN: a small key whole) and write it once: TIME, the record's
/// version, the key, the write.
#[test]
fn a_later_pull_in_the_slice_runs_four_commands() {
    let store = store_at(100);
    assert_eq!(pull(&store, "a", 1_000, 0, 0, false)[0], 1_000);
    assert_eq!(pull(&store, "b", 1_000, 0, 0, false)[0], 1_000);
    let before = commands(&store);
    let r = pull(&store, "a", 1_000, 1_000, 5_000, false);
    assert_eq!((r[0], r[1], r[4]), (1_000, 97_000, 2), "{r:?}");
    assert_eq!(commands(&store) - before, 4);
    // b's first pull after its key-creating one: the shape was checked.
    let before = commands(&store);
    assert_eq!(pull(&store, "b", 1_000, 1_000, 5_000, false)[0], 1_000);
    assert_eq!(commands(&store) - before, 4);
}

/// A host on another host's slicing checks the shape at every pull: when
/// the shape expires, its next pull answers "reslice" back to its own.
#[test]
fn a_host_on_another_slicing_is_sent_back_at_its_next_pull() {
    let store = store_at(100);
    let mut keys: Vec<String> = [
        format!("k:{SLICE}"),
        "cfg".into(),
        "shape".into(),
        format!("k:{}", SLICE - 1),
    ]
    .into();
    let args = |own: &str| -> Vec<String> {
        let mut a: Vec<String> = [
            QUOTA.to_string(),
            "10".into(),
            "1000".into(),
            SLICE.to_string(),
            "4000".into(),
            "h".into(),
            "0".into(),
            "0".into(),
            "0".into(),
            "1000".into(),
            "0".into(),
            own.into(),
            "0".into(),
            "10".into(),
        ]
        .into();
        a.extend(["0", "0", "0", "0", "0"].map(String::from));
        a
    };
    command(&store, &["SET", "shape", "1000"]);
    // Cut by the shape's 1,000 ms, its own 2,000: served, a mismatch.
    let r = flowctrl_sim::lua::ints(store.eval(&keys, &args("2000")).unwrap());
    assert_eq!((r[0], r[7]), (10, 1), "{r:?}");
    let r = flowctrl_sim::lua::ints(store.eval(&keys, &args("2000")).unwrap());
    assert_eq!((r[0], r[7]), (10, 1), "{r:?}");
    // The shape expires (its host stopped) 50 ms on.
    command(&store, &["SET", "shape", "1000", "PX", "50"]);
    store
        .model
        .lock()
        .unwrap()
        .set_now_us(SLICE * 1_000_000 + 200_000);
    let r = flowctrl_sim::lua::ints(store.eval(&keys, &args("2000")).unwrap());
    assert_eq!(&r[..2], &[-3, 2000], "{r:?}");
    // A host on its own slicing that finds another's shape at its first
    // pull of a slice is sent to it.
    keys[0] = format!("k:{}", SLICE + 1);
    command(&store, &["SET", "shape", "500"]);
    store
        .model
        .lock()
        .unwrap()
        .set_now_us((SLICE + 1) * 1_000_000 + 100_000);
    let r = flowctrl_sim::lua::ints(store.eval(&keys, &args("1000")).unwrap());
    assert_eq!(&r[..2], &[-3, 500], "{r:?}");
}

/// A host of release 0.3 and a host of this one share a key: neither
/// counts a field of the other as a host (this script adds none to the key,
/// and a 13th field of its own record is read alike by both), the key's
/// `left` is the quota less every grant and plus the give-back, and a
/// record the older script rewrote (12 fields) makes this one check the
/// shape again.
#[test]
fn a_host_of_release_0_3_and_one_of_this_share_a_key() {
    let new = store_at(100);
    let old = new.sharing(SCRIPT_0_3).unwrap();
    // Each pull asks 1,000 with what the host took so far as its claim,
    // and n (a host that gives back) what it gave back.
    let (mut took, left) = (
        std::collections::HashMap::new(),
        std::cell::Cell::new(QUOTA),
    );
    let mut step = |store: &LuaStore, host: &'static str, given: Option<i64>| {
        let claimed = *took.get(host).unwrap_or(&0);
        let r = ask(
            store,
            Ask {
                host,
                want: 1_000,
                claimed,
                demand: 5_000,
                given,
                ..Ask::default()
            },
        );
        took.insert(host, claimed + r[0].max(0));
        left.set(left.get() - r[0].max(0));
        r
    };
    let pulls = [
        (&new, "n"),
        (&old, "o"),
        (&new, "n"),
        (&old, "o"),
        (&new, "n"),
    ];
    for (i, (store, host)) in pulls.into_iter().enumerate() {
        let r = step(store, host, Some(0));
        let hosts = if i == 0 { 1 } else { 2 };
        assert_eq!(
            (r[0], r[1], r[4]),
            (1_000, left.get(), hosts),
            "{host}: {r:?}"
        );
    }
    // n gives back 500 of its 3,000 while idle: put back once, and the
    // older script reads the give-back from n's 13-field record as told.
    let r = ask(
        &new,
        Ask {
            host: "n",
            claimed: 3_000,
            given: Some(500),
            ..Ask::default()
        },
    );
    left.set(left.get() + 500);
    assert_eq!((r[1], r[4]), (left.get(), 2), "{r:?}");
    let r = step(&old, "n", Some(500));
    assert_eq!((r[0], r[1], r[4]), (1_000, left.get(), 2), "{r:?}");
    let r = step(&old, "o", Some(0));
    assert_eq!((r[0], r[1], r[4]), (1_000, left.get(), 2), "{r:?}");
    let r = step(&new, "n", Some(500));
    assert_eq!((r[0], r[1], r[4]), (1_000, left.get(), 2), "{r:?}");
    // The older script's write of n's record drops the 13th field: n's
    // next pull checks the shape again, and finds it changed.
    step(&old, "n", Some(500));
    command(&new, &["SET", "shape", "500"]);
    let r = step(&new, "n", Some(500));
    assert_eq!(&r[..2], &[-3, 500], "{r:?}");
}

/// A key Redis keeps as a hash table (past its compact limits), past the
/// scan's 16 fields, is read by name and counted (HSCAN, HMGET, HLEN): the
/// hosts counted and the grants are those of a compact key's.
#[test]
fn a_key_of_many_hosts_is_read_by_name() {
    let store = store_at(100);
    store.model.lock().unwrap().hash_tables = true;
    for i in 0..20 {
        assert_eq!(pull(&store, &format!("h{i}"), 100, 0, 100, false)[0], 100);
    }
    let before = commands(&store);
    let r = pull(&store, "h0", 100, 100, 100, false);
    assert_eq!((r[0], r[1], r[4]), (100, QUOTA - 2_100, 20), "{r:?}");
    assert_eq!(commands(&store) - before, 6);
    let r = pull(&store, "new", 100, 0, 100, false);
    assert_eq!((r[0], r[4]), (100, 21), "{r:?}");
}

/// A host that adopted a moved threshold mid-slice (twice the key's, with
/// twice its burst) is released the key's burst, not its own: the first
/// host took the key's whole burst, so nothing is left to release yet.
#[test]
fn the_release_is_the_keys_whatever_threshold_the_host_holds() {
    let store = store_at(0);
    let first = pull(&store, "a", 1000, 0, 0, false);
    assert_eq!(first[0], 1000, "the key's burst: {first:?}");
    let moved = ask(
        &store,
        Ask {
            host: "b",
            want: 1000,
            numbers: Some((2 * QUOTA, 2000)),
            ..Ask::default()
        },
    );
    assert_eq!(moved[0], 0, "released by the key's burst: {moved:?}");
    assert!(moved[6] > 0, "told when it will be: {moved:?}");
}

/// The two reads of the key answer alike: 30 hosts asking more than their
/// share (fair tails, reservations past none: 30 hosts), the same pulls on
/// a key Redis keeps compact (read whole by one HSCAN) and on one it keeps
/// as a hash table (HSCAN's page, then HMGET and HLEN): every reply and
/// the key's fields are the same; only the commands differ.
#[test]
fn a_key_read_whole_and_read_by_name_answer_alike() {
    let (whole, by_name) = (store_at(100), store_at(100));
    by_name.model.lock().unwrap().hash_tables = true;
    let fields = |store: &LuaStore| {
        let mut f = store.hash(&format!("k:{SLICE}")).unwrap();
        f.sort();
        f
    };
    for round in 0..3i64 {
        for i in 0..30i64 {
            let host = format!("h{i}");
            let (want, claimed) = (500 + 40 * i, round * 300 + i);
            let a = pull(&whole, &host, want, claimed, 8_000, false);
            let b = pull(&by_name, &host, want, claimed, 8_000, false);
            assert_eq!(a, b, "round {round}, {host}");
        }
    }
    assert_eq!(fields(&whole), fields(&by_name));
    assert!(
        fields(&whole).iter().any(|(f, _)| f == "fair"),
        "the fair tails ran"
    );
    assert!(commands(&whole) < commands(&by_name));
}

/// A record change, to an unsharded task's host (flag 2): the record's
/// version and fields after the ten integers; granted as usual where the
/// record keeps the slicing and the key exists, refused (-2) where it does
/// not. To a spread task's shard (no flag 2), -2 and nothing more.
#[test]
fn a_record_change_comes_with_the_reply() {
    let store = store_at(100);
    command(
        &store,
        &[
            "HSET",
            "cfg",
            "version",
            "7",
            "slice_ms",
            "1000",
            "global_rate",
            "100000",
        ],
    );
    let record = |r: &[i64]| r.len() == 17 && r[10] == 7;
    fn at(host: &str, record: (i64, u8)) -> Ask<'_> {
        Ask {
            host,
            want: 100,
            record,
            ..Ask::default()
        }
    }
    // No key yet: it would be made by the host's old numbers.
    let r = ask(&store, at("a", (6, 3)));
    assert_eq!(&r[..2], &[-2, 7], "{r:?}");
    assert!(record(&r), "the record comes with it: {r:?}");
    let r = ask(&store, at("a", (7, 3)));
    assert_eq!((r[0], r.len()), (100, 10), "adopted: served: {r:?}");
    // The key exists: granted across the next change, the record with it.
    command(&store, &["HSET", "cfg", "version", "8"]);
    let r = ask(&store, at("b", (7, 3)));
    assert_eq!(r[0], 100, "{r:?}");
    assert_eq!((r.len(), r[10]), (17, 8), "{r:?}");
    // Older numbers (twice the key's threshold and burst), spending by its
    // own (flag 2 alone) with another slicing's shape key about: granted by
    // the key, no mismatch, no shape check, `left` going on in the key.
    let left = r[1];
    command(&store, &["SET", "shape", "500"]);
    command(&store, &["HSET", "cfg", "version", "9"]);
    let r = ask(
        &store,
        Ask {
            numbers: Some((2 * QUOTA, 2000)),
            ..at("d", (8, 2))
        },
    );
    assert_eq!((r[0], r[1], r[7], r[10]), (100, left - 100, 0, 9), "{r:?}");
    // A spread task's shard: as before.
    let r = ask(&store, at("c", (8, 1)));
    assert_eq!((r[0], r[1], r.len()), (-2, 9, 10), "{r:?}");
    // A record that spreads the task over shards: the key is shard 0's.
    command(&store, &["HSET", "cfg", "version", "12", "shards", "3"]);
    let r = ask(&store, at("b", (9, 3)));
    assert_eq!(&r[..2], &[-2, 12], "{r:?}");
    command(&store, &["HSET", "cfg", "shards", "1"]);
    // Another slicing in the record: refused, the record with it.
    command(&store, &["HSET", "cfg", "version", "10", "slice_ms", "500"]);
    let r = ask(&store, at("b", (8, 3)));
    assert_eq!(&r[..2], &[-2, 10], "{r:?}");
    assert_eq!(r.len(), 19, "the record (4 fields) with it: {r:?}");
}
