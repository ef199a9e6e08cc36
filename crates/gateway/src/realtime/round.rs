//! §8.7 sync rounds over the socket: the reassembled request runs through the SAME code as
//! `POST /sync` ([`crate::db::round::run_round`], persist before acknowledging) with
//! `connection_client_id` = the socket's clientId. A request-level failure becomes the
//! round's response via `syncular.error_response` (`RESP_HEADER`, `ERROR`, `END`). The
//! response goes out as `0x01` chunks (whole frames, ≤ 64 KiB each), each awaiting queue room
//! (backpressure); the last chunk ends exactly at `END`. While the round is in flight the
//! session gets no `0x00` message. At round end the wire version becomes the request's and
//! the registrations are reloaded (a failed reload keeps the previous ones).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::hub::{Hub, RefreshMode};
use super::session::{close_code, RoundChunk, Session};
use crate::db::realtime::error_response;
use crate::db::round::{run_round, RoundArgs};
use crate::framing::{round_chunks, MAX_ROUND_CHUNK, TAG_ROUND};

/// Marks the round in flight and runs it on its own task (the socket keeps reading: acks,
/// presence, and pipelining detection continue).
pub fn start(hub: &Arc<Hub>, session: &Arc<Session>, request: Vec<u8>) {
    let wire = u16::from_le_bytes([request[4], request[5]]);
    {
        let mut st = session.state();
        st.round_in_flight = true;
        st.rounds_started += 1;
        st.delivered_at_round_start = st.delivered;
    }
    hub.round_started();
    let (hub, session) = (hub.clone(), session.clone());
    tokio::spawn(async move {
        run(&hub, &session, request, wire).await;
        hub.round_finished();
    });
}

async fn run(hub: &Arc<Hub>, session: &Arc<Session>, request: Vec<u8>, wire: u16) {
    let started = Instant::now();
    let args = RoundArgs {
        partition: &session.partition,
        actor_id: &session.actor_id,
        request: &request,
        allowed_scopes: session.allowed_scopes.as_ref(),
        connection_client_id: Some(&session.client_id),
    };
    let (response, ok) = match run_round(&hub.pool, &args).await {
        Ok(bytes) => (bytes, true),
        Err(e) => {
            hub.metrics.error(e.code_str());
            tracing::debug!(session = session.id, code = e.code_str(), "socket round failed");
            match error_response(&hub.pool, &session.partition, wire, &e.to_json()).await {
                Ok(bytes) => (bytes, false),
                Err(e2) => {
                    hub.metrics.error(e2.code_str());
                    tracing::error!(session = session.id, code = e2.code_str(), "cannot build the round's error response");
                    session.state().round_in_flight = false;
                    session.close(close_code::INTERNAL, "the round failed and no error response could be built");
                    return;
                }
            }
        }
    };
    hub.metrics.round("socket", ok, started.elapsed().as_secs_f64());
    let ranges = round_chunks(&response, MAX_ROUND_CHUNK);
    let n = ranges.len();
    for (i, range) in ranges.into_iter().enumerate() {
        let mut tagged = Vec::with_capacity(range.len() + 1);
        tagged.push(TAG_ROUND);
        tagged.extend_from_slice(&response[range]);
        let chunk = RoundChunk { bytes: Bytes::from(tagged), last: i + 1 == n, written: None };
        if !session.send_round_chunk(chunk).await {
            return;
        }
    }
    session.state().wire_version = i64::from(wire);
    hub.refresh(session, RefreshMode::RoundEnd).await;
}
