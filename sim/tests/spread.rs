//! The keys' script's list of the fleet's spread keys, one call at a time:
//! the crate's own `keyed.lua` over the model of Redis, at a fixed instant.
//! `keys` in the simulator shows what the list buys (a key asked on every
//! host exact from its third slice); these show what the script lists.

use flowctrl::sim::Script;
use flowctrl_sim::lua::LuaStore;

const SLICE: i64 = 1_900_000_000;

/// A store 800 ms into the slice, that has served the keys since the slice
/// before (a store that has not grants nothing of its first slice).
fn store() -> LuaStore {
    let store = LuaStore::new().unwrap();
    let mut model = store.model.lock().unwrap();
    model.set_now_us(SLICE * 1_000_000 + 800_000);
    let born = ["SET", "t:k:born-ms", &((SLICE - 1) * 1000).to_string()].map(String::from);
    model.call(&born).unwrap();
    drop(model);
    store
}

/// One ask: a key (its id), its permits, the chunk wanted, the charge, and
/// whether it is for the next slice.
type Ask = (u64, i64, i64, i64, bool);

/// One call of `host` in the slice the store is in: the grants (granted,
/// left per ask) and the spread keys listed.
fn call(store: &LuaStore, host: &str, asks: &[Ask]) -> (Vec<(i64, i64)>, Vec<u64>) {
    let slice = store.model.lock().unwrap().now_us() / 1_000_000;
    let r = call_sliced(store, 1000, host, asks);
    assert_eq!(r[1], slice, "{r:?}");
    assert_eq!(r[3], 1, "granted in the slice asked: {r:?}");
    let grants = r[5..5 + 2 * asks.len()]
        .chunks(2)
        .map(|p| (p[0], p[1]))
        .collect();
    let listed = r[5 + 2 * asks.len()..]
        .chunks(2)
        .map(|p| (p[0] as u64) << 32 | p[1] as u64)
        .collect();
    (grants, listed)
}

const KEY: u64 = 0xdead_beef_0000_0001;

#[test]
fn a_key_whose_slice_is_spent_and_still_asked_for_is_listed_to_every_caller() {
    let store = store();
    // One permit a slice: asked twice, the second refused.
    let (g, listed) = call(&store, "h1", &[(KEY, 1, 2, 0, false)]);
    assert_eq!(g, [(1, 0)]);
    assert!(listed.is_empty(), "spent, but asked once: {listed:?}");
    let (g, listed) = call(&store, "h2", &[(KEY, 1, 1, 1, false)]);
    assert_eq!(g, [(0, 0)], "nothing left for the second asker");
    assert_eq!(listed, [KEY], "asked twice a permit, refused: listed");
    // A host that asks nothing learns it too, in this slice and the next
    // (whose calls may all come before the key is refused again), not after.
    assert_eq!(call(&store, "h3", &[]).1, [KEY]);
    for (ms, listed) in [(1000, vec![KEY]), (2000, vec![])] {
        let at = SLICE * 1_000_000 + 800_000 + ms * 1000;
        store.model.lock().unwrap().set_now_us(at);
        assert_eq!(call(&store, "h3", &[]).1, listed, "{ms} ms on");
    }
}

#[test]
fn a_key_under_its_limit_asked_little_or_spent_ahead_is_not_listed() {
    let store = store();
    // Three hosts ask a key of 10 for 2 each: never spent.
    for h in ["h1", "h2", "h3"] {
        let (g, listed) = call(&store, h, &[(KEY, 10, 2, 1, false)]);
        assert_eq!(g[0].0, 2, "{g:?}");
        assert!(listed.is_empty(), "{listed:?}");
    }
    // A key of 2 refused at its second ask: asked less than twice a
    // permit, it keeps its allowances.
    let few = KEY + 2;
    assert_eq!(call(&store, "h1", &[(few, 2, 2, 0, false)]).0, [(2, 0)]);
    let (g, listed) = call(&store, "h2", &[(few, 2, 1, 1, false)]);
    assert_eq!(g, [(0, 0)]);
    assert!(listed.is_empty(), "{listed:?}");
    // An id that is not 16 hex digits (no host sends one) is never listed:
    // every host would refuse the answer that carried it.
    let odd = |id: &str, host: &str| {
        let keys = ["t:k", "t:k-hosts", "t:k-cfg"].map(String::from);
        let slice = SLICE.to_string();
        let args = ["1000", &slice, host, "1", id, "1", "1", "0", "0"].map(String::from);
        store.eval_keyed(&keys, &args).unwrap()
    };
    for id in ["-000000000000001", "abc"] {
        odd(id, "h1");
        let r = odd(id, "h2");
        assert_eq!(r.len(), 7, "{id}: {r:?}");
    }
    // The next slice given whole ahead, and asked ahead again: chunks
    // asked ahead are no proof of demand.
    let other = KEY + 1;
    call(&store, "h1", &[(other, 4, 4, 0, true)]);
    let (g, listed) = call(&store, "h2", &[(other, 4, 4, 0, true)]);
    assert_eq!(g, [(0, 0)]);
    assert!(listed.is_empty(), "{listed:?}");
}

