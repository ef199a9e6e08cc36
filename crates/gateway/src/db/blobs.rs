//! The blob SQL of the gateway (docs/src/sql/blobs.md; SPEC §5.9.3, §5.9.5): uploads stream the body
//! into `syncular.blob_upload_begin/append/finish` inside one transaction (the extension hashes
//! the bytes and records the blob only when they match the id); downloads authorize with
//! `syncular.blob_open` and stream `syncular.blob_read` chunk by chunk, one chunk ahead of the
//! client. Each chunk is read with its own short pool checkout, outside any open transaction: a
//! slow reader holds no connection and no snapshot while its socket drains (a download spanning
//! one transaction let a few slow readers exhaust the pool and block schema bumps). A blob's
//! bytes are immutable (content-addressed), so chunks read at different moments belong to the
//! same body; a blob swept mid-download ends the body early (its chunk read fails).

use bytes::{Bytes, BytesMut};
use deadpool_postgres::Pool;
use futures_util::{Stream, StreamExt};
use serde_json::Value;
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};

use super::{checkout, ApiError};

/// Bytes handed to one `blob_upload_append` call (the extension stores at most 1 MiB per row).
pub const APPEND_BYTES: usize = 1024 * 1024;

fn pg(e: tokio_postgres::Error) -> ApiError {
    ApiError::from_pg(&e)
}

/// How long an upload that holds a database connection may wait for the next piece of its body;
/// past it the upload fails (`sync.invalid_request`) and its transaction rolls back.
pub const UPLOAD_STALL: Duration = Duration::from_secs(10);

/// The uploads still receiving their bodies that may hold a pool connection at once: a quarter
/// of the pool, at least one, never the last connection of a pool of two or more, so that uploads
/// waiting for their bytes never take the connections sync rounds need (with `--pool-size 1` a
/// large upload shares the only connection).
pub fn upload_slots(pool_size: usize) -> Semaphore {
    Semaphore::new((pool_size / 4).max(1).min(pool_size.saturating_sub(1).max(1)))
}

/// Streams `body` into blob `blob_id` of `partition`; `declared` is the `Content-Length` of an
/// unencoded body. A body of at most one append (1 MiB; most blobs) is read whole before a
/// connection is taken and then stored like any short request; a larger declared one is checked
/// against the cap first (before any byte is read). A body still arriving holds a connection only
/// with one of `slots` and only while it keeps coming (each piece within [`UPLOAD_STALL`]).
///
/// Errors: the extension's (`blob.hash_mismatch`, `blob.too_large`, `sync.invalid_request` for a
/// malformed id), `sync.invalid_request` for an unreadable or stalled body, database failures.
pub async fn upload<S, E>(pool: &Pool, slots: &Semaphore, partition: &str, blob_id: &str, declared: Option<i64>, mut body: S) -> Result<(), ApiError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut buf = BytesMut::with_capacity(APPEND_BYTES);
    let mut done = false;
    if declared.is_none_or(|n| n <= APPEND_BYTES as i64) {
        done = fill(&mut body, &mut buf, None).await?;
    }
    let _slot = if done { None } else { Some(slots.acquire().await.map_err(|_| ApiError::unavailable("the gateway is shutting down"))?) };
    let mut client = checkout(pool).await?;
    let tx = client.transaction().await.map_err(pg)?;
    tx.query_one("SELECT syncular.blob_upload_begin($1::text, $2::text, $3::int8)", &[&partition, &blob_id, &declared])
        .await
        .map_err(pg)?;
    let append = tx.prepare_cached("SELECT syncular.blob_upload_append($1::text, $2::text, $3::bytea)").await.map_err(pg)?;
    loop {
        while buf.len() >= APPEND_BYTES || (done && !buf.is_empty()) {
            let chunk = buf.split_to(buf.len().min(APPEND_BYTES));
            tx.query_one(&append, &[&partition, &blob_id, &&chunk[..]]).await.map_err(pg)?;
        }
        if done {
            break;
        }
        done = fill(&mut body, &mut buf, Some(UPLOAD_STALL)).await?;
    }
    tx.query_one("SELECT syncular.blob_upload_finish($1::text, $2::text)", &[&partition, &blob_id]).await.map_err(pg)?;
    tx.commit().await.map_err(pg)
}

/// Reads pieces of `body` into `buf` until it holds one append's bytes (`false`) or the body
/// ended (`true`); with `stall`, a piece that takes longer fails.
async fn fill<S, E>(body: &mut S, buf: &mut BytesMut, stall: Option<Duration>) -> Result<bool, ApiError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    while buf.len() < APPEND_BYTES {
        let next = match stall {
            None => body.next().await,
            Some(limit) => tokio::time::timeout(limit, body.next())
                .await
                .map_err(|_| ApiError::invalid_request(format!("request body stalled for {} s", limit.as_secs())))?,
        };
        match next {
            None => return Ok(true),
            Some(piece) => buf.extend_from_slice(&piece.map_err(|e| ApiError::invalid_request(format!("request body could not be read: {e}")))?),
        }
    }
    Ok(false)
}

