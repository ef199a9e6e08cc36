//! One realtime connection's state (§8) and its bounded outbound path.
//!
//! [`Session`] is shared between the socket reader, the writer task, the partition worker
//! (deltas) and round tasks; its mutable [`SessionState`] sits behind a short-held mutex.
//! Outbound traffic goes through two bounded queues drained by one writer task
//! ([`run_writer`]): control messages and deltas (`try_send`, never blocking a fan-out) and
//! round-response chunks (awaited: §8.7 backpressure). When the control queue is short of
//! room a delta becomes a `catchup-required` wake-up (the session is suppressed), and a
//! session that cannot even take a control message is closed (1008) — a socket that never
//! reads cannot grow the gateway's memory. The Close frame never needs queue room: it has its
//! own slot, which the writer checks before the queues. Every frame must be taken by the
//! socket within `--write-timeout-secs`; a socket that does not drain is dropped. The writer
//! also sends the §8.5 heartbeat and WebSocket pings.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use bytes::Bytes;
use futures_util::stream::SplitSink;
use futures_util::SinkExt;
use serde_json::{Map, Value};
use syncular_protocol::realtime::{control_text, ControlMessage, WakeReason};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

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

/// A session's registrations as `realtime_open` returned them (contract §2), with their JSON
/// text computed once: the part of a delta group's identity that changes least, compared and
/// hashed on every pass without re-serializing.
#[derive(Debug, Clone, PartialEq)]
pub struct Registrations {
    value: Value,
    text: Arc<str>,
}

impl Registrations {
    /// Wraps `realtime_open`'s `registrations` (a JSON array).
    pub fn new(value: Value) -> Self {
        let text = Arc::from(value.to_string());
        Registrations { value, text }
    }

    /// The JSON handed back to `realtime_deltas`.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The JSON text (group key part).
    pub fn text(&self) -> &Arc<str> {
        &self.text
    }

    /// No registration (nothing can match).
    pub fn is_empty(&self) -> bool {
        self.value.as_array().is_none_or(Vec::is_empty)
    }
}

/// Mutable per-session state (§8 and contract §3 group fields).
#[derive(Debug, Clone)]
pub struct SessionState {
    /// `registrations` verbatim from `realtime_open` (JSON array).
    pub registrations: Registrations,
    /// Presence grant: the registrations' scope keys (§8.6.3).
    pub scope_keys: BTreeSet<String>,
    /// Delta wire version (1, 2 or 3).
    pub wire_version: i64,
    /// Partition `logEpoch` from the last open/reload.
    pub log_epoch: String,
    /// Served schema version from the last open/reload.
    pub schema_version: i64,
    /// Every commit ≤ this was delivered, woken for, or known not to match.
    pub delivered: i64,
    /// §8.2 wake pending: no delta until an ack reaches `delivered`.
    pub suppressed: bool,
    /// Highest cursor the client acknowledged.
    pub acked: i64,
    /// A §8.7 round is in flight (no `0x00` messages): from its request until its `END` is
    /// handed to the socket ([`SessionState::finish_round`]).
    pub round_in_flight: bool,
    /// Rounds started so far (generation guard of a deltas call).
    pub rounds_started: u64,
    /// What the round-end reload of the round in flight read, applied at its `END`.
    pub round_end: Option<RoundEnd>,
    /// Bumped whenever registrations (or epoch/schema) change, or a scopes notification makes
    /// them stale: a deltas result computed under an older generation is not delivered.
    pub generation: u64,
    /// Registration reloads issued / the newest one applied (a slower reload never
    /// overwrites a newer one).
    pub refresh_issued: u64,
    /// See `refresh_issued`.
    pub refresh_applied: u64,
    /// §8.6.4 presence rate state per scope key.
    pub presence_rate: HashMap<String, PresenceRate>,
}

/// What a round-end registration reload read (§8.7), applied when the round's `END` is
/// handed to the socket ([`SessionState::finish_round`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundEnd {
    /// The client record's cursor after the round (`realtime_open`'s `cursor`, −1 without a
    /// record): the minimum `nextCursor` over the active subscriptions of the round's pull
    /// (§4.5), or — for a round without a pull half, or a failed one — what an earlier pull
    /// or ack recorded. The client holds every matching commit up to it.
    pub floor: i64,
    /// The reload changed the registrations: commits past the floor were evaluated under the
    /// previous ones and are evaluated again.
    pub rewind: bool,
}

