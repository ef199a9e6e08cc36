//! One SSP2 sync round, persisted before it is acknowledged (contract §1, §2.3, §6.4).
//!
//! Every round is ONE transaction whose COMMIT precedes the first byte answered: one
//! `syncular.gateway_round` statement, buffered whole (it commits a request without
//! `PUSH_COMMIT` frames asynchronously, one with pushes durably). A socket round holds any
//! response; `POST /sync` passes `max_response_bytes` = [`WHOLE_ROUND_BYTES`], and only a round
//! whose response passes it (`syncular.response_too_large`: that transaction aborted, nothing
//! persisted) is run again as two: `syncular.push` COMMITted first, then the pull streamed in a
//! second transaction, the two spliced ([`crate::framing::splice_head`]). Transient failures
//! (SQLSTATE 40/53/57/08, lost connections) retry the failed transaction (the idempotency key
//! makes a push retry safe), then answer `syncular.unavailable` (503). The same code serves
//! `POST /sync` and socket rounds (§8.7), which pass `connection_client_id`.

use bytes::Bytes;
use deadpool_postgres::Pool;
use tokio::sync::mpsc;
use serde_json::Value;
use tokio_postgres::types::ToSql;

use super::{checkout, with_retry, ApiError};
use crate::framing;

/// Who runs the round and what it sends.
#[derive(Debug, Clone, Copy)]
pub struct RoundArgs<'a> {
    /// Host partition (from auth).
    pub partition: &'a str,
    /// Authenticated actor.
    pub actor_id: &'a str,
    /// The SSP2 request bytes.
    pub request: &'a [u8],
    /// §3.2 allowed map, `None` = the database resolver decides.
    pub allowed_scopes: Option<&'a Value>,
    /// A socket round's connection clientId (§8.7): the request's `REQ_HEADER.clientId` must
    /// equal it (`sync.invalid_client_id` otherwise). `None` for HTTP.
    pub connection_client_id: Option<&'a str>,
}

impl RoundArgs<'_> {
    /// The bound parameters of every round function: `(partition, actor_id, request,
    /// allowed_scopes[, connection_client_id])` — the last only for a socket round.
    pub fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&self.partition, &self.actor_id, &self.request, &self.allowed_scopes];
        if let Some(cid) = &self.connection_client_id {
            params.push(cid);
        }
        params
    }
}

/// The one-statement calls of a round: `syncular.gateway_round` (the whole round; it commits a
/// request without `PUSH_COMMIT` frames asynchronously), the same with `max_response_bytes`
/// (`POST /sync`: [`WHOLE_ROUND_BYTES`]), or `syncular.push` (the push half of a round whose pull
/// is streamed).
#[derive(Debug, Clone, Copy)]
enum Call {
    Round,
    RoundWithin(i32),
    Push,
}

impl Call {
    fn sql(self, with_client: bool) -> &'static str {
        match (self, with_client) {
            (Call::Round, false) => "SELECT syncular.gateway_round($1::text, $2::text, $3::bytea, $4::jsonb)",
            (Call::RoundWithin(_), false) => {
                "SELECT syncular.gateway_round($1::text, $2::text, $3::bytea, $4::jsonb, NULL::text, $5::integer)"
            }
            (Call::Push, false) => "SELECT syncular.push($1::text, $2::text, $3::bytea, $4::jsonb)",
            (Call::Round, true) => "SELECT syncular.gateway_round($1::text, $2::text, $3::bytea, $4::jsonb, $5::text)",
            (Call::RoundWithin(_), true) => {
                "SELECT syncular.gateway_round($1::text, $2::text, $3::bytea, $4::jsonb, $5::text, $6::integer)"
            }
            (Call::Push, true) => "SELECT syncular.push($1::text, $2::text, $3::bytea, $4::jsonb, $5::text)",
        }
    }
}

/// Runs the round and returns the response bytes once every write is committed.
///
/// Errors: the §10.1 error of the failing call (request-level SSP2 errors with their
/// category's status; `syncular.unavailable` 503 after retries; `syncular.internal` 500 when
/// the two halves cannot be spliced).
pub async fn run_round(pool: &Pool, args: &RoundArgs<'_>) -> Result<Vec<u8>, ApiError> {
    with_retry(|| call(pool, Call::Round, args)).await
}

