//! The segment SQL of the gateway (docs/src/sql/segments.md "Segments: download, signed URLs, expiry"; SPEC
//! §5.4, §5.5): a download is opened by `syncular.segment_open` (host auth + §5.5
//! re-authorization) or `syncular.segment_open_signed` (a §5.4 signed URL, no host auth), then
//! its chunks stream from `syncular.segment_chunk(partition, segment_id, idx)`, each read with
//! its own short pool checkout, one chunk ahead of the client (as blobs: a slow reader holds no
//! connection and no snapshot). Segment bytes are immutable (content-addressed), so chunks read
//! at different moments belong to one body; the sweep keeps them at least its grace period after
//! the open (docs/src/sql/segments.md), and a chunk that is gone ends the body early.
//!
//! The signed path learns the segment's partition from the extension (the gateway is trusted);
//! it is used for the chunk reads only and never leaves the gateway.

use bytes::Bytes;
use deadpool_postgres::Pool;
use serde_json::Value;
use tokio::sync::mpsc;

use super::{checkout, ApiError};

fn pg(e: tokio_postgres::Error) -> ApiError {
    ApiError::from_pg(&e)
}

/// An opened download: the segment's shape; its bytes are read only when [`Download::chunks`]
/// is called (a `304 Not Modified` reads none).
#[derive(Debug)]
pub struct Download {
    /// The segment id (the `ETag`).
    pub segment_id: String,
    /// Total size (the `Content-Length` of an unencoded body).
    pub byte_length: i64,
    /// When the signed URL stops verifying, Unix ms (signed downloads only).
    pub url_expires_at_ms: Option<i64>,
    chunk_count: i32,
    partition: String,
    pool: Pool,
}

impl Download {
    /// Starts streaming the chunks, in order, from a task that checks a connection out of the
    /// pool for each chunk only, one chunk ahead of the client; an `Err` ends the body early.
    pub fn chunks(self) -> mpsc::Receiver<Result<Bytes, std::io::Error>> {
        let (chunks_tx, chunks) = mpsc::channel(1);
        tokio::spawn(async move {
            for idx in 0..self.chunk_count {
                let item = read_chunk(&self.pool, &self.partition, &self.segment_id, idx).await;
                let failed = item.is_err();
                if chunks_tx.send(item).await.is_err() || failed {
                    return;
                }
            }
        });
        chunks
    }
}

fn download(pool: &Pool, partition: String, meta: &Value, url_expires_at_ms: Option<i64>) -> Download {
    Download {
        segment_id: meta.get("segmentId").and_then(Value::as_str).unwrap_or_default().to_owned(),
        byte_length: meta.get("byteLength").and_then(Value::as_i64).unwrap_or(0),
        url_expires_at_ms,
        chunk_count: meta.get("chunkCount").and_then(Value::as_i64).and_then(|n| i32::try_from(n).ok()).unwrap_or(0),
        partition,
        pool: pool.clone(),
    }
}

/// Who downloads what on the direct endpoint (§5.5).
#[derive(Debug, Clone)]
pub struct OpenArgs {
    /// Host partition (from auth).
    pub partition: String,
    /// Authenticated actor.
    pub actor_id: String,
    /// The segment id of the path.
    pub segment_id: String,
    /// `X-Syncular-Scopes`: the canonical JSON of the owning subscription's requested scopes.
    pub requested_scopes: String,
    /// §3.2 allowed map, `None` = the database resolver.
    pub allowed_scopes: Option<Value>,
}

/// `syncular.segment_open` (§5.5 re-authorization).
///
/// Errors: `sync.not_found`, `sync.segment_expired`, `sync.forbidden`, database failures.
pub async fn open(pool: &Pool, a: OpenArgs) -> Result<Download, ApiError> {
    let client = checkout(pool).await?;
    let row = client
        .query_one(
            "SELECT syncular.segment_open($1::text, $2::text, $3::text, $4::text, $5::jsonb)",
            &[&a.partition, &a.actor_id, &a.segment_id, &a.requested_scopes, &a.allowed_scopes],
        )
        .await
        .map_err(pg)?;
    let meta: Value = row.try_get(0).map_err(pg)?;
    Ok(download(pool, a.partition, &meta, None))
}

/// `syncular.segment_open_signed` (§5.4: the token is the whole grant).
///
/// Errors: `sync.forbidden` (any token fault), `sync.not_found`, `sync.segment_expired`,
/// database failures.
pub async fn open_signed(pool: &Pool, segment_id: &str, token: &str) -> Result<Download, ApiError> {
    let client = checkout(pool).await?;
    let row = client
        .query_one("SELECT syncular.segment_open_signed($1::text, $2::text)", &[&segment_id, &token])
        .await
        .map_err(pg)?;
    let meta: Value = row.try_get(0).map_err(pg)?;
    let partition = meta.get("partition").and_then(Value::as_str).unwrap_or_default().to_owned();
    let expires = meta.get("urlExpiresAtMs").and_then(Value::as_i64);
    Ok(download(pool, partition, &meta, expires))
}

/// One chunk, read with a connection checked out for this read only.
async fn read_chunk(pool: &Pool, partition: &str, segment_id: &str, idx: i32) -> Result<Bytes, std::io::Error> {
    let client = checkout(pool).await.map_err(|e| std::io::Error::other(Value::Object(e.body).to_string()))?;
    let read = client
        .prepare_cached("SELECT syncular.segment_chunk($1::text, $2::text, $3::int4)")
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let row = client.query_one(&read, &[&partition, &segment_id, &idx]).await.map_err(|e| std::io::Error::other(e.to_string()))?;
    row.try_get::<_, Vec<u8>>(0).map(Bytes::from).map_err(|e| std::io::Error::other(e.to_string()))
}