impl SessionState {
    /// The round in flight ends: its `END` is being handed to the socket (the caller holds
    /// the state lock, so no delta is queued between this and `END`). With what its reload
    /// read, the session's delivered cursor becomes the floor the client provably holds —
    /// the client record's cursor (not the in-memory ack: an ack of the previous timeline may
    /// still arrive after a new one began) — whenever the session is behind it, or was suppressed
    /// (a wake-up during the round, a delta dropped), or its registrations changed; the
    /// suppression lifts. The next pass then sends the commits past the floor — those made
    /// while the round ran included — as `0x00` deltas after `END`: no gap (the window starts
    /// where the client is), no duplicate of what the round's pull returned (it starts past
    /// it). Otherwise (not suppressed, nothing changed) every commit up to `delivered` already
    /// went out as a delta and the cursor stays. Without a reload result (it failed, or the
    /// log's epoch changed and a `reset-required` wake-up went out) the §8.2 suppression path
    /// stays: the client's next pull and ack lift it.
    pub fn finish_round(&mut self) {
        self.round_in_flight = false;
        let Some(RoundEnd { floor, rewind }) = self.round_end.take() else { return };
        if floor < 0 {
            return;
        }
        if floor >= self.delivered || self.suppressed || rewind {
            self.delivered = floor;
            self.suppressed = false;
        }
    }
}

/// Per-key presence rate-cap state (latest-wins coalescing, §8.6.4).
#[derive(Debug, Clone, Default)]
pub struct PresenceRate {
    /// When the last publish was fanned out.
    pub last_fanout: Option<std::time::Instant>,
    /// The newest document held back in the current window.
    pub pending: Option<Map<String, Value>>,
    /// A flush of `pending` is scheduled.
    pub timer_armed: bool,
}

/// A message for the writer's control queue.
#[derive(Debug)]
pub enum Outbound {
    /// A JSON control message (text frame).
    Text(String),
    /// A `0x00`-tagged delta (checked against a round in flight when written).
    Delta(Bytes),
}

/// One chunk of a round response; `last` ends the round ([`SessionState::finish_round`] right
/// before the chunk is written, so no delta can precede the response's `END`).
#[derive(Debug)]
pub struct RoundChunk {
    /// `0x01`-tagged payload.
    pub bytes: Bytes,
    /// This chunk carries the response's `END`.
    pub last: bool,
    /// Fired once the chunk has been handed to the socket.
    pub written: Option<oneshot::Sender<()>>,
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
    /// The scope keys presence was last reconciled to ([`super::presence::reconcile`]): the
    /// lock serializes reconciliations, so two reloads never apply their key changes out of
    /// order.
    pub(crate) presence_grant: Mutex<BTreeSet<String>>,
    ctrl: mpsc::Sender<Outbound>,
    round: mpsc::Sender<RoundChunk>,
    queued_delta_bytes: AtomicUsize,
    delta_budget: usize,
    ctrl_capacity: usize,
    closing: AtomicBool,
    /// The Close frame to send ([`Session::close`]): its own slot, never queue room.
    close_frame: Mutex<Option<(u16, String)>>,
    close_requested: tokio::sync::Notify,
    write_timeout: Duration,
    /// Cancelled when the session ends (reader, writer and timers stop).
    pub closed: CancellationToken,
    metrics: Arc<Metrics>,
}

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
            presence_grant: Mutex::new(state.scope_keys.clone()),
            state: Mutex::new(state),
            ctrl: ctrl_tx,
            round: round_tx,
            queued_delta_bytes: AtomicUsize::new(0),
            delta_budget: init.delta_budget,
            ctrl_capacity: init.queue.max(2),
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
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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
        match self.ctrl.try_send(Outbound::Text(text)) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::info!(session = self.id, "outbound queue full, closing the socket");
                self.close(close_code::POLICY, "outbound queue overflow: the client does not read");
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Sends a §8.3 wake-up and marks the session suppressed (caller holds the state lock).
    pub fn wake(&self, st: &mut SessionState, reason: WakeReason, cursor: i64) {
        st.suppressed = true;
        self.metrics.wake(reason.as_str());
        self.send_control(&ControlMessage::Wake { cursor, reason, timestamp: now_ms() });
    }

    /// Queues a delta (`0x00`-tagged SSP2 response bytes, shared by the sessions of a group),
    /// or — when the queue has no room for it — a `catchup-required` wake-up instead (caller
    /// holds the state lock).
    pub fn send_delta(&self, st: &mut SessionState, tagged: &Bytes, cursor: i64) {
        let len = tagged.len();
        let room = self.ctrl.capacity() > self.ctrl_capacity / 4
            && self.queued_delta_bytes.load(Ordering::Relaxed) + len <= self.delta_budget;
        if !room || st.round_in_flight || st.suppressed {
            self.wake(st, WakeReason::CatchupRequired, cursor);
            return;
        }
        self.queued_delta_bytes.fetch_add(len, Ordering::Relaxed);
        if self.ctrl.try_send(Outbound::Delta(tagged.clone())).is_err() {
            self.queued_delta_bytes.fetch_sub(len, Ordering::Relaxed);
            self.wake(st, WakeReason::CatchupRequired, cursor);
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
        *self.close_frame.lock().unwrap_or_else(|p| p.into_inner()) = Some((code, reason.to_owned()));
        self.close_requested.notify_one();
    }

    /// The Close frame requested by [`Session::close`], if any (taken once).
    fn take_close(&self) -> Option<(u16, String)> {
        self.close_frame.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// True once [`Session::close`] was called or the session ended.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst) || self.closed.is_cancelled()
    }
}

