//! What an operation's write caused without naming it (a foreign-key
//! cascade, an app trigger's write; [`crate::engine::commit::guard`]) as
//! further changes of the commit.

use super::*;

/// A row operation `op_index`'s write caused without naming it
/// ([`crate::engine::commit::guard`]: a foreign-key cascade, an app
/// trigger's write) as a further change of the commit: a deleted row's
/// scope entries and blob references go, a written row's blob references
/// are checked (§5.9.6) and recorded (§5.9.4). The capture's row trigger
/// computed it as for plain SQL. Errors: `blob.not_found` terminates the
/// commit; store failures.
pub fn side_effect_change(ctx: &SyncContext<'_>, op_index: i32, side: SideEffect) -> EngineResult<OpOutcome> {
    let partition = ctx.partition.as_str();
    let (old_ids, new_ids) = &side.blob_ids;
    if side.op == Op::Delete {
        row_scopes::delete_row_scopes(partition, &side.table, &side.row_id)?;
        let blob_columns = ctx.schema.table(&side.table).is_some_and(|t| !crate::engine::schema::blob_columns(table_schema(t)).is_empty());
        if blob_columns {
            crate::store::blobs::refs::delete_row_blob_refs(partition, &side.table, &side.row_id)?;
        }
    } else {
        if let Some(missing) = blob_refs::first_missing(partition, new_ids)? {
            return Ok(Err(StoredOpResult::error(
                op_index,
                ErrorCode::BlobNotFound,
                blob_refs::not_found_message(&side.table, &side.row_id, &missing),
            )
            .into()));
        }
        blob_refs::record_row(partition, &side.table, &side.row_id, old_ids, new_ids)?;
    }
    Ok(Ok(Some(StagedChange {
        table: side.table,
        row_id: side.row_id,
        op: side.op,
        row_version: side.row_version,
        scopes: side.scopes,
        payload: side.payload,
        inserted: side.inserted,
    })))
}