/// A round's response as `POST /sync` sends it.
pub enum RoundBody {
    /// The whole response, already persisted.
    Whole(Vec<u8>),
    /// A streamed pull half ([`super::stream`]): `head` opens the response (the committed
    /// push results spliced in front of the pull's first chunk); the rest comes from `rest`.
    Stream {
        /// The first bytes to send.
        head: Vec<u8>,
        /// The following chunks, the last one ending with `END` (or `ERROR` + `END`).
        rest: mpsc::Receiver<Bytes>,
    },
}

/// Largest response of a `POST /sync` round answered from one transaction, bytes
/// (`max_response_bytes` of its `syncular.gateway_round`). A larger one (a bootstrap) is
/// computed again as two transactions, its pull streamed: the first attempt's work — up to this
/// size plus one pull step — is the price of never holding more in memory.
pub const WHOLE_ROUND_BYTES: usize = 1 << 20;

/// [`run_round`] for `POST /sync`: one `syncular.gateway_round` transaction, answered whole,
/// while the response stays within [`WHOLE_ROUND_BYTES`]. Past it, the round runs again as two:
/// the push half (when present) runs and COMMITs first; then the pull half is opened with
/// `syncular.pull_stream` and its first chunk read — a failure up to here is answered as a
/// §10.1 error like any round. A first chunk that is the whole response is answered whole,
/// after the pull's COMMIT. The rest of the pull is pumped by a task into a channel of
/// `channel_chunks` chunks.
///
/// Errors: as [`run_round`].
pub async fn run_round_streamed(pool: &Pool, args: &RoundArgs<'_>, channel_chunks: usize) -> Result<RoundBody, ApiError> {
    let within = Call::RoundWithin(WHOLE_ROUND_BYTES as i32);
    match with_retry(|| call(pool, within, args)).await {
        Err(e) if e.code_str() == "syncular.response_too_large" => {}
        answered => return answered.map(RoundBody::Whole),
    }
    // The request decoded (the call got as far as the response), so its frames scan.
    let shape = framing::request_shape(args.request)
        .ok_or_else(|| ApiError::internal("a request the round decoded does not scan"))?;
    let push = if shape.has_push {
        let push = with_retry(|| call(pool, Call::Push, args)).await?;
        if !shape.has_pull {
            return Ok(RoundBody::Whole(push));
        }
        Some(push)
    } else {
        None
    };
    let (stream, first) = super::stream::open(pool, args).await?;
    if framing::is_whole_response(&first) {
        stream.finish().await?;
        return match &push {
            Some(push) => framing::splice(push, &first)
                .map(RoundBody::Whole)
                .map_err(|e| ApiError::internal(format!("cannot splice the round: {}", e.0))),
            None => Ok(RoundBody::Whole(first)),
        };
    }
    let head = match &push {
        Some(push) => match framing::splice_head(push, &first) {
            Ok(head) => head,
            Err(e) => {
                drop(stream.abandon_now());
                return Err(ApiError::internal(format!("cannot splice the round: {}", e.0)));
            }
        },
        None => first,
    };
    let (tx, rest) = mpsc::channel(channel_chunks.max(1));
    tokio::spawn(stream.pump(tx));
    Ok(RoundBody::Stream { head, rest })
}

/// One statement in its own implicit transaction, which commits at the statement's `Sync`:
/// `query_one` returns only after `ReadyForQuery`, so the bytes are returned only when the COMMIT
/// succeeded (a failed COMMIT is an error of the call). `syncular.gateway_round` commits a request
/// without `PUSH_COMMIT` frames with `synchronous_commit = off` (it writes only bookkeeping: the
/// client record's cursor — a retention watermark whose loss only lowers it — its subscription
/// list, re-recorded by the next pull, and the partition's last-seen time), pushes
/// (PUSH_RESULTs, §2.3/§6.4) durably.
async fn call(pool: &Pool, which: Call, args: &RoundArgs<'_>) -> Result<Vec<u8>, ApiError> {
    let client = checkout(pool).await?;
    let pg = |e: tokio_postgres::Error| ApiError::from_pg(&e);
    let statement = client.prepare_cached(which.sql(args.connection_client_id.is_some())).await.map_err(pg)?;
    let limit = match which {
        Call::RoundWithin(limit) => Some(limit),
        Call::Round | Call::Push => None,
    };
    let mut params = args.params();
    if let Some(limit) = &limit {
        params.push(limit);
    }
    client.query_one(&statement, &params).await.and_then(|row| row.try_get(0)).map_err(pg)
}
