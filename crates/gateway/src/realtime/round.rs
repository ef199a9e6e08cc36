//! §8.7 sync rounds over the socket: the reassembled request runs through the SAME code as
//! `POST /sync` ([`crate::db::round::run_round`], persist before acknowledging) with
//! `connection_client_id` = the socket's clientId. A request-level failure becomes the
//! round's response via `syncular.error_response` (`RESP_HEADER`, `ERROR`, `END`). The
//! response goes out as `0x01` chunks (whole frames, ≤ 64 KiB each), each awaiting queue room
//! (backpressure); the last chunk ends exactly at `END`. While the round is in flight, passes
//! give the session wake-ups for matching commits, never a `0x00` message (§8.7 interleaving).
//! The round-end reload (`syncular.realtime_reload(…, 'round-end', wire_version)`) runs while
//! the response streams: its scope keys take effect before `END`, its state — moved by the
//! rules to what the round's pull delivered — at `END`; a pass follows, so commits made during
//! the round arrive as deltas after it (a failed reload keeps the previous state).
//!
//! Memory: the request being reassembled ([`Assembler`]) and the response being sent are
//! leased from the gateway-wide round budget (`--round-buffer-bytes`,
//! [`super::limits::ByteBudget`]). A round that finds no room is refused by closing the socket
//! with 1013 (try again later) — never by waiting with the bytes in hand; the client
//! reconnects and retries (a push already committed is answered from its idempotency key).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::deltas::Work;
use super::hub::Hub;
use super::limits::{ByteBudget, Lease};
use super::session::{close_code, RoundChunk, Session};
use crate::db::realtime::error_response;
use crate::db::round::{run_round, RoundArgs};
use crate::db::session::Reason;
use crate::framing::{round_chunks, FramingError, RequestScanner, MAX_ROUND_CHUNK, TAG_ROUND};

/// Streaming reassembly of a socket round's request ([`RequestScanner`]) whose buffered bytes
/// are leased from the gateway-wide round budget. When the budget has no room for a chunk the
/// socket is closed with 1013 and the chunk is dropped.
pub struct Assembler {
    scanner: RequestScanner,
    limit: usize,
    budget: ByteBudget,
    lease: Lease,
    session: Arc<Session>,
}

/// A complete request and the budget lease that covers its bytes.
pub struct Request {
    bytes: Vec<u8>,
    lease: Lease,
}

impl Assembler {
    /// An assembler for `session`'s rounds (requests ≤ `--max-body-bytes`).
    pub fn new(hub: &Hub, session: &Arc<Session>) -> Self {
        let (limit, budget) = (hub.settings.max_body_bytes, hub.settings.limits.round_bytes.clone());
        Assembler { scanner: RequestScanner::new(limit), limit, lease: budget.lease(), budget, session: session.clone() }
    }

    /// Appends a chunk ([`RequestScanner::push`]). Over the round budget: the socket is closed
    /// with 1013 and `Ok(None)` returned.
    ///
    /// Errors: the scanner's (connection-fatal) framing errors.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Option<Request>, FramingError> {
        let fits_limit = self.scanner.buffered().saturating_add(chunk.len()) <= self.limit;
        if fits_limit && !self.lease.try_grow(chunk.len()) {
            tracing::info!(session = self.session.id, buffered = self.scanner.buffered(), "round buffer budget exhausted: closing the socket");
            self.session.close(close_code::TRY_AGAIN_LATER, "gateway busy: round buffer budget exhausted, retry later");
            return Ok(None);
        }
        Ok(self.scanner.push(chunk)?.map(|bytes| Request { bytes, lease: std::mem::replace(&mut self.lease, self.budget.lease()) }))
    }
}

