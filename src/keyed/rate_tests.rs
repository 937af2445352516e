//! The rates' texts and checks.
use super::*;
use crate::Fallback;

#[test]
fn rates_parse_as_the_limits_package_writes_them() {
    let l = crate::KeyLimits::parse_rates("10/second;1000/hour").unwrap();
    let rates: Vec<_> = l.rates().copied().collect();
    assert_eq!(rates[0], KeyRate::per_second(10.0));
    assert_eq!(rates[1], KeyRate::new(1000.0, Duration::from_secs(3600)));
    assert_eq!(
        KeyRate::parse("5/2m").unwrap(),
        KeyRate::new(5.0, Duration::from_secs(120))
    );
    assert_eq!(KeyRate::parse("1/ms").unwrap().rate(), 1000.0);
    for bad in [
        "10",
        "x/s",
        "10/parsec",
        "0/s",
        "-1/s",
        "10/0s",
        "1e300/ms",
        "10/400d",
    ] {
        assert!(KeyRate::parse(bad).is_err(), "{bad}");
    }
    assert!(crate::KeyLimits::parse_rates("1/s;2/s;3/s;4/s").is_err());
    assert!(
        crate::KeyLimits::new()
            .rate(KeyRate::per_second(1.0))
            .rate(KeyRate::per_second(1.0))
            .rate(KeyRate::per_second(1.0))
            .rate(KeyRate::per_second(1.0))
            .validate()
            .is_err(),
        "a fourth rate is refused, not dropped"
    );
}

#[test]
fn a_global_rate_reads_and_writes_its_text() {
    for (text, ms) in [
        ("1s", 1000),
        ("500ms", 500),
        ("1.5s", 1500),
        ("1m", 60_000),
        ("2h", 7_200_000),
        ("0.1s", 100),
        (" 1 hour ", 3_600_000),
    ] {
        assert_eq!(
            KeyGlobal::parse_slice(text).unwrap(),
            Duration::from_millis(ms),
            "{text}"
        );
    }
    for (bad, says) in [
        ("", "no unit"),
        ("10", "no unit"),
        ("1fortnight", "unknown unit"),
        ("0s", "out of range"),
        ("-1s", "out of range"),
        ("0.0001s", "not whole milliseconds"),
        ("1.2.3s", "not a number"),
    ] {
        let err = KeyGlobal::parse_slice(bad).unwrap_err().to_string();
        assert!(
            err.contains(says) && err.contains("key global slice"),
            "{bad}: {err}"
        );
    }
    assert_eq!(KeyGlobal::parse_fallback("deny").unwrap(), Fallback::Deny);
    assert_eq!(KeyGlobal::parse_fallback("local").unwrap(), Fallback::Local);
    assert_eq!(KeyGlobal::parse_fallback("share").unwrap(), Fallback::Share);
    for bad in ["10", "Share", "", "rate"] {
        assert!(KeyGlobal::parse_fallback(bad).is_err(), "{bad}");
    }
    let g = KeyGlobal::new(KeyRate::parse("1000/h").unwrap())
        .slice(Duration::from_secs(60))
        .local(2)
        .fallback(Fallback::Deny);
    assert_eq!(g.to_string(), "1000/h slice 1m local 2 fallback deny");
    assert_eq!(g.permits(), 16);
    let g = KeyGlobal::new(KeyRate::parse("5/s").unwrap());
    assert_eq!(g.to_string(), "5/s slice 1s local 1 fallback share");
    for (ms, text) in [(90_000, "90s"), (500, "500ms"), (86_400_000, "1d")] {
        let shown = slice_text(Duration::from_millis(ms));
        assert_eq!(shown, text);
        assert_eq!(
            KeyGlobal::parse_slice(&shown).unwrap(),
            Duration::from_millis(ms)
        );
    }
}

#[test]
fn a_global_rate_out_of_range_is_refused_with_its_reason() {
    let rate = |t: &str| KeyRate::parse(t).unwrap();
    for (g, says) in [
        (KeyGlobal::new(rate("5/s").burst(2)), "no burst"),
        (
            KeyGlobal::new(rate("5/s")).slice(Duration::from_millis(5)),
            "between 10 ms and a day",
        ),
        (
            KeyGlobal::new(rate("5/s")).slice(Duration::from_micros(10_500)),
            "whole ms",
        ),
        (
            KeyGlobal::new(rate("1/h")).slice(Duration::from_secs(1)),
            "permits per slice",
        ),
        (
            KeyGlobal::new(rate("5/s")).local(MAX_LOCAL + 1),
            "at most 31",
        ),
        (
            KeyGlobal::new(rate("5/s")).fallback(Fallback::Rate(3.0)),
            "not a rate",
        ),
        (
            KeyGlobal::new(rate("1/60d")).slice(Duration::from_secs(86_400)),
            "at most 49 days",
        ),
    ] {
        let err = g.validate().unwrap_err().to_string();
        assert!(err.contains(says), "{g:?}: {err}");
        assert!(!err.contains("  "), "one line, no runs of spaces: {err}");
    }
    assert!(
        KeyGlobal::new(rate("5/s"))
            .local(MAX_LOCAL)
            .validate()
            .is_ok()
    );
}
