//! Blobs — file attachments (SPEC §5.9): the blob store in the database,
//! per partition ([`upload`], [`download`], [`sweep`]), and the reference
//! index plus the push-time existence check ([`refs`]).
//!
//! **Per partition.** A blob is stored, checked and served within one
//! partition (`sync_blobs` is keyed `(partition, blob_id)`): the reference
//! index and download authorization are per partition (§5.9.4, §5.9.5), the
//! gateway's authentication yields the partition for an upload (§1.1), and a
//! global store would let one tenant learn whether another holds some bytes
//! (a push referencing a guessed id would be applied, not `blob.not_found`).
//! Identical bytes uploaded to two partitions are stored twice.
//!
//! **Invariant "referenced ⇒ present"** (§5.9.2, §5.9.6): every write that
//! adds a reference first locks the blob's `sync_blobs` row `FOR KEY SHARE`
//! (held to its transaction's end), and the sweep deletes only a blob whose
//! row it locked `FOR UPDATE SKIP LOCKED` and which a later read shows
//! unreferenced — see [`crate::store::blobs::bytes`].

pub mod download;
pub mod refs;
pub mod sweep;
pub mod upload;

use syncular_protocol::blob::is_blob_id;
use syncular_protocol::ErrorCode;

use crate::engine::error::{EngineError, EngineResult};

/// Largest chunk row of `sync_blob_chunks` (1 MiB): uploads are stored in
/// pieces of at most this size, downloads served one piece per call.
pub const CHUNK_BYTES: usize = 1024 * 1024;

/// Refuses a malformed blob id (`"sha256:" + 64 lowercase hex`, §5.9.1)
/// with `sync.invalid_request`.
pub fn check_blob_id(blob_id: &str) -> EngineResult<()> {
    if is_blob_id(blob_id) {
        return Ok(());
    }
    Err(EngineError::protocol(
        ErrorCode::InvalidRequest,
        format!("{blob_id:?} is not a blob id (\"sha256:\" + 64 lowercase hex, §5.9.1)"),
    ))
}

/// `blob.too_large` for `bytes` over the cap `max` (GUC `syncular.blob_max_bytes`).
pub fn too_large(bytes: i64, max: i64) -> EngineError {
    EngineError::protocol(
        ErrorCode::BlobTooLarge,
        format!("blob of {bytes} bytes exceeds this server's limit of {max} bytes (§5.9.3)"),
    )
}
