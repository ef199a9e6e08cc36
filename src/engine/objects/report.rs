//! The mover's reports (`syncular.object_store_report`): what it did with one work item, checked
//! against the rows the item names — sizes come from Postgres, never from the report, and a
//! report about something that changed meanwhile changes nothing.

use serde_json::Value;

use crate::engine::clock;
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::engine::objects::GRANT_GRACE_MS;
use crate::store::blobs::bytes::{self as blob_bytes, BlobRecord};
use crate::store::objects::{grants, stored};
use crate::store::push::locks as push_locks;

fn invalid(message: impl Into<String>) -> EngineError {
    EngineError::host(HostCode::InvalidArgument, message)
}

/// The next check of a grant checked `checks` times: every 100 ms for the first 2 s after the
/// grant (a push usually follows the upload at once), then every second, then every 5 s.
fn grant_backoff_ms(checks: i32) -> i64 {
    match checks {
        ..=19 => 100,
        20..=79 => 1_000,
        _ => 5_000,
    }
}

/// `syncular.object_store_report`: what the mover did with one work item — the item's fields
/// plus `"result"`: `copied` (+ `etag`), `deleted`, `checked` (+ `etag`: as stored), `missing`
/// (absent, or another ETag/length), `verified` (+ `etag`: the upload matched its length and
/// SHA-256 and was copied to the content key), `absent` (no upload yet), `invalid` (wrong length or
/// hash: the mover deleted it). Every report is checked against the rows it names — sizes come
/// from Postgres, never from the report; a report about something that changed meanwhile changes
/// nothing. Returns what changed, as text (for the mover's log; `upload verified…` tells the mover
/// it may delete the upload's own key). Errors: `syncular.invalid_argument` for a malformed report.
pub fn report(item: &Value) -> EngineResult<String> {
    let field = |name: &str| item.get(name).and_then(Value::as_str).ok_or_else(|| invalid(format!("the report needs a string {name:?}")));
    let op = field("op")?;
    let result = field("result")?;
    let now_ms = clock::now_ms()?;
    let content_id = |name: &str| -> EngineResult<&str> {
        let id = field(name)?;
        if syncular_protocol::blob::is_blob_id(id) { Ok(id) } else { Err(invalid(format!("{name} must be sha256:<64 lowercase hex>"))) }
    };
    let etag = || -> EngineResult<&str> {
        let etag = field("etag")?;
        if etag.is_empty() || etag.len() > 256 { Err(invalid("etag must be 1..256 characters")) } else { Ok(etag) }
    };
    let partition = || -> EngineResult<&str> {
        let p = field("partition")?;
        if p.is_empty() { Err(invalid("partition must not be empty")) } else { Ok(p) }
    };
    match (op, result) {
        ("copySegment", "copied") => {
            let segment_id = content_id("segmentId")?;
            let etag = etag()?;
            match stored::segment_length(segment_id)? {
                Some(byte_length) => {
                    stored::upsert_segment(segment_id, byte_length, etag, now_ms)?;
                    Ok("segment object recorded".into())
                }
                None => Ok("no such segment: the object is deleted by a later scan".into()),
            }
        }
        ("copyBlob", "copied") => {
            let (partition, blob_id, etag) = (partition()?, content_id("blobId")?, etag()?);
            match blob_bytes::select_blob(partition, blob_id)? {
                Some(record) if record.chunk_count > 0 || record.byte_length == 0 => {
                    stored::upsert_blob(partition, blob_id, record.byte_length, etag, true, now_ms)?;
                    Ok("blob object recorded".into())
                }
                _ => Ok("no such blob in Postgres: nothing recorded".into()),
            }
        }
        ("deleteSegment", "deleted") => Ok(format!("segment object forgotten: {}", stored::delete_segment(content_id("segmentId")?)?)),
        ("deleteBlob", "deleted") => blob_deleted(partition()?, content_id("blobId")?),
        ("checkSegment", "checked") => Ok(format!("checked: {}", stored::touch_segment(content_id("segmentId")?, etag()?, now_ms)?)),
        ("checkBlob", "checked") => Ok(format!("checked: {}", stored::touch_blob(partition()?, content_id("blobId")?, etag()?, now_ms)?)),
        ("checkSegment", "missing") => {
            // Postgres holds the bytes: forgetting the object makes the next work round copy it again.
            stored::delete_segment(content_id("segmentId")?)?;
            Ok("segment object missing: copied again next".into())
        }
        ("checkBlob", "missing") => blob_missing(partition()?, content_id("blobId")?, now_ms),
        ("verifyUpload", "verified") => verified(partition()?, content_id("blobId")?, etag()?, now_ms),
        ("verifyUpload", "absent") => {
            let (partition, blob_id) = (partition()?, content_id("blobId")?);
            match grants::select_grant(partition, blob_id)? {
                Some((_, _, expires_at_ms, _)) if now_ms > expires_at_ms.saturating_add(GRANT_GRACE_MS) => {
                    grants::delete_grant(partition, blob_id)?;
                    Ok("grant lapsed without an upload".into())
                }
                Some((_, _, _, checks)) => {
                    grants::reschedule(partition, blob_id, now_ms.saturating_add(grant_backoff_ms(checks)))?;
                    Ok("grant still pending".into())
                }
                None => Ok("no such grant".into()),
            }
        }
        ("verifyUpload", "invalid") => {
            grants::delete_grant(partition()?, content_id("blobId")?)?;
            Ok("upload refused: wrong length or hash".into())
        }
        _ => Err(invalid(format!("unknown report {op:?} → {result:?}"))),
    }
}

