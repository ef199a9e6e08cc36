//! The mover's loop: configure the tier, hand over the per-day signing keys, probe the bucket
//! and keep the heartbeat, then do the work items the extension lists and report each one
//! (`syncular.object_store_*`; docs/src/operate/object-store.md "The mover's protocol").
//! A failed request is logged and left alone: the extension lists the item again next round.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use deadpool_postgres::Pool;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::args::{credentials_from_env, ObjectStoreArgs};
use super::s3::{Bucket, Head};

/// Work items asked for per round.
const ITEMS_PER_ROUND: i32 = 64;

/// A running mover's parts.
struct Mover {
    pool: Pool,
    bucket: Bucket,
    args: ObjectStoreArgs,
    access_key_id: String,
    secret_access_key: String,
    /// The origin presigned URLs name.
    public_endpoint: String,
    /// Hash of this mover's settings and secret: the extension refuses a mover whose fingerprint
    /// is not the one that configured it last (`syncular.object_store_conflict`).
    fingerprint: String,
    /// The bucket answered and this mover owns the configuration: the work loop runs.
    active: AtomicBool,
}

/// `hex(SHA-256("syncular mover v1" ‖ settings ‖ secret))[..32]`: equal for movers with equal
/// settings and credentials, and it reveals nothing of the secret.
fn fingerprint(parts: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"syncular mover v1");
    for p in parts {
        h.update([0u8]);
        h.update(p.as_bytes());
    }
    super::hex(&h.finalize()[..16])
}

/// Starts the mover as a background task when `--object-store-endpoint` is given.
/// Errors: missing credentials or an unusable endpoint (before anything starts).
pub fn start(pool: Pool, args: &ObjectStoreArgs, stop: CancellationToken) -> Result<Option<tokio::task::JoinHandle<()>>, String> {
    let Some(endpoint) = args.object_store_endpoint.clone() else { return Ok(None) };
    let (access_key_id, secret_access_key) = credentials_from_env()?;
    syncular_object_store::validate_endpoint(&endpoint).map_err(|e| format!("--object-store-endpoint: {e}"))?;
    let public = args.object_store_public_endpoint.clone().unwrap_or_else(|| endpoint.clone());
    syncular_object_store::validate_endpoint(&public).map_err(|e| format!("--object-store-public-endpoint: {e}"))?;
    syncular_object_store::validate_prefix(&args.object_store_prefix).map_err(|e| format!("--object-store-prefix: {e}"))?;
    let bucket = Bucket::new(&endpoint, &args.object_store_bucket, &args.object_store_region, &access_key_id, &secret_access_key)?;
    let fingerprint = fingerprint(&[
        &public,
        &args.object_store_bucket,
        &args.object_store_region,
        &args.object_store_prefix,
        &access_key_id,
        &secret_access_key,
        &args.object_store_url_ttl_secs.to_string(),
    ]);
    let mover = Arc::new(Mover {
        pool,
        bucket,
        args: args.clone(),
        access_key_id,
        secret_access_key,
        public_endpoint: public,
        fingerprint,
        active: AtomicBool::new(false),
    });
    // One handle for both loops: it ends after the heartbeat loop's last act (heartbeat 0).
    Ok(Some(tokio::spawn(async move {
        let heartbeat = tokio::spawn(mover.clone().heartbeat_loop(stop.clone()));
        mover.run(stop).await;
        let _ = heartbeat.await;
    })))
}

impl Mover {
    /// The work loop: a round every interval while [`Mover::active`].
    async fn run(self: Arc<Self>, stop: CancellationToken) {
        let interval = Duration::from_millis(self.args.object_store_interval_ms);
        loop {
            if self.active.load(Ordering::Relaxed) {
                if let Err(e) = self.work_round().await {
                    tracing::warn!(error = %e, "object store mover: round failed");
                }
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(interval) => {}
            }
        }
    }

    /// Probe, configuration, keys and heartbeat, every interval, on their own task: a long copy
    /// never lets the heartbeat lapse. Nothing is written before the bucket answered these
    /// credentials; a mover another one replaced (`syncular.object_store_conflict`) goes quiet.
    async fn heartbeat_loop(self: Arc<Self>, stop: CancellationToken) {
        let interval = Duration::from_millis(self.args.object_store_interval_ms);
        let mut configured = false;
        let mut keys_day = String::new();
        let mut state = String::new();
        loop {
            let next = match self.heartbeat_round(&mut configured, &mut keys_day).await {
                Ok(true) => "healthy".to_owned(),
                Ok(false) => "unhealthy".to_owned(),
                Err(e) => e,
            };
            self.active.store(next == "healthy", Ordering::Relaxed);
            if next != state {
                match next.as_str() {
                    "healthy" => tracing::info!("object store healthy: presigned URLs on"),
                    "unhealthy" => tracing::warn!("object store unreachable: presigned URLs off, Postgres serves every byte"),
                    e if e.contains("syncular.object_store_conflict") => {
                        tracing::error!(error = %e, "object store mover replaced by another: idle until restarted")
                    }
                    e => tracing::warn!(error = %e, "object store mover: heartbeat failed"),
                }
                state = next;
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(interval) => {}
            }
        }
        // Stop presigning: nobody keeps the bucket in check any more.
        self.active.store(false, Ordering::Relaxed);
        if let Ok(client) = self.pool.get().await {
            let _ = client.execute("SELECT syncular.object_store_heartbeat(0, $1)", &[&self.fingerprint]).await;
        }
    }