#[test]
fn the_list_holds_the_most_asked_and_stays_bounded() {
    let store = store();
    // 100 keys of one permit, each spent and refused: key i asked 2 + i % 5
    // times in all.
    for i in 0..100u64 {
        let id = KEY + i;
        for ask in 0..2 + i % 5 {
            call(&store, &format!("h{ask}"), &[(id, 1, 1, 0, false)]);
        }
    }
    let (_, listed) = call(&store, "h9", &[]);
    assert_eq!(listed.len(), 32, "{listed:?}");
    // The most asked first: the 20 keys asked 6 times (i % 5 == 4), then
    // 12 of the 20 asked 5 times.
    let times: Vec<u64> = listed.iter().map(|id| 2 + (id - KEY) % 5).collect();
    assert_eq!(times, [[6; 20].as_slice(), &[5; 12]].concat(), "{listed:?}");
    let set = format!("t:k:h:{SLICE}");
    let mut model = store.model.lock().unwrap();
    let n = model.call(&["ZCARD".to_string(), set]).unwrap();
    assert!(
        matches!(n, flowctrl_sim::model::Reply::Int(n) if n <= 64),
        "{n:?}"
    );
}

/// One call of `host` with slices of `slice_ms`, in the slice the store is
/// in: its whole answer.
fn call_sliced(store: &LuaStore, slice_ms: i64, host: &str, asks: &[Ask]) -> Vec<i64> {
    let slice = store.model.lock().unwrap().now_us() / 1000 / slice_ms;
    let keys = ["t:k", "t:k-hosts", "t:k-cfg"].map(String::from);
    let mut args = vec![
        slice_ms.to_string(),
        slice.to_string(),
        host.to_string(),
        asks.len().to_string(),
    ];
    for &(id, permits, want, charge, next) in asks {
        args.push(format!("{id:016x}"));
        args.extend([permits, want, charge, next as i64].map(|v| v.to_string()));
    }
    store.eval_keyed(&keys, &args).unwrap()
}

#[test]
fn a_store_that_lost_its_counts_grants_nothing_of_that_instant_in_any_slicing() {
    // No mark: a store restarted empty, 450 ms into a second.
    let store = LuaStore::new().unwrap();
    store
        .model
        .lock()
        .unwrap()
        .set_now_us(SLICE * 1_000_000 + 450_000);
    let ask = |slice_ms, host| call_sliced(&store, slice_ms, host, &[(KEY, 10, 4, 0, false)])[5];
    assert_eq!(ask(1000, "h1"), 0, "slices of a second");
    assert_eq!(ask(100, "h2"), 0, "slices of 100 ms: the same instant");
    // The next 100 ms slice is granted; the second is not over.
    store
        .model
        .lock()
        .unwrap()
        .set_now_us(SLICE * 1_000_000 + 550_000);
    assert_eq!(ask(100, "h2"), 4);
    assert_eq!(ask(1000, "h1"), 0);
}

#[test]
fn a_damaged_count_refuses_its_key_and_not_the_call() {
    let store = store();
    let damaged = KEY + 7;
    let field = format!("{damaged:016x}");
    for value in ["abc", "1.5", "99999999999999999999"] {
        let set = ["HSET", &format!("t:k:{SLICE}"), &field, value].map(String::from);
        store.model.lock().unwrap().call(&set).unwrap();
        let (g, _) = call(
            &store,
            "h1",
            &[(damaged, 10, 4, 0, false), (KEY, 10, 4, 0, false)],
        );
        assert_eq!(g[0], (0, 0), "{value}: read as spent");
        assert!(g[1].0 > 0, "{value}: the other key is served: {g:?}");
        // Written back whole: the next ask reads it.
        let (g, _) = call(&store, "h2", &[(damaged, 10, 4, 0, false)]);
        assert_eq!(g, [(0, 0)], "{value}");
    }
}
