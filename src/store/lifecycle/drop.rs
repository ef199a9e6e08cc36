//! Removing one partition (a tenant) in bounded batches.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::{StoreError, StoreResult};

/// Every `sync_*` table holding rows of a partition, in deletion order: the
/// indexes and log first, the counter and registry rows last (while they
/// exist, the partition is still "known"). Not `sync_blob_objects`: its rows
/// name the bucket objects the mover deletes once their blobs are gone
/// (docs/src/operate/object-store.md), and go with them.
pub const SYNC_TABLES: [&str; 19] = [
    "sync_blob_grants",
    "sync_segment_publications",
    "sync_segment_chunks",
    "sync_segments",
    "sync_row_scopes",
    "sync_blob_refs",
    "sync_blob_chunks",
    "sync_blobs",
    "sync_reactions",
    "sync_tombstones",
    "sync_change_scopes",
    "sync_changes",
    "sync_commits",
    "sync_push_results",
    "sync_round_failures",
    "sync_auth_leases",
    "sync_clients",
    "sync_partitions",
    "sync_partition_registry",
];

/// The tables keyed by the partition alone (one row each): deleted by their
/// primary key, which — unlike a `ctid` list — still matches a row a
/// concurrent transaction updated after the statement's snapshot (READ
/// COMMITTED re-checks the new version), so a batch never reports the
/// partition gone while its registry row stands.
const ONE_ROW_TABLES: [&str; 2] = ["sync_partitions", "sync_partition_registry"];

/// Deletes at most `max_rows` rows of `partition` from `table`: a `sync_*`
/// table of [`SYNC_TABLES`] (column `partition`) or, with `app = true`, an
/// app table given as its quoted qualified name (column `_sync_partition`).
/// Returns how many. Errors: SPI failures.
pub fn delete_rows(table: &str, app: bool, partition: &str, max_rows: i64) -> StoreResult<i64> {
    let (relation, column) = if app {
        (table.to_owned(), "_sync_partition")
    } else {
        debug_assert!(SYNC_TABLES.contains(&table));
        (format!("syncular.{table}"), "partition")
    };
    let sql = if !app && ONE_ROW_TABLES.contains(&table) {
        // `$2 > 0`: the same parameters, and the cap honoured (max_rows ≥ 1 holds one row).
        format!("DELETE FROM {relation} WHERE {column} = $1 AND $2 > 0")
    } else {
        format!(
            "DELETE FROM {relation} WHERE {column} = $1 AND ctid = ANY(ARRAY( \
               SELECT t.ctid FROM {relation} t WHERE t.{column} = $1 LIMIT $2))"
        )
    };
    Spi::connect_mut(|client| {
        let done = client.update(
            sql.as_str(),
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(max_rows)],
        )?;
        Ok(done.len() as i64)
    })
    .map_err(StoreError::spi("drop_partition_rows"))
}
