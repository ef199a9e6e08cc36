//! The orphan sweep (SPEC §5.9.2): blobs uploaded more than a grace period
//! ago that no current row references are deleted, in bounded batches. A
//! blob is deleted only after its row is locked `FOR UPDATE SKIP LOCKED`
//! (a writer referencing it, or an upload of it, holds a conflicting lock:
//! the blob is skipped) and a later statement still finds no reference —
//! so a push that checked the blob's existence can never commit a
//! reference to a deleted blob, and a sweep never deletes a referenced one.

use crate::engine::clock;
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::store::blobs::bytes;

/// The default grace period: 24 hours (§5.9.2).
pub const DEFAULT_GRACE_MS: i64 = 24 * 60 * 60 * 1000;

/// Deletes up to `max_rows` orphan blobs of `partition` (every partition
/// when `None`) uploaded more than `older_than_ms` ago; returns how many.
/// Errors: `syncular.invalid_argument` (a negative age, `max_rows` < 1, a
/// REPEATABLE READ / SERIALIZABLE caller: its snapshot could miss a
/// reference committed after it), store failures.
pub fn sweep(partition: Option<&str>, older_than_ms: i64, max_rows: i64) -> EngineResult<i64> {
    if older_than_ms < 0 || max_rows < 1 {
        return Err(EngineError::host(
            HostCode::InvalidArgument,
            format!("older_than_ms must be ≥ 0 and max_rows ≥ 1, got {older_than_ms} and {max_rows}"),
        ));
    }
    // SAFETY: reads backend transaction state.
    if unsafe { pgrx::pg_sys::XactIsoLevel } >= pgrx::pg_sys::XACT_REPEATABLE_READ as i32 {
        return Err(EngineError::host(
            HostCode::InvalidArgument,
            "syncular.blob_sweep_orphans runs under READ COMMITTED only: it re-reads the reference index after locking each blob",
        ));
    }
    let cutoff = clock::now_ms()?.saturating_sub(older_than_ms);
    let mut deleted = 0i64;
    for (p, blob_id) in bytes::sweep_candidates(partition, cutoff, max_rows)? {
        if !bytes::lock_for_sweep(&p, &blob_id, cutoff)? {
            continue;
        }
        if crate::store::blobs::bytes::blob_referenced(&p, &blob_id)? {
            continue;
        }
        bytes::delete_blob_chunks(&p, &blob_id)?;
        if bytes::delete_blob(&p, &blob_id)? {
            deleted += 1;
        }
    }
    Ok(deleted)
}
