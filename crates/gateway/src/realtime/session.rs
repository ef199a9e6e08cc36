//! One realtime connection's state (§8) and its bounded outbound path.
//!
//! [`Session`] is shared between the socket reader, the writer task, the partition worker
//! (deltas) and round tasks; its mutable [`SessionState`] sits behind a short-held mutex.
//! A delta is written by the partition worker itself when nothing is queued before it and the
//! socket takes it at once ([`Session::send_message`]: one write, no task switch — most
//! deliveries). Everything else goes through two bounded queues drained by one writer task
//! ([`run_writer`]), which owns the socket's write half between writes: control messages and
//! deltas (`try_send`, never blocking a fan-out) and round-response chunks (awaited: §8.7
//! backpressure). When the control queue is short of room a delta becomes a
//! `catchup-required` wake-up (the session is suppressed), and a session that cannot even take
//! a control message is closed (1008) — a socket that never reads cannot grow the gateway's
//! memory. The Close frame never needs queue room: it has its own slot, which the writer checks
//! before the queues. Every frame must be taken by the socket within `--write-timeout-secs`; a
//! socket that does not drain is dropped. The writer also sends the §8.5 heartbeat and
//! WebSocket pings.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use bytes::Bytes;
use futures_util::stream::SplitSink;
use futures_util::{Sink, SinkExt};
use serde_json::{Map, Value};
use syncular_protocol::realtime::{control_text, ControlMessage};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::lock;
use crate::db::session::{Overflow, Resume, StateText};
use crate::metrics::Metrics;

/// WebSocket close codes used by the gateway (RFC 6455 §7.4.1).
pub mod close_code {
    /// Normal closure.
    pub const NORMAL: u16 = 1000;
    /// Going away: gateway shutdown, idle timeout.
    pub const GOING_AWAY: u16 = 1001;
    /// Protocol error: a broken §8.7 stream (bad header, pipelining, unknown tag).
    pub const PROTOCOL: u16 = 1002;
    /// Invalid payload: a control message that is not JSON or malformed (§8.1).
    pub const INVALID_PAYLOAD: u16 = 1007;
    /// Policy violation: outbound queue overflow (the peer does not read).
    pub const POLICY: u16 = 1008;
    /// Message too big (request over the body limit).
    pub const TOO_BIG: u16 = 1009;
    /// Internal error (a round response that could not be produced).
    pub const INTERNAL: u16 = 1011;
    /// Try again later: the gateway-wide round buffer budget (`--round-buffer-bytes`) has no
    /// room for this socket's round request or response (RFC 6455 registry, IANA 1013).
    pub const TRY_AGAIN_LATER: u16 = 1013;
}

/// Mutable per-session state: what the session rules answered last — kept verbatim, never
/// interpreted (docs/src/sql/realtime.md "Session rules") — and the socket's own bookkeeping.
#[derive(Debug, Clone, Default)]
pub struct SessionState {
    /// The session's state (JSON text, opaque): handed back to `realtime_pass` and
    /// `realtime_reload`; sessions with equal texts share one pass row and one delta.
    pub state: StateText,
    /// Its resume rule: once `acked` reaches the cursor, the state becomes that text.
    pub resume: Resume,
    /// The state's `logEpoch` (acks carry it; a new one restarts the partition's timeline).
    pub log_epoch: String,
    /// Presence grant: the registrations' scope keys (§8.6.3).
    pub scope_keys: BTreeSet<String>,
    /// Highest cursor the client acknowledged.
    pub acked: i64,
    /// A §8.7 round is in flight, from its request until its `END` is handed to the socket:
    /// passes give the session wake-ups, never a `0x00` message.
    pub round_in_flight: bool,
    /// What the round-end reload answered (state, resume, `logEpoch`), kept at the round's
    /// `END` ([`SessionState::finish_round`]).
    pub round_end: Option<(StateText, Resume, String)>,
    /// Bumped whenever a round begins, a reload replaces the state, or a scopes notification
    /// makes it stale: a pass result computed under an older generation is not delivered.
    pub generation: u64,
    /// Registration reloads issued / the newest one applied (a slower reload never
    /// overwrites a newer one).
    pub refresh_issued: u64,
    /// See `refresh_issued`.
    pub refresh_applied: u64,
    /// §8.6.4 presence rate state per scope key.
    pub presence_rate: HashMap<String, PresenceRate>,
}

