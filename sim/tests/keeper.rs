//! When one host's keeper calls the store for its keys' global rates, and
//! when it does not: a real table and the crate's `keyed.lua` over the
//! model of Redis, on the simulated clock, the keeper looking every 10 ms
//! as its thread does. The store is watched: every call's instant and how
//! many keys it asked for, and it can be taken down.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use flowctrl::sim::{Script, ScriptValue};
use flowctrl::{
    Error, ErrorKind, KeyConfig, KeyGlobal, KeyLimits, KeyRate, Outcome, Result, Table, Task,
    TaskConfig,
};
use flowctrl_sim::fleet::{Dir, table_options};
use flowctrl_sim::lua::LuaStore;

/// A slice's start (every slice length here divides it).
const BASE_US: i64 = 1_900_000_000_000_000;
/// How often the keeper looks (`quota::keeper::EVERY`).
const KEEPER_US: i64 = 10_000;

/// The store, the clock and the installed script are the process's: one
/// test at a time.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One call for keys: when (store µs) and how many keys it asked for.
#[derive(Clone, Copy, Debug)]
struct Call {
    at_us: i64,
    asks: usize,
}

/// The model of Redis, with the calls for keys seen and a switch that
/// fails them (a store down).
struct Watched {
    store: LuaStore,
    down: AtomicBool,
    calls: Mutex<Vec<Call>>,
}

impl Script for Watched {
    fn eval(&self, keys: &[String], args: &[String]) -> Result<Vec<ScriptValue>> {
        self.store.eval(keys, args)
    }

    fn hash(&self, key: &str) -> Result<Vec<(String, String)>> {
        self.store.hash(key)
    }

    fn eval_keyed(&self, keys: &[String], args: &[String]) -> Result<Vec<i64>> {
        let at_us = self.store.model.lock().unwrap().now_us();
        let asks = args[3].parse().unwrap();
        self.calls.lock().unwrap().push(Call { at_us, asks });
        if self.down.load(Ordering::Relaxed) {
            return Err(Error::new(ErrorKind::Store, "down (the test took it down)"));
        }
        self.store.eval_keyed(keys, args)
    }
}

/// One host whose keyed task has `config`, its store [`Watched`], the
/// clock at `BASE_US`.
struct Host {
    watched: Arc<Watched>,
    task: Task,
    _table: Table,
    _dir: Dir,
    now_us: i64,
}

impl Host {
    fn new(name: &str, config: &KeyConfig) -> Self {
        let watched = Arc::new(Watched {
            store: LuaStore::new().unwrap(),
            down: AtomicBool::new(false),
            calls: Mutex::new(Vec::new()),
        });
        flowctrl::sim::install(watched.clone());
        flowctrl::clock::sim::set_now_us(BASE_US);
        watched.store.model.lock().unwrap().set_now_us(BASE_US);
        let dir = Dir::new(&format!("keeper-{name}")).unwrap();
        let table = Table::open(dir.0.join("t"), &table_options(0)).unwrap();
        let task = table.task("keys", &TaskConfig::new()).unwrap();
        task.set_keys(config).unwrap();
        Self {
            watched,
            task,
            _table: table,
            _dir: dir,
            now_us: BASE_US,
        }
    }

    /// The host's and the store's clocks both read `us`.
    fn set_now(&mut self, us: i64) {
        self.now_us = us;
        flowctrl::clock::sim::set_now_us(us);
        self.watched.store.model.lock().unwrap().set_now_us(us);
    }

    /// The clock runs on for `span`, the keeper looking every 10 ms.
    fn keep_for(&mut self, span: Duration) {
        let end = self.now_us + span.as_micros() as i64;
        while self.now_us < end {
            let next = self.now_us + KEEPER_US;
            self.set_now(next);
            self.task.tend_keys();
        }
    }

    /// `n` requests for `key` now: how many were admitted.
    fn ask(&self, key: &str, n: u32) -> u32 {
        let mut admitted = 0;
        for _ in 0..n {
            if let Ok(mut permit) = self.task.acquire_key_raw(key.as_bytes(), 1).unwrap() {
                admitted += 1;
                self.task
                    .release_raw(&mut permit, Outcome::Success)
                    .unwrap();
            }
        }
        admitted
    }

    /// The calls for keys made so far, in order.
    fn calls(&self) -> Vec<Call> {
        self.watched.calls.lock().unwrap().clone()
    }

    fn take_down(&self, down: bool) {
        self.watched.down.store(down, Ordering::Relaxed);
    }
}

/// Keys of `per_second` across the fleet, counted in slices of `slice`.
fn limits(per_second: f64, slice: Duration) -> KeyLimits {
    KeyLimits::new().global(KeyGlobal::new(KeyRate::per_second(per_second)).slice(slice))
}