/// A verified presigned upload (its bytes copied by the mover to the content key) becomes a blob
/// — an object-only one unless Postgres got the bytes meanwhile through `PUT /blobs/{blobId}` —
/// under the blob's upload lock, at the grant's size. While the content key still holds a swept
/// blob's object the mover is about to delete, the grant is checked again later.
fn verified(partition: &str, blob_id: &str, etag: &str, now_ms: i64) -> EngineResult<String> {
    let Some((byte_length, _, _, checks)) = grants::select_grant(partition, blob_id)? else {
        return Ok("no such grant".into());
    };
    push_locks::lock_keys(vec![push_locks::blob_key(partition, blob_id)])?;
    let record = blob_bytes::select_blob(partition, blob_id)?;
    if record.is_none() && stored::blob_object(partition, blob_id)?.is_some() {
        grants::reschedule(partition, blob_id, now_ms.saturating_add(grant_backoff_ms(checks)))?;
        return Ok("the content key still holds a swept blob's object: checked again later".into());
    }
    let in_postgres = match record {
        Some(record) => record.chunk_count > 0 || record.byte_length == 0,
        None => {
            blob_bytes::insert_blob(partition, blob_id, BlobRecord { byte_length, chunk_count: 0, uploaded_at_ms: now_ms })?;
            false
        }
    };
    stored::upsert_blob(partition, blob_id, byte_length, etag, in_postgres, now_ms)?;
    grants::delete_grant(partition, blob_id)?;
    Ok("upload verified: blob stored".into())
}

/// The mover deleted a blob's object: its row goes. A blob recorded again meanwhile (uploaded
/// again right after the sweep) lost its object with it: copied again when Postgres holds it,
/// else lost (a WARNING; its record goes, downloads answer `blob.not_found`).
fn blob_deleted(partition: &str, blob_id: &str) -> EngineResult<String> {
    let gone = stored::delete_blob(partition, blob_id)?.is_some();
    push_locks::lock_keys(vec![push_locks::blob_key(partition, blob_id)])?;
    if let Some(record) = blob_bytes::select_blob(partition, blob_id)? {
        if record.chunk_count == 0 && record.byte_length > 0 {
            blob_bytes::delete_blob(partition, blob_id)?;
            pgrx::warning!("syncular: blob {blob_id} was uploaded again while its old object was being deleted: upload it again");
            return Ok("blob object forgotten: the blob uploaded meanwhile is lost".into());
        }
    }
    Ok(format!("blob object forgotten: {gone}"))
}

/// A stored blob object is gone or changed: a copy Postgres also holds is forgotten (copied
/// again next); one the bucket held alone stays recorded — restoring the object brings it back —
/// and a WARNING says so (downloads fail at the bucket meanwhile).
fn blob_missing(partition: &str, blob_id: &str, now_ms: i64) -> EngineResult<String> {
    match stored::blob_in_postgres(partition, blob_id)? {
        Some(true) => {
            stored::delete_blob(partition, blob_id)?;
            Ok("blob object missing: copied again next".into())
        }
        Some(false) => {
            stored::touch_blob_any(partition, blob_id, now_ms)?;
            pgrx::warning!(
                "syncular: blob {blob_id} is held only by the object store and its object is missing or changed: restore the object"
            );
            Ok("blob object missing, no copy in Postgres".into())
        }
        None => Ok("no such blob object".into()),
    }
}
