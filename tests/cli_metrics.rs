//! `flowctrl metrics` scraped over real HTTP while real processes hold
//! permits, and the library's `metrics::render`: every line is valid
//! Prometheus text exposition, every counter equals the library's
//! statistics, and neither the endpoint nor the other read-only commands
//! take an attachment slot of the table. `set` reaches the live processes.

#[path = "common/cli.rs"]
mod cli;
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use cli::{field, ok};
use common::*;
use flowctrl::{
    BalancerConfig, Decision, Limited, Outcome, PickOptions, Table, Task, TaskConfig, View,
};

/// A series: its name and its labels, sorted.
type Series = (String, Vec<(String, String)>);

/// Parses an exposition strictly: `# HELP` then `# TYPE` once per family,
/// samples of the family just declared (a histogram's `_bucket`, `_sum`,
/// `_count`), names and labels as the format allows, counters ending in
/// `_total`, no series twice. The samples.
fn parse(text: &str) -> BTreeMap<Series, f64> {
    let valid_name = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    let mut samples = BTreeMap::new();
    let mut declared = Vec::new();
    let (mut help, mut family): (Option<String>, Option<String>) = (None, None);
    let mut histogram = false;
    assert!(text.ends_with('\n'), "the exposition ends with a newline");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, doc) = rest.split_once(' ').expect("HELP has a text");
            assert!(valid_name(name) && !doc.is_empty(), "{line}");
            assert!(
                !declared.contains(&name.to_string()),
                "{name} declared twice"
            );
            declared.push(name.to_string());
            help = Some(name.to_string());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert_eq!(help.as_deref(), Some(name), "HELP before TYPE: {line}");
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert_eq!(kind == "counter", name.ends_with("_total"), "{line}");
            family = Some(name.to_string());
            histogram = kind == "histogram";
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "{line:?}");
        let (series, value) = line.rsplit_once(' ').unwrap();
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
        let (name, labels) = match series.split_once('{') {
            None => (series, Vec::new()),
            Some((name, rest)) => (name, labels(rest.strip_suffix('}').expect(line))),
        };
        let of = match name.rsplit_once('_') {
            Some((of, "bucket" | "sum" | "count")) if histogram => of,
            _ => name,
        };
        assert_eq!(
            family.as_deref(),
            Some(of),
            "a sample of its family: {line}"
        );
        let mut sorted = labels.clone();
        sorted.sort();
        let key = (name.to_string(), sorted);
        assert!(samples.insert(key, value).is_none(), "{line} twice");
    }
    samples
}

/// `k="v",k2="v2"` with the format's escapes.
fn labels(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while chars.peek().is_some() {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        assert!(
            key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{key}"
        );
        assert_eq!(chars.next(), Some('"'), "{text}");
        let mut value = String::new();
        loop {
            match chars.next().expect("a closed label value") {
                '\\' => value.push(match chars.next().unwrap() {
                    'n' => '\n',
                    c @ ('\\' | '"') => c,
                    c => panic!("bad escape \\{c} in {text}"),
                }),
                '"' => break,
                c => value.push(c),
            }
        }
        out.push((key, value));
        match chars.next() {
            Some(',') | None => {}
            Some(c) => panic!("{c:?} after a label in {text}"),
        }
    }
    out
}

fn get(samples: &BTreeMap<Series, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut l: Vec<_> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    l.sort();
    *samples
        .get(&(name.to_string(), l))
        .unwrap_or_else(|| panic!("no {name}{labels:?}"))
}

