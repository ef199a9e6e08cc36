//! The reference index on the write path (SPEC §5.9.4) and the push-time
//! existence check (§5.9.6, §6.6).
//!
//! Pushes and `syncular.commit` ([`crate::engine::push::apply`]): an upsert
//! whose row carries non-NULL `blob_ref` values checks that every referenced
//! blob is stored in the partition — after the scope check, the version
//! check, the scope strip and the crdt check, right before the write
//! validator (the reference server's order) — locking them against the
//! sweep; an absent one terminates the commit with `blob.not_found`. After
//! the row's write its references are recorded (replaced on update when
//! they changed); a delete removes them.
//!
//! Captured plain SQL writes ([`captured`]): set-based at the statement's
//! end, from its transition table — the same check (an absent blob fails
//! the statement with `blob.not_found`, 42704), then the references.

use syncular_protocol::ErrorCode;

use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::store::blobs::{bytes, refs};
use crate::store::capture::transition::{self as log, CapturedOp, NEW_TABLE, OLD_TABLE};

/// Locks the stored ones of `blob_ids` against the sweep and returns the
/// first one the partition does not store, if any. Errors:
/// `syncular.blob_pending` (55006, retryable) when that one's presigned
/// upload was granted and is not verified yet (the mover turns it into a blob
/// or drops the grant; the request is retried, not the commit rejected).
pub fn first_missing(partition: &str, blob_ids: &[String]) -> EngineResult<Option<String>> {
    if blob_ids.is_empty() {
        return Ok(None);
    }
    let present = bytes::lock_present_blobs(partition, blob_ids)?;
    let Some(missing) = blob_ids.iter().find(|id| !present.contains(id)).cloned() else { return Ok(None) };
    let abandon_before_ms = crate::engine::clock::now_ms()?.saturating_sub(crate::engine::objects::GRANT_GRACE_MS);
    if crate::store::objects::grants::pending(partition, &missing, abandon_before_ms)? {
        return Err(EngineError::host(
            HostCode::BlobPending,
            format!("blob {missing} was granted a presigned upload that is not verified yet: retry shortly (§5.9.3)"),
        ));
    }
    Ok(Some(missing))
}

/// The `blob.not_found` message for a row referencing `blob_id`.
pub fn not_found_message(table: &str, row_id: &str, blob_id: &str) -> String {
    format!("row {row_id:?} of table {table:?} references blob {blob_id}, which is not stored: upload it first (§5.9.6)")
}

/// Records the references of a written row: `old` its previous blob ids
/// (empty for an insert), `new` the current ones. Nothing is written when
/// they are equal.
pub fn record_row(partition: &str, table: &str, row_id: &str, old: &[String], new: &[String]) -> EngineResult<()> {
    if old == new {
        return Ok(());
    }
    if !old.is_empty() {
        refs::delete_row_blob_refs(partition, table, row_id)?;
    }
    refs::insert_row_blob_refs(partition, table, row_id, new)?;
    Ok(())
}

/// The blob part of a captured statement on IR table `tbl` with `blob_ref`
/// columns `columns` (nothing without any): the existence check of the
/// inserted / updated rows, then the references.
/// Errors: `blob.not_found` naming the first absent blob, store failures.
///
/// # Safety
/// `trigger_data` must be the `TriggerData` of the AFTER STATEMENT trigger in
/// progress, whose transition table holds the statement's rows.
pub unsafe fn captured(
    trigger_data: *mut pgrx::pg_sys::TriggerData,
    plan_key: &str,
    partition: &str,
    tbl: &str,
    op: CapturedOp,
    columns: &[String],
) -> EngineResult<()> {
    if columns.is_empty() {
        return Ok(());
    }
    if op != CapturedOp::Delete {
        // SAFETY: forwarded from the caller.
        let ids = unsafe { log::with_transition_tables(trigger_data, |c| refs::captured_blob_ids(c, plan_key, NEW_TABLE, columns)) }?;
        if let Some(missing) = first_missing(partition, &ids)? {
            return Err(EngineError::protocol(
                ErrorCode::BlobNotFound,
                format!("a row written to table {tbl:?} references blob {missing}, which is not stored in partition {partition:?}: upload it first (syncular.blob_put, PUT /blobs/{{blobId}}; §5.9.6)"),
            ));
        }
    }
    // SAFETY: forwarded from the caller.
    unsafe {
        log::with_transition_tables(trigger_data, |c| {
            match op {
                CapturedOp::Insert => {}
                CapturedOp::Update => refs::captured_delete_refs(c, plan_key, NEW_TABLE, partition, tbl)?,
                CapturedOp::Delete => return refs::captured_delete_refs(c, plan_key, OLD_TABLE, partition, tbl),
            }
            refs::captured_insert_refs(c, plan_key, NEW_TABLE, partition, tbl, columns)
        })
    }?;
    Ok(())
}
