//! One SSP2 sync round, persisted before it is acknowledged (contract §1, §2.3, §6.4).
//!
//! Every round is ONE transaction whose COMMIT precedes the first byte answered: a request with
//! `PUSH_COMMIT` frames and a `PULL_HEADER` runs `syncular.sync` (socket rounds, buffered
//! whole) or `syncular.sync_stream` read whole while it stays under [`WHOLE_ROUND_BYTES`]
//! (`POST /sync`); a request without `PUSH_COMMIT` frames is one `syncular.pull` (or
//! `pull_stream`) transaction; one whose frames cannot be scanned goes to `syncular.sync`
//! (which answers its error). Only an HTTP round whose response outgrows
//! [`WHOLE_ROUND_BYTES`] is run as two: `syncular.push` COMMITted first, then the pull
//! streamed in a second transaction, the two spliced ([`crate::framing::splice_head`]). Transient failures (SQLSTATE 40/53/57/08, lost
//! connections) retry the failed transaction (the idempotency key makes a push retry safe),
//! then answer `syncular.unavailable` (503). The same code serves `POST /sync` and socket
//! rounds (§8.7), which pass `connection_client_id`.

use bytes::Bytes;
use deadpool_postgres::Pool;
use tokio::sync::mpsc;
use futures_util::future::join3;
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

#[derive(Debug, Clone, Copy)]
enum Half {
    Push,
    Pull,
    Both,
}

impl Half {
    fn sql(self, with_client: bool) -> &'static str {
        match (self, with_client) {
            (Half::Push, false) => "SELECT syncular.push($1::text, $2::text, $3::bytea, $4::jsonb)",
            (Half::Pull, false) => "SELECT syncular.pull($1::text, $2::text, $3::bytea, $4::jsonb)",
            (Half::Both, false) => "SELECT syncular.sync($1::text, $2::text, $3::bytea, $4::jsonb)",
            (Half::Push, true) => "SELECT syncular.push($1::text, $2::text, $3::bytea, $4::jsonb, $5::text)",
            (Half::Pull, true) => "SELECT syncular.pull($1::text, $2::text, $3::bytea, $4::jsonb, $5::text)",
            (Half::Both, true) => "SELECT syncular.sync($1::text, $2::text, $3::bytea, $4::jsonb, $5::text)",
        }
    }
}

/// Runs the round and returns the response bytes once every write is committed.
///
/// Errors: the §10.1 error of the failing call (request-level SSP2 errors with their
/// category's status; `syncular.unavailable` 503 after retries; `syncular.internal` 500 when
/// the two halves cannot be spliced).
pub async fn run_round(pool: &Pool, args: &RoundArgs<'_>) -> Result<Vec<u8>, ApiError> {
    match framing::request_shape(args.request) {
        // Push and pull in one transaction: the response is buffered whole anyway.
        Some(shape) if shape.has_push && shape.has_pull => with_retry(|| call_in_tx(pool, Half::Both, args)).await,
        Some(shape) if shape.has_push => with_retry(|| call_in_tx(pool, Half::Push, args)).await,
        // No PUSH_COMMIT frame: `syncular.pull` serves the same response as `syncular.sync`
        // (and would apply nothing even if the frame scan were wrong).
        Some(_) => with_retry(|| call_in_tx(pool, Half::Pull, args)).await,
        None => with_retry(|| call_in_tx(pool, Half::Both, args)).await,
    }
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

/// Largest response of a `POST /sync` round with pushes that is answered from one
/// transaction ([`super::stream::whole_round`]), bytes. A larger one (a bootstrap sent
/// together with pushes) is computed again as two transactions, its pull streamed: the
/// first attempt's work up to this size is the price of never holding more in memory.
pub const WHOLE_ROUND_BYTES: usize = 1 << 20;

/// [`run_round`] with the pull half streamed (`POST /sync`): a round with pushes and a pull is
/// answered from one transaction while its response stays under [`WHOLE_ROUND_BYTES`];
/// otherwise the push half (when present) runs and COMMITs first; then the pull half is opened with
/// `syncular.pull_stream` and its first chunk read — a failure up to here is answered as a
/// §10.1 error like any round. A first chunk that is the whole response is answered whole,
/// after the pull's COMMIT. The rest of the pull is pumped by a task into a channel of
/// `channel_chunks` chunks. A request whose frames cannot be scanned is answered whole
/// (`syncular.sync`, which reports its error).
///
/// Errors: as [`run_round`].
pub async fn run_round_streamed(pool: &Pool, args: &RoundArgs<'_>, channel_chunks: usize) -> Result<RoundBody, ApiError> {
    let Some(shape) = framing::request_shape(args.request) else {
        return with_retry(|| call_in_tx(pool, Half::Both, args)).await.map(RoundBody::Whole);
    };
    if shape.has_push && shape.has_pull {
        if let Some(whole) = super::stream::whole_round(pool, args, WHOLE_ROUND_BYTES).await? {
            return Ok(RoundBody::Whole(whole));
        }
    }
    let push = if shape.has_push {
        let push = with_retry(|| call_in_tx(pool, Half::Push, args)).await?;
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

/// One half in its own transaction. A push (or push and pull) is ONE statement in its own
/// implicit transaction, which commits durably at the statement's `Sync`: `query_one` returns
/// only after `ReadyForQuery`, so the bytes are returned only when the COMMIT succeeded (a
/// failed COMMIT is an error of the call). A pull: `BEGIN`, the call and `COMMIT` pipelined
/// (sent back to back, in that order, on one connection — one network round trip instead of
/// three); a failed call aborts the transaction, so the pipelined `COMMIT` only rolls it back.
///
/// The pull half commits with `synchronous_commit = off`: it writes only bookkeeping (the
/// client record's cursor — a retention watermark whose loss only lowers it — and its
/// subscription list, re-recorded by the next pull) and the partition's last-seen time, so a
/// crash right after it loses nothing a client relies on, while a durable flush would double
/// the WAL flushes of every round. Pushes (PUSH_RESULTs, §2.3/§6.4) always commit durably.
async fn call_in_tx(pool: &Pool, half: Half, args: &RoundArgs<'_>) -> Result<Vec<u8>, ApiError> {
    let client = checkout(pool).await?;
    let pg = |e: tokio_postgres::Error| ApiError::from_pg(&e);
    let statement = client.prepare_cached(half.sql(args.connection_client_id.is_some())).await.map_err(pg)?;
    let params = args.params();
    if !matches!(half, Half::Pull) {
        return client.query_one(&statement, &params).await.and_then(|row| row.try_get(0)).map_err(pg);
    }
    // join3 polls in argument order, and each future queues its message on its first poll.
    let (begin, row, commit) = join3(
        client.batch_execute("BEGIN; SET LOCAL synchronous_commit TO off"),
        client.query_one(&statement, &params),
        client.batch_execute("COMMIT"),
    )
    .await;
    begin.map_err(pg)?;
    let bytes: Vec<u8> = row.map_err(pg)?.try_get(0).map_err(pg)?;
    commit.map_err(pg)?;
    Ok(bytes)
}
