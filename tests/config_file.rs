//! Limits from a config file: parsed and checked (refusals name the file,
//! the line and the key), winning over code and over what the table holds,
//! and edits applied host-wide while processes run. Real processes, a real
//! Redis for the store's record.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::redis::RedisServer;
use common::*;
use flowctrl::{
    ConfigFile, Decision, ErrorKind, Fallback, GlobalConfig, GlobalSource, Limited, Store, Table,
    TableOptions, TaskConfig,
};

/// Writes `text` as an editor saves: a new file renamed over the old.
fn save(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn a_file_is_checked_and_refusals_name_the_file_line_and_key() {
    let path = Path::new("/etc/flowctrl.toml");
    let good = r#"
[table]
path = "/dev/shm/svc"
store = "redis://127.0.0.1:6379/0"
store_timeout_ms = 7
capacity = 64

[tasks.search]
local_rate = 800
burst = 10
max_concurrency = 64
global_rate = 2000.5
fallback = 400
limiter = "gradient2 tolerance=2"
min_limit = 4

[tasks."the other"]
fallback = "deny"

[balancers.backends]
backends = ["10.0.0.1:80", { address = "10.0.0.2:80", weight = 3 }]
decay_ms = 5000
"#;
    let file = ConfigFile::parse(path, good).unwrap();
    let search = file.tasks["search"];
    assert_eq!(search.local.local_rate, Some(800.0));
    assert_eq!(search.local.max_concurrency, Some(64));
    assert_eq!(search.global.global_rate, Some(2000.5));
    assert_eq!(search.global.fallback, Some(Fallback::Rate(400.0)));
    assert_eq!(search.limiter.min_limit, Some(4));
    assert_eq!(
        file.tasks["the other"].global.fallback,
        Some(Fallback::Deny)
    );
    assert_eq!(file.table.capacity, Some(64));
    assert_eq!(file.table.store_timeout_ms, Some(7));
    let b = &file.balancers["backends"];
    assert_eq!(
        b.backends,
        Some(vec![("10.0.0.1:80".into(), 1), ("10.0.0.2:80".into(), 3)])
    );
    assert_eq!(b.config.decay, Duration::from_secs(5));

    for (text, says) in [
        ("[tasks.a]\nlocal_rat = 5\n", "/etc/flowctrl.toml:2:1"),
        ("[tasks.a]\nlocal_rat = 5\n", "local_rat"),
        ("[table]\ncolour = 1\n", "colour"),
        ("[tasks.a]\nburst = -1\n", ":2:"),
        ("[tasks.a]\nburst = \"ten\"\n", ":2:9: `burst = \"ten\"`"),
        (
            "\n\n[tasks.a]\nlocal_rate = -5\n",
            "/etc/flowctrl.toml:3:1: tasks.\"a\"",
        ),
        ("[tasks.a]\nlocal_rate = -5\n", "local_rate"),
        ("[tasks.a]\nfallback = \"maybe\"\n", "fallback"),
        ("[tasks.a]\nlimiter = \"warp\"\n", "warp"),
        ("[tasks.a]\nburst = 0\n", "burst"),
        ("[tasks.a]\nglobal_rate = 1\nslice_ms = 5\n", "slice_ms"),
        ("[tasks.\"\"]\nburst = 1\n", "name"),
        ("[balancers.b]\nbackends = []\n", "balancers.\"b\""),
        ("[balancers.b]\nretry_ratio = -1\n", "retry_ratio"),
        ("[tasks.a\nburst = 1\n", ":1:"),
    ] {
        let err = ConfigFile::parse(path, text).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{text}");
        assert!(err.message().contains(says), "{text:?}: {err}");
    }
    let missing = ConfigFile::load("/nonexistent/flowctrl.toml").unwrap_err();
    assert!(
        missing.message().contains("/nonexistent/flowctrl.toml"),
        "{missing}"
    );
}

#[test]
fn the_file_wins_over_code_and_over_what_the_table_holds() {
    let scratch = Scratch::new("config-wins");
    let table_path = scratch.path("table");
    let file = scratch.path("flowctrl.toml");
    // A host running without a file, its task registered in code.
    let old = Table::open(&table_path, &TableOptions::default()).unwrap();
    let code = TaskConfig::new().local_rate(100.0).max_concurrency(2);
    let task = old.task("api", &code).unwrap();
    // A restart with a file that says otherwise: no mismatch, the file's
    // numbers host-wide, the other fields still the code's.
    save(
        &file,
        &format!("[table]\npath = {table_path:?}\n[tasks.api]\nmax_concurrency = 5\n"),
    );
    let new = Table::open("/ignored/by/the/file", &options().config(&file)).unwrap();
    assert_eq!(new.path(), table_path, "the file's [table] path wins");
    let again = new.task("api", &code).unwrap();
    for t in [&task, &again] {
        let s = t.settings();
        assert_eq!((s.local.max_concurrency, s.local.local_rate), (5, 100.0));
    }
    // A field only the code sets is still compared.
    let err = new
        .task("api", &TaskConfig::new().local_rate(300.0))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConfigMismatch, "{err}");
    // A task the file does not name is the code's alone.
    let other = new.task("other", &code).unwrap();
    assert_eq!(other.settings().local.max_concurrency, 2);
    // The file's table options win over the code's.
    save(
        &file,
        &format!(
            "[table]\npath = {:?}\ncapacity = 8\n",
            scratch.path("small")
        ),
    );
    let small = Table::open(&table_path, &options().config(&file).clone()).unwrap();
    assert_eq!(small.capacity(), 8);
    assert_eq!(small.lane_pool(), None, "lanes for every pair by default");
    // The lane pool of a new table, from the file.
    save(
        &file,
        &format!("[table]\npath = {:?}\nlanes = 12\n", scratch.path("pooled")),
    );
    let pooled = Table::open(&table_path, &options().config(&file)).unwrap();
    assert_eq!(pooled.lane_pool(), Some((0, 12)));
}