/// Marks the round in flight and runs it on its own task (the socket keeps reading: acks,
/// presence, and pipelining detection continue).
pub fn start(hub: &Arc<Hub>, session: &Arc<Session>, request: Request) {
    let wire = u16::from_le_bytes([request.bytes[4], request.bytes[5]]);
    {
        let mut st = session.state();
        st.round_in_flight = true;
        st.round_end = None;
        st.generation += 1;
    }
    hub.rounds_in_flight.fetch_add(1, Ordering::SeqCst);
    let (hub, session) = (hub.clone(), session.clone());
    tokio::spawn(async move {
        run(&hub, &session, request, wire).await;
        hub.rounds_in_flight.fetch_sub(1, Ordering::SeqCst);
    });
}

async fn run(hub: &Arc<Hub>, session: &Arc<Session>, request: Request, wire: u16) {
    let started = Instant::now();
    let Request { bytes: request, lease } = request;
    let args = RoundArgs {
        partition: &session.partition,
        actor_id: &session.actor_id,
        request: &request,
        allowed_scopes: session.allowed_scopes.as_ref(),
        connection_client_id: Some(&session.client_id),
    };
    if let Some(code) = crate::framing::round_failure_code(&request) {
        hub.metrics.round_failure(&code);
    }
    let result = run_round(&hub.pool, &args).await;
    // The request is done with: its bytes go back to the budget before the response's are taken.
    drop((request, lease));
    // Ends the round without a response: the socket is closed — before the round stops being
    // in flight, so no pass writes a delta in between.
    let abort = |code: u16, reason: &str| {
        session.close(code, reason);
        session.state().round_in_flight = false;
    };
    let (response, ok) = match result {
        Ok(bytes) => (bytes, true),
        Err(e) => {
            hub.metrics.error(e.code_str());
            tracing::debug!(session = session.id, code = e.code_str(), "socket round failed");
            match error_response(&hub.pool, &session.partition, wire, &e.to_json()).await {
                Ok(bytes) => (bytes, false),
                Err(e2) => {
                    hub.metrics.error(e2.code_str());
                    tracing::error!(session = session.id, code = e2.code_str(), "cannot build the round's error response");
                    return abort(close_code::INTERNAL, "the round failed and no error response could be built");
                }
            }
        }
    };
    hub.metrics.round("socket", ok, started.elapsed().as_secs_f64());
    let mut lease = hub.settings.limits.round_bytes.lease();
    if !lease.try_grow(response.len()) {
        tracing::info!(session = session.id, bytes = response.len(), "round buffer budget exhausted: closing the socket");
        return abort(close_code::TRY_AGAIN_LATER, "gateway busy: round buffer budget exhausted, retry later");
    }
    let ranges = round_chunks(&response, MAX_ROUND_CHUNK);
    let tagged = |range: &std::ops::Range<usize>| Bytes::from([&[TAG_ROUND], &response[range.clone()]].concat());
    let Some((last, head)) = ranges.split_last() else { return abort(close_code::INTERNAL, "empty round response") };
    // The round committed: the client record is final. The registrations reload while the
    // response streams and their scope keys take effect before `END` goes out, so whatever the
    // client does once it has `END` (publish presence on a key the round granted) meets them;
    // the reload's state is kept at `END` (SessionState::finish_round).
    let stream_head = async {
        for range in head {
            if !session.send_round_chunk(RoundChunk { bytes: tagged(range), end: None }).await {
                return false;
            }
        }
        true
    };
    let (streamed, _) = tokio::join!(stream_head, hub.refresh(session, Reason::RoundEnd(wire)));
    if !streamed {
        return;
    }
    let (written, done) = tokio::sync::oneshot::channel();
    if !session.send_round_chunk(RoundChunk { bytes: tagged(last), end: Some(written) }).await {
        return;
    }
    drop((response, lease));
    // Once `END` is out (a session that ends drops the chunk instead), the commits past the
    // session's state — those made while the round ran included — go out as deltas.
    if let (Ok(()), Some(p)) = (done.await, hub.partition(&session.partition)) {
        p.schedule(Work::Pass);
    }
}