impl SessionState {
    /// The state of a session the rules just connected.
    pub fn new(state: StateText, resume: Resume, log_epoch: String, scope_keys: BTreeSet<String>, acked: i64) -> Self {
        SessionState { state, resume, log_epoch, scope_keys, acked, ..SessionState::default() }
    }

    /// Keeps an answer's state and resume rule.
    pub fn adopt(&mut self, state: StateText, resume: Resume) {
        self.state = state;
        self.resume = resume;
    }

    /// Keeps a reload's state, resume rule and log epoch. Another epoch is another timeline
    /// (its cursors restart): the acks of the old one say nothing about it and are forgotten, so
    /// an old high ack cannot satisfy the new resume rule before the client caught up.
    pub fn adopt_reloaded(&mut self, state: StateText, resume: Resume, log_epoch: String) {
        if log_epoch != self.log_epoch {
            self.acked = -1;
            self.log_epoch = log_epoch;
        }
        self.adopt(state, resume);
    }

    /// The round in flight ends: its `END` is being handed to the socket (the caller holds the
    /// state lock, so nothing is queued between this and `END`). The state the round-end reload
    /// answered is kept — the rules moved it to what the client holds after the round, so the
    /// next pass sends the commits past it, those made during the round too, as deltas.
    /// Without one (the reload failed or was overtaken by a newer one) the state stays.
    pub fn finish_round(&mut self) {
        self.round_in_flight = false;
        if let Some((state, resume, log_epoch)) = self.round_end.take() {
            self.generation += 1;
            self.adopt_reloaded(state, resume, log_epoch);
        }
    }

    /// §8.2 ack: the highest one is kept; once it reaches the resume rule's cursor, the
    /// session keeps the rule's state (deltas resume). Negative cursors are ignored.
    pub fn ack(&mut self, cursor: i64) {
        self.acked = self.acked.max(cursor);
        if let Some((at, state)) = &self.resume {
            if self.acked >= *at {
                self.state = state.clone();
                self.resume = None;
            }
        }
    }
}

/// Per-key presence rate-cap state (latest-wins coalescing, §8.6.4).
#[derive(Debug, Clone, Default)]
pub struct PresenceRate {
    /// When the last publish was fanned out.
    pub last_fanout: Option<std::time::Instant>,
    /// The newest document held back in the current window (a flush of it is scheduled).
    pub pending: Option<Map<String, Value>>,
    /// The scheduled flush's token (a child of the session's `closed`): a leave, or a publish
    /// after the window ended, cancels it, so a flush never fans out a document early or after a
    /// newer one.
    pub flush: Option<CancellationToken>,
}

impl PresenceRate {
    /// Drops the held document and cancels its scheduled flush (a leave; a publish after the
    /// window ended, which goes out itself).
    pub fn drop_held(&mut self) {
        self.pending = None;
        if let Some(flush) = self.flush.take() {
            flush.cancel();
        }
    }
}

/// A pass's hold on one delta it queued: a clone of the pass's sender, dropped once the delta
/// was written, refused or discarded. The partition worker waits (bounded) until every clone
/// of its pass is gone before the next pass, so passes follow the sockets' pace — commits that
/// land meanwhile coalesce into the next pass instead of one delta per commit per session.
pub type FanOut = mpsc::Sender<()>;

/// A message for the writer's control queue.
#[derive(Debug)]
pub enum Outbound {
    /// A JSON control message (text frame).
    Text(String),
    /// A `0x00`-tagged delta (checked against a round in flight when written), what to do
    /// when it cannot be sent, and its pass's hold on it.
    Delta(Bytes, Option<Arc<Overflow>>, Option<FanOut>),
}

/// One chunk of a round response; the one carrying `END` ends the round (cleared in-flight
/// right before the chunk is written, so no delta can precede the response's `END`).
#[derive(Debug)]
pub struct RoundChunk {
    /// `0x01`-tagged payload.
    pub bytes: Bytes,
    /// With the chunk carrying `END`: fired once the chunk has been handed to the socket.
    pub end: Option<oneshot::Sender<()>>,
}