/// Every counter of `task` in the exposition equals its statistics.
fn assert_task_counters(samples: &BTreeMap<Series, f64>, task: &Task) {
    let (s, q) = (task.stats(), task.quota_stats());
    let t = ("task", task.name());
    let count = |name, extra: Option<(&str, &str)>| {
        let mut labels = vec![t];
        labels.extend(extra);
        get(samples, name, &labels)
    };
    let limited = "flowctrl_requests_limited_total";
    let released = "flowctrl_requests_released_total";
    for (value, want) in [
        (count("flowctrl_requests_admitted_total", None), s.admitted),
        (count(limited, Some(("reason", "local"))), s.limited_local),
        (count(limited, Some(("reason", "global"))), s.limited_global),
        (
            count(limited, Some(("reason", "concurrency"))),
            s.limited_concurrency,
        ),
        (
            count(limited, Some(("reason", "fallback"))),
            q.limited_fallback,
        ),
        (
            count(released, Some(("outcome", "success"))),
            s.released_success,
        ),
        (
            count(released, Some(("outcome", "dropped"))),
            s.released_dropped,
        ),
        (
            count(released, Some(("outcome", "ignored"))),
            s.released_ignored,
        ),
        (count("flowctrl_permits_reclaimed_total", None), s.reclaimed),
        (
            count("flowctrl_permit_rtt_samples_total", None),
            s.rtt_samples,
        ),
        (count("flowctrl_permits_in_flight", None), s.in_flight),
    ] {
        assert_eq!(value, want as f64, "{} of {samples:?}", task.name());
    }
    let rtt = count("flowctrl_permit_rtt_seconds_sum", None);
    assert_eq!(rtt, s.rtt_sum_ns as f64 / 1e9);
    // Every release of this build is in a bucket: none waited.
    let inf = Some(("le", "+Inf"));
    assert_eq!(
        count("flowctrl_permit_rtt_seconds_bucket", inf),
        s.rtt_samples as f64
    );
    assert_eq!(
        count("flowctrl_permit_rtt_seconds_count", None),
        s.rtt_samples as f64
    );
    assert_eq!(count("flowctrl_permit_wait_seconds_count", None), 0.0);
    if q.state.is_some() {
        assert_eq!(count("flowctrl_quota_pulls_total", None), q.pulls as f64);
        assert_eq!(
            count("flowctrl_quota_granted_total", None),
            q.granted as f64
        );
        assert_eq!(
            count("flowctrl_quota_reserved_total", None),
            q.reserved as f64
        );
        assert_eq!(
            count("flowctrl_quota_returned_total", None),
            q.returned as f64
        );
        assert_eq!(
            count("flowctrl_quota_stranded_total", None),
            q.stranded as f64
        );
        assert_eq!(
            count("flowctrl_quota_shards_down", None),
            q.shards_down.count_ones() as f64
        );
        let open = count("flowctrl_quota_state", Some(("state", "open")));
        assert_eq!(open, 1.0, "the quota is open");
    }
}

/// The backends' families: b:1 failed five times in a row and was ejected
/// once, a:1 never; the four successes went to either; the deprecated
/// `flowctrl_backend_ejections` still says the same as its new name, and
/// its HELP says it is deprecated.
fn assert_backend_families(samples: &BTreeMap<Series, f64>, body: &str) {
    let mut successes = 0.0;
    for (backend, ejected, in_a_row) in [("a:1", 0.0, 0.0), ("b:1", 1.0, 1.0)] {
        let labels = [("balancer", "db"), ("backend", backend)];
        successes += get(samples, "flowctrl_backend_successes_total", &labels);
        assert_eq!(
            get(samples, "flowctrl_backend_failures_total", &labels),
            5.0 * ejected,
            "{backend}"
        );
        assert_eq!(
            get(samples, "flowctrl_backend_ejections_started_total", &labels),
            ejected,
            "{backend}"
        );
        assert_eq!(
            get(samples, "flowctrl_backend_ejected", &labels),
            ejected,
            "{backend}"
        );
        assert_eq!(
            get(samples, "flowctrl_backend_consecutive_ejections", &labels),
            in_a_row,
            "{backend}"
        );
        assert_eq!(
            get(samples, "flowctrl_backend_ejections", &labels),
            in_a_row,
            "{backend}: the old name serves the same value"
        );
    }
    assert_eq!(successes, 4.0);
    for family in ["successes", "failures", "ejections_started"] {
        assert!(
            body.contains(&format!("# TYPE flowctrl_backend_{family}_total counter\n")),
            "{body}"
        );
    }
    let help = body
        .lines()
        .find_map(|l| l.strip_prefix("# HELP flowctrl_backend_ejections "))
        .expect("the deprecated family has a HELP");
    assert!(
        help.starts_with("Deprecated") && help.contains("flowctrl_backend_consecutive_ejections"),
        "{help}"
    );
    assert!(
        body.contains("# TYPE flowctrl_backend_consecutive_ejections gauge\n"),
        "{body}"
    );
}