/// With slices shorter than a second, the keeper's call with nothing to ask
/// is the heartbeat, once a second while the store answers. A failed call
/// takes the store as down for a second: the keeper calls no more often
/// than that while it stays down (not at every window's call point, ten a
/// second here), and a second after it answers again the heartbeat goes
/// on as before.
#[test]
fn the_keepers_empty_calls_wait_out_a_store_taken_as_down() {
    let _one = one_at_a_time();
    let mut host = Host::new(
        "down",
        &KeyConfig::new(limits(100.0, Duration::from_millis(100))),
    );
    host.keep_for(Duration::from_secs(3));
    let up = host.calls();
    assert!((2..=4).contains(&up.len()), "{up:?}");
    assert!(up.iter().all(|c| c.asks == 0), "{up:?}");

    host.take_down(true);
    host.keep_for(Duration::from_secs(5));
    let down = host.calls()[up.len()..].to_vec();
    assert!((4..=6).contains(&down.len()), "{down:?}");
    for pair in down.windows(2) {
        assert!(pair[1].at_us - pair[0].at_us >= 990_000, "{down:?}");
    }

    host.take_down(false);
    let seen = host.calls().len();
    host.keep_for(Duration::from_secs(3));
    let back = host.calls()[seen..].to_vec();
    assert!((2..=4).contains(&back.len()), "{back:?}");
}

/// A host's marks of when it called, and of when its next heartbeat is
/// due, are store or host milliseconds: when the clock steps back ten
/// seconds (a host's clock set right, a store failed over to a server
/// behind), marks that far ahead are stale, and the keeper calls within a
/// window and a tenth, not ten seconds later. Slices of a second (the
/// slice's last call, its mark of the last call stale) and of 100 ms (the
/// heartbeat, its due time stale) alike.
#[test]
fn a_keeper_whose_clock_stepped_back_calls_within_a_window() {
    let _one = one_at_a_time();
    for slice_ms in [1000, 100] {
        let slice = Duration::from_millis(slice_ms);
        let mut host = Host::new(
            &format!("back-{slice_ms}"),
            &KeyConfig::new(limits(100.0, slice)),
        );
        host.keep_for(Duration::from_secs(3));
        let before = host.calls().len();
        assert!(before >= 2, "slices of {slice_ms} ms: {:?}", host.calls());
        host.set_now(host.now_us - 10_000_000);
        host.keep_for(Duration::from_millis(1200));
        let after = host.calls()[before..].to_vec();
        assert!(
            !after.is_empty(),
            "slices of {slice_ms} ms: no call in 1.2 s after the clock stepped back"
        );
    }
}

/// The host's mark of when its next window's call is due is a store
/// millisecond too: after the clock steps back ten seconds, a key that
/// waits for the store is asked for within a window and a tenth, not when
/// the stale mark comes round.
#[test]
fn a_key_waiting_after_the_clock_stepped_back_is_asked_for_within_a_window() {
    let _one = one_at_a_time();
    let one_second = limits(10.0, Duration::from_secs(1));
    let mut host = Host::new("back-asks", &KeyConfig::new(one_second));
    host.keep_for(Duration::from_secs(3));
    let before = host.calls().len();
    host.set_now(host.now_us - 10_000_000);
    host.keep_for(Duration::from_millis(100));
    // Past its allowance (half the slice on a host alone): it waits.
    host.ask("a", 8);
    host.keep_for(Duration::from_millis(1200));
    let after = host.calls()[before..].to_vec();
    assert!(after.iter().any(|c| c.asks > 0), "{after:?}");
}

/// The keeper makes a window's call for the keys that wait when no request
/// came after the call point to make it; but while an override counts its
/// key in slices of another length, the windows are left to the requests
/// (the override's key needs its own), and the keeper only makes its call
/// with nothing to ask. Here a key of 10 a slice is asked 8 times early in
/// every slice (past its allowance, half the slice on a host alone) and
/// never after the call point: the keeper's calls ask for it without the
/// override, and never with it.
#[test]
fn the_keeper_leaves_the_windows_to_requests_while_slicings_differ() {
    let _one = one_at_a_time();
    for mixed in [false, true] {
        let default = limits(10.0, Duration::from_secs(1));
        let mut host = Host::new(&format!("mixed-{mixed}"), &KeyConfig::new(default));
        if mixed {
            let other = limits(10.0, Duration::from_secs(2));
            host.task.set_key_override(b"other", Some(&other)).unwrap();
        }
        for _ in 0..4 {
            host.keep_for(Duration::from_millis(100));
            host.ask("a", 8);
            host.keep_for(Duration::from_millis(900));
        }
        let calls = host.calls();
        let asking = calls.iter().filter(|c| c.asks > 0).count();
        if mixed {
            assert_eq!(asking, 0, "{calls:?}");
            assert!(calls.len() >= 3, "the empty calls go on: {calls:?}");
        } else {
            assert!(asking >= 3, "{calls:?}");
        }
    }
}
