//! `GET {mount}/realtime?clientId=…` (§8.1): everything that can fail is answered as HTTP
//! (§10.1 JSON) BEFORE upgrading — missing `clientId` (400 `sync.invalid_request`), auth (401
//! `sync.auth_required`), caps (429 `sync.websocket_connection_limit`), shutdown (503), and
//! the `syncular.realtime_connect` errors (e.g. 400 `sync.invalid_client_id`). After the
//! upgrade: `hello`, the presence snapshot, then the read loop — acks and presence (text),
//! `0x01` round chunks (binary). Broken input closes the socket: text that is not a valid
//! control message (1007), an unknown binary tag, a bad request header, bytes past `END`, a
//! new round while one is in flight (1002), a request over `--max-body-bytes` (1009).
//! Unknown control events/types are tolerated (§8.1). Idle sockets are closed (1001).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::rejection::QueryRejection;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures_util::stream::SplitStream;
use futures_util::StreamExt;
use syncular_protocol::realtime::{parse_control, ControlMessage};
use syncular_protocol::realtime_session::Connected;

use super::hub::{Hub, Slot};
use super::presence;
use super::round;
use super::session::{close_code, now_ms, run_writer, Session, SessionInit, SessionState};
use crate::auth::Identity;
use crate::db::session::{connect, Answer, Reason};
use crate::db::ApiError;
use crate::framing::{FramingError, TAG_ROUND};
use crate::http::error_response;
use crate::AppState;

/// The upgrade handler.
pub async fn upgrade(
    State(gw): State<AppState>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let opened = async {
        // `Query` decodes lossily (%ff → U+FFFD): different clientIds would become one.
        let utf8 = uri.query().is_none_or(|q| percent_encoding::percent_decode_str(q).decode_utf8().is_ok());
        let (Ok(Query(query)), true) = (query, utf8) else {
            return Err(ApiError::invalid_request("the query string is not percent-encoded UTF-8"));
        };
        let ws = ws.map_err(|_| ApiError::invalid_request("expected a WebSocket upgrade (§8.1)"))?;
        if !valid_key(&headers) {
            return Err(ApiError::invalid_request("Sec-WebSocket-Key must be 16 bytes in base64 (RFC 6455 §4.2.1)"));
        }
        let client_id = query.get("clientId").filter(|c| !c.is_empty()).cloned();
        let client_id = client_id.ok_or_else(|| ApiError::invalid_request("query parameter clientId is required (§8.1)"))?;
        let identity = gw.auth.authenticate(&headers, query.get("access_token").map(String::as_str))?;
        // Held until the session ends (or the upgrade is abandoned).
        let slot = gw.hub.reserve(&identity.partition, &identity.actor_id, &client_id)?;
        let opened = connect(&gw.pool, &identity.partition, &identity.actor_id, &client_id, identity.allowed_scopes.as_ref()).await?;
        Ok((ws, identity, client_id, opened, slot))
    };
    let (ws, identity, client_id, opened, slot) = match opened.await {
        Ok(opened) => opened,
        Err(e) => return error_response(&gw, "/realtime", e),
    };
    let s = &gw.hub.settings;
    let write_max = (s.max_delta_bytes as usize).max(crate::framing::MAX_ROUND_CHUNK).max(s.presence_max_bytes) + 64 * 1024;
    let hub = gw.hub.clone();
    ws.read_buffer_size(4 * 1024)
        .write_buffer_size(0)
        .max_write_buffer_size(write_max)
        .max_message_size(s.ws_max_message_bytes)
        .max_frame_size(s.ws_max_message_bytes)
        .on_upgrade(move |socket| serve(hub, identity, client_id, opened, slot, socket))
        .into_response()
}

