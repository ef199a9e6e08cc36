//! The mover's loop: configure the tier, hand over the per-day signing keys, probe the bucket
//! and keep the heartbeat, then do the work items the extension lists and report each one
//! (`syncular.object_store_*`; docs/src/operate/object-store.md "The mover's protocol").
//! A failed request is logged and left alone: the extension lists the item again next round.

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
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
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
    let mover = Arc::new(Mover { pool, bucket, args: args.clone(), access_key_id, secret_access_key });
    Ok(Some(tokio::spawn(async move { mover.run(stop).await })))
}

impl Mover {
    async fn run(self: Arc<Self>, stop: CancellationToken) {
        let interval = Duration::from_millis(self.args.object_store_interval_ms);
        let mut configured = false;
        let mut keys_day = String::new();
        let mut healthy: Option<bool> = None;
        loop {
            if let Err(e) = self.round(&mut configured, &mut keys_day, &mut healthy).await {
                tracing::warn!(error = %e, "object store mover: round failed");
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(interval) => {}
            }
        }
        // Stop presigning: nobody keeps the bucket in check any more.
        if let Ok(client) = self.pool.get().await {
            let _ = client.execute("SELECT syncular.object_store_heartbeat(0)", &[]).await;
        }
    }

    async fn round(self: &Arc<Self>, configured: &mut bool, keys_day: &mut String, healthy: &mut Option<bool>) -> Result<(), String> {
        let client = self.pool.get().await.map_err(|e| format!("no database connection: {e}"))?;
        let db = db_error;
        if !*configured {
            let args = &self.args;
            let public = args.object_store_public_endpoint.as_ref().or(args.object_store_endpoint.as_ref()).cloned().unwrap_or_default();
            client
                .execute(
                    "SELECT syncular.object_store_configure($1, $2, $3, $4, $5, $6)",
                    &[&public, &args.object_store_bucket, &args.object_store_region, &args.object_store_prefix, &self.access_key_id, &args.object_store_url_ttl_secs],
                )
                .await
                .map_err(db)?;
            *configured = true;
            tracing::info!(bucket = %args.object_store_bucket, "object store configured");
        }
        let now = now_ms();
        let (today, _) = syncular_object_store::amz_date(now).map_err(|e| e.to_string())?;
        if *keys_day != today {
            let mut keys = Vec::new();
            for at in [now, now + 86_400_000] {
                let (day, _) = syncular_object_store::amz_date(at).map_err(|e| e.to_string())?;
                let key = syncular_object_store::derive_signing_key(&self.secret_access_key, &day, &self.args.object_store_region);
                let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
                keys.push(json!({"day": day, "accessKeyId": self.access_key_id, "signingKey": hex}));
            }
            client.execute("SELECT syncular.object_store_signing_keys($1)", &[&Value::Array(keys)]).await.map_err(db)?;
            *keys_day = today;
        }
        let probe = self.bucket.probe().await;
        let ok = probe.is_ok();
        let healthy_for = if ok { (self.args.object_store_interval_ms as i64 * 5).clamp(5_000, 600_000) } else { 0 };
        client.execute("SELECT syncular.object_store_heartbeat($1)", &[&healthy_for]).await.map_err(db)?;
        if *healthy != Some(ok) {
            match &probe {
                Ok(()) => tracing::info!("object store healthy: presigned URLs on"),
                Err(e) => tracing::warn!(error = %e, "object store unreachable: presigned URLs off, Postgres serves every byte"),
            }
            *healthy = Some(ok);
        }
        if !ok {
            return Ok(());
        }
        let check_after = i64::try_from(self.args.object_store_check_after_ms).unwrap_or(i64::MAX);
        let scan_after = i64::try_from(self.args.object_store_scan_after_ms).unwrap_or(i64::MAX);
        let rows = client
            .query("SELECT syncular.object_store_work($1, $2, $3)", &[&ITEMS_PER_ROUND, &check_after, &scan_after])
            .await
            .map_err(db)?;
        drop(client);
        let items: Vec<Value> = rows.iter().filter_map(|r| r.try_get::<_, Value>(0).ok()).collect();
        let concurrency = usize::try_from(self.args.object_store_concurrency).unwrap_or(4);
        futures_util::stream::iter(items)
            .for_each_concurrent(concurrency, |item| {
                let mover = self.clone();
                async move {
                    let op = item.get("op").and_then(Value::as_str).unwrap_or_default().to_owned();
                    match mover.handle(&item).await {
                        Ok(Some(result)) => {
                            if let Err(e) = mover.report(item, result).await {
                                tracing::warn!(op = %op, error = %e, "object store mover: report failed");
                            }
                        }
                        Ok(None) => {}
                        Err(e) => tracing::warn!(op = %op, error = %e, "object store mover: request failed"),
                    }
                }
            })
            .await;
        Ok(())
    }

    async fn report(&self, mut item: Value, result: (&'static str, Option<String>)) -> Result<(), String> {
        item["result"] = json!(result.0);
        if let Some(etag) = result.1 {
            item["etag"] = json!(etag);
        }
        let client = self.pool.get().await.map_err(|e| format!("no database connection: {e}"))?;
        let row = client.query_one("SELECT syncular.object_store_report($1)", &[&item]).await.map_err(db_error)?;
        tracing::debug!(op = %item["op"], outcome = %row.get::<_, String>(0), "object store mover");
        Ok(())
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
                let expected = text("blobId");
                match self.bucket.head(&key).await? {
                    Head::Absent => return Ok(Some(("absent", None))),
                    Head::Present { length, .. } if length != byte_length => {
                        self.bucket.delete(&key).await?;
                        return Ok(Some(("invalid", None)));
                    }
                    Head::Present { .. } => {}
                }
                match self.bucket.sha256(&key, u64::try_from(byte_length).unwrap_or(0)).await? {
                    None => Ok(Some(("absent", None))),
                    Some((hex, len)) if len as i64 == byte_length && expected.strip_prefix("sha256:") == Some(hex.as_str()) => {
                        match self.bucket.head(&key).await? {
                            Head::Present { etag, .. } => Ok(Some(("verified", Some(etag)))),
                            Head::Absent => Ok(Some(("absent", None))),
                        }
                    }
                    Some(_) => {
                        self.bucket.delete(&key).await?;
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
