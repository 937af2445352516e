//! The deadline in force on a thread, and a socket bounded by it: before
//! every connect, read and write the socket's timeout is set to the time
//! left before the deadline (see `link`).

use std::cell::Cell;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::Path;

use std::time::{Duration, Instant};

thread_local! {
    /// The deadline of what this thread's links do now (`within`).
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Whether a link of this thread stopped at its deadline or its socket
    /// timeout since [`clear_timed_out`]: a cluster client wraps errors,
    /// and a request's error must still say it timed out.
    static TIMED_OUT: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with every connect, read and write of this thread's links
/// bounded by `deadline` (or by the one already in force, if earlier).
pub(crate) fn within<T>(deadline: Instant, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEADLINE.set(self.0);
        }
    }
    let outer = DEADLINE.get();
    let _restore = Restore(outer);
    DEADLINE.set(Some(outer.map_or(deadline, |o| o.min(deadline))));
    f()
}

/// Forgets that a link of this thread timed out (a request begins).
pub(crate) fn clear_timed_out() {
    TIMED_OUT.set(false);
}

/// Whether a link of this thread timed out since [`clear_timed_out`].
pub(crate) fn timed_out_since_clear() -> bool {
    TIMED_OUT.get()
}

pub(super) fn timed_out() -> io::Error {
    TIMED_OUT.set(true);
    io::Error::new(io::ErrorKind::TimedOut, "the store timed out")
}

/// The time left before the deadline in force, else `fallback`; an error
/// once the deadline has passed.
pub(super) fn left(fallback: Option<Duration>) -> io::Result<Option<Duration>> {
    match DEADLINE.get() {
        None => Ok(fallback),
        Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
            Some(left) if !left.is_zero() => Ok(Some(left)),
            _ => Err(timed_out()),
        },
    }
}

/// The time left before the deadline in force (links connect only within
/// one).
pub(super) fn left_in_force() -> io::Result<Duration> {
    left(None)?.ok_or_else(|| io::Error::other("a store connection needs a deadline"))
}

/// A socket's timeouts ran out: the same error as a deadline's.
pub(super) fn on_error(e: io::Error) -> io::Error {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => timed_out(),
        _ => e,
    }
}

pub(super) enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// A socket whose timeout is the time left before the deadline, set before
/// every read and write. `read_timeout` / `write_timeout` apply outside any
/// deadline (the cluster client sets them; flowctrl always has a deadline).
pub(super) struct Timed {
    sock: Sock,
    pub(super) read_timeout: Cell<Option<Duration>>,
    pub(super) write_timeout: Cell<Option<Duration>>,
}

impl Timed {
    pub(super) fn new(sock: Sock) -> Self {
        Self {
            sock,
            read_timeout: Cell::new(None),
            write_timeout: Cell::new(None),
        }
    }
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let timeout = left(self.read_timeout.get())?;
        match &mut self.sock {
            Sock::Tcp(s) => {
                s.set_read_timeout(timeout)?;
                s.read(buf)
            }
            Sock::Unix(s) => {
                s.set_read_timeout(timeout)?;
                s.read(buf)
            }
        }
        .map_err(on_error)
    }
}

impl Write for Timed {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let timeout = left(self.write_timeout.get())?;
        match &mut self.sock {
            Sock::Tcp(s) => {
                s.set_write_timeout(timeout)?;
                s.write(buf)
            }
            Sock::Unix(s) => {
                s.set_write_timeout(timeout)?;
                s.write(buf)
            }
        }
        .map_err(on_error)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub(super) enum Stream {
    Plain(Timed),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, Timed>>),
}

impl Stream {
    pub(super) fn timed(&self) -> &Timed {
        match self {
            Self::Plain(t) => t,
            Self::Tls(s) => &s.sock,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Plain(t) => t.read(buf),
            Self::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Plain(t) => t.write(buf),
            Self::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Plain(t) => t.flush(),
            Self::Tls(s) => s.flush(),
        }
    }
}

/// The deadline in force on this thread, if any.
pub(super) fn deadline_in_force() -> Option<Instant> {
    DEADLINE.get()
}

/// The first address of `host` that accepts within the time left.
pub(super) fn tcp(host: &str, port: u16) -> io::Result<TcpStream> {
    let mut last = None;
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, left_in_force()?) {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(e) => last = Some(on_error(e)),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address"))
    }))
}

/// A unix socket, connected within the time left: a blocking connect to a
/// server whose backlog is full waits, up to the socket's send timeout
/// (which `UnixStream::connect` cannot set first).
pub(super) fn unix(path: &Path) -> io::Result<UnixStream> {
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    socket.set_write_timeout(Some(left_in_force()?))?;
    socket
        .connect(&socket2::SockAddr::unix(path)?)
        .map_err(on_error)?;
    Ok(socket.into())
}

/// A request's clock: when it began and the bound it has so far (each
/// sentinel asked adds a connect timeout).
pub(crate) struct Budget {
    pub began: Instant,
    pub bound: Duration,
}

impl Budget {
    /// A request beginning now, bounded by `bound`.
    pub fn new(bound: Duration) -> Self {
        Self {
            began: Instant::now(),
            bound,
        }
    }

    pub fn deadline(&self) -> Instant {
        self.began + self.bound
    }

    /// The deadline of a step that may take `step`, within the request's.
    pub fn step(&self, step: Duration) -> Instant {
        (Instant::now() + step).min(self.deadline())
    }
}
