//! Presigned URLs minted inside the extension: segment GETs (§5.4 delegated presign), blob GETs
//! (§5.9.5) and blob PUTs (§5.9.3), each from the configuration row and today's signing key
//! ([`crate::store::objects::config`]). `None` whenever the tier cannot serve the object now.

use syncular_object_store as objects;

use crate::engine::error::{EngineError, EngineResult};
use crate::store::objects::config::{self, SignerRow};
use crate::store::objects::{grants, stored};

/// A presigned URL and its `urlExpiresAtMs`.
pub type Presigned = (String, i64);

/// The configuration with today's key, when the mover is healthy at `now_ms`.
fn signer(now_ms: i64) -> EngineResult<Option<SignerRow>> {
    let (day, _) = objects::amz_date(now_ms).map_err(|e| EngineError::internal(format!("object store clock: {e}")))?;
    Ok(config::select_signer(&day, now_ms)?)
}

/// The presigned URL, or `None` when the stored configuration cannot sign it (the tier then
/// fails open: Postgres serves).
fn presign(row: &SignerRow, method: objects::Method, key: &str, now_ms: i64, headers: &[(&str, &str)]) -> Option<Presigned> {
    let signing_key: [u8; 32] = row.signing_key.as_slice().try_into().ok()?;
    let (day, _) = objects::amz_date(now_ms).ok()?;
    let request = objects::PresignRequest {
        method,
        endpoint: &row.endpoint,
        bucket: &row.bucket,
        key,
        region: &row.region,
        access_key_id: &row.access_key_id,
        signing_key,
        signing_day: &day,
        unix_ms: now_ms,
        expires_seconds: u64::try_from(row.url_ttl_s).unwrap_or(1).max(1),
        extra_signed_headers: headers,
    };
    let signed = objects::presign(&request).ok()?;
    Some((signed.url, signed.expires_at_ms))
}

/// A presigned GET of segment `segment_id`, when the bucket holds it. Errors: store failures.
pub fn segment_get(segment_id: &str, now_ms: i64) -> EngineResult<Option<Presigned>> {
    if !stored::segment_stored(segment_id)? {
        return Ok(None);
    }
    let Some(row) = signer(now_ms)? else { return Ok(None) };
    let Ok(key) = objects::segment_object_key(&row.key_prefix, segment_id) else { return Ok(None) };
    Ok(presign(&row, objects::Method::Get, &key, now_ms, &[]))
}

/// Where blob `blob_id` of `partition` can be read from the bucket.
pub enum BlobGet {
    /// Not in the bucket: Postgres serves it.
    NotStored,
    /// In the bucket, which cannot be used now; `in_postgres`: Postgres holds a copy.
    Unavailable { in_postgres: bool },
    /// A presigned GET.
    Url(Presigned),
}

/// A presigned GET of blob `blob_id` of `partition` (the caller authorized the actor).
/// Errors: store failures.
pub fn blob_get(partition: &str, blob_id: &str, now_ms: i64) -> EngineResult<BlobGet> {
    let Some((_, in_postgres)) = stored::blob_object(partition, blob_id)? else { return Ok(BlobGet::NotStored) };
    let Some(row) = signer(now_ms)? else { return Ok(BlobGet::Unavailable { in_postgres }) };
    let url = blob_key(&row, partition, blob_id).and_then(|key| presign(&row, objects::Method::Get, &key, now_ms, &[]));
    Ok(url.map_or(BlobGet::Unavailable { in_postgres }, BlobGet::Url))
}

/// A presigned PUT of `byte_length` bytes for blob `blob_id` of `partition` (`content-length`
/// signed: the bucket refuses another size) to a key of this grant's own
/// (`{prefix}up/{nonce}/{hex}`: the mover copies verified bytes to the content key, so a grant
/// never rewrites a blob that counts), recording the grant; `None` when the tier cannot take
/// uploads now (the client streams through `PUT /blobs/{blobId}`).
/// Errors: store failures; `syncular.internal` without randomness.
pub fn blob_put(partition: &str, blob_id: &str, byte_length: i64, now_ms: i64) -> EngineResult<Option<Presigned>> {
    let Some(row) = signer(now_ms)? else { return Ok(None) };
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).map_err(|e| EngineError::internal(format!("no randomness for an upload key: {e}")))?;
    let nonce = crate::engine::segments::bytes::hex_of(&nonce);
    let Ok(key) = objects::staging_object_key(&row.key_prefix, &nonce, blob_id) else { return Ok(None) };
    let length = byte_length.to_string();
    let Some(presigned) = presign(&row, objects::Method::Put, &key, now_ms, &[("content-length", length.as_str())]) else {
        return Ok(None);
    };
    grants::upsert_grant(partition, blob_id, byte_length, now_ms, presigned.1, &key)?;
    Ok(Some(presigned))
}

fn blob_key(row: &SignerRow, partition: &str, blob_id: &str) -> Option<String> {
    let token = objects::partition_token(&row.partition_salt, partition);
    objects::blob_object_key(&row.key_prefix, &token, blob_id).ok()
}