/// A connected realtime session.
pub struct Session {
    /// Gateway-local id (map key).
    pub id: u64,
    /// `sessionId` of the hello.
    pub session_id: String,
    /// Host partition.
    pub partition: String,
    /// Authenticated actor.
    pub actor_id: String,
    /// The socket's clientId (`?clientId=`).
    pub client_id: String,
    /// Allowed scopes from auth (`None` = database resolver).
    pub allowed_scopes: Option<Value>,
    state: Mutex<SessionState>,
    /// The scope keys presence was last reconciled to ([`super::presence::reconcile`]; none
    /// before the session joined): the lock serializes reconciliations, so two reloads never
    /// apply their key changes out of order.
    pub(crate) presence_grant: Mutex<BTreeSet<String>>,
    ctrl: mpsc::Sender<Outbound>,
    round: mpsc::Sender<RoundChunk>,
    /// The socket's write half, set by [`run_writer`] (taken back when it ends); locked for
    /// every write, by the writer task or a direct delta write.
    sink: tokio::sync::Mutex<Option<WsSink>>,
    /// Messages of the control queue not yet written (queued, or taken by the writer and being
    /// written): a delta is written directly only when there is none, so nothing overtakes.
    unwritten: AtomicUsize,
    /// A direct write left bytes the socket did not take at once: the writer flushes them.
    flush_wanted: tokio::sync::Notify,
    queued_delta_bytes: AtomicUsize,
    delta_budget: usize,
    closing: AtomicBool,
    /// The Close frame to send ([`Session::close`]): its own slot, never queue room.
    close_frame: Mutex<Option<(u16, String)>>,
    close_requested: tokio::sync::Notify,
    write_timeout: Duration,
    /// Cancelled when the session ends (reader, writer and timers stop).
    pub closed: CancellationToken,
    metrics: Arc<Metrics>,
}

/// The write half of a session's socket.
pub type WsSink = SplitSink<WebSocket, Message>;

/// The receiving ends handed to [`run_writer`].
pub struct WriterQueues {
    ctrl: mpsc::Receiver<Outbound>,
    round: mpsc::Receiver<RoundChunk>,
}

/// Identity and limits of a new session.
pub struct SessionInit {
    /// Gateway-local id.
    pub id: u64,
    /// `sessionId` of the hello.
    pub session_id: String,
    /// Host partition.
    pub partition: String,
    /// Actor.
    pub actor_id: String,
    /// clientId.
    pub client_id: String,
    /// Allowed scopes from auth.
    pub allowed_scopes: Option<Value>,
    /// Control queue capacity, messages.
    pub queue: usize,
    /// Bytes of deltas that may wait in the queue.
    pub delta_budget: usize,
    /// Longest a frame may take to be written (`--write-timeout-secs`).
    pub write_timeout: Duration,
}

impl Session {
    /// Creates the session and the queues its writer drains.
    pub fn new(init: SessionInit, state: SessionState, metrics: Arc<Metrics>, parent: &CancellationToken) -> (Arc<Self>, WriterQueues) {
        let (ctrl_tx, ctrl_rx) = mpsc::channel(init.queue.max(2));
        let (round_tx, round_rx) = mpsc::channel(2);
        let s = Session {
            id: init.id,
            session_id: init.session_id,
            partition: init.partition,
            actor_id: init.actor_id,
            client_id: init.client_id,
            allowed_scopes: init.allowed_scopes,
            presence_grant: Mutex::default(),
            state: Mutex::new(state),
            ctrl: ctrl_tx,
            round: round_tx,
            sink: tokio::sync::Mutex::new(None),
            unwritten: AtomicUsize::new(0),
            flush_wanted: tokio::sync::Notify::new(),
            queued_delta_bytes: AtomicUsize::new(0),
            delta_budget: init.delta_budget,
            closing: AtomicBool::new(false),
            close_frame: Mutex::new(None),
            close_requested: tokio::sync::Notify::new(),
            write_timeout: init.write_timeout,
            closed: parent.child_token(),
            metrics,
        };
        (Arc::new(s), WriterQueues { ctrl: ctrl_rx, round: round_rx })
    }

