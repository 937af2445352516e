//! `metrics`: the table's Prometheus exposition ([`flowctrl::metrics::render`])
//! over HTTP. A single-purpose endpoint on std's `TcpListener`: `GET /metrics`
//! (and `HEAD`), one request per connection, each on a thread of its own
//! with a few at once, every scrape reading the table anew through a
//! read-only view (a table recreated by a restarted service is followed).

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowctrl::{Error, ErrorKind, View};

use crate::Result;

/// Connections answered at once; more are closed unanswered.
const MAX_CONNECTIONS: usize = 8;
/// How long a client may take to send its request or read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request head read.
const MAX_HEAD: usize = 8 * 1024;

pub(crate) fn serve(path: &Path, listen: &str) -> Result {
    // Refuse a table that cannot be read now, rather than at the first scrape.
    let path: PathBuf = View::open(path)?.path().to_path_buf();
    let shown = path.display().to_string();
    serve_with(listen, &shown, move || {
        View::open(&path)
            .and_then(|view| flowctrl::metrics::render(&view))
            .map_err(|e| e.to_string())
    })
}

/// Serves `GET /metrics` with what `render` returns (an error: 503) until
/// the process ends.
pub(crate) fn serve_with(
    listen: &str,
    what: &str,
    render: impl Fn() -> std::result::Result<String, String> + Send + Sync + 'static,
) -> Result {
    let listener = TcpListener::bind(listen)
        .map_err(|e| Error::new(ErrorKind::Io, format!("cannot listen on {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::new(ErrorKind::Io, format!("cannot listen on {listen}: {e}")))?;
    eprintln!("flowctrl: serving http://{addr}/metrics for {what}");
    let render = Arc::new(render);
    let busy = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if busy.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            busy.fetch_sub(1, Ordering::AcqRel);
            continue;
        }
        let (render, done) = (render.clone(), busy.clone());
        let spawned = std::thread::Builder::new()
            .name("flowctrl-scrape".into())
            .spawn(move || {
                let _ = answer(stream, &*render);
                done.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            busy.fetch_sub(1, Ordering::AcqRel);
        }
    }
    Ok(())
}

fn answer(
    mut stream: TcpStream,
    render: &dyn Fn() -> std::result::Result<String, String>,
) -> io::Result<()> {
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let head = read_head(&mut stream)?;
    let line = head.lines().next().unwrap_or("");
    let mut words = line.split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let target = target.split('?').next().unwrap_or("");
    let head_only = method == "HEAD";
    let (status, content_type, body) = match (method, target) {
        ("GET" | "HEAD", "/metrics") => match render() {
            Ok(body) => ("200 OK", flowctrl::metrics::CONTENT_TYPE, body),
            Err(e) => ("503 Service Unavailable", "text/plain", format!("{e}\n")),
        },
        ("GET" | "HEAD", "/") => (
            "200 OK",
            "text/plain",
            "flowctrl metrics: GET /metrics\n".to_string(),
        ),
        ("GET" | "HEAD", _) => ("404 Not Found", "text/plain", "not found\n".to_string()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET or HEAD only\n".to_string(),
        ),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Allow: GET, HEAD\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        response.push_str(&body);
    }
    stream.write_all(response.as_bytes())?;
    stream.flush()
}

/// The request up to its blank line (or [`MAX_HEAD`] bytes).
fn read_head(stream: &mut TcpStream) -> io::Result<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}
