//! Raw WebSocket sessions against the gateway's `/realtime` (§8), behaving
//! like a real client: connect with dev-auth headers, read `hello`, then for
//! every `0x00` delta record the receive time, decode it with the reference
//! codec (`syncular-ssp2`) for its `COMMIT` `commitSeq`s and `SUB_END.nextCursor`,
//! and ack `{"type":"ack","cursor":<nextCursor>}`. A wake-up (§8.3) — or a
//! `hello` with `requiresSync` — starts a catch-up like a client's: a jittered
//! wait (§8.4), incremental pulls through the gateway's `POST /sync` until the
//! cursor reaches the wake's, then an ack, which lifts the gateway's suppression.
//!
//! Identical deltas are decoded once ([`DecodeCache`], module `decode`).
//! With [`Sessions::with_committed`], each session also notes when it first
//! held everything committed before its socket was opened (the reconnect →
//! caught-up time of the reconnect storm).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use ssp2::realtime::{parse_control, ControlMessage};
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tokio_tungstenite::tungstenite::Message;

pub use super::decode::{DecodeCache, Decoded};
use super::session_io::{catch_up, connect};

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
pub(super) struct State {
    pub(super) log: SessionLog,
    /// Highest cursor the session holds data through (delta or pull).
    pub(super) covered: i64,
    /// Highest cursor a wake-up (or `hello.requiresSync`) asked to reach.
    pub(super) wake_target: i64,
    pub(super) catching_up: bool,
    pub(super) ended: bool,
    /// The session's task has returned (its log is complete).
    pub(super) finished: bool,
    /// When the socket was opened, and the highest `commitSeq` committed then
    /// (−1 without [`Sessions::with_committed`]).
    pub(super) opened_at: Option<Instant>,
    pub(super) target: i64,
    /// When `covered` first reached `target`.
    pub(super) reached_at: Option<Instant>,
    /// The §8.4 jitter waited before catch-up pulls until `target` was reached.
    pub(super) jitter: Duration,
}

impl State {
    /// Raises `covered` to `cursor`, noting when the reconnect target is reached.
    pub(super) fn cover(&mut self, cursor: i64) {
        self.covered = self.covered.max(cursor);
        if self.reached_at.is_none() && self.opened_at.is_some() && self.covered >= self.target {
            self.reached_at = Some(Instant::now());
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    pub(super) stop: Notify,
}

impl Shared {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
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
pub(super) struct Ctx {
    pub(super) addr: SocketAddr,
    pub(super) jitter_ms: u64,
    pub(super) cache: Arc<DecodeCache>,
    /// The committers' highest returned `commitSeq` (reconnect targets).
    pub(super) committed: Option<Arc<AtomicI64>>,
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
                committed: None,
            },
            open: Vec::new(),
        }
    }

    /// Each session opened from now on notes the committers' high-water mark
    /// `committed` when its socket opens, and when it first holds data through it
    /// ([`Sessions::caught_up`]).
    pub fn with_committed(mut self, committed: Arc<AtomicI64>) -> Sessions {
        self.ctx.committed = Some(committed);
        self
    }

    /// Per open session: time from opening its socket to holding everything
    /// committed before, and the part of it spent in the client's own §8.4
    /// jitter wait (None: not yet; only with [`Sessions::with_committed`]).
    pub fn caught_up(&self) -> Vec<Option<(Duration, Duration)>> {
        self.open
            .iter()
            .map(|h| {
                let st = h.shared.lock();
                match (st.opened_at, st.reached_at) {
                    (Some(o), Some(r)) => Some((r.saturating_duration_since(o), st.jitter)),
                    _ => None,
                }
            })
            .collect()
    }

    /// Waits (≤ `timeout`) until every open session has caught up with its
    /// reconnect target; returns how many did not.
    pub fn wait_caught_up(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            let behind = self.caught_up().iter().filter(|c| c.is_none()).count();
            if behind == 0 || Instant::now() >= deadline {
                return behind;
            }
            std::thread::sleep(Duration::from_millis(5));
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

    /// Closes every session (normal close), waits (≤ 5 s) for their tasks to
    /// end, and returns each one's `hello` and complete log, in open order.
    pub fn close_all(&mut self) -> Vec<(HelloInfo, SessionLog)> {
        let handles: Vec<Handle> = self.open.drain(..).collect();
        for h in &handles {
            h.shared.lock().ended = true;
            h.shared.stop.notify_one();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && handles.iter().any(|h| !h.shared.lock().finished) {
            std::thread::sleep(Duration::from_millis(5));
        }
        handles
            .into_iter()
            .map(|h| (h.hello, std::mem::take(&mut h.shared.lock().log)))
            .collect()
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

/// One session's task: [`session`], then marks it finished.
async fn run(
    ctx: Ctx,
    spec: SessionSpec,
    shared: Arc<Shared>,
    gate: Arc<Semaphore>,
    ready: oneshot::Sender<Result<HelloInfo, String>>,
) {
    session(ctx, spec, shared.clone(), gate, ready).await;
    shared.lock().finished = true;
}

/// Connect, hello, then the read loop until stopped.
async fn session(
    ctx: Ctx,
    spec: SessionSpec,
    shared: Arc<Shared>,
    gate: Arc<Semaphore>,
    ready: oneshot::Sender<Result<HelloInfo, String>>,
) {
    let permit = gate.acquire_owned().await;
    if let Some(committed) = &ctx.committed {
        let mut st = shared.lock();
        st.opened_at = Some(Instant::now());
        st.target = committed.load(Ordering::Acquire);
    }
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
        st.cover(hello.cursor);
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
                                st.cover(c);
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
