//! `sync_changes` and `sync_change_scopes` statements (SPEC §2.2, §3.1): the
//! changes of an applied commit and the commit→scope inverted index the
//! incremental pull reads through.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::plan_cache;
use crate::store::{StoreError, StoreResult};

/// One change of a commit, as stored.
#[derive(Debug, Clone)]
pub struct NewChange {
    /// Position inside the commit, 0-based, in application order.
    pub idx: i32,
    /// IR table name (`tbl`).
    pub table: String,
    /// The row's `rowId`.
    pub row_id: String,
    /// `1` = upsert, `2` = delete (§6.1 op bytes).
    pub op: i16,
    /// `server_version` after the write (upserts only).
    pub row_version: Option<i64>,
    /// Stored scopes `{"variable":"value",…}` as JSON text (delete: the row's
    /// scopes before removal).
    pub scopes_json: String,
    /// The row-codec payload after the write (upserts only), byte-identical
    /// to the app row's stored payload.
    pub payload: Option<Vec<u8>>,
}

/// Inserts every change of commit `commit_seq` in one statement (arrays
/// unnested in `idx` order). A no-op for an empty list. Errors: SPI failures.
pub fn insert_changes(partition: &str, commit_seq: i64, changes: &[NewChange]) -> StoreResult<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let idx: Vec<i32> = changes.iter().map(|c| c.idx).collect();
    let tbl: Vec<String> = changes.iter().map(|c| c.table.clone()).collect();
    let row_id: Vec<String> = changes.iter().map(|c| c.row_id.clone()).collect();
    let op: Vec<i16> = changes.iter().map(|c| c.op).collect();
    let version: Vec<Option<i64>> = changes.iter().map(|c| c.row_version).collect();
    let scopes: Vec<String> = changes.iter().map(|c| c.scopes_json.clone()).collect();
    let payload: Vec<Option<Vec<u8>>> = changes.iter().map(|c| c.payload.clone()).collect();
    Spi::connect_mut(|client| {
        plan_cache::execute(client,
            "INSERT INTO syncular.sync_changes \
               (partition, commit_seq, idx, tbl, row_id, op, row_version, scopes, payload) \
             SELECT $1, $2, u.idx, u.tbl, u.row_id, u.op, u.row_version, u.scopes::jsonb, u.payload \
             FROM unnest($3::int4[], $4::text[], $5::text[], $6::int2[], $7::int8[], $8::text[], $9::bytea[]) \
               AS u(idx, tbl, row_id, op, row_version, scopes, payload)",
            None,
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(commit_seq),
                DatumWithOid::from(idx),
                DatumWithOid::from(tbl),
                DatumWithOid::from(row_id),
                DatumWithOid::from(op),
                DatumWithOid::from(version),
                DatumWithOid::from(scopes),
                DatumWithOid::from(payload),
            ],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("insert_changes"))
}

/// Inserts the `(tbl, var, value)` index entries of commit `commit_seq`, one
/// per distinct triple (`ON CONFLICT DO NOTHING`); `entries` may repeat.
/// A no-op for an empty list. Errors: SPI failures.
pub fn insert_change_scopes(
    partition: &str,
    commit_seq: i64,
    entries: &[(String, String, String)],
) -> StoreResult<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let tbl: Vec<String> = entries.iter().map(|e| e.0.clone()).collect();
    let var: Vec<String> = entries.iter().map(|e| e.1.clone()).collect();
    let value: Vec<String> = entries.iter().map(|e| e.2.clone()).collect();
    Spi::connect_mut(|client| {
        plan_cache::execute(
            client,
            "INSERT INTO syncular.sync_change_scopes (partition, tbl, var, value, commit_seq) \
             SELECT DISTINCT $1, u.tbl, u.var, u.value, $2::int8 \
             FROM unnest($3::text[], $4::text[], $5::text[]) AS u(tbl, var, value) \
             ON CONFLICT DO NOTHING",
            None,
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(commit_seq),
                DatumWithOid::from(tbl),
                DatumWithOid::from(var),
                DatumWithOid::from(value),
            ],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("insert_change_scopes"))
}
