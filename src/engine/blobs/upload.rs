//! Blob upload (SPEC §5.9.3): the bytes are streamed into the caller's
//! transaction in pieces, hashed here, and the blob is recorded only when
//! the SHA-256 of every byte received equals the blob id.
//!
//! One upload per transaction at a time, in one subtransaction:
//! [`begin`] → [`append`]… → [`finish`] (or [`put`], all three in one
//! call). [`begin`] takes the blob's upload lock (identical uploads queue:
//! the second finds the bytes present) and checks the declared size; a blob
//! already present is re-hashed but not stored again (its upload time is
//! refreshed, so the sweep spares it for another grace period). The hasher
//! lives in this backend ([`UPLOAD`]); a transaction that would commit with
//! an unfinished upload is refused ([`unfinished`], checked by the API at
//! pre-commit). The upload follows its subtransaction: rolled back, it goes
//! with its chunks ([`subtransaction_aborted`]); released (`RELEASE
//! SAVEPOINT`, a PL/pgSQL block that ends without an exception), it belongs
//! to the parent, so its chunks cannot commit unverified
//! ([`subtransaction_committed`]). The API registers both as subtransaction
//! callbacks.

use std::cell::RefCell;

use pgrx::pg_sys;
use serde_json::{json, Value};
use syncular_protocol::blob::BlobHasher;
use syncular_protocol::ErrorCode;

use super::{check_blob_id, too_large, CHUNK_BYTES};
use crate::engine::clock;
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::engine::auth::caller::check_partition;
use crate::store::blobs::bytes::{self, BlobRecord};
use crate::store::push::locks as push_locks;

/// The upload in progress in this backend.
struct Upload {
    partition: String,
    blob_id: String,
    /// The blob was stored already: the bytes are hashed, not stored.
    present: bool,
    next_idx: i32,
    received: i64,
    max_bytes: i64,
    hasher: BlobHasher,
    subxact: pg_sys::SubTransactionId,
}

thread_local! {
    static UPLOAD: RefCell<Option<Upload>> = const { RefCell::new(None) };
}

fn current_subxact() -> pg_sys::SubTransactionId {
    // SAFETY: reads backend transaction state; valid inside a transaction.
    unsafe { pg_sys::GetCurrentSubTransactionId() }
}

/// A subtransaction was rolled back: an upload begun in it goes (its
/// chunks were rolled back with it).
pub fn subtransaction_aborted(my_subid: pg_sys::SubTransactionId, _parent: pg_sys::SubTransactionId) {
    UPLOAD.with(|u| {
        let mut u = u.borrow_mut();
        if u.as_ref().is_some_and(|up| up.subxact == my_subid) {
            *u = None;
        }
    });
}

/// A subtransaction was released into `parent`: an upload begun in it (and
/// its chunks) now belongs to the parent.
pub fn subtransaction_committed(my_subid: pg_sys::SubTransactionId, parent: pg_sys::SubTransactionId) {
    UPLOAD.with(|u| {
        if let Some(up) = u.borrow_mut().as_mut().filter(|up| up.subxact == my_subid) {
            up.subxact = parent;
        }
    });
}

fn invalid(message: String) -> EngineError {
    EngineError::host(HostCode::InvalidArgument, message)
}

/// The upload of this backend, if any (a rolled-back one is gone already:
/// [`subtransaction_aborted`]).
fn take_live() -> Option<Upload> {
    UPLOAD.with(|u| u.borrow_mut().take())
}

/// Forgets the upload in progress (transaction end).
pub fn reset() {
    UPLOAD.with(|u| u.borrow_mut().take());
}

/// The refusal of a commit while an upload is unfinished (its chunks would
/// be stored without a blob record), `None` when there is none.
pub fn unfinished() -> Option<EngineError> {
    let live = UPLOAD.with(|u| u.borrow().as_ref().map(|u| u.blob_id.clone()));
    live.map(|id| {
        invalid(format!(
            "the upload of blob {id} was begun but not finished in this transaction: call syncular.blob_upload_finish, or roll back"
        ))
    })
}

/// Starts the upload of `blob_id` into `partition`, `declared` its size when
/// known (a `Content-Length`). Returns whether the blob is already stored.
/// Errors: `sync.invalid_request` (malformed id), `blob.too_large`
/// (declared size over `syncular.blob_max_bytes`), `syncular.invalid_argument`
/// (a negative size, another upload in progress, a partition over 512 bytes).
pub fn begin(partition: &str, blob_id: &str, declared: Option<i64>) -> EngineResult<bool> {
    check_partition(partition)?;
    check_blob_id(blob_id)?;
    let max_bytes = crate::settings::blob_max_bytes();
    match declared {
        Some(n) if n < 0 => return Err(invalid(format!("byte_length must not be negative, got {n}"))),
        Some(n) if n > max_bytes => return Err(too_large(n, max_bytes)),
        _ => {}
    }
    if let Some(live) = take_live() {
        let id = live.blob_id.clone();
        UPLOAD.with(|u| *u.borrow_mut() = Some(live));
        return Err(invalid(format!(
            "the upload of blob {id} is still in progress in this transaction: finish it first (one upload at a time)"
        )));
    }
    crate::store::lifecycle::fence::share_writes(partition);
    push_locks::lock_keys(vec![push_locks::blob_key(partition, blob_id)])?;
    let present = bytes::refresh_blob(partition, blob_id, clock::now_ms()?)?;
    if !present {
        // Chunks without a record cannot commit (unfinished() refuses it); clear any a
        // hand-edited table left, so the new ones do not collide.
        bytes::delete_blob_chunks(partition, blob_id)?;
    }
    let upload = Upload {
        partition: partition.to_owned(),
        blob_id: blob_id.to_owned(),
        present,
        next_idx: 0,
        received: 0,
        max_bytes,
        hasher: BlobHasher::new(),
        subxact: current_subxact(),
    };
    UPLOAD.with(|u| *u.borrow_mut() = Some(upload));
    Ok(present)
}

