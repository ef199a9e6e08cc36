//! The order of work of one sync round (SPEC §1.5–§1.7, §2.1, §3.2, §6.1,
//! §9): decode → partition registry → epoch/wire gate → schema floor →
//! reset response → client record → operation cap → allowed scopes →
//! subscription validation → push half → pull half.
//!
//! Every check that fails the request runs before any push is attempted, so
//! a request-level error leaves nothing applied (and the caller's
//! transaction aborts anyway). The response is written in the request's
//! wire version (§9).
//!
//! `begin` holds the steps up to the first subscription section, one
//! function each; [`failures`] the wire-3 `ROUND_FAILURE` reports. The
//! caller's identity, allowed map and client binding are
//! [`crate::engine::auth`]'s.

use serde_json::Value;
use syncular_protocol::constants::WIRE_VERSION_1;
use syncular_protocol::response::{RespEpoch, RespHeader, ResponseWriter};

use crate::engine::auth::caller::Caller;
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::engine::pull;

mod begin;
pub mod failures;

use begin::{begin, OwnedContext};

/// Which halves of the request a call executes. Validation is identical for
/// all three, so the same request bytes fail the same way whichever is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Halves {
    /// `syncular.sync`: push then pull.
    Both,
    /// `syncular.push`: `PUSH_RESULT`s only (any pull half is not served).
    PushOnly,
    /// `syncular.pull`: subscriptions only (any push half is not applied).
    PullOnly,
}

fn v2_epoch(wire_version: u16, log_epoch: &str, reset_required: bool) -> Option<RespEpoch> {
    (wire_version != WIRE_VERSION_1).then(|| RespEpoch {
        log_epoch: log_epoch.to_owned(),
        reset_required,
    })
}

/// A response the server failed to encode is a server bug, never the
/// client's request: `syncular.internal`.
fn encoding(e: syncular_protocol::ProtocolError) -> EngineError {
    EngineError::internal(format!("response encoding failed: {e}"))
}

fn header_only(wire_version: u16, header: &RespHeader) -> EngineResult<Vec<u8>> {
    let writer =
        ResponseWriter::new(Vec::with_capacity(64), wire_version, header).map_err(encoding)?;
    writer.finish().map_err(encoding)
}

/// Runs one SSP2 request for `caller` and returns the encoded response. With `max_bytes`
/// (`usize::MAX`: no limit) it fails as soon as the response under construction holds more:
/// checked after each step of the round (the push half with the pull's first section, then each
/// subscription section or bootstrap segment), so the work thrown away is at most `max_bytes`
/// plus one step; the caller's transaction aborts with the error, so nothing of the round
/// persists and the caller can run it again streamed (`syncular.gateway_round`).
///
/// Errors (the whole request fails; raised by the API as a Postgres ERROR):
/// - any §1.7 decode error: `sync.invalid_request` / `sync.empty_commit`;
/// - `sync.invalid_client_id` when `caller.connection_client_id` is set and
///   differs from `REQ_HEADER.clientId` (§8.7), before anything is written;
/// - `sync.client_wire_unsupported` (wire v1 after an epoch rotation);
/// - `sync.invalid_request` (v2 without `logEpoch` carrying pushes, or a
///   `PULL_HEADER.accept` without bits 0 and 1 — E2b's validation);
/// - `sync.invalid_client_id` (reserved prefix, or bound to another actor);
/// - `sync.too_many_operations` (§6.1 cap, GUC `syncular.max_operations`);
/// - `sync.invalid_subscription` / `sync.unknown_table` (subscriptions,
///   allowed-map keys);
/// - `syncular.no_schema`, `syncular.invalid_argument` (malformed
///   `allowed_scopes`), `syncular.resolver_malformed`, `syncular.internal`;
/// - `syncular.response_too_large` (54000) past `max_bytes`.
///
/// Not errors: an unserved `schemaVersion` (schema-floor response) and an
/// absent/different v2 `logEpoch` (reset response).
pub fn run(caller: &Caller<'_>, request: &[u8], halves: Halves, max_bytes: usize) -> EngineResult<Vec<u8>> {
    let within = |written: usize| {
        if written > max_bytes {
            return Err(EngineError::host(
                HostCode::ResponseTooLarge,
                format!("the response passed max_response_bytes = {max_bytes}: run the round streamed"),
            ));
        }
        Ok(())
    };
    match begin(caller, request, halves)? {
        Begun::Complete(bytes) => within(bytes.len()).map(|()| bytes),
        Begun::Pulling(mut open) => {
            while open.step()? {
                within(usize::try_from(open.writer.bytes_written()).unwrap_or(usize::MAX))?;
            }
            let bytes = open.writer.finish().map_err(encoding)?;
            within(bytes.len()).map(|()| bytes)
        }
    }
}

