//! dashboards/flowctrl.json and dashboards/alerts.yml against a real
//! Prometheus (Debian's `prometheus`, which scripts/setup.sh installs):
//! `promtool` accepts the rules and passes their unit tests
//! (dashboards/alerts.test.yml, which tests every alert); two tables (one with a global rate on a
//! real `redis-server`, a keyed task, a balancer; one with a global rate on
//! the embedded store) and a manager, all under traffic, are scraped every
//! second; every expression of every dashboard panel, with `$task`,
//! `$instance`, `$__interval` and `$__rate_interval` replaced as Grafana
//! replaces them, returns at least one series (a number, for a percentile
//! of the latency histograms: the traffic waits in a queue too); every
//! metric name either file names is one Prometheus scraped. Then the Redis server is killed:
//! the fallback alert goes pending, then firing, for that table's global
//! task and no other (in a copy of the rules whose `for:` is 2 s instead of
//! a minute).

#[path = "common/cli.rs"]
mod cli;
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::redis::{RedisServer, free_port};
use common::{Options, Scratch, cli_options};
use flowctrl::{
    BalancerConfig, Decision, KeyConfig, KeyDecision, KeyLimits, KeyRate, Outcome, PickOptions,
    Table, TableOptions, TaskConfig,
};
use serde_json::Value;

/// What the test substitutes for Grafana's interval variables: a scrape
/// every second gives a 5 s `$__interval` two samples or more, and a 10 s
/// `$__rate_interval` (Grafana's is at least 4 scrapes) several.
const INTERVAL: &str = "5s";
const RATE_INTERVAL: &str = "10s";
/// The global task's rate, the manager's bounds around it.
const GLOBAL_RATE: f64 = 100.0;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A child process killed by its pid and reaped when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tool(name: &str) -> Command {
    let path = Path::new("/usr/bin").join(name);
    assert!(
        path.exists(),
        "{} is missing: scripts/setup.sh installs Debian's prometheus package",
        path.display()
    );
    Command::new(path)
}

/// `promtool ARGS`, which must succeed.
fn promtool(args: &[&str]) {
    let out = tool("promtool").args(args).output().expect("promtool runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("$ promtool {}\n{text}", args.join(" "));
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
}

/// `GET path` from the server at `port` (HTTP/1.0: the server closes the
/// connection after its answer): (status, body).
fn get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no response head: {response:?}")))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status: {head:?}")))?;
    Ok((status, body.to_string()))
}

/// Percent-encodes everything but the unreserved characters.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A real Prometheus, stopped (by its pid) when dropped.
struct Prometheus {
    port: u16,
    _process: Killed,
}

impl Prometheus {
    /// Starts `/usr/bin/prometheus` with `config`, its data in `dir`, and
    /// waits until it is ready.
    fn start(config: &Path, dir: &Path) -> Self {
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = tool("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        let prometheus = Self {
            port,
            _process: Killed(child),
        };
        wait_for("Prometheus ready", Duration::from_secs(20), || {
            matches!(get(port, "/-/ready"), Ok((200, _)))
        });
        prometheus
    }