    /// Locks the state (never held across an await).
    pub fn state(&self) -> MutexGuard<'_, SessionState> {
        lock(&self.state)
    }

    /// Queues a control message. Returns false (and closes the session) when the queue is
    /// full — the peer is not reading.
    pub fn send_control(&self, msg: &ControlMessage) -> bool {
        self.send_text(control_text(msg))
    }

    /// Queues a text frame (see [`Session::send_control`]).
    pub fn send_text(&self, text: String) -> bool {
        if self.closed.is_cancelled() {
            return false;
        }
        match self.enqueue(Outbound::Text(text)) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::info!(session = self.id, "outbound queue full, closing the socket");
                self.close(close_code::POLICY, "outbound queue overflow: the client does not read");
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Queues the wake-ups a reload answered (`send`), counted by reason.
    pub fn send_wakes(&self, texts: Vec<String>) {
        for text in texts {
            self.metrics.wake(wake_reason(&text));
            self.send_text(text);
        }
    }

    /// Queues a binary message of a pass (a `0x00`-tagged delta shared by the sessions of its
    /// row) — or, when the queue has no room for it or a round is in flight, follows the row's
    /// overflow rule instead: keeps its state and sends its wake-up (caller holds the state
    /// lock).
    pub fn send_message(&self, st: &mut SessionState, message: &Bytes, overflow: Option<&Arc<Overflow>>, fan_out: Option<&FanOut>) {
        if st.round_in_flight {
            self.overflow(st, overflow);
            return;
        }
        if self.write_now(message) {
            return;
        }
        let len = message.len();
        let room = self.ctrl.capacity() > self.ctrl.max_capacity() / 4
            && self.queued_delta_bytes.load(Ordering::Relaxed) + len <= self.delta_budget;
        if !room {
            self.overflow(st, overflow);
            return;
        }
        self.queued_delta_bytes.fetch_add(len, Ordering::Relaxed);
        if self.enqueue(Outbound::Delta(message.clone(), overflow.cloned(), fan_out.cloned())).is_err() {
            self.queued_delta_bytes.fetch_sub(len, Ordering::Relaxed);
            self.overflow(st, overflow);
        }
    }

    /// Puts a message on the control queue, counted in `unwritten` until the writer wrote it.
    fn enqueue(&self, out: Outbound) -> Result<(), mpsc::error::TrySendError<Outbound>> {
        self.unwritten.fetch_add(1, Ordering::SeqCst);
        let sent = self.ctrl.try_send(out);
        if sent.is_err() {
            self.unwritten.fetch_sub(1, Ordering::SeqCst);
        }
        sent
    }

    /// Writes a delta to the socket from the calling task when no message waits before it, the
    /// writer is not writing and the socket takes the frame without waiting; true when it was
    /// taken (bytes the kernel did not take at once are flushed by the writer, which drops a
    /// socket that does not drain). False leaves the delta to the queue. Never after a close
    /// was asked for: the Close frame is the last frame.
    fn write_now(&self, message: &Bytes) -> bool {
        let Ok(mut sink) = self.sink.try_lock() else { return false };
        let Some(sink) = sink.as_mut() else { return false };
        // Under the lock: the writer takes it before it writes what it dequeued.
        if self.unwritten.load(Ordering::SeqCst) != 0 || self.closing.load(Ordering::SeqCst) {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        if !matches!(Pin::new(&mut *sink).poll_ready(&mut cx), Poll::Ready(Ok(()))) {
            return false;
        }
        if Pin::new(&mut *sink).start_send(Message::Binary(message.clone())).is_err() {
            return false;
        }
        if !matches!(Pin::new(&mut *sink).poll_flush(&mut cx), Poll::Ready(Ok(()))) {
            // Taken but not (all) written, or the socket failed: the writer's flush finishes
            // it or ends the session.
            self.flush_wanted.notify_one();
        }
        self.metrics.deltas_sent.inc();
        true
    }

    /// Follows an overflow rule (a message could not be sent): keeps its state, sends its
    /// wake-up. Without a rule the session cannot know what it missed: it is closed (1011) and
    /// its client reconnects.
    fn overflow(&self, st: &mut SessionState, overflow: Option<&Arc<Overflow>>) {
        match overflow {
            Some(o) => {
                st.adopt(o.state.clone(), o.resume.clone());
                self.metrics.wake("catchup-required");
                self.send_text(o.control.clone());
            }
            None => self.close(close_code::INTERNAL, "a delta could not be delivered"),
        }
    }

    /// Sends one round-response chunk, waiting for queue room (§8.7 backpressure).
    /// Returns false when the session is gone.
    pub async fn send_round_chunk(&self, chunk: RoundChunk) -> bool {
        tokio::select! {
            r = self.round.send(chunk) => r.is_ok(),
            _ = self.closed.cancelled() => false,
        }
    }

    /// Closes the socket with `code`/`reason` (once); the reader and writer stop. The Close
    /// frame goes into its own slot, which the writer takes before anything queued — so a
    /// session whose queue overflowed still gets its 1008.
    pub fn close(&self, code: u16, reason: &str) {
        if self.closing.swap(true, Ordering::SeqCst) {
            return;
        }
        *lock(&self.close_frame) = Some((code, reason.to_owned()));
        self.close_requested.notify_one();
    }

    /// The Close frame requested by [`Session::close`], if any (taken once).
    fn take_close(&self) -> Option<(u16, String)> {
        lock(&self.close_frame).take()
    }

    /// True once [`Session::close`] was called or the session ended.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst) || self.closed.is_cancelled()
    }
}

