//! A hostile store: a TCP listener on a free loopback port that accepts
//! every connection and answers every request (whatever bytes arrive) with
//! a valid RESP reply, one byte every 20 ms. Each read of the reply
//! succeeds well within any per-read timeout; only a bound on the whole
//! request stops a client waiting for it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The gap between two bytes of a reply.
pub const GAP: Duration = Duration::from_millis(20);

/// The reply to every request: a bulk string of 100 bytes (108 bytes in
/// all, 2.16 s at one byte per [`GAP`]).
pub const REPLY_BYTES: usize = 108;

pub struct Trickler {
    pub port: u16,
    stop: Arc<AtomicBool>,
}

impl Trickler {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let stopped = stopped.clone();
                        std::thread::spawn(move || serve(stream, &stopped));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Self { port, stop }
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for Trickler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(mut stream: TcpStream, stop: &AtomicBool) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let mut reply = format!("${}\r\n", REPLY_BYTES - 8).into_bytes();
    reply.resize(REPLY_BYTES - 2, b'x');
    reply.extend_from_slice(b"\r\n");
    let mut request = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        match stream.read(&mut request) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        for byte in &reply {
            if stop.load(Ordering::Relaxed) || stream.write_all(&[*byte]).is_err() {
                return;
            }
            std::thread::sleep(GAP);
        }
    }
}