    /// `GET /api/v1/PATH`: its `data`.
    fn api(&self, path: &str) -> Value {
        let (status, body) = get(self.port, &format!("/api/v1/{path}"))
            .unwrap_or_else(|e| panic!("GET /api/v1/{path}: {e}"));
        let doc: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("GET /api/v1/{path}: {e}: {body}"));
        assert_eq!(
            (status, doc["status"].as_str()),
            (200, Some("success")),
            "GET /api/v1/{path}: {body}"
        );
        doc["data"].clone()
    }

    /// The series an instant query returns now.
    fn query(&self, expr: &str) -> Vec<Value> {
        let data = self.api(&format!("query?query={}", encode(expr)));
        assert_eq!(data["resultType"], "vector", "{expr}: {data}");
        data["result"].as_array().unwrap().clone()
    }

    /// The values of label `label` on the series of `selector`.
    fn label_values(&self, label: &str, selector: &str) -> Vec<String> {
        let data = self.api(&format!(
            "label/{label}/values?match[]={}",
            encode(selector)
        ));
        data.as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    }
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let began = Instant::now();
    while !done() {
        assert!(began.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    began.elapsed()
}

/// Traffic until `stop` (or 2 minutes), from one process with two tables:
/// `path`'s "api" (its local rate and concurrency cap refuse some),
/// "global" (on the store at `url`, a tenth of its releases dropped, for
/// the manager to judge), "keyed" (4 keys at 5/s each, asked for more) and
/// balancer "db" (a backend that always fails when it is picked alone);
/// and `edge`'s "edge-global" (a global rate on the embedded store).
fn traffic(
    path: PathBuf,
    edge: PathBuf,
    url: String,
    stop: Arc<AtomicBool>,
    ready: Arc<AtomicBool>,
) {
    let table = Table::open(
        &path,
        &cli_options()
            .store(&url)
            // A shared 2-core machine: room for Redis to answer.
            .timeout(Duration::from_millis(200)),
    )
    .unwrap();
    let api = table
        .task(
            "api",
            &TaskConfig::new()
                .local_rate(150.0)
                .burst(10)
                .max_concurrency(3),
        )
        .unwrap();
    let global = table
        .task("global", &TaskConfig::new().global_rate(GLOBAL_RATE))
        .unwrap();
    let keyed = table.task("keyed", &TaskConfig::new()).unwrap();
    keyed
        .set_keys(&KeyConfig::new(
            KeyLimits::new().rate(KeyRate::per_second(5.0)),
        ))
        .unwrap();
    let db = table
        .balancer_with_backends(
            "db",
            &BalancerConfig::default(),
            &[("127.0.0.1:5001", 1), ("127.0.0.1:5002", 1)],
        )
        .unwrap();
    let edge_table = Table::open(&edge, &TableOptions::default()).unwrap();
    let edge_global = edge_table
        .task("edge-global", &TaskConfig::new().global_rate(50.0))
        .unwrap();
    ready.store(true, Ordering::Relaxed);
    let began = Instant::now();
    let mut held = std::collections::VecDeque::new();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) && began.elapsed() < Duration::from_secs(120) {
        i += 1;
        if let Decision::Admitted(p) = api.acquire(1).unwrap() {
            held.push_back(p);
        }
        if held.len() == 3 && i.is_multiple_of(5) {
            // The cap is taken: a wait in the queue, until its deadline.
            let short = Some(Duration::from_millis(2));
            if let Decision::Admitted(p) = api.acquire_wait(1, short).unwrap() {
                held.push_back(p);
            }
        }
        while held.len() > 2 {
            held.pop_front().unwrap().release(Outcome::Success).unwrap();
        }
        if let Decision::Admitted(p) = global.acquire(1).unwrap() {
            let outcome = if i.is_multiple_of(10) {
                Outcome::Dropped
            } else {
                Outcome::Success
            };
            p.release(outcome).unwrap();
        }
        if let KeyDecision::Admitted(p) = keyed
            .acquire_key(format!("k{}", i % 4).as_bytes(), 1)
            .unwrap()
        {
            p.release(Outcome::Success).unwrap();
        }
        if i.is_multiple_of(10) {
            db.pick(&PickOptions { exclude: &[0] })
                .unwrap()
                .done(Outcome::Dropped)
                .unwrap();
        } else {
            db.pick(&Default::default())
                .unwrap()
                .done(Outcome::Success)
                .unwrap();
        }
        if let Decision::Admitted(p) = edge_global.acquire(1).unwrap() {
            p.release(Outcome::Success).unwrap();
        }
        std::thread::sleep(Duration::from_millis(3));
    }
}

/// The manager's file: the store, and "global" managed with a policy.
fn manager_config(url: &str) -> String {
    format!(
        "[table]\nstore = \"{url}\"\n\n[manager]\nlease_ms = 1000\n\n\
         [tasks.\"global\"]\nglobal_rate = {GLOBAL_RATE}\nslice_ms = 1000\n\n\
         [tasks.\"global\".policy]\nmin_rate = 50\nmax_rate = 400\ndropped_ratio = 0.05\n"
    )
}

