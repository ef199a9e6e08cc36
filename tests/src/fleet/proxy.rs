//! [`LossyProxy`]: a TCP relay on `127.0.0.1` between a client and a gateway that, when armed,
//! loses exactly one `POST /sync` response — the request reaches the gateway whole, the gateway
//! answers (so the round ran and committed), and the client's connection is cut before a byte
//! of the answer reaches it. That is a lost ack (§7.2): the client keeps its commit and sends it
//! again. Everything else is relayed untouched (HTTP keep-alive, segment downloads, WebSocket
//! upgrades, which switch the connection to a plain byte relay).
//!
//! Requests are read as HTTP/1.1 heads plus `Content-Length` bodies (both clients always set
//! it); responses are not parsed. Threads end with their sockets (the client's driver or the
//! gateway going away).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Longest request head accepted.
const MAX_HEAD: usize = 64 * 1024;

/// A running relay.
pub struct LossyProxy {
    /// `http://127.0.0.1:PORT`, the client's `baseUrl`.
    pub base_url: String,
    state: Arc<State>,
}

struct State {
    upstream: String,
    armed: AtomicBool,
    lost: AtomicUsize,
    stopped: AtomicBool,
}

impl LossyProxy {
    /// Relays to the gateway at `upstream_base_url` (`http://HOST:PORT`).
    pub fn start(upstream_base_url: &str) -> LossyProxy {
        let upstream = upstream_base_url.strip_prefix("http://").expect("an http:// base URL").trim_end_matches('/').to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let base_url = format!("http://{}", listener.local_addr().expect("proxy address"));
        let state = Arc::new(State { upstream, armed: AtomicBool::new(false), lost: AtomicUsize::new(0), stopped: AtomicBool::new(false) });
        let accepting = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = conn else { continue };
                let state = accepting.clone();
                std::thread::spawn(move || relay(client, state));
            }
        });
        LossyProxy { base_url, state }
    }

    /// Loses the next `POST /sync` response (once).
    pub fn lose_next_sync_response(&self) {
        self.state.armed.store(true, Ordering::SeqCst);
    }

    /// How many responses were lost so far.
    pub fn lost(&self) -> usize {
        self.state.lost.load(Ordering::SeqCst)
    }

    /// True while armed (the loss has not happened yet).
    pub fn armed(&self) -> bool {
        self.state.armed.load(Ordering::SeqCst)
    }
}

impl Drop for LossyProxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        if let Some(addr) = self.base_url.strip_prefix("http://") {
            let _ = TcpStream::connect(addr);
        }
    }
}

/// One client connection: requests up, responses down (one of them lost when armed).
fn relay(client: TcpStream, state: Arc<State>) {
    let Ok(upstream) = TcpStream::connect(&state.upstream) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let lose = Arc::new(AtomicBool::new(false));
    let (Ok(client_up), Ok(upstream_down)) = (client.try_clone(), upstream.try_clone()) else { return };
    let (downstream_lose, downstream_state) = (lose.clone(), state.clone());
    std::thread::spawn(move || responses(upstream_down, client, &downstream_lose, &downstream_state));
    requests(client_up, upstream, &lose, &state);
}

/// Client → gateway: request by request until an upgrade, then bytes.
fn requests(mut client: TcpStream, mut upstream: TcpStream, lose: &AtomicBool, state: &State) {
    while let Some(head) = read_head(&mut client) {
        let text = String::from_utf8_lossy(&head).into_owned();
        let mut first = text.lines().next().unwrap_or("").split(' ');
        let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
        let header = |name: &str| {
            text.lines().skip(1).find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
        };
        let length: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        let upgrade = header("upgrade").is_some();
        let is_sync = method == "POST" && (path == "/sync" || path.starts_with("/sync?"));
        // Armed before the request goes up: every byte the gateway sends after it is its answer.
        if is_sync && state.armed.compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            lose.store(true, Ordering::SeqCst);
        }
        if upstream.write_all(&head).is_err() || copy_exact(&mut client, &mut upstream, length).is_err() {
            break;
        }
        if upgrade {
            let _ = std::io::copy(&mut client, &mut upstream);
            break;
        }
    }
    let _ = upstream.shutdown(Shutdown::Write);
}

/// Gateway → client: bytes, unless this connection's next answer is to be lost.
fn responses(mut upstream: TcpStream, mut client: TcpStream, lose: &AtomicBool, state: &State) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match upstream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if lose.load(Ordering::SeqCst) {
            // The gateway answered: the round ran. The client gets nothing but a cut connection.
            state.lost.fetch_add(1, Ordering::SeqCst);
            let _ = client.shutdown(Shutdown::Both);
            let _ = upstream.shutdown(Shutdown::Both);
            return;
        }
        if client.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Write);
}

/// A request head through its blank line; `None` at end of stream or when too long.
fn read_head(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
        if head.len() > MAX_HEAD {
            return None;
        }
    }
    Some(head)
}

fn copy_exact(from: &mut TcpStream, to: &mut TcpStream, mut n: usize) -> std::io::Result<()> {
    let mut buf = [0u8; 16 * 1024];
    while n > 0 {
        let want = n.min(buf.len());
        let got = from.read(&mut buf[..want])?;
        if got == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        to.write_all(&buf[..got])?;
        n -= got;
    }
    Ok(())
}
