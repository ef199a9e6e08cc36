//! `sync_tombstones` statements: the last deleting commit of a deleted row
//! (`partition, tbl, row_id → commit_seq`), kept while the row stays deleted.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::plan_cache;
use crate::store::{StoreError, StoreResult};

/// Records (or moves forward) the tombstone of a row deleted by `commit_seq`.
/// Errors: SPI failures.
pub fn upsert_tombstone(
    partition: &str,
    table: &str,
    row_id: &str,
    commit_seq: i64,
) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        plan_cache::execute(
            client,
            "INSERT INTO syncular.sync_tombstones (partition, tbl, row_id, commit_seq) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (partition, tbl, row_id) DO UPDATE SET commit_seq = EXCLUDED.commit_seq",
            None,
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(table),
                DatumWithOid::from(row_id),
                DatumWithOid::from(commit_seq),
            ],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("upsert_tombstone"))
}

/// Removes the tombstone of a row that exists again (re-inserted).
/// Errors: SPI failures.
pub fn delete_tombstone(partition: &str, table: &str, row_id: &str) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        plan_cache::execute(client,
            "DELETE FROM syncular.sync_tombstones WHERE partition = $1 AND tbl = $2 AND row_id = $3",
            None,
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(table),
                DatumWithOid::from(row_id),
            ],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("delete_tombstone"))
}
