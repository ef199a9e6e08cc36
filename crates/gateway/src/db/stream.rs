//! The pull half of an HTTP round, streamed (SPEC §1.4; docs/src/sql/sync.md "Streaming rounds"),
//! for a round whose response is too large to hold ([`super::round::run_round_streamed`]).
//!
//! `SELECT syncular.pull_stream(…)` in its own transaction (`synchronous_commit = off`, like
//! the buffered pull): a value-per-call set-returning function in the select list, so
//! Postgres produces and sends one row (one chunk: the header, one subscription section, or
//! `END`) at a time, and the rows are read one at a time from the socket — neither the
//! backend nor the gateway holds the whole response. The connection's own flow control is
//! the backpressure: while the HTTP client does not read, the gateway does not read rows and
//! the backend waits on its socket.
//!
//! Order of bytes (persist before acknowledging): the first chunk is returned as soon as it
//! is read (it carries `RESP_HEADER` and, for a request without pushes, the `LEASE`) — unless
//! it is the whole response (schema floor, reset…), which is answered after COMMIT; every
//! later chunk is sent only once the next one was read, and the last one (`END`) only after
//! the pull's COMMIT succeeded. A failure after the first chunk — an ERROR raised by a later
//! step, a lost connection, a failed COMMIT — rolls the pull back and ends the body with an
//! in-band `ERROR` frame (the §10.1 object of the failure) and `END`
//! ([`crate::framing::error_tail`]); the chunks already sent are complete frames. A client
//! that goes away mid-stream cancels the backend's query and the pull rolls back.

use std::pin::Pin;

use bytes::Bytes;
use deadpool_postgres::Pool;
use futures_util::future::join;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, RowStream};

use super::round::RoundArgs;
use super::{checkout, with_retry, ApiError, TxConn};
use crate::framing::error_tail;

/// An open pull stream: the connection in its transaction and the rows still to read. Dropped
/// (or failed) before its `COMMIT` was answered, the connection is closed, never pooled
/// ([`TxConn`]).
pub struct PullStream {
    client: TxConn,
    rows: Pin<Box<RowStream>>,
}

fn sql(with_client: bool) -> &'static str {
    if with_client {
        "SELECT syncular.pull_stream($1::text, $2::text, $3::bytea, $4::jsonb, $5::text)"
    } else {
        "SELECT syncular.pull_stream($1::text, $2::text, $3::bytea, $4::jsonb)"
    }
}

/// Opens the stream and reads its first chunk, retrying transient failures like any round
/// (nothing was sent yet). Errors: the §10.1 error of the call (request-level SSP2 errors
/// surface here: every request check runs in the first step).
pub async fn open(pool: &Pool, args: &RoundArgs<'_>) -> Result<(PullStream, Vec<u8>), ApiError> {
    with_retry(|| open_once(pool, args)).await
}

async fn open_once(pool: &Pool, args: &RoundArgs<'_>) -> Result<(PullStream, Vec<u8>), ApiError> {
    let client = TxConn::new(checkout(pool).await?);
    let pg = |e: tokio_postgres::Error| ApiError::from_pg(&e);
    let statement = client.prepare_cached(sql(args.connection_client_id.is_some())).await.map_err(pg)?;
    let params = args.params();
    // BEGIN and the query are pipelined (join polls in argument order).
    let (begin, rows) = join(
        client.batch_execute("BEGIN; SET LOCAL synchronous_commit TO off"),
        client.query_raw(&statement, params.iter().map(|p| *p as &dyn ToSql)),
    )
    .await;
    let first = match (begin, rows) {
        (Ok(()), Ok(rows)) => {
            let mut rows = Box::pin(rows);
            match rows.next().await {
                Some(Ok(row)) => row.try_get::<_, Vec<u8>>(0).map(|chunk| (rows, chunk)).map_err(pg),
                Some(Err(e)) => Err(pg(e)),
                None => Err(ApiError::internal("syncular.pull_stream returned no row")),
            }
        }
        (Err(e), _) | (_, Err(e)) => Err(pg(e)),
    };
    match first {
        Ok((rows, chunk)) => Ok((PullStream { client, rows }, chunk)),
        Err(e) => {
            if client.batch_execute("ROLLBACK").await.is_ok() {
                client.ended();
            }
            Err(e)
        }
    }
}