/// The `reason` of a wake-up text the session rules built, for the metrics label (`other`
/// when it names none).
pub fn wake_reason(control: &str) -> &'static str {
    ["catchup-required", "delta-too-large", "reset-required"].into_iter().find(|r| control.contains(r)).unwrap_or("other")
}

/// Epoch milliseconds (control message timestamps).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Drains the session's queues into the socket until the session closes; sends the §8.5
/// heartbeat and a ping every `heartbeat`; flushes what a direct delta write left unflushed. A
/// requested Close frame is sent before anything still queued (after the round chunks already
/// queued when the gateway is going away, so a finished round is not cut at shutdown). A frame
/// the socket does not take within the session's write timeout ends the session (the peer does
/// not read: no Close can get through). The write half sits in [`Session`]'s slot while the
/// writer runs; every write locks it.
pub async fn run_writer(session: Arc<Session>, sink: WsSink, mut queues: WriterQueues, heartbeat: Duration) {
    *session.sink.lock().await = Some(sink);
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
    loop {
        let sent = tokio::select! {
            biased;
            _ = session.closed.cancelled() => break,
            () = session.close_requested.notified() => {
                let Some((code, reason)) = session.take_close() else { continue };
                if code == close_code::GOING_AWAY {
                    // Shutdown: the round chunks already queued go first, so a round that
                    // finished is not cut before its `END` (bounded: 2 s in all).
                    let flush = async {
                        while let Ok(chunk) = queues.round.try_recv() {
                            if !write_round_chunk(&session, chunk).await {
                                return;
                            }
                        }
                    };
                    let _ = tokio::time::timeout(Duration::from_secs(2), flush).await;
                }
                let frame = CloseFrame { code, reason: reason.into() };
                if let Some(sink) = session.sink.lock().await.as_mut() {
                    let _ = tokio::time::timeout(Duration::from_secs(2), sink.send(Message::Close(Some(frame)))).await;
                }
                // Linger: the reader drains until the peer answers the close (or 1 s), so
                // the connection ends with FIN, not a reset that could eat the frame.
                let _ = tokio::time::timeout(Duration::from_secs(1), session.closed.cancelled()).await;
                break;
            }
            Some(out) = queues.ctrl.recv() => {
                let sent = match out {
                    Outbound::Text(t) => write(&session, Message::Text(t.into())).await,
                    // The pass's hold (`_fan_out`) is let go once the delta was written.
                    Outbound::Delta(bytes, overflow, _fan_out) => {
                        session.queued_delta_bytes.fetch_sub(bytes.len(), Ordering::Relaxed);
                        let in_round = {
                            let mut st = session.state();
                            if st.round_in_flight {
                                // §8.7: no 0x00 while a response streams — the overflow rule instead.
                                session.overflow(&mut st, overflow.as_ref());
                            }
                            st.round_in_flight
                        };
                        in_round || {
                            session.metrics.deltas_sent.inc();
                            write(&session, Message::Binary(bytes)).await
                        }
                    }
                };
                // Written (or given up): a delta may now be written directly.
                session.unwritten.fetch_sub(1, Ordering::SeqCst);
                sent
            }
            Some(chunk) = queues.round.recv() => write_round_chunk(&session, chunk).await,
            () = session.flush_wanted.notified() => match session.sink.lock().await.as_mut() {
                Some(sink) => timed(&session, sink.flush()).await,
                None => false,
            },
            _ = ticker.tick() => {
                let hb = control_text(&ControlMessage::Heartbeat { timestamp: now_ms() });
                write(&session, Message::Text(hb.into())).await && write(&session, Message::Ping(Bytes::from_static(b"hb"))).await
            }
        };
        if !sent {
            break;
        }
    }
    session.closed.cancel();
    let sink = session.sink.lock().await.take();
    if let Some(mut sink) = sink {
        let _ = tokio::time::timeout(Duration::from_secs(2), sink.close()).await;
    }
}