/// The rules with FlowctrlTaskInFallback's `for:` cut from 1m to 2s.
fn quick_fallback_rules(rules: &str) -> String {
    let at = rules
        .find("alert: FlowctrlTaskInFallback")
        .expect("the fallback alert");
    let (head, tail) = rules.split_at(at);
    let tail = tail.replacen("for: 1m", "for: 2s", 1);
    assert!(tail.contains("for: 2s"), "the fallback alert has for: 1m");
    format!("{head}{tail}")
}

/// Every target expression of every panel (rows' panels too): (panel title,
/// expression).
fn panel_exprs(dashboard: &Value) -> Vec<(String, String)> {
    fn walk(panels: &Value, out: &mut Vec<(String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            walk(&p["panels"], out);
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"].as_str().expect("every target has an expr");
                out.push((p["title"].as_str().unwrap().to_string(), expr.to_string()));
            }
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// The dashboard is one Grafana imports: schema 39, a Prometheus data
/// source variable every panel and target uses, `instance` and `task`
/// variables from label_values, unique panel ids inside the 24 columns.
fn check_dashboard(d: &Value) {
    assert_eq!(d["schemaVersion"], 39);
    assert_eq!(d["uid"], "flowctrl");
    let vars = d["templating"]["list"].as_array().unwrap();
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    for (name, query) in [
        ("instance", "label_values(flowctrl_build_info, instance)"),
        (
            "task",
            "label_values(flowctrl_task_info{instance=~\"$instance\"}, task)",
        ),
    ] {
        assert_eq!(var(name)["type"], "query");
        assert_eq!(var(name)["query"]["query"], query);
        assert_eq!(var(name)["datasource"]["uid"], "${datasource}");
    }
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "panel id twice: {p}");
        let g = &p["gridPos"];
        let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
        assert!(x + w <= 24, "{}: outside the grid", p["title"]);
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        for t in p["targets"].as_array().unwrap() {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
}

/// The rules `rules` (the YAML text) defines.
fn alert_count(rules: &str) -> usize {
    rules
        .lines()
        .filter(|l| l.trim_start().starts_with("- alert: "))
        .count()
}

/// The `flowctrl_*` names `text` mentions.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("flowctrl_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        names.insert(name);
    }
    names
}

/// Grafana's multi-value form for a Prometheus regex: `(a|b)`, each value's
/// regex characters escaped (a backslash doubled inside PromQL's quotes).
fn multi(values: &[String]) -> String {
    let escaped: Vec<String> = values
        .iter()
        .map(|v| {
            v.chars()
                .map(|c| {
                    if "\\.+*?()|[]{}^$".contains(c) {
                        format!("\\\\{c}")
                    } else {
                        c.to_string()
                    }
                })
                .collect()
        })
        .collect();
    format!("({})", escaped.join("|"))
}

/// The fallback alert's series now: (alertstate, instance, task).
fn fallback_alerts(prometheus: &Prometheus) -> BTreeSet<(String, String, String)> {
    prometheus
        .query("ALERTS{alertname=\"FlowctrlTaskInFallback\"}")
        .iter()
        .map(|s| {
            let l = &s["metric"];
            let get = |k: &str| l[k].as_str().unwrap_or("").to_string();
            (get("alertstate"), get("instance"), get("task"))
        })
        .collect()
}