/// Epoch milliseconds (control message timestamps).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Drains the session's queues into the socket until the session closes; sends the §8.5
/// heartbeat and a ping every `heartbeat`. A requested Close frame is sent before anything
/// still queued (after the round chunks already queued when the gateway is going away, so a
/// finished round is not cut at shutdown). A frame the socket does not take within the
/// session's write timeout ends the session (the peer does not read: no Close can get through).
pub async fn run_writer(
    session: Arc<Session>,
    mut sink: SplitSink<WebSocket, Message>,
    mut queues: WriterQueues,
    heartbeat: Duration,
) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
    loop {
        let msg = tokio::select! {
            biased;
            _ = session.closed.cancelled() => break,
            () = session.close_requested.notified() => {
                let Some((code, reason)) = session.take_close() else { continue };
                if code == close_code::GOING_AWAY {
                    flush_queued_round(&session, &mut sink, &mut queues).await;
                }
                let frame = CloseFrame { code, reason: reason.into() };
                let _ = tokio::time::timeout(Duration::from_secs(2), sink.send(Message::Close(Some(frame)))).await;
                // Linger: the reader drains until the peer answers the close (or 1 s), so
                // the connection ends with FIN, not a reset that could eat the frame.
                let _ = tokio::time::timeout(Duration::from_secs(1), session.closed.cancelled()).await;
                break;
            }
            Some(out) = queues.ctrl.recv() => match out {
                Outbound::Text(t) => Message::Text(t.into()),
                Outbound::Delta(bytes) => {
                    session.queued_delta_bytes.fetch_sub(bytes.len(), Ordering::Relaxed);
                    let mut st = session.state();
                    if st.round_in_flight {
                        // §8.7: no 0x00 while a response streams — the suppression path.
                        let cursor = st.delivered;
                        session.wake(&mut st, WakeReason::CatchupRequired, cursor);
                        continue;
                    }
                    session.metrics.deltas_sent.inc();
                    Message::Binary(bytes)
                }
            },
            Some(chunk) = queues.round.recv() => {
                if chunk.last {
                    session.state().finish_round();
                }
                let sent = write(&session, &mut sink, Message::Binary(chunk.bytes)).await;
                if let Some(done) = chunk.written {
                    let _ = done.send(());
                }
                if !sent {
                    break;
                }
                continue;
            }
            _ = ticker.tick() => {
                let hb = control_text(&ControlMessage::Heartbeat { timestamp: now_ms() });
                if !write(&session, &mut sink, Message::Text(hb.into())).await
                    || !write(&session, &mut sink, Message::Ping(Bytes::from_static(b"hb"))).await
                {
                    break;
                }
                continue;
            }
        };
        if !write(&session, &mut sink, msg).await {
            break;
        }
    }
    session.closed.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(2), sink.close()).await;
}

/// Writes one frame, bounded by the session's write timeout. False when the session ended,
/// the socket failed, or the peer did not take the frame in time.
async fn write(session: &Session, sink: &mut SplitSink<WebSocket, Message>, msg: Message) -> bool {
    tokio::select! {
        r = tokio::time::timeout(session.write_timeout, sink.send(msg)) => match r {
            Ok(r) => r.is_ok(),
            Err(_) => {
                tracing::info!(session = session.id, timeout = ?session.write_timeout, "the socket does not drain, dropping it");
                false
            }
        },
        _ = session.closed.cancelled() => false,
    }
}