/// The live upload of `blob_id` in `partition`, begun in the current
/// subtransaction. Errors: `syncular.invalid_argument`.
fn take_matching(partition: &str, blob_id: &str) -> EngineResult<Upload> {
    let live = take_live();
    match live {
        Some(u) if u.partition == partition && u.blob_id == blob_id && u.subxact == current_subxact() => Ok(u),
        other => {
            let message = match &other {
                Some(u) if u.subxact != current_subxact() => format!(
                    "the upload of blob {} was begun in another subtransaction: begin, append and finish in the same one",
                    u.blob_id
                ),
                _ => format!("no upload of blob {blob_id} into this partition is in progress: call syncular.blob_upload_begin first"),
            };
            UPLOAD.with(|u| *u.borrow_mut() = other);
            Err(invalid(message))
        }
    }
}

/// Appends `data` to the upload; returns the bytes received so far.
/// Errors: as [`take_matching`]; `blob.too_large` once the bytes received
/// exceed the cap (the caller's subtransaction must be rolled back).
pub fn append(partition: &str, blob_id: &str, data: &[u8]) -> EngineResult<i64> {
    let mut upload = take_matching(partition, blob_id)?;
    let len = i64::try_from(data.len()).unwrap_or(i64::MAX);
    let received = upload.received.saturating_add(len);
    if received > upload.max_bytes {
        return Err(too_large(received, upload.max_bytes));
    }
    if !upload.present {
        for piece in data.chunks(CHUNK_BYTES) {
            bytes::insert_blob_chunk(partition, blob_id, upload.next_idx, piece)?;
            upload.next_idx += 1;
        }
    }
    upload.hasher.update(data);
    upload.received = received;
    UPLOAD.with(|u| *u.borrow_mut() = Some(upload));
    Ok(received)
}

/// Ends the upload: the content address is verified and, for a new blob,
/// its record written. Returns `{"blobId", "byteLength", "stored"}`
/// (`stored` false: it was present already).
/// Errors: as [`take_matching`]; `blob.hash_mismatch` (the caller's
/// subtransaction must be rolled back: its chunks go with it).
pub fn finish(partition: &str, blob_id: &str) -> EngineResult<Value> {
    let upload = take_matching(partition, blob_id)?;
    let computed = upload.hasher.finish();
    if computed != blob_id {
        return Err(EngineError::protocol(
            ErrorCode::BlobHashMismatch,
            format!("the {} bytes received hash to {computed}, not {blob_id} (§5.9.3)", upload.received),
        ));
    }
    if !upload.present {
        let (rows, stored) = bytes::chunk_totals(partition, blob_id)?;
        if rows != i64::from(upload.next_idx) || stored != upload.received {
            return Err(EngineError::internal(format!(
                "blob {blob_id}: {rows} chunks of {stored} bytes stored, {} of {} received",
                upload.next_idx, upload.received
            )));
        }
        bytes::insert_blob(
            partition,
            blob_id,
            BlobRecord { byte_length: upload.received, chunk_count: upload.next_idx, uploaded_at_ms: clock::now_ms()? },
        )?;
    }
    Ok(json!({"blobId": blob_id, "byteLength": upload.received, "stored": !upload.present}))
}

/// [`begin`] + [`append`] + [`finish`] in one call.
pub fn put(partition: &str, blob_id: &str, data: &[u8]) -> EngineResult<Value> {
    begin(partition, blob_id, Some(i64::try_from(data.len()).unwrap_or(i64::MAX)))?;
    append(partition, blob_id, data)?;
    finish(partition, blob_id)
}

/// The §5.9.3 upload grant: the size cap is checked up front;
/// `{"present": true}` when the blob is stored (its upload time refreshed:
/// the client skips the PUT and pushes), else a presigned PUT
/// `{"url", "urlExpiresAtMs"}` when the object store takes uploads now (the
/// grant is recorded; the mover verifies the upload before it counts), else
/// `{"present": false}` — the client streams the bytes through
/// `PUT /blobs/{blobId}`. Errors: `sync.invalid_request`,
/// `blob.too_large`, `syncular.invalid_argument` (negative size).
pub fn grant(partition: &str, blob_id: &str, byte_length: i64) -> EngineResult<Value> {
    check_partition(partition)?;
    check_blob_id(blob_id)?;
    if byte_length < 0 {
        return Err(invalid(format!("byteLength must not be negative, got {byte_length}")));
    }
    let max = crate::settings::blob_max_bytes();
    if byte_length > max {
        return Err(too_large(byte_length, max));
    }
    crate::store::lifecycle::fence::share_writes(partition);
    let now_ms = clock::now_ms()?;
    let present = bytes::refresh_blob(partition, blob_id, now_ms)?;
    if !present {
        if let Some((url, expires_at_ms)) = crate::engine::objects::urls::blob_put(partition, blob_id, byte_length, now_ms)? {
            return Ok(json!({"url": url, "urlExpiresAtMs": expires_at_ms}));
        }
    }
    Ok(json!({"present": present}))
}
