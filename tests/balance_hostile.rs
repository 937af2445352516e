//! A hostile balancer region: the words of the balancer slots, backend slots
//! and pick ledgers of a table in use are overwritten with arbitrary and
//! boundary values, and each case is used in a forked child (register, set
//! backends, pick, done, stats, retry budget, reap). A case may answer
//! errors; it must never panic, crash or hang (the child has an alarm).
//!
//! `FLOWCTRL_BALANCE_FUZZ_CASES` (default 120) sets the number of cases.

mod common;

use std::time::Duration;

use common::*;
use flowctrl::{BalancerConfig, Outcome, PickOptions, Table, TableOptions};

const TASKS: usize = 2;
const PROCESSES: usize = 4;
const BALANCERS: usize = 2;
const BACKENDS: usize = 4;
/// Bytes of the balancer regions (balancer slots, backend slots, and a pick
/// ledger per process and backend), at the end of the file.
fn region() -> usize {
    layout::balancers_size(BALANCERS, BACKENDS, PROCESSES)
}

/// The table of these constants.
fn geometry() -> TableOptions {
    options()
        .capacity(TASKS as u32)
        .processes(PROCESSES as u32)
        .balancers(BALANCERS as u32)
        .backends(BACKENDS as u32)
}

/// Bits of a case child's exit code (0..=3; anything else is a failure): the
/// case refused the table or a balancer it holds, and it picked a backend.
const REFUSED: i32 = 1;
const PICKED: i32 = 2;

fn exercise(path: &std::path::Path) -> i32 {
    let Ok(table) = Table::open(path, &geometry()) else {
        return REFUSED;
    };
    let mut code = 0;
    for name in ["api", "db", "other"] {
        let lb = match table.balancer(name, &BalancerConfig::new()) {
            Ok(lb) => lb,
            // "other" does not fit (both slots are taken): refusing it is no
            // sign of damage.
            Err(_) if name == "other" => continue,
            Err(_) => {
                code |= REFUSED;
                continue;
            }
        };
        let _ = lb.stats();
        let _ = lb.retry_allowed();
        let _ = lb.index_of("10.0.0.1:80");
        for i in 0..20 {
            // A ledger the file marks busy for ever costs each pick its 1 s
            // deadline (an error, not a hang): one is enough to see.
            let picked = lb.pick_raw(&PickOptions { exclude: &[i % 5] });
            if let Err(e) = &picked
                && e.kind() == flowctrl::ErrorKind::Timeout
            {
                break;
            }
            if let Ok(mut p) = picked {
                code |= PICKED;
                let _ = p.address();
                let outcome =
                    [Outcome::Success, Outcome::Dropped, Outcome::Ignored][i as usize % 3];
                let _ = lb.done_raw(&mut p, outcome, None, Some(0.5));
                let _ = lb.done_raw(&mut p, outcome, None, None);
            }
        }
        let _ = lb.set_backends(&[("10.0.0.1:80", 1), ("10.0.0.9:80", 3)]);
        let _ = lb.pick(&PickOptions::default());
        let _ = lb.stats();
    }
    table.reap();
    code
}

#[test]
fn hostile_balancer_words_never_crash() {
    let cases = env_number("FLOWCTRL_BALANCE_FUZZ_CASES", 120);
    let seed = seed_from_env("FLOWCTRL_BALANCE_FUZZ_SEED");
    eprintln!("balancer fuzz: {cases} cases, FLOWCTRL_BALANCE_FUZZ_SEED={seed}");
    let scratch = Scratch::new("lb-fuzz");
    let path = scratch.path("pristine");
    {
        let table = Table::open(&path, &geometry()).unwrap();
        let lb = table.balancer("api", &BalancerConfig::new()).unwrap();
        lb.set_backends(&[("10.0.0.1:80", 1), ("10.0.0.2:80", 2), ("10.0.0.3:80", 1)])
            .unwrap();
        // A process that dies holding picks leaves ledgers to reap.
        let p = path.clone();
        let exit = run_in_child(Duration::from_secs(30), move || {
            let table = Table::open(&p, &geometry()).unwrap();
            let lb = table.balancer("api", &BalancerConfig::new()).unwrap();
            let held: Vec<_> = (0..5)
                .map(|_| lb.pick_raw(&PickOptions::default()).unwrap())
                .collect();
            std::mem::forget(held);
            std::mem::forget(table);
            unsafe { libc::_exit(0) }
        });
        assert!(matches!(exit, Exit::Code(0)));
        let _ = table.balancer("db", &BalancerConfig::new());
    }
    let pristine = std::fs::read(&path).unwrap();
    // The cases are copies: an unaltered copy opens and picks.
    let copy = scratch.path("copy");
    std::fs::write(&copy, &pristine).unwrap();
    let exit = run_in_child(Duration::from_secs(30), move || {
        let table = Table::open(&copy, &geometry()).unwrap();
        let lb = table.balancer("api", &BalancerConfig::new()).unwrap();
        let pick = lb.pick(&PickOptions::default()).unwrap();
        assert_eq!(lb.stats().backends.len(), 3);
        pick.done(Outcome::Success).unwrap();
        0
    });
    assert!(
        matches!(exit, Exit::Code(0)),
        "the unaltered copy: {exit:?}"
    );
    assert_eq!(
        pristine.len(),
        layout::file_size(TASKS, PROCESSES, BALANCERS, BACKENDS),
        "the layout mirrored in tests/common is out of date"
    );
    // The balancer regions end where 0.3.0's table ends.
    let start = layout::total_size(TASKS, PROCESSES, BALANCERS, BACKENDS) - region();
    let mut rng = Rng::new(seed);
    // Cases that refused the table or a balancer, and cases that picked.
    let (mut refused, mut picked) = (0u64, 0u64);
    for case in 0..cases {
        let mut bytes = pristine.clone();
        for _ in 0..1 + rng.below(8) {
            let offset = start + 8 * rng.below((region() / 8) as u64) as usize;
            let old = u64::from_le_bytes(bytes[offset..offset + 8].try_into().unwrap());
            let value = match rng.below(8) {
                0 => 0,
                1 => u64::MAX,
                2 => old ^ (1 << rng.below(64)),
                3 => old.wrapping_add(1),
                4 => old.wrapping_sub(1),
                5 => 1 << rng.below(64),
                6 => u32::MAX as u64,
                _ => rng.next_u64(),
            };
            bytes[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
        }
        let case_path = scratch.path(&format!("case-{case}"));
        std::fs::write(&case_path, &bytes).unwrap();
        let p = case_path.clone();
        let exit = run_in_child(Duration::from_secs(30), move || exercise(&p));
        let code = match exit {
            Exit::Code(code @ 0..=3) => code,
            other => panic!("case {case} (seed {seed}): {other:?}"),
        };
        refused += u64::from(code & REFUSED != 0);
        picked += u64::from(code & PICKED != 0);
        let _ = std::fs::remove_file(case_path);
    }
    // Both outcomes happened: damage that is refused, and damage that is
    // used through pick. A fuzzer whose cases all go one way tests one
    // branch only. (Below 50 cases, a short run asked for by hand, either
    // may miss by chance.)
    eprintln!("balancer fuzz: {refused} cases refused, {picked} picked");
    assert!(
        cases < 50 || (refused > 0 && picked > 0),
        "{cases} cases: {refused} refused a balancer and {picked} picked; both must occur \
         (seed {seed})"
    );
}
