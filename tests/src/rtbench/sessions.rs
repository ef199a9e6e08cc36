//! Raw WebSocket sessions against the gateway's `/realtime` (§8), behaving
//! like a real client: connect with dev-auth headers, read `hello`, then for
//! every `0x00` delta record the receive time, decode it with the reference
//! codec (`syncular-ssp2`) for its `COMMIT` `commitSeq`s and `SUB_END.nextCursor`,
//! and ack `{"type":"ack","cursor":<nextCursor>}`. A wake-up (§8.3) — or a
//! `hello` with `requiresSync` — starts a catch-up like a client's: a jittered
//! wait (§8.4), incremental pulls through the gateway's `POST /sync` until the
//! cursor reaches the wake's, then an ack, which lifts the gateway's suppression.
//!
//! Identical deltas (sessions with the same registrations share one encoding)
//! are decoded once ([`DecodeCache`]): decoding is the client's cost, and this
//! process shares two cores with the gateway and Postgres.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use ssp2::realtime::{parse_control, ControlMessage};
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

use super::http::HttpConn;
use super::setup::{pull_outcome, pull_request};
use crate::wire::decode_response;

/// What a delta carried.
#[derive(Clone, Debug, Default)]
pub struct Decoded {
    /// The `commitSeq` of every `COMMIT` frame, in message order.
    pub commit_seqs: Vec<i64>,
    /// The highest `SUB_END.nextCursor` (the ack cursor).
    pub next_cursor: Option<i64>,
}

/// Decodes each distinct delta payload once.
#[derive(Debug, Default)]
pub struct DecodeCache {
    map: Mutex<HashMap<Bytes, Arc<Decoded>>>,
}

impl DecodeCache {
    /// The decoded form of `payload` (an SSP2 response without its channel tag).
    ///
    /// Errors: the reference codec's decode error.
    pub fn get(&self, payload: Bytes) -> Result<Arc<Decoded>, String> {
        if let Some(d) = self.lock().get(&payload) {
            return Ok(d.clone());
        }
        let msg = decode_response(&payload)?;
        let out = pull_outcome(&msg);
        let decoded = Arc::new(Decoded {
            commit_seqs: out.commit_seqs,
            next_cursor: out.next_cursor,
        });
        let mut map = self.lock();
        if map.len() > 8192 {
            map.clear();
        }
        map.insert(payload, decoded.clone());
        Ok(decoded)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Bytes, Arc<Decoded>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a session saw since the last [`Sessions::drain_logs`].
#[derive(Clone, Debug, Default)]
pub struct SessionLog {
    /// Every delta: receive time (taken before decoding) and content.
    pub deltas: Vec<(Instant, Arc<Decoded>)>,
    /// Every wake-up: `(cursor, reason)`.
    pub wakes: Vec<(i64, String)>,
    /// `commitSeq`s received through catch-up pulls.
    pub recovered: Vec<i64>,
    /// Decode failures, unexpected closes, failed catch-ups.
    pub errors: Vec<String>,
    /// Heartbeats received.
    pub heartbeats: usize,
}

#[derive(Debug, Default)]
struct State {
    log: SessionLog,
    /// Highest cursor the session holds data through (delta or pull).
    covered: i64,
    /// Highest cursor a wake-up (or `hello.requiresSync`) asked to reach.
    wake_target: i64,
    catching_up: bool,
    ended: bool,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    stop: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Who a session is.
#[derive(Clone, Debug)]
pub struct SessionSpec {
    pub partition: String,
    pub epoch: String,
    pub actor: String,
    pub client_id: String,
}

/// The `hello` fields the benchmark reports.
#[derive(Clone, Copy, Debug)]
pub struct HelloInfo {
    pub cursor: i64,
    pub latest_cursor: i64,
    pub requires_sync: bool,
}

struct Handle {
    shared: Arc<Shared>,
    hello: HelloInfo,
}

/// Settings shared by every session task.
#[derive(Clone, Debug)]
struct Ctx {
    addr: SocketAddr,
    jitter_ms: u64,
    cache: Arc<DecodeCache>,
}

/// The open sessions (tasks on a tokio runtime; every method is called from
/// outside it and blocks).
pub struct Sessions {
    rt: tokio::runtime::Handle,
    ctx: Ctx,
    open: Vec<Handle>,
}

impl Sessions {
    /// No sessions yet; `addr` is the gateway, `jitter_ms` the catch-up jitter bound.
    pub fn new(rt: tokio::runtime::Handle, addr: SocketAddr, jitter_ms: u64) -> Sessions {
        Sessions {
            rt,
            ctx: Ctx {
                addr,
                jitter_ms,
                cache: Arc::new(DecodeCache::default()),
            },
            open: Vec::new(),
        }
    }

    /// Number of open sessions.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// True when none is open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Opens one session per spec (at most 64 handshakes at a time) and waits
    /// for every `hello`. Returns the `hello`s.
    ///
    /// Errors: the first session that could not connect or got no `hello` in 30 s.
    pub fn open(&mut self, specs: &[SessionSpec]) -> Result<Vec<HelloInfo>, String> {
        let gate = Arc::new(Semaphore::new(64));
        let mut pending = Vec::with_capacity(specs.len());
        for spec in specs {
            let (tx, rx) = oneshot::channel();
            let shared = Arc::new(Shared::default());
            self.rt.spawn(run(
                self.ctx.clone(),
                spec.clone(),
                shared.clone(),
                gate.clone(),
                tx,
            ));
            pending.push((shared, rx));
        }
        let mut hellos = Vec::with_capacity(specs.len());
        let mut first_error = None;
        for (shared, rx) in pending {
            let got = self.rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(60), rx).await
            });
            match got {
                Ok(Ok(Ok(hello))) => {
                    hellos.push(hello);
                    self.open.push(Handle { shared, hello });
                }
                Ok(Ok(Err(e))) => first_error = first_error.or(Some(e)),
                _ => first_error = first_error.or(Some("no hello within 60 s".to_owned())),
            }
        }
        match first_error {
            Some(e) => Err(format!("opening realtime sessions: {e}")),
            None => Ok(hellos),
        }
    }