/// RFC 6455 §4.2.1: the key is the base64 of 16 bytes (the upgrade extractor only checks it is there).
fn valid_key(headers: &HeaderMap) -> bool {
    use base64::Engine;
    let key = headers.get("sec-websocket-key").map(|k| k.as_bytes()).unwrap_or_default();
    base64::engine::general_purpose::STANDARD.decode(key).is_ok_and(|k| k.len() == 16)
}

/// Registers the session with registrations resolved after the last host refresh: when a
/// `syncular_scopes` notification for its actor or its whole partition (or a LISTEN
/// reconnect) came in since the slot's epoch, reload (`realtime_reload(…, 'connect')`: a
/// state that differs from the one `hello` described comes with a `catchup-required`
/// wake-up) and try again — or close (1008) a session whose scopes came from its credential,
/// which cannot be re-resolved. Returns false when the session was closed instead (a failed
/// reload: 1011).
async fn join(hub: &Arc<Hub>, session: &Arc<Session>, mut latest: i64, slot: &mut Slot) -> bool {
    while !hub.add(session, slot, latest) {
        match hub.refresh(session, Reason::Connect).await {
            Some(l) => latest = l,
            None => return false,
        }
    }
    true
}

/// The session's slot is given back before the session leaves the hub (and `sessions_open`),
/// so a client that saw the session gone can open a new one at once.
async fn serve(hub: Arc<Hub>, identity: Identity, client_id: String, opened: Answer<Connected>, mut slot: Slot, socket: WebSocket) {
    let (sink, stream) = socket.split();
    // A session authenticated by an expiring credential (a JWT's `exp`) is closed when it
    // expires: the client reconnects with a fresh token, which is authenticated — and its
    // scopes resolved — anew. A session opened on an auth lease (§7.3.3) closes at the lease's
    // expiry: its next connection needs a live resolver or a fresh lease. Whichever comes first.
    let expiry = [
        (identity.expires_at_ms, "sync.auth_required: the credential expired; reconnect with a fresh one"),
        (opened.answer.lease_expires_at_ms, "sync.auth_lease_required: the auth lease this session was opened on expired"),
    ]
    .into_iter()
    .filter_map(|(at, reason)| Some((at?, reason)))
    .min_by_key(|(at, _)| *at);
    let init = SessionInit {
        id: hub.next_session_id(),
        session_id: opened.answer.session_id.clone(),
        partition: identity.partition,
        actor_id: identity.actor_id,
        client_id,
        allowed_scopes: identity.allowed_scopes,
        queue: hub.settings.session_queue,
        delta_budget: (hub.settings.max_delta_bytes as usize).max(256 * 1024) * 2,
        write_timeout: hub.settings.limits.write_timeout,
    };
    let Answer { answer: connected, state, resume } = opened;
    let keys = connected.scope_keys.iter().cloned().collect();
    let first = SessionState::new(state, resume, connected.log_epoch.clone(), keys, -1);
    let (session, queues) = Session::new(init, first, hub.metrics.clone(), &hub.shutdown);
    session.send_text(connected.hello);
    let writer = tokio::spawn(run_writer(session.clone(), sink, queues, hub.settings.heartbeat));
    if !join(&hub, &session, connected.latest_cursor, &mut slot).await {
        let _ = writer.await;
        return;
    }
    presence::reconcile(&hub, &session);
    if let Some((at, reason)) = expiry {
        close_at(&session, at, reason);
    }
    tracing::debug!(session = session.id, "realtime session open");
    read_loop(&hub, &session, stream).await;
    session.closed.cancel();
    drop(slot);
    hub.remove(&session);
    let _ = writer.await;
    tracing::debug!(session = session.id, "realtime session closed");
}

/// Closes the session (1008, `reason`) at `expires_at_ms`.
fn close_at(session: &Arc<Session>, expires_at_ms: i64, reason: &'static str) {
    let session = session.clone();
    let left = Duration::from_millis(u64::try_from(expires_at_ms.saturating_sub(now_ms())).unwrap_or(0));
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep(left) => session.close(close_code::POLICY, reason),
            _ = session.closed.cancelled() => {}
        }
    });
}

