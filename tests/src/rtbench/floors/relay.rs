//! The floor of a `POST /sync` hop: the leanest HTTP server that can run a round, measured beside
//! the gateway in the same run. One OS thread per connection, blocking reads and writes (a request
//! wakes exactly the thread that serves it), its own Postgres connection with `syncular.sync`
//! prepared once, the dev-auth headers read as given; no auth check, no pool, no retry, no
//! metrics, no error body (a failed round closes the connection). What any gateway pays on top of
//! `SELECT syncular.sync` — a second process woken per round and a second pair of socket reads and
//! writes — is what this pays; the rest of a gateway's overhead is its own.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use crate::rtbench::http::SSP2_CONTENT_TYPE;
use crate::transport::SYNC_SQL;

/// A running relay; dropping it stops accepting (served connections end when their client closes).
pub struct Relay {
    /// Where it listens (loopback).
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Relay {
    /// Listens on an ephemeral loopback port; every accepted connection gets a thread and a
    /// Postgres connection to `dsn`.
    ///
    /// Errors: the listener cannot be bound.
    pub fn start(dsn: &str) -> Result<Relay, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("relay: bind: {e}"))?;
        let addr = listener.local_addr().map_err(|e| format!("relay: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (dsn, stopping) = (dsn.to_owned(), stop.clone());
        let accept = thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(stream) = stream {
                    let dsn = dsn.clone();
                    thread::spawn(move || serve(stream, &dsn));
                }
            }
        });
        Ok(Relay { addr, stop, accept: Some(accept) })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wakes the accept loop
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// Serves keep-alive `POST /sync` requests until the client closes or a round fails.
fn serve(stream: TcpStream, dsn: &str) {
    let _ = stream.set_nodelay(true);
    let Ok(read_half) = stream.try_clone() else { return };
    let (mut reader, mut writer) = (BufReader::new(read_half), stream);
    let mut pg = crate::connect_to(dsn);
    let Ok(sync) = pg.prepare(SYNC_SQL) else { return };
    let none = None::<serde_json::Value>;
    while let Some((partition, actor, body)) = read_request(&mut reader) {
        let Ok(row) = pg.query_one(&sync, &[&partition, &actor, &body, &none]) else { return };
        let Ok(bytes) = row.try_get::<_, Vec<u8>>(0) else { return };
        let mut out = format!("HTTP/1.1 200 OK\r\ncontent-type: {SSP2_CONTENT_TYPE}\r\ncontent-length: {}\r\n\r\n", bytes.len())
            .into_bytes();
        out.extend_from_slice(&bytes);
        if writer.write_all(&out).is_err() {
            return;
        }
    }
}

/// One request: `(x-syncular-partition, x-syncular-actor, body)`; `None` at EOF or on a request
/// it cannot read.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, String, Vec<u8>)> {
    let (mut partition, mut actor, mut length) = (String::new(), String::new(), 0usize);
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "x-syncular-partition" => partition = value.trim().to_owned(),
            "x-syncular-actor" => actor = value.trim().to_owned(),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((partition, actor, body))
}