    /// Closes the sessions past the first `keep` (normal close, 1000).
    pub fn shrink_to(&mut self, keep: usize) {
        for h in self.open.drain(keep.min(self.open.len())..) {
            h.shared.lock().ended = true;
            h.shared.stop.notify_one();
        }
    }

    /// Waits until every session holds data through `cursor` (or `timeout`).
    /// Returns how many did not.
    pub fn wait_covered(&self, cursor: i64, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            let behind = self
                .open
                .iter()
                .filter(|h| {
                    let st = h.shared.lock();
                    !st.ended && st.covered < cursor
                })
                .count();
            if behind == 0 || Instant::now() >= deadline {
                return behind;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Takes every session's log (and resets it).
    pub fn drain_logs(&self) -> Vec<SessionLog> {
        self.open
            .iter()
            .map(|h| std::mem::take(&mut h.shared.lock().log))
            .collect()
    }

    /// The `hello`s of the open sessions.
    pub fn hellos(&self) -> Vec<HelloInfo> {
        self.open.iter().map(|h| h.hello).collect()
    }
}

impl Drop for Sessions {
    fn drop(&mut self) {
        self.shrink_to(0);
    }
}

fn ack(cursor: i64) -> Message {
    Message::text(format!("{{\"type\":\"ack\",\"cursor\":{cursor}}}"))
}

/// One session's task: connect, hello, then the read loop until stopped.
async fn run(
    ctx: Ctx,
    spec: SessionSpec,
    shared: Arc<Shared>,
    gate: Arc<Semaphore>,
    ready: oneshot::Sender<Result<HelloInfo, String>>,
) {
    let permit = gate.acquire_owned().await;
    let connected = connect(&ctx, &spec).await;
    drop(permit);
    let (mut ws, hello) = match connected {
        Ok(c) => c,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let (ack_tx, mut ack_rx) = mpsc::unbounded_channel::<i64>();
    {
        let mut st = shared.lock();
        st.covered = hello.cursor;
        if hello.requires_sync {
            st.wake_target = hello.latest_cursor;
            st.catching_up = true;
            tokio::spawn(catch_up(ctx.clone(), spec.clone(), shared.clone(), ack_tx.clone()));
        }
    }
    let _ = ready.send(Ok(hello));
    loop {
        let next = tokio::select! {
            _ = shared.stop.notified() => {
                let _ = ws.close(None).await;
                return;
            }
            Some(cursor) = ack_rx.recv() => {
                if let Err(e) = ws.send(ack(cursor)).await {
                    shared.lock().log.errors.push(format!("sending an ack: {e}"));
                    return;
                }
                continue;
            }
            next = ws.next() => next,
        };
        let message = match next {
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                end_unexpectedly(&shared, format!("socket error: {e}"));
                return;
            }
            None => {
                end_unexpectedly(&shared, "socket closed by the gateway".to_owned());
                return;
            }
        };
        match message {
            Message::Binary(data) => {
                let at = Instant::now();
                if data.first() != Some(&0x00) {
                    shared.lock().log.errors.push("binary message without the 0x00 delta tag".to_owned());
                    continue;
                }
                match ctx.cache.get(data.slice(1..)) {
                    Ok(decoded) => {
                        let cursor = decoded.next_cursor;
                        {
                            let mut st = shared.lock();
                            if let Some(c) = cursor {
                                st.covered = st.covered.max(c);
                            }
                            st.log.deltas.push((at, decoded));
                        }
                        if let Some(c) = cursor {
                            if let Err(e) = ws.send(ack(c)).await {
                                end_unexpectedly(&shared, format!("sending an ack: {e}"));
                                return;
                            }
                        }
                    }
                    Err(e) => shared.lock().log.errors.push(format!("undecodable delta: {e}")),
                }
            }
            Message::Text(text) => match parse_control(text.as_str()) {
                Ok(ControlMessage::Wake { cursor, reason, .. }) => {
                    let mut st = shared.lock();
                    st.log.wakes.push((cursor, reason.as_str().to_owned()));
                    st.wake_target = st.wake_target.max(cursor);
                    if !st.catching_up {
                        st.catching_up = true;
                        tokio::spawn(catch_up(ctx.clone(), spec.clone(), shared.clone(), ack_tx.clone()));
                    }
                }
                Ok(ControlMessage::Heartbeat { .. }) => shared.lock().log.heartbeats += 1,
                Ok(_) => {}
                Err(e) => shared.lock().log.errors.push(format!("malformed control message: {e}: {text}")),
            },
            Message::Close(frame) => {
                end_unexpectedly(&shared, format!("closed by the gateway: {frame:?}"));
                return;
            }
            _ => {}
        }
    }
}

fn end_unexpectedly(shared: &Shared, why: String) {
    let mut st = shared.lock();
    if !st.ended {
        st.ended = true;
        st.log.errors.push(why);
    }
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Upgrades `/realtime?clientId=…` with dev-auth headers and reads up to the `hello`.
async fn connect(ctx: &Ctx, spec: &SessionSpec) -> Result<(Ws, HelloInfo), String> {
    let url = format!("ws://{}/realtime?clientId={}", ctx.addr, spec.client_id);
    let mut req = url.into_client_request().map_err(|e| e.to_string())?;
    let h = req.headers_mut();
    h.insert("x-syncular-actor", HeaderValue::from_str(&spec.actor).map_err(|e| e.to_string())?);
    h.insert("x-syncular-partition", HeaderValue::from_str(&spec.partition).map_err(|e| e.to_string())?);
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(req, None, true)
        .await
        .map_err(|e| format!("{}: upgrade failed: {e}", spec.client_id))?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let next = tokio::time::timeout_at(deadline, ws.next())
            .await
            .map_err(|_| format!("{}: no hello within 30 s", spec.client_id))?;
        match next {
            Some(Ok(Message::Text(text))) => {
                if let Ok(ControlMessage::Hello { cursor, latest_cursor, requires_sync, .. }) =
                    parse_control(text.as_str())
                {
                    return Ok((ws, HelloInfo { cursor, latest_cursor, requires_sync }));
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(format!("{}: socket error before hello: {e}", spec.client_id)),
            None => return Err(format!("{}: closed before hello", spec.client_id)),
        }
    }
}

/// A client's recovery after a wake-up: jitter, pull through `POST /sync`
/// until the session holds data through the highest wake cursor, then ack.
async fn catch_up(ctx: Ctx, spec: SessionSpec, shared: Arc<Shared>, acks: mpsc::UnboundedSender<i64>) {
    if ctx.jitter_ms > 0 {
        let r = RandomState::new().hash_one(Instant::now()) % (ctx.jitter_ms + 1);
        tokio::time::sleep(Duration::from_millis(r)).await;
    }
    let mut failures = 0;
    loop {
        let cursor = {
            let mut st = shared.lock();
            if st.covered >= st.wake_target || st.ended {
                st.catching_up = false;
                let c = st.covered;
                drop(st);
                let _ = acks.send(c);
                return;
            }
            st.covered
        };
        match pull_once(&ctx, &spec, cursor).await {
            Ok((seqs, next)) => {
                let mut st = shared.lock();
                st.log.recovered.extend(seqs);
                st.covered = st.covered.max(next);
            }
            Err(e) => {
                failures += 1;
                let give_up = {
                    let mut st = shared.lock();
                    st.log.errors.push(format!("catch-up pull: {e}"));
                    if failures >= 5 {
                        st.catching_up = false;
                    }
                    failures >= 5
                };
                if give_up {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// One incremental pull from `cursor` through the gateway: `(commitSeqs, nextCursor)`.
async fn pull_once(ctx: &Ctx, spec: &SessionSpec, cursor: i64) -> Result<(Vec<i64>, i64), String> {
    let mut conn = HttpConn::connect(ctx.addr).await?;
    let body = conn
        .sync(&spec.actor, &spec.partition, pull_request(&spec.client_id, &spec.epoch, cursor))
        .await?;
    let out = pull_outcome(&decode_response(&body)?);
    let next = out.next_cursor.ok_or("pull response without SUB_END")?;
    Ok((out.commit_seqs, next))
}