impl PullStream {
    /// Sends the rest of the stream to `tx` (one message per chunk, bounded by the channel),
    /// holding back each chunk until the next one was read and the last one until COMMIT;
    /// ends with `ERROR` + `END` on a failure (module docs). Runs until the body is complete
    /// or the receiver is gone.
    pub async fn pump(mut self, tx: mpsc::Sender<Bytes>) {
        let mut held: Option<Vec<u8>> = None;
        loop {
            match self.rows.next().await {
                Some(Ok(row)) => {
                    let chunk = match row.try_get::<_, Vec<u8>>(0) {
                        Ok(chunk) => chunk,
                        Err(e) => return self.fail(held, ApiError::from_pg(&e), &tx).await,
                    };
                    if let Some(previous) = held.replace(chunk) {
                        if tx.send(Bytes::from(previous)).await.is_err() {
                            return self.abandon().await;
                        }
                    }
                }
                Some(Err(e)) => return self.fail(held, ApiError::from_pg(&e), &tx).await,
                None => break,
            }
        }
        match self.client.batch_execute("COMMIT").await {
            Ok(()) => {
                self.client.ended();
                if let Some(last) = held {
                    let _ = tx.send(Bytes::from(last)).await;
                }
            }
            Err(e) => {
                // Nothing of the pull stays; the held chunk (`END`) is replaced by the error.
                let held = held.map(|mut last| {
                    if last.ends_with(&[0, 0, 0, 0, 0]) {
                        last.truncate(last.len() - 5);
                    }
                    last
                });
                self.fail(held, ApiError::from_pg(&e), &tx).await;
            }
        }
    }

    /// Rolls back and ends the body with the held chunk (complete frames), `ERROR`, `END`.
    async fn fail(self, held: Option<Vec<u8>>, error: ApiError, tx: &mpsc::Sender<Bytes>) {
        tracing::info!(code = error.code_str(), "sync stream failed mid-body: ending it with an ERROR frame");
        let _ = self.client.batch_execute("ROLLBACK").await;
        if let Some(chunk) = held.filter(|c| !c.is_empty()) {
            if tx.send(Bytes::from(chunk)).await.is_err() {
                return;
            }
        }
        let _ = tx.send(Bytes::from(error_tail(&error.to_json()))).await;
    }

    /// Ends a stream whose first chunk was the whole response (schema floor, reset, no
    /// subscription… — it ends with `END`): reads the end of the rows and COMMITs, so that not
    /// even a one-chunk response is sent before its COMMIT. Errors: a further row (the
    /// extension broke its chunking) or the failure of the call / the COMMIT.
    pub async fn finish(mut self) -> Result<(), ApiError> {
        let result = match self.rows.next().await {
            None => self.client.batch_execute("COMMIT").await.map_err(|e| ApiError::from_pg(&e)),
            Some(Err(e)) => Err(ApiError::from_pg(&e)),
            Some(Ok(_)) => Err(ApiError::internal("syncular.pull_stream sent a row after END")),
        };
        match result {
            Ok(()) => self.client.ended(),
            Err(_) => self.abandon().await,
        }
        result
    }

    /// Gives the stream up before anything of it was sent (on its own task).
    pub fn abandon_now(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.abandon())
    }

    /// The client went away: cancel the running query, roll back, and close the connection.
    ///
    /// The connection never goes back to the pool: a cancel request is delivered to the
    /// backend asynchronously (`cancel_query` returns once the request is sent, not once the
    /// backend got its SIGINT), so when the pull finished on its own meanwhile, the signal can
    /// land during whatever the next checkout runs on that connection and cancel an unrelated
    /// request (`57014 canceling statement due to user request`).
    async fn abandon(self) {
        tracing::debug!("sync stream receiver gone: cancelling the pull");
        let _ = self.client.cancel_token().cancel_query(NoTls).await;
        drop(self.rows);
        let _ = self.client.batch_execute("ROLLBACK").await;
        // Dropped without `ended`: the connection is closed.
    }
}
