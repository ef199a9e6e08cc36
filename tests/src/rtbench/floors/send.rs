//! The floor under issue 30's fan-out goal on this machine: what writing one small WebSocket
//! binary message to each of N loopback TCP sockets costs the writing thread when nothing else
//! is done — no delta to build, no session state, one `write` per (message, socket) as a gateway
//! does per (delta, session) delivery — while the peers read the bytes on the bench's runtime,
//! as the bench's sessions do. Measured as the writing thread's CPU (`getrusage(RUSAGE_THREAD)`:
//! user and system) per write. On loopback the sender's `write` also runs the receiving side's
//! TCP processing, so the system part is what any gateway on this machine pays per delivery.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

/// What the floor measured.
#[derive(Clone, Debug)]
pub struct SendFloor {
    /// Sockets written to, each once per round.
    pub sockets: usize,
    /// Bytes of one message (frame header included).
    pub bytes: usize,
    /// Writes done.
    pub writes: u64,
    /// The writing thread's user and system CPU per write, µs.
    pub user_us: f64,
    pub sys_us: f64,
}

impl SendFloor {
    /// CPU per write, µs (user + system).
    pub fn us_per_write(&self) -> f64 {
        self.user_us + self.sys_us
    }
}

/// A WebSocket binary frame (server → client, unmasked) with `payload` bytes.
fn frame(payload: usize) -> Vec<u8> {
    let mut f = vec![0x82];
    match u16::try_from(payload) {
        Ok(n) if n < 126 => f.push(n as u8),
        Ok(n) => {
            f.push(126);
            f.extend_from_slice(&n.to_be_bytes());
        }
        Err(_) => {
            f.push(127);
            f.extend_from_slice(&(payload as u64).to_be_bytes());
        }
    }
    f.resize(f.len() + payload, 0x5a);
    f
}

/// The thread's `(user, system)` CPU so far, µs.
fn thread_cpu_us() -> (f64, f64) {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    (us(ru.ru_utime), us(ru.ru_stime))
}

/// Opens `sockets` loopback connections whose peers read on `rt`, then writes a frame of
/// `payload` bytes to each of them `rounds` times from one thread and measures that thread.
///
/// Errors: a socket that cannot be opened or written, or peers that did not receive every byte
/// within 60 s.
pub fn run(rt: &tokio::runtime::Runtime, sockets: usize, payload: usize, rounds: usize) -> Result<SendFloor, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let received = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::with_capacity(sockets);
    let _in_runtime = rt.enter();
    for _ in 0..sockets {
        let w = TcpStream::connect(addr).map_err(|e| format!("send floor: connect: {e}"))?;
        w.set_nodelay(true).map_err(|e| e.to_string())?;
        let (r, _) = listener.accept().map_err(|e| e.to_string())?;
        r.set_nonblocking(true).map_err(|e| e.to_string())?;
        let mut r = tokio::net::TcpStream::from_std(r).map_err(|e| e.to_string())?;
        let received = received.clone();
        rt.spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = r.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                received.fetch_add(n as u64, Ordering::Relaxed);
            }
        });
        writers.push(w);
    }
    let message = frame(payload);
    let bytes = message.len();
    let writer = thread::spawn(move || -> Result<(f64, f64), String> {
        let (u0, s0) = thread_cpu_us();
        for _ in 0..rounds {
            for w in &mut writers {
                w.write_all(&message).map_err(|e| format!("send floor: write: {e}"))?;
            }
        }
        let (u1, s1) = thread_cpu_us();
        Ok((u1 - u0, s1 - s0))
    });
    let (user, sys) = writer.join().map_err(|_| "send floor: the writer panicked".to_owned())??;
    let expected = (sockets * rounds * bytes) as u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while received.load(Ordering::Relaxed) < expected {
        if Instant::now() > deadline {
            return Err(format!("send floor: {} of {expected} bytes received after 60 s", received.load(Ordering::Relaxed)));
        }
        thread::sleep(Duration::from_millis(10));
    }
    let writes = (sockets * rounds) as u64;
    Ok(SendFloor { sockets, bytes, writes, user_us: user / writes as f64, sys_us: sys / writes as f64 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_written_is_read_and_the_writer_is_measured() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let fl = run(&rt, 50, 200, 40).unwrap();
        assert_eq!((fl.writes, fl.bytes), (2000, 204), "200 payload bytes behind a 4-byte header");
        assert!(fl.us_per_write() > 0.0, "{fl:?}");
        assert_eq!(frame(125).len(), 127);
        assert_eq!(&frame(70_000)[..2], &[0x82, 127]);
    }
}
