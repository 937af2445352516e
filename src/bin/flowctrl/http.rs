//! The one small HTTP server of `flowctrl metrics` and `flowctrl manage
//! --metrics`: `GET /metrics` (what the caller's `render` returns; an
//! error is a 503 with its text), `GET /healthz` (200 "ok"), `HEAD` of
//! both, 404 for any other path, 405 for any other method; one request per
//! connection.
//!
//! One thread, one `poll(2)` loop over non-blocking sockets: a slow client
//! holds a descriptor, never the loop. Each connection has 5 s from its
//! accept to send its request and read the answer, and is closed then;
//! at most 256 are open, and a newcomer beyond that closes the oldest one
//! that has not finished sending its request (one still reading its
//! answer is left to finish). Rendering runs in the loop: a scrape copies
//! the table and encodes it in a few milliseconds, and a manager's report
//! is in memory.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Connections open at once.
const MAX_CONNECTIONS: usize = 256;
/// From a connection's accept to its close: time to send the request and
/// read the answer.
const DEADLINE: Duration = Duration::from_secs(5);
/// The longest request head read; a longer one is answered 431.
const MAX_HEAD: usize = 8 * 1024;
/// Connections the kernel completes before they are accepted: std listens
/// with 128, which a burst of connections fills between two turns of the
/// loop, and a scrape whose SYN is dropped then waits a second to retry.
const BACKLOG: i32 = 1024;

/// What `/metrics` answers: the body, or the error a 503 carries.
pub(crate) type Render<'a> = dyn FnMut() -> std::result::Result<String, String> + 'a;

/// Binds `listen`; the error names the address.
pub(crate) fn bind(listen: &str) -> crate::Result<TcpListener> {
    let listener = TcpListener::bind(listen).map_err(|e| {
        let message = format!("cannot listen on {listen}: {e}");
        // Not an address at all: the command line is wrong.
        if e.kind() == io::ErrorKind::InvalidInput {
            crate::usage(message)
        } else {
            crate::invalid(message)
        }
    })?;
    // Listening again only sets the backlog (the kernel caps it at
    // net.core.somaxconn); on failure std's stays.
    // SAFETY: listen(2) on our own listening socket.
    unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) };
    Ok(listener)
}

/// Serves `listener` until the process ends (or the listener fails).
pub(crate) fn serve(listener: TcpListener, render: &mut Render<'_>) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut conns: Vec<Conn> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    loop {
        let now = Instant::now();
        conns.retain(|c| now < c.since + DEADLINE);
        let timeout = conns
            .iter()
            .map(|c| (c.since + DEADLINE).saturating_duration_since(now))
            .min()
            .map_or(-1, |d| d.as_millis().min(60_000) as i32 + 1);
        fds.clear();
        fds.push(pollfd(listener.as_raw_fd(), libc::POLLIN));
        fds.extend(conns.iter().map(|c| {
            let events = if c.out.is_some() {
                libc::POLLOUT
            } else {
                libc::POLLIN
            };
            pollfd(c.stream.as_raw_fd(), events)
        }));
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let mut index = 0;
        conns.retain_mut(|c| {
            index += 1;
            let events = fds[index].revents;
            events == 0 || c.progress(events, render)
        });
        if fds[0].revents & libc::POLLIN != 0 {
            accept(&listener, &mut conns);
        }
    }
}

fn pollfd(fd: i32, events: i16) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// Accepts every connection waiting; beyond [`MAX_CONNECTIONS`], each
/// newcomer closes the oldest connection still sending its request (or is
/// closed itself when every one is reading its answer). Only one accepted
/// before this call: one of this burst has not been read yet (a scrape
/// that sent its whole request at once would be closed behind a flood of
/// idle ones), so the rest of the burst waits in the backlog until the
/// next round has read it.
fn accept(listener: &TcpListener, conns: &mut Vec<Conn>) {
    let before = conns.len();
    let mut evicted = 0;
    loop {
        let mut close_it = false;
        if conns.len() >= MAX_CONNECTIONS {
            // `conns` is in the order of accept: the oldest first.
            let earlier = before - evicted;
            let pending = |c: &Conn| c.out.is_none();
            if let Some(oldest) = conns[..earlier].iter().position(pending) {
                drop(conns.remove(oldest));
                evicted += 1;
            } else if conns[earlier..].iter().any(pending) {
                return;
            } else {
                close_it = true;
            }
        }
        match listener.accept() {
            Ok(_) if close_it => {}
            Ok((stream, _)) => {
                if stream.set_nonblocking(true).is_ok() {
                    let _ = stream.set_nodelay(true);
                    conns.push(Conn {
                        stream,
                        since: Instant::now(),
                        head: Vec::new(),
                        out: None,
                    });
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                // Out of descriptors: give one back (the oldest request
                // still coming), or leave the rest waiting in the backlog.
                match conns.iter().position(|c| c.out.is_none()) {
                    Some(oldest) => drop(conns.remove(oldest)),
                    None => return,
                }
            }
            Err(_) => return,
        }
    }
}

/// One connection: reading its request head, then writing the answer.
struct Conn {
    stream: TcpStream,
    since: Instant,
    head: Vec<u8>,
    /// The answer and how much of it was sent.
    out: Option<(Vec<u8>, usize)>,
}

impl Conn {
    /// Reads or writes what `events` allow; `false`: close it.
    fn progress(&mut self, events: i16, render: &mut Render<'_>) -> bool {
        if events & (libc::POLLERR | libc::POLLNVAL) != 0 {
            return false;
        }
        if self.out.is_none() {
            let mut buf = [0u8; 1024];
            loop {
                match self.stream.read(&mut buf) {
                    Ok(0) => return false,
                    Ok(n) => {
                        self.head.extend_from_slice(&buf[..n]);
                        let whole = self.head.windows(4).any(|w| w == b"\r\n\r\n");
                        if whole || self.head.len() >= MAX_HEAD {
                            self.out = Some((answer(&self.head, whole, render), 0));
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return false,
                }
            }
        }
        let Some((out, sent)) = &mut self.out else {
            return true;
        };
        while *sent < out.len() {
            match self.stream.write(&out[*sent..]) {
                Ok(0) => return false,
                Ok(n) => *sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        let _ = self.stream.shutdown(Shutdown::Write);
        false
    }
}

/// The whole answer to request `head` (`whole`: it ended with its blank
/// line, else it was cut at [`MAX_HEAD`]).
fn answer(head: &[u8], whole: bool, render: &mut Render<'_>) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let line = text.lines().next().unwrap_or("");
    let mut words = line.split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let text_plain = "text/plain; charset=utf-8";
    let (status, content_type, body) = match (method, path) {
        _ if !whole => (
            "431 Request Header Fields Too Large",
            text_plain,
            "request head too large\n".to_string(),
        ),
        ("GET" | "HEAD", "/metrics") => match render() {
            Ok(body) => ("200 OK", flowctrl::metrics::CONTENT_TYPE, body),
            Err(e) => ("503 Service Unavailable", text_plain, format!("{e}\n")),
        },
        ("GET" | "HEAD", "/healthz") => ("200 OK", text_plain, "ok\n".to_string()),
        ("GET" | "HEAD", _) => (
            "404 Not Found",
            text_plain,
            "not found: GET /metrics or /healthz\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            text_plain,
            "GET or HEAD only\n".to_string(),
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Allow: GET, HEAD\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != "HEAD" {
        out.extend_from_slice(body.as_bytes());
    }
    out
}