#[test]
fn prometheus_answers_every_panel_and_fires_the_fallback_alert_for_the_failed_task() {
    let began = Instant::now();
    let rules_path = root().join("dashboards/alerts.yml");
    promtool(&["check", "rules", rules_path.to_str().unwrap()]);
    // Each alert's unit tests: a case that fires, one that does not.
    let unit_tests = root().join("dashboards/alerts.test.yml");
    promtool(&["test", "rules", unit_tests.to_str().unwrap()]);
    let tested = std::fs::read_to_string(&unit_tests).unwrap();
    for line in std::fs::read_to_string(&rules_path).unwrap().lines() {
        if let Some(name) = line.trim_start().strip_prefix("- alert: ") {
            assert!(
                tested.contains(&format!("alertname: {name}\n")),
                "alerts.test.yml does not test {name}"
            );
        }
    }
    let rules = std::fs::read_to_string(&rules_path).unwrap();
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("dashboards/flowctrl.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    check_dashboard(&dashboard);

    // Two tables under traffic, their endpoints, and a manager.
    let mut redis = RedisServer::start();
    let scratch = Scratch::new("dashboard");
    let (path, edge) = (scratch.path("table"), scratch.path("edge"));
    let (stop, ready) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let driver = {
        let (path, edge, url) = (path.clone(), edge.clone(), redis.url());
        let (stop, ready) = (stop.clone(), ready.clone());
        std::thread::spawn(move || traffic(path, edge, url, stop, ready))
    };
    wait_for("the tables made", Duration::from_secs(10), || {
        ready.load(Ordering::Relaxed)
    });
    let table_metrics = cli::Server::start(&path);
    let edge_metrics = cli::Server::start(&edge);
    let fleet = scratch.path("fleet.toml");
    std::fs::write(&fleet, manager_config(&redis.url())).unwrap();
    let manager_port = free_port();
    let _manager = Killed(
        Command::new(env!("CARGO_BIN_EXE_flowctrl"))
            .args(["manage", "--config"])
            .arg(&fleet)
            .args(["--metrics", &format!("127.0.0.1:{manager_port}")])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(scratch.path("manager.log")).unwrap())
            .spawn()
            .expect("flowctrl manage"),
    );

    // Prometheus scraping the three every second, with the rules.
    let test_rules = scratch.path("alerts.yml");
    std::fs::write(&test_rules, quick_fallback_rules(&rules)).unwrap();
    let target = |port: u16| format!("127.0.0.1:{port}");
    let (table_instance, edge_instance) = (target(table_metrics.port), target(edge_metrics.port));
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {rules}\n\
         scrape_configs:\n\
         \x20 - job_name: flowctrl\n    static_configs:\n      - targets: [\"{table_instance}\", \"{edge_instance}\"]\n\
         \x20 - job_name: flowctrl-manager\n    static_configs:\n      - targets: [\"{manager}\"]\n",
        rules = test_rules.display(),
        manager = target(manager_port),
    );
    let config_path = scratch.path("prometheus.yml");
    std::fs::write(&config_path, &config).unwrap();
    promtool(&["check", "config", config_path.to_str().unwrap()]);
    let prometheus = Prometheus::start(&config_path, scratch.dir());
    let started = began.elapsed();

    // Scraped: every target up, twice over for the rates.
    let scraped = wait_for("three targets up", Duration::from_secs(20), || {
        prometheus.query("up == 1").len() == 3
            && !prometheus.query("flowctrl_manager_threshold").is_empty()
    });
    std::thread::sleep(Duration::from_secs(2));

    // The variables as Grafana fills them, then every panel's expressions.
    let instances = prometheus.label_values("instance", "flowctrl_build_info");
    assert_eq!(instances.len(), 3, "{instances:?}");
    let tasks = prometheus.label_values(
        "task",
        &format!("flowctrl_task_info{{instance=~\"{}\"}}", multi(&instances)),
    );
    assert_eq!(tasks, ["api", "edge-global", "global", "keyed"]);
    let exprs = panel_exprs(&dashboard);
    let filled = |expr: &str| {
        expr.replace("$__rate_interval", RATE_INTERVAL)
            .replace("$__interval", INTERVAL)
            .replace("$instance", &multi(&instances))
            .replace("$task", &multi(&tasks))
    };
    let mut series: BTreeMap<String, usize> = BTreeMap::new();
    let answered = wait_for(
        "every panel expression answered",
        Duration::from_secs(20),
        || {
            // A percentile of buckets that did not move is NaN: not data.
            series = exprs
                .iter()
                .map(|(_, e)| {
                    let result = prometheus.query(&filled(e));
                    let percentile = e.contains("histogram_quantile");
                    let data = result
                        .iter()
                        .filter(|r| !percentile || r["value"][1] != "NaN")
                        .count();
                    (filled(e), data)
                })
                .collect();
            series.values().all(|n| *n > 0)
        },
    );
    for (title, expr) in &exprs {
        eprintln!(
            "{:>3} series  {title}: {}",
            series[&filled(expr)],
            filled(expr)
        );
    }
    assert!(exprs.len() >= 30, "{} expressions", exprs.len());

    // Every name either file uses is one Prometheus scraped.
    let scraped_names: BTreeSet<String> = prometheus
        .api("label/__name__/values")
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let used: BTreeSet<String> = metric_names(&rules)
        .into_iter()
        .chain(exprs.iter().flat_map(|(_, e)| metric_names(e)))
        .collect();
    let unknown: Vec<_> = used.difference(&scraped_names).collect();
    assert!(unknown.is_empty(), "names no endpoint serves: {unknown:?}");
    assert!(
        fallback_alerts(&prometheus).is_empty(),
        "no fallback while the store answers"
    );
    // Every rule evaluates without error (no vector matching that
    // Prometheus refuses, say).
    let groups = prometheus.api("rules");
    let rules_seen: Vec<_> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .collect();
    assert_eq!(rules_seen.len(), alert_count(&rules), "every rule loaded");
    for r in &rules_seen {
        assert_eq!(r["health"], "ok", "{r}");
    }

    // The store dies: the global task falls back, and its alert goes
    // pending, then firing, for it alone.
    redis.kill();
    let killed = Instant::now();
    let want = |state: &str| {
        (
            state.to_string(),
            table_instance.clone(),
            "global".to_string(),
        )
    };
    let mut seen = BTreeSet::new();
    let mut pending_after = None;
    let firing_after = wait_for("the fallback alert firing", Duration::from_secs(20), || {
        let now = fallback_alerts(&prometheus);
        if pending_after.is_none() && now.contains(&want("pending")) {
            pending_after = Some(killed.elapsed());
        }
        seen.extend(now.iter().cloned());
        now.contains(&want("firing"))
    });
    let pending_after = pending_after.expect("the alert was pending before it fired");
    assert_eq!(
        seen,
        BTreeSet::from([want("pending"), want("firing")]),
        "the fallback alert for the failed task only"
    );
    let state = prometheus.query(&format!(
        "flowctrl_quota_state{{instance=\"{edge_instance}\", task=\"edge-global\", state=\"open\"}}"
    ));
    assert_eq!(
        state.len(),
        1,
        "the embedded store's task could alert, and is open"
    );

    // An endpoint stops: the endpoint-down alert goes pending for it.
    drop(edge_metrics);
    let stopped = Instant::now();
    let down = |p: &Prometheus| -> Vec<String> {
        p.query("ALERTS{alertname=\"FlowctrlMetricsDown\", alertstate=\"pending\"}")
            .iter()
            .map(|s| s["metric"]["instance"].as_str().unwrap().to_string())
            .collect()
    };
    wait_for("the endpoint-down alert", Duration::from_secs(10), || {
        !down(&prometheus).is_empty()
    });
    let down_after = stopped.elapsed();
    assert_eq!(down(&prometheus), std::slice::from_ref(&edge_instance));

    stop.store(true, Ordering::Relaxed);
    driver.join().unwrap();
    drop((prometheus, table_metrics));
    let total = began.elapsed();
    eprintln!(
        "{} panel expressions, {} series in all, all answered {answered:.1?} after the targets \
         were up; {} names checked; Prometheus started at {started:.1?}, targets up after \
         {scraped:.1?}; the fallback alert pending {pending_after:.1?} and firing \
         {firing_after:.1?} after the store was killed; the endpoint-down alert pending \
         {down_after:.1?} after an endpoint stopped; {total:.1?} in all",
        exprs.len(),
        series.values().sum::<usize>(),
        used.len(),
    );
    assert!(total < Duration::from_secs(60), "took {total:?}");
}