    /// One heartbeat: `Ok(true)` healthy, `Ok(false)` the bucket did not answer.
    async fn heartbeat_round(&self, configured: &mut bool, keys_day: &mut String) -> Result<bool, String> {
        let probe = self.bucket.probe().await;
        let client = self.pool.get().await.map_err(|e| format!("no database connection: {e}"))?;
        if let Err(e) = probe {
            tracing::debug!(error = %e, "object store probe failed");
            if *configured {
                client.execute("SELECT syncular.object_store_heartbeat(0, $1)", &[&self.fingerprint]).await.map_err(db_error)?;
            }
            return Ok(false);
        }
        let args = &self.args;
        if !*configured {
            client
                .execute(
                    "SELECT syncular.object_store_configure($1, $2, $3, $4, $5, $6, $7)",
                    &[
                        &self.public_endpoint,
                        &args.object_store_bucket,
                        &args.object_store_region,
                        &args.object_store_prefix,
                        &self.access_key_id,
                        &args.object_store_url_ttl_secs,
                        &self.fingerprint,
                    ],
                )
                .await
                .map_err(db_error)?;
            *configured = true;
            keys_day.clear();
            tracing::info!(bucket = %args.object_store_bucket, "object store configured");
        }
        let now = crate::realtime::session::now_ms();
        let (today, _) = syncular_object_store::amz_date(now).map_err(|e| e.to_string())?;
        if *keys_day != today {
            let mut keys = Vec::new();
            for at in [now, now + 86_400_000] {
                let (day, _) = syncular_object_store::amz_date(at).map_err(|e| e.to_string())?;
                let key = syncular_object_store::derive_signing_key(&self.secret_access_key, &day, &args.object_store_region);
                let hex = super::hex(&key);
                keys.push(json!({"day": day, "accessKeyId": self.access_key_id, "signingKey": hex}));
            }
            client
                .execute("SELECT syncular.object_store_signing_keys($1, $2)", &[&Value::Array(keys), &self.fingerprint])
                .await
                .map_err(db_error)?;
            *keys_day = today;
        }
        let healthy_for = (args.object_store_interval_ms as i64 * 5).clamp(5_000, 600_000);
        let row = client.query_one("SELECT syncular.object_store_heartbeat($1, $2)", &[&healthy_for, &self.fingerprint]).await.map_err(db_error)?;
        // The configuration row is gone (the extension was re-created): configure again next time.
        if !row.try_get::<_, bool>(0).map_err(db_error)? {
            *configured = false;
            return Ok(false);
        }
        Ok(true)
    }

    async fn work_round(self: &Arc<Self>) -> Result<(), String> {
        let client = self.pool.get().await.map_err(|e| format!("no database connection: {e}"))?;
        let check_after = i64::try_from(self.args.object_store_check_after_ms).unwrap_or(i64::MAX);
        let scan_after = i64::try_from(self.args.object_store_scan_after_ms).unwrap_or(i64::MAX);
        let rows = client
            .query("SELECT syncular.object_store_work($1, $2, $3)", &[&ITEMS_PER_ROUND, &check_after, &scan_after])
            .await
            .map_err(db_error)?;
        drop(client);
        let items: Vec<Value> = rows.iter().filter_map(|r| r.try_get::<_, Value>(0).ok()).collect();
        let concurrency = usize::try_from(self.args.object_store_concurrency).unwrap_or(4);
        futures_util::stream::iter(items)
            .for_each_concurrent(concurrency, |item| {
                let mover = self.clone();
                async move {
                    let op = item.get("op").and_then(Value::as_str).unwrap_or_default().to_owned();
                    let staging = item.get("stagingKey").and_then(Value::as_str).map(str::to_owned);
                    match mover.handle(&item).await {
                        Ok(Some(result)) => match mover.report(item, result).await {
                            // The upload counts: its own key is no longer needed.
                            Ok(outcome) if outcome.starts_with("upload verified") => {
                                if let Some(staging) = staging {
                                    if let Err(e) = mover.bucket.delete(&staging).await {
                                        tracing::warn!(error = %e, "object store mover: deleting a verified upload's key failed");
                                    }
                                }
                            }
                            Ok(_) => {}
                            Err(e) => tracing::warn!(op = %op, error = %e, "object store mover: report failed"),
                        },
                        Ok(None) => {}
                        Err(e) => tracing::warn!(op = %op, error = %e, "object store mover: request failed"),
                    }
                }
            })
            .await;
        Ok(())
    }

