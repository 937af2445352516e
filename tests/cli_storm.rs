//! The read-only commands against a table whose owner truncates, grows
//! again and replaces its file under them, 1,000 times: `flowctrl top`
//! running live (piped), `top --once` and `stats` run in a loop, and a
//! `flowctrl metrics` endpoint scraped in a loop. No reader ever dies by a
//! signal (a view copies the table with `pread`, never maps it: a
//! truncation is an error of one read, not a SIGBUS); every run that ends
//! prints a result or exactly one error line; every scrape is answered 200
//! or 503, never a dropped connection.

#[path = "common/cli.rs"]
mod cli;
mod common;

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Options, options};
use flowctrl::{Outcome, Table, TaskConfig};

/// Owner operations on the file.
const OPS: u64 = 1000;

/// A directory in /dev/shm (where tables live: tmpfs), removed when dropped.
struct ShmDir(PathBuf);

impl ShmDir {
    fn new() -> Self {
        let dir = PathBuf::from(format!("/dev/shm/flowctrl-storm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for ShmDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A table with a few tasks that counted something, made at `path` and
/// left without an attached process (this one would die by SIGBUS when its
/// own thread touched the file truncated).
fn make_table(path: &Path, round: u64) {
    let table = Table::open(path, &options().capacity(64).processes(32)).unwrap();
    for name in ["api", "db", "search"] {
        let task = table
            .task(name, &TaskConfig::new().local_rate(1e6).max_concurrency(8))
            .unwrap();
        for _ in 0..=round % 5 {
            task.acquire(1)
                .unwrap()
                .permit()
                .unwrap()
                .release(Outcome::Success)
                .unwrap();
        }
    }
}

/// What the readers saw.
#[derive(Default, Debug)]
struct Tally {
    ok: u64,
    errors: u64,
    /// Runs that ended otherwise (a signal, another exit code, more than
    /// one line on stderr): each described.
    bad: Vec<String>,
}

/// Runs `flowctrl ARGS` once and tallies how it ended.
fn run_once(path: &Path, args: &[&str], tally: &Mutex<Tally>) {
    let out = cli::command(path).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut t = tally.lock().unwrap();
    match (out.status.code(), out.status.signal()) {
        (_, Some(sig)) => t.bad.push(format!("{args:?} died by signal {sig}")),
        (Some(0), _) if !out.stdout.is_empty() => t.ok += 1,
        (Some(1), _)
            if stderr.starts_with("flowctrl: ")
                && stderr.lines().count() == 1
                && !stderr.contains("panicked") =>
        {
            t.errors += 1
        }
        (code, _) => t.bad.push(format!("{args:?} exited {code:?}: {stderr:?}")),
    }
}

/// One scrape over a fresh connection: the status, or why there was none.
fn scrape(port: u16) -> Result<u16, String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    s.read_to_string(&mut response).map_err(|e| e.to_string())?;
    let status = response
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no status line: {response:?}"))?;
    let (_, body) = response.split_once("\r\n\r\n").unwrap_or_default();
    match status {
        200 if body.contains("flowctrl_table_tasks") => Ok(200),
        503 if !body.trim().is_empty() && body.trim().lines().count() == 1 => Ok(503),
        _ => Err(format!("answered {response:?}")),
    }
}

#[test]
fn readers_survive_a_table_truncated_grown_and_replaced_under_them() {
    let dir = ShmDir::new();
    let path = dir.0.join("t");
    let spare = dir.0.join("t.next");
    make_table(&path, 0);
    let full = std::fs::metadata(&path).unwrap().len();

    // Readers started on a whole table.
    let mut top = cli::command(&path)
        .args(["top", "--interval", "0.05"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let top_out = top.stdout.take().unwrap();
    // The storm starts once top has drawn a frame: started, it may open
    // the table while the storm has it truncated, which is an error of its
    // start, not of a reader under a storm.
    let (drawn, first_frame) = std::sync::mpsc::channel();
    let frames = std::thread::spawn(move || {
        let mut out = std::io::BufReader::new(top_out);
        let mut text = String::new();
        let mut line = Vec::new();
        while let Ok(1..) = std::io::BufRead::read_until(&mut out, b'\n', &mut line) {
            text.push_str(&String::from_utf8_lossy(&line));
            line.clear();
            if text.contains("flowctrl top") {
                let _ = drawn.send(());
            }
        }
        (
            text.matches("rates over").count(),
            text.matches("shrank under the view").count(),
            text.matches("flowctrl top").count(),
        )
    });
    first_frame
        .recv_timeout(Duration::from_secs(10))
        .expect("the live top drew its first frame");
    let mut server = cli::Server::start(&path);
    let port = server.port;

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut readers = Vec::new();
    for args in [&["top", "--once", "--interval", "0.01"][..], &["stats"]] {
        let (stop, tally, path) = (stop.clone(), tally.clone(), path.clone());
        readers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                run_once(&path, args, &tally);
            }
        }));
    }
    let scrapes = Arc::new(Mutex::new((0u64, 0u64, Vec::<String>::new())));
    let slowest = Arc::new(AtomicU64::new(0));
    {
        let (stop, scrapes, slowest) = (stop.clone(), scrapes.clone(), slowest.clone());
        readers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let began = Instant::now();
                let answer = scrape(port);
                slowest.fetch_max(began.elapsed().as_micros() as u64, Ordering::Relaxed);
                let mut s = scrapes.lock().unwrap();
                match answer {
                    Ok(200) => s.0 += 1,
                    Ok(_) => s.1 += 1,
                    Err(e) => s.2.push(e),
                }
            }
        }));
    }

    // The storm: truncate, grow again, replace (a new table renamed over).
    let began = Instant::now();
    let (mut truncated, mut grown, mut replaced) = (0, 0, 0);
    for op in 0..OPS {
        match op % 3 {
            0 => {
                let size = if op % 2 == 0 { 4096 } else { full / 2 };
                let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                f.set_len(size).unwrap();
                truncated += 1;
            }
            1 => {
                let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                f.set_len(full).unwrap();
                grown += 1;
            }
            _ => {
                make_table(&spare, op);
                std::fs::rename(&spare, &path).unwrap();
                replaced += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(6));
    }
    let storm = began.elapsed();
    // A last whole table: the live readers must still answer from it.
    make_table(&spare, 0);
    std::fs::rename(&spare, &path).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }

    let top_status = top.try_wait().unwrap();
    let server_status = server.exited();
    let final_scrape = scrape(port);
    let _ = top.kill();
    let _ = top.wait();
    let mut top_err = String::new();
    let _ = top.stderr.take().unwrap().read_to_string(&mut top_err);
    let (frames, shrank, passes) = frames.join().unwrap();
    let tally = tally.lock().unwrap();
    let scrapes = scrapes.lock().unwrap();
    eprintln!(
        "storm: {OPS} operations in {storm:.1?} ({truncated} truncations, {grown} growths, \
         {replaced} replacements)\n\
         top --once / stats: {} answered, {} one-line errors, {} bad\n\
         scrapes: {} answered 200, {} answered 503, {} failed; slowest {:.1} ms\n\
         live top: {passes} passes, {frames} frames, {shrank} 'shrank' errors",
        tally.ok,
        tally.errors,
        tally.bad.len(),
        scrapes.0,
        scrapes.1,
        scrapes.2.len(),
        slowest.load(Ordering::Relaxed) as f64 / 1000.0,
    );
    assert!(
        tally.bad.is_empty(),
        "readers that ended badly: {:?}",
        &tally.bad[..tally.bad.len().min(10)]
    );
    assert!(
        top_status.is_none(),
        "the live top ended: {top_status:?} ({top_err:?})"
    );
    assert!(
        server_status.is_none(),
        "the metrics server ended: {server_status:?}"
    );
    assert!(
        scrapes.2.is_empty(),
        "scrapes without an answer: {:?}",
        &scrapes.2[..scrapes.2.len().min(10)]
    );
    assert_eq!(final_scrape, Ok(200), "the server reads the last table");
    assert!(
        tally.ok > 0 && tally.errors > 0 && scrapes.0 > 0 && scrapes.1 > 0,
        "both outcomes seen: {tally:?}, {scrapes:?}"
    );
    assert!(frames > 0, "the live top drew frames");
}