/// At shutdown (1001): writes the round chunks already queued, so a round that finished is
/// not cut before its `END` (bounded: 2 s in all).
async fn flush_queued_round(session: &Session, sink: &mut SplitSink<WebSocket, Message>, queues: &mut WriterQueues) {
    let flush = async {
        while let Ok(chunk) = queues.round.try_recv() {
            if chunk.last {
                session.state().finish_round();
            }
            let sent = write(session, sink, Message::Binary(chunk.bytes)).await;
            if let Some(done) = chunk.written {
                let _ = done.send(());
            }
            if !sent {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), flush).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let state = SessionState {
            registrations: Registrations::new(json!([])),
            scope_keys: BTreeSet::new(),
            wire_version: 2,
            log_epoch: "e".into(),
            schema_version: 1,
            delivered: 0,
            suppressed: false,
            acked: 0,
            round_in_flight: false,
            rounds_started: 0,
            round_end: None,
            generation: 0,
            refresh_issued: 0,
            refresh_applied: 0,
            presence_rate: HashMap::new(),
        };
        Session::new(init, state, Arc::new(Metrics::new()), &CancellationToken::new())
    }

    fn kinds(s: &Session, q: &mut WriterQueues) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(m) = q.ctrl.try_recv() {
            out.push(match m {
                Outbound::Text(t) if t.contains("catchup-required") => "wake".into(),
                Outbound::Text(_) => "text".into(),
                Outbound::Delta(b) => format!("delta{}", b.len()),
            });
        }
        if let Some((code, _)) = s.take_close() {
            out.push(format!("close{code}"));
        }
        out
    }

    #[test]
    fn a_full_queue_turns_deltas_into_a_wake_then_closes_the_session() {
        let (s, mut q) = session(8, 1 << 20);
        for _ in 0..7 {
            let mut st = s.state();
            s.send_delta(&mut st, &Bytes::from(vec![7; 11]), 5);
        }
        // Deltas stop while a quarter of the queue is still free: the rest is a wake-up, and
        // the session is suppressed from then on.
        assert!(s.state().suppressed);
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
        s.send_delta(&mut st, &Bytes::from(vec![1; 61]), 9);
        s.send_delta(&mut st, &Bytes::from(vec![1; 61]), 9);
        drop(st);
        assert_eq!(kinds(&s, &mut q), vec!["delta61".to_string(), "wake".to_string()]);
    }

    #[test]
    fn a_rounds_end_resumes_from_what_the_client_holds() {
        let (s, _q) = session(8, 1 << 20);
        let end = |floor, rewind| Some(RoundEnd { floor, rewind });
        // A commit woke the session during the round (delivered 12, suppressed); the round's
        // pull reached 10: the cursor goes back to 10 and the suppression lifts, so the next
        // pass sends 11..=12 as deltas.
        let mut st = s.state().clone();
        (st.round_in_flight, st.delivered, st.suppressed, st.acked, st.round_end) = (true, 12, true, 5, end(10, false));
        st.finish_round();
        assert_eq!((st.round_in_flight, st.delivered, st.suppressed, st.round_end), (false, 10, false, None));
        // The pull reached past what the session was told (the notification comes later):
        // the cursor moves up, so that commit is not sent again as a delta.
        (st.round_in_flight, st.delivered, st.suppressed, st.round_end) = (true, 7, false, end(10, false));
        st.finish_round();
        assert_eq!((st.delivered, st.suppressed), (10, false));
        // Not suppressed and the registrations unchanged: everything up to `delivered` went
        // out as deltas; a round without a pull half (floor from an older pull) keeps it.
        (st.round_in_flight, st.delivered, st.round_end) = (true, 15, end(10, false));
        st.finish_round();
        assert_eq!(st.delivered, 15);
        // Changed registrations: commits evaluated under the old ones are evaluated again.
        (st.round_in_flight, st.delivered, st.round_end) = (true, 15, end(10, true));
        st.finish_round();
        assert_eq!(st.delivered, 10);
        // The floor is the record's, whatever was acked (an ack can be of an older timeline).
        (st.round_in_flight, st.delivered, st.suppressed, st.acked, st.round_end) = (true, 15, true, 13, end(0, false));
        st.finish_round();
        assert_eq!((st.delivered, st.suppressed), (0, false));
        // No reload result (failed, or a new timeline): the suppression path stays.
        (st.round_in_flight, st.delivered, st.suppressed, st.round_end) = (true, 15, true, None);
        st.finish_round();
        assert_eq!((st.round_in_flight, st.delivered, st.suppressed), (false, 15, true));
        // No client record: nothing is known.
        (st.round_in_flight, st.delivered, st.suppressed, st.acked, st.round_end) = (true, 15, true, -1, end(-1, true));
        st.finish_round();
        assert_eq!((st.delivered, st.suppressed), (15, true));
    }

    #[test]
    fn no_delta_while_a_round_is_in_flight() {
        let (s, mut q) = session(64, 1 << 20);
        let mut st = s.state();
        st.round_in_flight = true;
        s.send_delta(&mut st, &Bytes::from(vec![1; 11]), 3);
        assert!(st.suppressed);
        drop(st);
        assert_eq!(kinds(&s, &mut q), vec!["wake".to_string()]);
    }
}