    async fn report(&self, mut item: Value, result: (&'static str, Option<String>)) -> Result<String, String> {
        item["result"] = json!(result.0);
        if let Some(etag) = result.1 {
            item["etag"] = json!(etag);
        }
        let client = self.pool.get().await.map_err(|e| format!("no database connection: {e}"))?;
        let row = client.query_one("SELECT syncular.object_store_report($1)", &[&item]).await.map_err(db_error)?;
        let outcome: String = row.try_get(0).map_err(db_error)?;
        tracing::debug!(op = %item["op"], outcome = %outcome, "object store mover");
        Ok(outcome)
    }

    /// Does one item; the report's `result` (and ETag), or `None` for nothing to report.
    async fn handle(&self, item: &Value) -> Result<Option<(&'static str, Option<String>)>, String> {
        let text = |name: &str| item.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
        let key = text("objectKey");
        let byte_length = item.get("byteLength").and_then(Value::as_i64).unwrap_or(0);
        match text("op").as_str() {
            "copySegment" | "copyBlob" => {
                let (sql, id) = if text("op") == "copySegment" {
                    ("SELECT syncular.segment_chunk($1::text, $2::text, $3::int4)", text("segmentId"))
                } else {
                    ("SELECT syncular.object_store_blob_chunk($1::text, $2::text, $3::int4)", text("blobId"))
                };
                let count = item.get("chunkCount").and_then(Value::as_i64).and_then(|c| i32::try_from(c).ok()).unwrap_or(0);
                let body = chunk_body(self.pool.clone(), sql, text("partition"), id, count);
                let etag = self.bucket.put(&key, u64::try_from(byte_length).unwrap_or(0), body).await?;
                Ok(Some(("copied", Some(etag))))
            }
            "verifyUpload" => {
                // The upload landed on a key of its grant's own; verified bytes are copied to the
                // content key (never overwriting one: only movers write content keys).
                let staging = text("stagingKey");
                let expected = text("blobId");
                match self.bucket.head(&staging).await? {
                    Head::Absent => return Ok(Some(("absent", None))),
                    Head::Present { length, .. } if length != byte_length => {
                        self.bucket.delete(&staging).await?;
                        return Ok(Some(("invalid", None)));
                    }
                    Head::Present { .. } => {}
                }
                let length = u64::try_from(byte_length).unwrap_or(0);
                let hex = match self.bucket.copy_hashing(&staging, &key, length).await? {
                    Some((hex, etag)) if expected.strip_prefix("sha256:") == Some(hex.as_str()) => return Ok(Some(("verified", Some(etag)))),
                    Some(_) => {
                        self.bucket.delete(&key).await?;
                        None
                    }
                    // The content key exists (a mover wrote it): the upload counts if its bytes are right.
                    None => self.bucket.sha256(&staging, length).await?.map(|(hex, _)| hex),
                };
                match (hex, self.bucket.head(&key).await?) {
                    (Some(hex), Head::Present { etag, .. }) if expected.strip_prefix("sha256:") == Some(hex.as_str()) => {
                        Ok(Some(("verified", Some(etag))))
                    }
                    _ => {
                        self.bucket.delete(&staging).await?;
                        Ok(Some(("invalid", None)))
                    }
                }
            }
            "deleteSegment" | "deleteBlob" => {
                self.bucket.delete(&key).await?;
                Ok(Some(("deleted", None)))
            }
            "checkSegment" | "checkBlob" => match self.bucket.head(&key).await? {
                Head::Present { length, etag } if length == byte_length && etag == text("etag") => Ok(Some(("checked", None))),
                _ => Ok(Some(("missing", None))),
            },
            other => {
                tracing::warn!(op = %other, "object store mover: unknown work item (a newer extension?)");
                Ok(None)
            }
        }
    }
}

/// A database error's text: the server's message when it sent one (tokio-postgres' own
/// `Display` says only "db error").
fn db_error(e: tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => e.to_string(),
    }
}

/// The chunks `0 .. count` of `sql(partition, id, idx)` as a streamed request body, each read
/// with its own short pool checkout; a failed read fails the body (the PUT is then incomplete
/// and the bucket keeps nothing).
fn chunk_body(pool: Pool, sql: &'static str, partition: String, id: String, count: i32) -> reqwest::Body {
    let stream = futures_util::stream::unfold(0i32, move |idx| {
        let (pool, partition, id) = (pool.clone(), partition.clone(), id.clone());
        async move {
            if idx >= count {
                return None;
            }
            let read = async {
                let client = pool.get().await.map_err(|e| std::io::Error::other(format!("no database connection: {e}")))?;
                let row = client.query_one(sql, &[&partition, &id, &idx]).await.map_err(|e| std::io::Error::other(db_error(e)))?;
                row.try_get::<_, Option<Vec<u8>>>(0)
                    .map_err(std::io::Error::other)?
                    .map(Bytes::from)
                    .ok_or_else(|| std::io::Error::other(format!("chunk {idx} of {id} is gone")))
            };
            Some((read.await, idx + 1))
        }
    });
    reqwest::Body::wrap_stream(stream)
}