/// One process: the task's cap as this process sees it, polled until it is
/// `want`; exits 0 and writes how long it took.
fn wait_for_cap(file: PathBuf, want: u32, out: PathBuf) -> i32 {
    let table = Table::open("/ignored", &options().config(&file)).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    std::fs::write(out.with_extension("ready"), "").unwrap();
    let began = Instant::now();
    while task.settings().local.max_concurrency != want {
        if began.elapsed() > Duration::from_secs(5) {
            return 2;
        }
        let _ = task.acquire(1).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    std::fs::write(out, format!("{}", began.elapsed().as_millis())).unwrap();
    0
}

#[test]
fn an_edit_reaches_every_process_within_a_second_and_a_bad_one_is_kept_out() {
    let scratch = Scratch::new("config-reload");
    let file = scratch.path("flowctrl.toml");
    let table_path = scratch.path("table");
    let text = |cap: u32| {
        format!("[table]\npath = {table_path:?}\n[tasks.api]\nmax_concurrency = {cap}\n")
    };
    save(&file, &text(3));
    let table = Table::open("/ignored", &options().config(&file)).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    let mut pids = KillOnDrop::default();
    let outs: Vec<PathBuf> = (0..3).map(|i| scratch.path(&format!("took-{i}"))).collect();
    for out in &outs {
        let (file, out) = (file.clone(), out.clone());
        pids.add(fork_guarded(move || wait_for_cap(file, 7, out)));
    }
    for out in &outs {
        while !out.with_extension("ready").exists() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    save(&file, &text(7));
    let saved = Instant::now();
    for pid in pids.0.clone() {
        assert_eq!(wait(pid), 0, "a process did not see the edit within 5 s");
        pids.forget(pid);
    }
    let took: Vec<u64> = outs
        .iter()
        .map(|o| std::fs::read_to_string(o).unwrap().parse().unwrap())
        .collect();
    eprintln!(
        "the edit reached the processes in {took:?} ms (all within {:?})",
        saved.elapsed()
    );
    assert!(took.iter().all(|ms| *ms <= 1000), "{took:?}");
    assert_eq!(task.settings().local.max_concurrency, 7);

    // A bad edit keeps the configuration in force and is counted once.
    assert_eq!(table.config_errors(), 0);
    save(&file, "[tasks.api]\nmax_concurrency = \"many\"\n");
    let began = Instant::now();
    while table.config_errors() == 0 {
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "the bad edit was not noticed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(table.config_errors(), 1, "one bad version, counted once");
    assert_eq!(task.settings().local.max_concurrency, 7);
    // A deleted file keeps the last good version.
    std::fs::remove_file(&file).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(task.settings().local.max_concurrency, 7);
    // A registration in a process that never read the applied version (it
    // polled only the bad one) does not take the table back to its own.
    let late = Table::open("/ignored", &options().config(&file));
    assert!(late.is_err(), "no file to open with");
    assert_eq!(
        table
            .task("api", &TaskConfig::new())
            .unwrap()
            .settings()
            .local
            .max_concurrency,
        7
    );
    // A good file again is applied.
    save(&file, &text(9));
    let began = Instant::now();
    while task.settings().local.max_concurrency != 9 {
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "not applied again"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn balancers_take_their_options_and_backends_from_the_file() {
    let scratch = Scratch::new("config-balancers");
    let file = scratch.path("flowctrl.toml");
    let text = |backends: &str| {
        format!(
            "[table]\npath = {:?}\n[balancers.up]\nbackends = {backends}\ndecay_ms = 2000\n",
            scratch.path("table")
        )
    };
    save(&file, &text(r#"["a:1", { address = "b:2", weight = 4 }]"#));
    let table = Table::open("/ignored", &options().config(&file)).unwrap();
    let b = table
        .balancer("up", &flowctrl::BalancerConfig::default())
        .unwrap();
    assert_eq!(b.config().decay, Duration::from_secs(2));
    assert!(b.index_of("a:1").is_some() && b.index_of("b:2").is_some());
    save(&file, &text(r#"["c:3"]"#));
    let began = Instant::now();
    while b.index_of("c:3").is_none() {
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "backends not updated"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(b.index_of("a:1").is_none());
}

#[test]
fn the_stores_record_wins_over_the_file_for_global_fields() {
    let redis = RedisServer::start();
    let scratch = Scratch::new("config-record");
    let file = scratch.path("flowctrl.toml");
    save(
        &file,
        &format!(
            "[table]\npath = {:?}\nstore = {:?}\nstore_timeout_ms = 500\nhost_id = \"h\"\n[tasks.api]\nglobal_rate = 1000\nmax_concurrency = 9\n",
            scratch.path("table"),
            redis.url()
        ),
    );
    let store = common::options::admin_store(&redis.url());
    store
        .set_task_config(
            "api",
            &GlobalConfig {
                global_rate: Some(300.0),
                ..GlobalConfig::default()
            },
        )
        .unwrap();
    let table = Table::open("/ignored", &options().config(&file)).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    // One acquire pulls, and the pull adopts the record.
    assert!(matches!(task.acquire(1).unwrap(), Decision::Admitted(_)));
    let s = task.settings();
    assert_eq!(
        (
            s.global_source,
            s.global.global_rate,
            s.local.max_concurrency
        ),
        (GlobalSource::Store, 300.0, 9)
    );
    assert!(!matches!(
        task.acquire(1).unwrap(),
        Decision::Limited(Limited::Concurrency)
    ));
}

/// What a hostile or broken file gets: a position for bytes that are not
/// UTF-8, an echo of a huge name cut to 40 characters with its length said,
/// numbers past 10^15 in scientific notation, one line per refusal.
#[test]
fn hostile_files_get_short_one_line_refusals_with_a_position() {
    let scratch = Scratch::new("config-hostile");
    let path = scratch.path("f.toml");
    std::fs::write(&path, b"[tasks.a]\nburst = 2\n# caf\xe9\n").unwrap();
    let err = ConfigFile::load(&path).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(
        err.message()
            .starts_with(&format!("{}:3:6: not UTF-8", path.display())),
        "{err}"
    );
    let long = "y".repeat(100_000);
    for text in [
        format!("[tasks.\"{long}\"]\nburst = 1\n"),
        format!("[tasks.a]\nburst = \"{long}\"\n"),
        format!("[table]\nhost_id = \"{long}\"\n"),
        format!("[table]\nkey_prefix = \"{long}\"\n"),
    ] {
        std::fs::write(&path, &text).unwrap();
        let err = match ConfigFile::load(&path) {
            Err(e) => e,
            Ok(f) => TableOptions::from_config(&f).unwrap_err(),
        };
        assert!(err.message().len() < 400, "{}", &err.message()[..400]);
        assert!(err.message().contains("bytes"), "{err}");
        assert!(!err.message().contains('\n'), "{err}");
    }
    for (text, says) in [
        ("[tasks.a]\nlocal_rate = 1e300\n", "not 1e300"),
        ("[tasks.a]\nglobal_rate = 1e300\n", "1e300"),
        ("[balancers.b]\nretry_ratio = 1e300\n", "not 1e300"),
    ] {
        let err = ConfigFile::parse(&path, text).unwrap_err();
        assert!(err.message().contains(says), "{err}");
        assert!(err.message().len() < 300, "{err}");
    }
}

/// Names and prefixes that break Redis Cluster hash tags or the protocol
/// are refused in every face: the library, the C ABI (status and
/// `fc_last_error`), a config file (file:line:column).
#[test]
fn names_prefixes_and_host_ids_that_break_hash_tags_are_refused() {
    let scratch = Scratch::new("config-tags");
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    for name in ["}x", "x{", "{app}", "a\nb"] {
        let err = table.task(name, &TaskConfig::new()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidName, "{name:?}: {err}");
        assert!(err.message().contains("task name"), "{err}");
    }
    let mut ok = 0;
    for (prefix, host, field) in [
        ("app{", None, "key_prefix"),
        ("{app}", None, "key_prefix"),
        ("a\nb", None, "key_prefix"),
        ("a b", None, "key_prefix"),
        ("app:", Some("h{1}"), "host_id"),
        ("app:", Some("left"), "host_id"),
        ("app:", Some("quota"), "host_id"),
        ("app:", Some("h\u{1b}"), "host_id"),
        ("", Some("h-1"), ""),
    ] {
        let mut o = TableOptions::default().store("redis://127.0.0.1:1/0");
        o.store.key_prefix = prefix.into();
        o.store.host_id = host.map(Into::into);
        let opened = Table::open(scratch.path("p"), &o);
        let store = Store::open(&o.store);
        if field.is_empty() {
            assert!(opened.is_ok() && store.is_ok(), "{prefix:?}");
            ok += 1;
            continue;
        }
        let err = opened.unwrap_err();
        assert_eq!(
            err.kind(),
            ErrorKind::InvalidArgument,
            "{prefix:?} {host:?}: {err}"
        );
        assert!(err.message().contains(field), "{err}");
        assert!(!err.message().contains('\n'), "{err}");
        if host.is_none() {
            assert!(store.is_err(), "{prefix:?}");
        }
    }
    assert_eq!(ok, 1);
    let err = Table::open(
        scratch.path("q"),
        &TableOptions::default().store("redis://127.0.0.1:1/0?prefix=a}"),
    )
    .unwrap_err();
    assert!(err.message().contains("key_prefix"), "{err}");

    // The C face: the status and fc_last_error name the field.
    use flowctrl::ffi::*;
    use std::ffi::{CStr, CString};
    let last = || {
        unsafe { CStr::from_ptr(fc_last_error()) }
            .to_string_lossy()
            .into_owned()
    };
    let path = CString::new(scratch.path("c").to_str().unwrap()).unwrap();
    let prefix = CString::new("app{").unwrap();
    let url = CString::new("redis://127.0.0.1:1/0").unwrap();
    let mut options = std::mem::MaybeUninit::<fc_table_options>::zeroed();
    let size = std::mem::size_of::<fc_table_options>();
    unsafe {
        assert_eq!(
            fc_table_options_init(options.as_mut_ptr(), size),
            fc_status::FC_OK
        );
        let mut options = options.assume_init();
        options.store_url = url.as_ptr();
        options.key_prefix = prefix.as_ptr();
        let mut out = std::ptr::null_mut();
        let status = fc_table_open(path.as_ptr(), &options, &mut out);
        assert_eq!(status, fc_status::FC_ERR_INVALID_ARGUMENT);
        assert!(last().contains("key_prefix"), "{}", last());
        options.key_prefix = std::ptr::null();
        assert_eq!(
            fc_table_open(path.as_ptr(), &options, &mut out),
            fc_status::FC_OK
        );
        let name = CString::new("}x").unwrap();
        let mut task = std::ptr::null_mut();
        let status = fc_task_register(out, name.as_ptr(), std::ptr::null(), &mut task);
        assert_eq!(status, fc_status::FC_ERR_INVALID_NAME);
        assert!(last().contains("hash tag"), "{}", last());
        fc_table_close(out);
    }

    // A config file: the file, the line and the column.
    let file = scratch.path("f.toml");
    std::fs::write(&file, "[table]\nkey_prefix = \"{app}\"\n").unwrap();
    let err = Table::open(scratch.path("t"), &TableOptions::default().config(&file)).unwrap_err();
    assert!(
        err.message()
            .starts_with(&format!("{}:2:14: [table] key_prefix", file.display())),
        "{err}"
    );
}

/// A keyed task's global rate per key from the file (`key_global` and its
/// slice, allowance and fallback), in the task and in an override, applied
/// at registration; each bad value refused at its own line and column.
#[test]
fn key_global_rates_are_read_and_bad_ones_refused_at_their_line() {
    use flowctrl::{KeyGlobal, KeyLimits, KeyRate};
    let scratch = Scratch::new("config-key-global");
    let path = scratch.path("flowctrl.toml");
    let table_path = scratch.path("table");
    let text = format!(
        "[table]\npath = {table_path:?}\n\n[tasks.api]\nkey_rate = \"100/second\"\n\
         key_global = \"1000/hour\"\nkey_global_slice = \"1m\"\nkey_global_local = 2\n\
         key_global_fallback = \"deny\"\n\n[tasks.api.key_overrides]\n\
         \"vip\" = {{ key_rate = \"50/s\", key_global = \"5/s\", key_global_slice = \"500ms\" }}\n\
         \"plain\" = {{ key_global = \"10/s\" }}\n\n[tasks.solo]\nkey_global = \"5/s\"\n"
    );
    let file = ConfigFile::parse(&path, &text).unwrap();
    let api = &file.keys["api"];
    let expected = KeyGlobal::new(KeyRate::new(1000.0, Duration::from_secs(3600)))
        .slice(Duration::from_secs(60))
        .local(2)
        .fallback(Fallback::Deny);
    assert_eq!(api.config.limits.global, Some(expected));
    assert_eq!(api.config.limits.rates().count(), 1);
    let vip = &api.overrides.iter().find(|(k, _)| k == "vip").unwrap().1;
    let vip_global = vip.global.unwrap();
    assert_eq!(vip_global.slice, Some(Duration::from_millis(500)));
    assert_eq!(
        (vip_global.local, vip_global.fallback),
        (1, Fallback::Share)
    );
    assert_eq!(vip_global.permits(), 2, "5/s in slices of 500 ms");
    let plain = &api.overrides.iter().find(|(k, _)| k == "plain").unwrap().1;
    assert_eq!(plain.rates().count(), 0, "an override's limits are its own");
    assert_eq!(
        file.keys["solo"].config.limits,
        KeyLimits::new().global(KeyGlobal::new(KeyRate::per_second(5.0)))
    );

    // Applied when a process registers the task.
    std::fs::write(&path, &text).unwrap();
    let table = Table::open("/ignored", &TableOptions::default().config(&path)).unwrap();
    let task = table.task("api", &TaskConfig::new()).unwrap();
    let got = task.key_config().unwrap().unwrap().limits.global.unwrap();
    assert_eq!(
        (got.permits(), got.slice_in_force(), got.local, got.fallback),
        (16, Duration::from_secs(60), 2, Fallback::Deny),
        "1000/hour in slices of a minute: 16 a slice"
    );
    let (vip, overridden) = task.key_limits(b"vip").unwrap();
    assert!(overridden && vip.global.is_some_and(|g| g.permits() == 2));

    let f = path.display();
    for (text, at, says) in [
        (
            "[tasks.a]\nkey_global = \"10/fortnight\"\n",
            format!("{f}:2:14: tasks.\"a\".key_global: "),
            "unknown unit",
        ),
        (
            "[tasks.a]\nkey_rate = \"1/s\"\n  key_global_slice = \"1s\"\n",
            format!("{f}:3:22: tasks.\"a\".key_global_slice: "),
            "key_global_slice needs key_global",
        ),
        (
            "[tasks.a]\nkey_global_fallback = \"deny\"\n",
            format!("{f}:2:23: tasks.\"a\".key_global_fallback: "),
            "needs key_global",
        ),
        (
            "[tasks.a]\nkey_global = \"5/s\"\nkey_global_local = 32\n",
            format!("{f}:3:20: tasks.\"a\".key_global_local: "),
            "0 to 31",
        ),
        (
            "[tasks.a]\nkey_global = \"5/s\"\nkey_global_local = -1\n",
            format!("{f}:3:20: tasks.\"a\".key_global_local: "),
            "not -1",
        ),
        (
            "[tasks.a]\nkey_global = \"5/s\"\nkey_global_local = \"two\"\n",
            format!("{f}:3:20: `key_global_local = \"two\"`"),
            "",
        ),
        (
            "[tasks.a]\nkey_global = \"5/s\"\nkey_global_fallback = \"5\"\n",
            format!("{f}:3:23: tasks.\"a\".key_global_fallback: "),
            "\"share\", \"local\" or \"deny\"",
        ),
        (
            "[tasks.a]\nkey_global = \"5/s\"\nkey_global_slice = \"5ms\"\n",
            format!("{f}:3:20: tasks.\"a\".key_global_slice: "),
            "between 10 ms and a day",
        ),
        (
            "[tasks.a]\nkey_global = \"5/s\"\nkey_global_slice = \"1 fortnight\"\n",
            format!("{f}:3:20: tasks.\"a\".key_global_slice: "),
            "unknown unit",
        ),
        (
            "[tasks.a]\nkey_global = \"1/hour\"\nkey_global_slice = \"1s\"\n",
            format!("{f}:3:20: tasks.\"a\".key_global_slice: "),
            "permits per slice",
        ),
        (
            "[tasks.a]\nkey_global = \"5/s burst 3\"\n",
            format!("{f}:2:14: tasks.\"a\".key_global: "),
            "key rate",
        ),
        (
            "[tasks.a]\nkey_global = \"5/s\"\nkey_global_slic = \"1s\"\n",
            format!("{f}:3:1: "),
            "key_global_slic",
        ),
        (
            "[tasks.a]\nkey_rate = \"1/s\"\n[tasks.a.key_overrides]\n\
             \"vip\" = { key_global_slice = \"1s\" }\n",
            format!("{f}:4:9: tasks.\"a\".key_overrides.\"vip\".key_global_slice: "),
            "needs key_global",
        ),
        (
            "[tasks.a]\nkey_rate = \"1/s\"\n[tasks.a.key_overrides]\n\
             \"vip\" = { key_global = 5 }\n",
            format!("{f}:4:9: tasks.\"a\".key_overrides.\"vip\".key_global: "),
            "unknown or mistyped field",
        ),
        (
            "[tasks.a]\nkey_rate = \"1/s\"\n[tasks.a.key_overrides]\n\
             \"vip\" = { key_global = \"5/s\", key_global_local = 99 }\n",
            format!("{f}:4:9: tasks.\"a\".key_overrides.\"vip\".key_global_local: "),
            "0 to 31",
        ),
        (
            "[tasks.a]\nkey_rate = \"1/fortnight\"\n",
            format!("{f}:2:12: tasks.\"a\".key_rate: "),
            "unknown unit",
        ),
    ] {
        let err = ConfigFile::parse(&path, text).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{text}");
        let message = err.message();
        assert!(
            message.starts_with(&at) && message.contains(says),
            "{text:?}: {message}\n  wanted it to start with {at:?} and say {says:?}"
        );
        assert!(!message.contains('\n') && message.len() < 400, "{message}");
    }
}