const WEIRD: &str = "we\"ird\\name";

/// A process holding 3 permits of `api` until it is told to end.
fn holder(path: &Path, ready: Pipe, end: Pipe) -> i32 {
    let table = Table::open(path, &cli_options()).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    let permits: Vec<_> = (0..3)
        .map(|_| task.acquire(1).unwrap().permit().unwrap())
        .collect();
    ready.send(1);
    end.recv();
    drop(permits);
    0
}

#[test]
fn the_endpoint_serves_valid_exposition_equal_to_the_statistics_and_takes_no_slot() {
    let scratch = Scratch::new("cli-metrics");
    let path = scratch.path("table");
    let table = Table::open(&path, &cli_options()).unwrap();
    let api = table
        .task(
            "api",
            &TaskConfig::new()
                .local_rate(1000.0)
                .burst(20)
                .max_concurrency(4),
        )
        .unwrap();
    let global = table
        .task(
            "global",
            &TaskConfig::new().global_rate(100.0).global_burst(100),
        )
        .unwrap();
    let weird = table.task(WEIRD, &TaskConfig::new()).unwrap();
    let (ready, end) = (Pipe::new(), Pipe::new());
    let mut children = KillOnDrop::default();
    let child_path = path.clone();
    let pid = fork_guarded(move || holder(&child_path, ready, end));
    children.add(pid);
    assert_eq!(ready.recv_timeout(Duration::from_secs(30)), Some(1));
    let mine = api.acquire(1).unwrap().permit().unwrap();
    assert!(matches!(
        api.acquire(1).unwrap(),
        Decision::Limited(Limited::Concurrency)
    ));
    for _ in 0..5 {
        global
            .acquire(1)
            .unwrap()
            .permit()
            .unwrap()
            .release(Outcome::Success)
            .unwrap();
    }
    weird
        .acquire(1)
        .unwrap()
        .permit()
        .unwrap()
        .release(Outcome::Dropped)
        .unwrap();
    let db = table
        .balancer_with_backends("db", &BalancerConfig::default(), &[("a:1", 1), ("b:1", 1)])
        .unwrap();
    for _ in 0..4 {
        db.pick(&Default::default())
            .unwrap()
            .done(Outcome::Success)
            .unwrap();
    }
    // Five failures of b:1 (index 1) in a row eject it once.
    for _ in 0..5 {
        db.pick(&PickOptions { exclude: &[0] })
            .unwrap()
            .done(Outcome::Dropped)
            .unwrap();
    }
    let raw = RawTable::open(&path);
    let attached = raw.live_attachments();
    assert_eq!(attached.len(), 2, "this process and the holder");

    let server = cli::Server::start(&path);
    let (status, body) = server.get("/metrics");
    assert_eq!(status, 200);
    eprintln!("GET /metrics\n{body}");
    let samples = parse(&body);
    assert_eq!(
        raw.live_attachments(),
        attached,
        "the endpoint took no slot"
    );
    for task in [&api, &global, &weird] {
        assert_task_counters(&samples, task);
    }
    assert_eq!(
        get(&samples, "flowctrl_concurrency_limit", &[("task", "api")]),
        4.0
    );
    assert_eq!(get(&samples, "flowctrl_table_processes", &[]), 2.0);
    assert_eq!(get(&samples, "flowctrl_table_tasks", &[]), 3.0);
    for task in [&api, &global, &weird] {
        assert_eq!(
            get(
                &samples,
                "flowctrl_concurrency_drift",
                &[("task", task.name())]
            ),
            0.0,
            "the counts match the ledgers"
        );
    }
    let picks: f64 = ["a:1", "b:1"]
        .iter()
        .map(|b| {
            get(
                &samples,
                "flowctrl_backend_picks_total",
                &[("balancer", "db"), ("backend", b)],
            )
        })
        .sum();
    assert_eq!(picks, 9.0);
    assert_backend_families(&samples, &body);
    let layout = flowctrl::LAYOUT_VERSION.to_string();
    let build = [("version", env!("CARGO_PKG_VERSION")), ("layout", &layout)];
    assert_eq!(
        get(&samples, "flowctrl_build_info", &build),
        1.0,
        "a table without a lane pool has the plain layout"
    );
    assert!(body.contains(r#"flowctrl_requests_admitted_total{task="we\"ird\\name"} 1"#));

    // The library call renders the same counters.
    let rendered = parse(&flowctrl::metrics::render(&View::open(&path).unwrap()).unwrap());
    for task in [&api, &global, &weird] {
        assert_task_counters(&rendered, task);
    }
    assert_eq!(server.get("/nope").0, 404);
    assert_eq!(server.request("POST", "/metrics").0, 405);
    let (status, body) = server.request("HEAD", "/metrics");
    assert_eq!((status, body.as_str()), (200, ""));

    // The other read-only commands take no slot either, with processes live.
    let stats = ok(&path, &["stats", "api", "--processes"]);
    eprintln!("$ flowctrl stats api --processes\n{stats}");
    assert_eq!(field(&stats, "in flight"), "4 / 4");
    let shares: Vec<Vec<&str>> = stats
        .lines()
        .skip_while(|l| !l.contains("SLOT"))
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let mut by_pid: Vec<_> = shares.iter().map(|r| (r[1], r[2], r[3], r[10])).collect();
    by_pid.sort();
    let (me, child) = (std::process::id().to_string(), pid.to_string());
    let mut want = vec![
        (me.as_str(), "yes", "1", "1"),
        (child.as_str(), "yes", "3", "3"),
    ];
    want.sort();
    assert_eq!(by_pid, want, "{stats}");
    let stats = ok(&path, &["stats", "global"]);
    eprintln!("$ flowctrl stats global\n{stats}");
    assert!(
        field(&stats, "quota").starts_with("open  granted "),
        "{stats}"
    );
    // The embedded store: nothing reserved nor given back, said in both forms.
    let q = global.quota_stats();
    assert!(
        field(&stats, "quota").contains(&format!(
            "reserved {}  returned {}  stranded ",
            q.reserved, q.returned
        )),
        "{stats}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&ok(&path, &["stats", "global", "--json"])).unwrap();
    let quota = &doc["tasks"][0]["quota"];
    assert_eq!(quota["reserved"], q.reserved, "{doc}");
    assert_eq!(quota["returned"], q.returned, "{doc}");
    let top = ok(&path, &["top", "--once", "--interval", "0.2"]);
    eprintln!("$ flowctrl top --once\n{top}");
    ok(&path, &["tasks"]);
    ok(&path, &["check"]);
    assert_eq!(raw.live_attachments(), attached, "no command took a slot");

    // `set` reaches every process: the cap this process is held at rises.
    let out = ok(&path, &["set", "api", "max_concurrency=8"]);
    assert_eq!(out, "task \"api\": max_concurrency 4 -> 8\n");
    assert_eq!(api.settings().local.max_concurrency, 8);
    let more = api
        .acquire(1)
        .unwrap()
        .permit()
        .expect("admitted under the new cap");
    drop((mine, more));
    end.send(1);
    assert_eq!(wait(pid), 0);
    children.forget(pid);

    // A scrape reads the table anew: a deleted one is a 503 saying why.
    std::fs::remove_file(&path).unwrap();
    let (status, body) = server.get("/metrics");
    assert_eq!(status, 503);
    assert!(body.contains("No such file"), "{body}");
}

#[test]
fn build_info_names_the_layout_of_a_pooled_table() {
    let scratch = Scratch::new("cli-metrics-pooled");
    let path = scratch.path("table");
    let pooled = cli_options().lanes(4);
    let _table = Table::open(&path, &pooled).unwrap();
    let samples = parse(&flowctrl::metrics::render(&View::open(&path).unwrap()).unwrap());
    let infos: Vec<_> = samples
        .iter()
        .filter(|((name, _), _)| name == "flowctrl_build_info")
        .collect();
    // The pooled lanes' layout is the plain one's successor.
    let layout = (flowctrl::LAYOUT_VERSION + 1).to_string();
    let want = vec![
        ("layout".to_string(), layout),
        ("version".to_string(), env!("CARGO_PKG_VERSION").to_string()),
    ];
    assert_eq!(infos.len(), 1, "{infos:?}");
    assert_eq!((&infos[0].0.1, *infos[0].1), (&want, 1.0));
}

/// A table with a task, and `flowctrl metrics` serving it.
fn served(tag: &str) -> (Scratch, Table, cli::Server) {
    let scratch = Scratch::new(tag);
    let path = scratch.path("table");
    let table = Table::open(&path, &cli_options()).unwrap();
    table
        .task("api", &TaskConfig::new().local_rate(100.0))
        .unwrap();
    let server = cli::Server::start(&path);
    (scratch, table, server)
}

#[test]
fn slow_clients_and_half_requests_do_not_starve_a_scrape() {
    let (_scratch, _table, mut server) = served("cli-metrics-starve");
    let port = server.port;
    let hogs = cli::Hogs::default()
        .slow(port, 8, Duration::from_secs(3))
        .half(port, 400);
    std::thread::sleep(Duration::from_millis(500));
    let began = std::time::Instant::now();
    let (mut answered, mut slowest, mut failed) = (0, Duration::ZERO, Vec::new());
    while began.elapsed() < Duration::from_secs(10) {
        let at = std::time::Instant::now();
        match cli::http(port, "GET", "/metrics") {
            Ok((200, body)) if body.contains("flowctrl_table_tasks 1") => answered += 1,
            other => failed.push(format!("{other:?}")),
        }
        slowest = slowest.max(at.elapsed());
        std::thread::sleep(Duration::from_millis(100).saturating_sub(at.elapsed()));
    }
    let connections = hogs.stop();
    eprintln!(
        "{answered} scrapes answered, {} not, slowest {slowest:.1?}, while 8 slow clients and \
         400 half requests opened {connections} connections",
        failed.len()
    );
    assert!(failed.is_empty(), "unanswered scrapes: {failed:?}");
    assert!(answered >= 20, "{answered} scrapes in 10 s");
    assert!(
        slowest < Duration::from_secs(3),
        "slowest scrape {slowest:?}"
    );
    assert!(server.exited().is_none());
}

#[test]
fn healthz_answers_and_an_unfinished_request_is_closed_at_its_deadline() {
    let (_scratch, _table, server) = served("cli-metrics-deadline");
    assert_eq!(server.get("/healthz"), (200, "ok\n".to_string()));
    assert_eq!(server.request("HEAD", "/healthz"), (200, String::new()));
    assert_eq!(server.get("/").0, 404);
    assert_eq!(server.request("DELETE", "/healthz").0, 405);

    use std::io::{Read, Write};
    let mut unfinished = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    unfinished.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    unfinished
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let began = std::time::Instant::now();
    // Meanwhile the others are served.
    assert_eq!(server.get("/healthz").0, 200);
    let mut rest = Vec::new();
    let end = unfinished.read_to_end(&mut rest);
    let closed_after = began.elapsed();
    eprintln!("an unfinished request closed after {closed_after:.2?}: {end:?}");
    assert!(
        matches!(&end, Ok(0))
            || matches!(&end, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{end:?} {rest:?}"
    );
    assert!(rest.is_empty(), "no answer to half a request");
    assert!(
        (Duration::from_millis(4500)..Duration::from_secs(7)).contains(&closed_after),
        "closed after {closed_after:?}, not at the 5 s deadline"
    );
}