async fn read_loop(hub: &Arc<Hub>, session: &Arc<Session>, mut stream: SplitStream<WebSocket>) {
    let mut scanner = round::Assembler::new(hub, session);
    let idle = hub.settings.idle_timeout;
    // One timer for the whole session, moved only when it fires (not re-armed per message).
    let (cancelled, deadline) = (session.closed.cancelled(), tokio::time::sleep(idle));
    tokio::pin!(cancelled, deadline);
    let mut last_read = tokio::time::Instant::now();
    while !session.is_closing() {
        let next = tokio::select! {
            _ = &mut cancelled => break,
            () = &mut deadline => {
                if last_read.elapsed() >= idle {
                    session.close(close_code::GOING_AWAY, "idle timeout");
                } else {
                    deadline.as_mut().reset(last_read + idle);
                }
                continue;
            }
            next = stream.next() => next,
        };
        last_read = tokio::time::Instant::now();
        match next {
            None | Some(Ok(Message::Close(_))) => break,
            Some(Err(e)) => {
                let code = if e.to_string().to_ascii_lowercase().contains("too long") || e.to_string().contains("Space limit") {
                    close_code::TOO_BIG
                } else {
                    close_code::PROTOCOL
                };
                tracing::debug!(session = session.id, error = %e, "socket read failed");
                session.close(code, "unreadable WebSocket frame");
            }
            Some(Ok(Message::Text(text))) => on_text(hub, session, text.as_str()),
            Some(Ok(Message::Binary(bytes))) => on_binary(hub, session, &mut scanner, &bytes),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
        }
    }
    // Closing: drain (and ignore) what the peer still sends until its close or 1 s.
    let linger = async {
        while let Some(Ok(message)) = stream.next().await {
            if matches!(message, Message::Close(_)) {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), linger).await;
}

fn on_text(hub: &Arc<Hub>, session: &Arc<Session>, text: &str) {
    match parse_control(text) {
        Ok(ControlMessage::Ack { cursor }) => hub.ack(session, cursor),
        Ok(ControlMessage::PresencePublish { scope_key, doc }) => presence::publish(hub, session, scope_key, doc),
        // A presence event in the server→client shape is a malformed publish (§8.6.2).
        Ok(ControlMessage::PresenceFanout { .. } | ControlMessage::PresenceRejected { .. }) => {
            session.close(close_code::INVALID_PAYLOAD, "malformed presence control message (§8.6.2)")
        }
        // Unknown events/types, and server-direction events echoed back, are tolerated (§8.1).
        Ok(_) => {}
        Err(e) => {
            tracing::debug!(session = session.id, error = %e, "malformed control message");
            session.close(close_code::INVALID_PAYLOAD, "malformed control message (§8.1)");
        }
    }
}

fn on_binary(hub: &Arc<Hub>, session: &Arc<Session>, scanner: &mut round::Assembler, bytes: &[u8]) {
    let Some((&tag, payload)) = bytes.split_first() else {
        session.close(close_code::PROTOCOL, "empty binary message");
        return;
    };
    if tag != TAG_ROUND {
        session.close(close_code::PROTOCOL, "unexpected channel tag (§8.7)");
        return;
    }
    if session.state().round_in_flight {
        session.close(close_code::PROTOCOL, "sync round begun while a response stream is in flight (§8.7)");
        return;
    }
    match scanner.push(payload) {
        Ok(None) => {}
        Ok(Some(request)) => round::start(hub, session, request),
        Err(FramingError::TooLarge { .. }) => session.close(close_code::TOO_BIG, "sync request over the size limit"),
        Err(e) => {
            tracing::debug!(session = session.id, error = %e, "broken round stream");
            session.close(close_code::PROTOCOL, "unframed or pipelined sync round stream (§8.7)");
        }
    }
}