/// Writes one frame, bounded by the session's write timeout. False when the session ended,
/// the socket failed, or the peer did not take the frame in time.
async fn write(session: &Session, msg: Message) -> bool {
    send_on(session, &mut *session.sink.lock().await, msg).await
}

/// [`write`] on the write half the caller has locked.
async fn send_on(session: &Session, sink: &mut Option<WsSink>, msg: Message) -> bool {
    match sink.as_mut() {
        Some(sink) => timed(session, sink.send(msg)).await,
        None => false,
    }
}

/// Runs a send or flush of the write half within the session's write timeout; false as [`write`].
async fn timed<E>(session: &Session, io: impl std::future::Future<Output = Result<(), E>>) -> bool {
    tokio::select! {
        r = tokio::time::timeout(session.write_timeout, io) => match r {
            Ok(r) => r.is_ok(),
            Err(_) => {
                tracing::info!(session = session.id, timeout = ?session.write_timeout, "the socket does not drain, dropping it");
                false
            }
        },
        _ = session.closed.cancelled() => false,
    }
}

/// Writes one round chunk; before the chunk carrying `END`, the round in flight ends — under
/// the write half's lock, so no delta is written between the two. False as [`write`].
async fn write_round_chunk(session: &Session, chunk: RoundChunk) -> bool {
    let mut sink = session.sink.lock().await;
    if chunk.end.is_some() {
        session.state().finish_round();
    }
    let sent = send_on(session, &mut sink, Message::Binary(chunk.bytes)).await;
    if let Some(done) = chunk.end {
        let _ = done.send(());
    }
    sent
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAKE: &str = r#"{"event":"sync","data":{"cursor":5,"requiresPull":true,"reason":"catchup-required","timestamp":1}}"#;

    fn session(queue: usize, delta_budget: usize) -> (Arc<Session>, WriterQueues) {
        let init = SessionInit {
            id: 1,
            session_id: "s".into(),
            partition: "p".into(),
            actor_id: "a".into(),
            client_id: "c".into(),
            allowed_scopes: None,
            queue,
            delta_budget,
            write_timeout: Duration::from_secs(30),
        };
        let state = SessionState::new(Arc::from("plain"), None, "e".into(), BTreeSet::new(), 0);
        Session::new(init, state, Arc::new(Metrics::new()), &CancellationToken::new())
    }

    fn overflow() -> Arc<Overflow> {
        Arc::new(Overflow { state: Arc::from("woken"), control: WAKE.into(), resume: Some((5, Arc::from("resumed"))) })
    }

    fn kinds(s: &Session, q: &mut WriterQueues) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(m) = q.ctrl.try_recv() {
            out.push(match m {
                Outbound::Text(t) if t.contains("catchup-required") => "wake".into(),
                Outbound::Text(_) => "text".into(),
                Outbound::Delta(b, _, _) => format!("delta{}", b.len()),
            });
        }
        if let Some((code, _)) = s.take_close() {
            out.push(format!("close{code}"));
        }
        out
    }

    #[test]
    fn a_full_queue_turns_deltas_into_the_overflow_rule_then_closes_the_session() {
        let (s, mut q) = session(8, 1 << 20);
        for _ in 0..7 {
            let mut st = s.state();
            s.send_message(&mut st, &Bytes::from(vec![7; 11]), Some(&overflow()), None);
        }
        // Deltas stop while a quarter of the queue is still free: the rest follows the overflow
        // rule (its wake-up, its state).
        assert_eq!(&*s.state().state, "woken");
        let got = kinds(&s, &mut q);
        assert_eq!(got.iter().filter(|k| *k == "delta11").count(), 6, "{got:?}");
        assert_eq!(got.last().map(String::as_str), Some("wake"), "{got:?}");
        // Control messages fill the queue; one more closes the session (the peer does not read).
        for _ in 0..8 {
            assert!(s.send_text("{}".into()));
        }
        assert!(!s.send_text("{}".into()));
        assert!(s.is_closing());
        // The Close frame does not need queue room: it waits in its own slot for the writer,
        // which takes it before the queued messages (the peer gets 1008, not a dropped
        // connection).
        assert!(!s.closed.is_cancelled());
        assert_eq!(s.take_close().map(|c| c.0), Some(close_code::POLICY));
        // Closing is once: a later close does not replace the frame.
        s.close(close_code::NORMAL, "again");
        assert_eq!(s.take_close(), None);
    }

    #[test]
    fn queued_delta_bytes_are_bounded() {
        let (s, mut q) = session(64, 100);
        let mut st = s.state();
        s.send_message(&mut st, &Bytes::from(vec![1; 61]), Some(&overflow()), None);
        s.send_message(&mut st, &Bytes::from(vec![1; 61]), Some(&overflow()), None);
        drop(st);
        assert_eq!(kinds(&s, &mut q), vec!["delta61".to_string(), "wake".to_string()]);
    }

    #[test]
    fn no_delta_while_a_round_is_in_flight_and_no_rule_closes() {
        let (s, mut q) = session(64, 1 << 20);
        let mut st = s.state();
        st.round_in_flight = true;
        s.send_message(&mut st, &Bytes::from(vec![1; 11]), Some(&overflow()), None);
        assert_eq!(&*st.state, "woken");
        assert_eq!(st.resume.as_ref().map(|r| r.0), Some(5));
        s.send_message(&mut st, &Bytes::from(vec![1; 11]), None, None);
        drop(st);
        assert_eq!(kinds(&s, &mut q), vec!["wake".to_string(), format!("close{}", close_code::INTERNAL)]);
    }

    #[test]
    fn a_rounds_end_keeps_what_its_reload_answered() {
        let mut st = SessionState::new(Arc::from("before"), None, "e".into(), BTreeSet::new(), 0);
        st.round_in_flight = true;
        // A pass during the round woke the session; the reload's answer is kept at END.
        st.adopt(Arc::from("woken in the round"), Some((9, Arc::from("resumed"))));
        st.round_end = Some((Arc::from("from the floor"), None, "e2".into()));
        st.finish_round();
        assert_eq!((&*st.state, st.resume.is_none(), st.log_epoch.as_str(), st.round_in_flight), ("from the floor", true, "e2", false));
        assert_eq!(st.generation, 1, "a pass computed before END is not delivered");
        // Without an answer the state stays.
        st.round_in_flight = true;
        st.finish_round();
        assert_eq!((&*st.state, st.generation), ("from the floor", 1));
    }

    #[test]
    fn an_ack_resumes_once_it_reaches_the_rules_cursor() {
        let mut st = SessionState::new(Arc::from("woken"), Some((5, Arc::from("resumed"))), "e".into(), BTreeSet::new(), 2);
        st.ack(4);
        assert_eq!((&*st.state, st.acked), ("woken", 4));
        st.ack(3);
        assert_eq!(st.acked, 4, "the highest ack is kept");
        st.ack(6);
        assert_eq!((&*st.state, st.resume.is_none()), ("resumed", true));
        // Adopting a rule does not apply it with an old ack: only a new ack does.
        st.adopt(Arc::from("woken again"), Some((6, Arc::from("resumed again"))));
        assert_eq!(&*st.state, "woken again");
        st.ack(6);
        assert_eq!(&*st.state, "resumed again");
    }

    #[test]
    fn a_reload_into_another_log_epoch_forgets_the_old_timelines_acks() {
        let mut st = SessionState::new(Arc::from("s"), None, "e1".into(), BTreeSet::new(), -1);
        st.ack(5000);
        // Same epoch: the ack stands.
        st.adopt_reloaded(Arc::from("same"), Some((10, Arc::from("resumed"))), "e1".into());
        assert_eq!((st.acked, st.log_epoch.as_str()), (5000, "e1"));
        // A new timeline restarts at cursor 0: ack 5000 of the old one must not resume it.
        st.adopt_reloaded(Arc::from("caught up?"), Some((10, Arc::from("resumed"))), "e2".into());
        assert_eq!((st.acked, st.log_epoch.as_str()), (-1, "e2"));
        st.ack(3);
        assert_eq!(&*st.state, "caught up?", "not caught up yet");
        st.ack(10);
        assert_eq!(&*st.state, "resumed");
    }
}