/// `syncular.blob_upload_grant`: `{"present": bool}`.
///
/// Errors: `blob.too_large`, `sync.invalid_request`, database failures.
pub async fn upload_grant(pool: &Pool, partition: &str, blob_id: &str, byte_length: i64) -> Result<Value, ApiError> {
    let client = checkout(pool).await?;
    let row = client
        .query_one("SELECT syncular.blob_upload_grant($1::text, $2::text, $3::int8)", &[&partition, &blob_id, &byte_length])
        .await
        .map_err(pg)?;
    row.try_get(0).map_err(pg)
}

/// An authorized download: the blob's size; its bytes are read only when [`Download::chunks`]
/// is called (a `304 Not Modified` reads none).
pub struct Download {
    /// Total size (the `Content-Length`).
    pub byte_length: i64,
    /// The object store's presigned GET and its `urlExpiresAtMs`, when the bucket holds it.
    pub presigned: Option<(String, i64)>,
    chunk_count: i32,
    pool: Pool,
    args: DownloadArgs,
}

impl Download {
    /// Starts streaming the chunks, in order, from a task that checks a connection out of the
    /// pool for each chunk only, one chunk ahead of the client; an `Err` ends the body early
    /// (the response is cut short).
    pub fn chunks(self) -> mpsc::Receiver<Result<Bytes, std::io::Error>> {
        let (chunks_tx, chunks) = mpsc::channel(1);
        tokio::spawn(async move {
            for chunk in 0..self.chunk_count {
                let item = read_chunk(&self.pool, &self.args, chunk).await;
                let failed = item.is_err();
                if chunks_tx.send(item).await.is_err() || failed {
                    return; // the client went away, or the read failed: the body ends here
                }
            }
        });
        chunks
    }
}

/// Who downloads what.
#[derive(Debug, Clone)]
pub struct DownloadArgs {
    /// Host partition (from auth).
    pub partition: String,
    /// Authenticated actor.
    pub actor_id: String,
    /// §3.2 allowed map, `None` = the database resolver.
    pub allowed_scopes: Option<Value>,
    /// The blob id of the path.
    pub blob_id: String,
}

/// Authorizes the download (`syncular.blob_open`); its chunks (`syncular.blob_read`,
/// re-authorized per chunk) come from [`Download::chunks`].
///
/// When the object store holds the blob, [`Download::presigned`] is its presigned GET (§5.9.5
/// always-issue: answer it as JSON, stream nothing).
///
/// Errors: `blob.not_found`, `blob.forbidden`, `sync.invalid_request`,
/// `syncular.object_store_unavailable` (only the bucket holds it and cannot be used now),
/// database failures.
pub async fn download(pool: &Pool, args: DownloadArgs) -> Result<Download, ApiError> {
    let meta: Value = {
        let client = checkout(pool).await?;
        let row = client
            .query_one(
                "SELECT syncular.blob_open($1::text, $2::text, $3::text, $4::jsonb)",
                &[&args.partition, &args.actor_id, &args.blob_id, &args.allowed_scopes],
            )
            .await
            .map_err(pg)?;
        row.try_get(0).map_err(pg)?
    };
    let byte_length = meta.get("byteLength").and_then(Value::as_i64).unwrap_or(0);
    let chunk_count = meta.get("chunkCount").and_then(Value::as_i64).and_then(|n| i32::try_from(n).ok()).unwrap_or(0);
    let presigned = match (meta.get("url").and_then(Value::as_str), meta.get("urlExpiresAtMs").and_then(Value::as_i64)) {
        (Some(url), Some(expires)) => Some((url.to_owned(), expires)),
        _ => None,
    };
    Ok(Download { byte_length, chunk_count, presigned, pool: pool.clone(), args })
}

/// One chunk of a download, read with a connection checked out for this read only.
async fn read_chunk(pool: &Pool, a: &DownloadArgs, chunk: i32) -> Result<Bytes, std::io::Error> {
    let client = checkout(pool).await.map_err(|e| std::io::Error::other(Value::Object(e.body).to_string()))?;
    let read = client
        .prepare_cached("SELECT syncular.blob_read($1::text, $2::text, $3::text, $4::int4, $5::jsonb)")
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let row = client
        .query_one(&read, &[&a.partition, &a.actor_id, &a.blob_id, &chunk, &a.allowed_scopes])
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    row.try_get::<_, Vec<u8>>(0).map(Bytes::from).map_err(|e| std::io::Error::other(e.to_string()))
}