/// How [`begin`] left a round.
enum Begun {
    /// The whole response (schema floor, reset, push only, no pull half).
    Complete(Vec<u8>),
    /// Everything before the first subscription section is written; the
    /// pull half's sections follow.
    Pulling(Box<OpenPull>),
}

/// A round whose pull half is under way: the context it runs under, the
/// resumable pull and the writer (whose sink holds what was not drained).
struct OpenPull {
    ctx: OwnedContext,
    stream: pull::PullStream,
    writer: ResponseWriter<Vec<u8>>,
}

impl OpenPull {
    /// One [`pull::PullStream::step`]; `false` when only `END` remains.
    fn step(&mut self) -> EngineResult<bool> {
        let ctx = self.ctx.view();
        self.stream.step(&ctx, &mut self.writer)
    }
}

/// An owned [`Caller`], for a round that outlives its first call.
#[derive(Debug, Clone)]
pub struct OwnedCaller {
    /// [`Caller::partition`].
    pub partition: String,
    /// [`Caller::actor_id`].
    pub actor_id: String,
    /// [`Caller::allowed_scopes`].
    pub allowed_scopes: Option<Value>,
    /// [`Caller::connection_client_id`].
    pub connection_client_id: Option<String>,
}

impl OwnedCaller {
    fn view(&self) -> Caller<'_> {
        Caller {
            partition: &self.partition,
            actor_id: &self.actor_id,
            allowed_scopes: self.allowed_scopes.as_ref(),
            connection_client_id: self.connection_client_id.as_deref(),
        }
    }
}

/// One round produced in chunks (§1.4: no response-sized buffer) — the
/// engine of `syncular.sync_stream` / `syncular.pull_stream`. Each
/// [`RoundStream::next_chunk`] does one step of work and returns the bytes it
/// wrote: the first chunk carries `RESP_HEADER`, the `LEASE` and every
/// `PUSH_RESULT` (or the whole response when the round has no pull half or
/// ends at the schema floor / a reset); then one chunk per subscription
/// section; the last chunk is `END`, written after the §4.5 bookkeeping.
/// Concatenated, the chunks are byte for byte the response [`run`] returns
/// for the same request and database state — [`run`] drives the same steps.
///
/// A request-level error surfaces from the call that meets it (the first
/// one for every check of [`run`]'s list; a later one only for store or
/// encoder failures); afterwards the stream is over.
pub struct RoundStream {
    state: RoundState,
}

enum RoundState {
    Pending { caller: OwnedCaller, request: Vec<u8>, halves: Halves },
    Pulling(Box<OpenPull>),
    Finished(Vec<u8>),
    Done,
}

impl RoundStream {
    /// A round of `request` for `caller`, nothing run yet.
    pub fn new(caller: OwnedCaller, request: Vec<u8>, halves: Halves) -> Self {
        RoundStream { state: RoundState::Pending { caller, request, halves } }
    }

    /// The next chunk (never empty), `None` once `END` was returned.
    /// Errors: as [`run`]; the stream is over after an error.
    pub fn next_chunk(&mut self) -> EngineResult<Option<Vec<u8>>> {
        let result = self.next_inner();
        if result.is_err() {
            self.state = RoundState::Done;
        }
        result
    }

    fn next_inner(&mut self) -> EngineResult<Option<Vec<u8>>> {
        loop {
            match std::mem::replace(&mut self.state, RoundState::Done) {
                RoundState::Done => return Ok(None),
                RoundState::Finished(bytes) => return Ok(Some(bytes)),
                RoundState::Pending { caller, request, halves } => {
                    self.state = match begin(&caller.view(), &request, halves)? {
                        Begun::Complete(bytes) => RoundState::Finished(bytes),
                        Begun::Pulling(open) => RoundState::Pulling(open),
                    };
                }
                RoundState::Pulling(mut open) => {
                    if open.step()? {
                        self.state = RoundState::Pulling(open);
                    } else {
                        let OpenPull { writer, .. } = *open;
                        self.state = RoundState::Finished(writer.finish().map_err(encoding)?);
                        continue;
                    }
                }
            }
            if let RoundState::Pulling(open) = &mut self.state {
                let bytes = std::mem::take(open.writer.sink_mut());
                if !bytes.is_empty() {
                    return Ok(Some(bytes));
                }
            }
        }
    }
}
