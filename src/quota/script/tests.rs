//! The pull script's reply as the host reads it.

use std::sync::atomic::AtomicU64;

use super::*;

fn ask(word: &AtomicU64, shards: u32) -> Ask<'_> {
    Ask {
        shards,
        quota: 1000,
        burst: 100,
        want: 10,
        record_version: 6,
        spends_record: true,
        ..Ask::plain(word)
    }
}

fn reply(first: [i64; 10], tail: &[ScriptValue]) -> Vec<ScriptValue> {
    let mut v: Vec<_> = first.map(ScriptValue::Int).into();
    v.extend_from_slice(tail);
    v
}

fn text(s: &str) -> ScriptValue {
    ScriptValue::Text(s.into())
}

const GRANT: [i64; 10] = [10, 90, 1, 0, 2, 0, 0, 0, 0, 0];

#[test]
fn a_record_rides_on_a_grant_or_a_refresh_and_nothing_else_does() {
    let word = AtomicU64::new(0);
    let unsharded = ask(&word, 1);
    let record = [ScriptValue::Int(7), text("version"), text("7")];
    let (r, carried) = pull_reply(&unsharded, &reply(GRANT, &record)).unwrap();
    assert_eq!(
        (r.granted, r.went_on, r.refresh),
        (10, true, Some(Refresh::Record(7)))
    );
    assert_eq!(carried, Some((7, vec![("version".into(), "7".into())])));
    let refresh = [-2, 7, 1, 0, 0, 0, 0, 0, 0, 0];
    let (r, carried) = pull_reply(&unsharded, &reply(refresh, &record)).unwrap();
    assert_eq!(
        (r.granted, r.went_on, r.refresh),
        (0, false, Some(Refresh::Record(7)))
    );
    assert!(carried.is_some());
    let (r, carried) = pull_reply(&unsharded, &reply(GRANT, &[])).unwrap();
    assert_eq!((r.went_on, r.refresh, carried), (false, None, None));

    let refused = |a: &Ask<'_>, v: Vec<ScriptValue>| pull_reply(a, &v).is_err();
    // To a shard of a spread task: its record is a copy, never carried.
    assert!(refused(&ask(&word, 3), reply(GRANT, &record)));
    // A version out of range, a field without a value, the same version
    // as the host's, another refresh's version, a slice mismatch's.
    assert!(refused(&unsharded, reply(GRANT, &[ScriptValue::Int(0)])));
    assert!(refused(&unsharded, reply(GRANT, &record[..2])));
    let same = [ScriptValue::Int(6), text("version"), text("6")];
    assert!(refused(&unsharded, reply(GRANT, &same)));
    assert!(refused(
        &unsharded,
        reply([-2, 8, 1, 0, 0, 0, 0, 0, 0, 0], &record)
    ));
    assert!(refused(
        &unsharded,
        reply([-1, 0, 1, 0, 0, 0, 0, 0, 0, 0], &record)
    ));
    // A field that is a number, not a string; fewer than ten integers.
    let number = [ScriptValue::Int(7), ScriptValue::Int(1), text("7")];
    assert!(refused(&unsharded, reply(GRANT, &number)));
    assert!(refused(
        &unsharded,
        GRANT[..9].iter().map(|n| ScriptValue::Int(*n)).collect()
    ));
}

#[test]
fn a_carried_record_goes_only_to_its_own_task_and_version() {
    let word = AtomicU64::new(0);
    let carried = Carried::default();
    let fields = |v: &str| vec![("version".to_string(), v.to_string())];
    let carry = |version: &str| {
        let record = [ScriptValue::Int(7), text("version"), text(version)];
        carried
            .reply(&ask(&word, 1), &reply(GRANT, &record))
            .unwrap();
    };
    carry("7");
    assert_eq!(carried.take("b", 7), None, "another task's");
    assert_eq!(carried.take("t", 8), None, "another version's");
    assert_eq!(carried.take("t", 7), Some(fields("7")));
    assert_eq!(carried.take("t", 7), None, "taken once");
    // Fields whose own version is not the one they came with.
    carry("5");
    assert_eq!(carried.take("t", 7), None);
    // Else the store is read.
    let read = carried.record_at("t", 7, || Ok(Some(fields("9")))).unwrap();
    assert_eq!(read, Some(fields("9")));
}
