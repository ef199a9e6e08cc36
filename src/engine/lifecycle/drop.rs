//! Removing a partition (a tenant) in bounded batches (docs/src/sql/lifecycle.md
//! `syncular.drop_partition`).
//!
//! A batch first takes the partition's write fence exclusively
//! ([`fence::exclusive_writes`], after the schema fence: every taker's
//! order): a push, server commit, captured statement, realtime open or ack
//! or blob upload of the partition still in flight commits first and its
//! rows are deleted with the rest; one arriving later waits for the batch.
//! A batch deletes up to `max_rows` rows of the partition: app tables first
//! (children before parents: the reverse of the schema's bootstrap order, so
//! a foreign key between app tables never blocks), then the `sync_*` tables
//! in [`SYNC_TABLES`] order — the registry row last. The app-table deletes
//! hold the engine-write guard of every app table, so the capture triggers
//! write no commit for them. The batch that deletes the registry row queues a
//! `syncular_scopes` notification for every actor: gateways reload their
//! sessions of the partition, meet the new timeline and send `reset-required`.
//! Afterwards the partition is unknown: the next request creates it anew with
//! a fresh `logEpoch` (a v2 client resets, any client bootstraps an empty
//! partition).

use crate::engine::error::EngineResult;
use crate::engine::notify;
use crate::engine::schema;
use crate::engine::commit::guard::EngineWrite;
use crate::store::lifecycle::fence;
use crate::store::lifecycle::drop::{delete_rows, SYNC_TABLES};

/// Blob chunk rows (up to 1 MiB each) one batch deletes at most.
pub const CHUNK_ROWS_PER_BATCH: i64 = 64;

/// What one batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropBatch {
    /// Rows deleted, at most `max_rows`.
    pub deleted: i64,
    /// The batch reached the registry row (the last table): the partition
    /// is gone. A later batch would delete a partition created anew since
    /// (e.g. by a gateway reloading its sessions on this batch's
    /// notification), so a drop stops here.
    pub done: bool,
}

/// Deletes at most `max_rows` rows of `partition`. Errors: store failures.
pub fn batch(partition: &str, max_rows: i64) -> EngineResult<DropBatch> {
    let mut left = max_rows;
    let stopped = |left: i64| Ok(DropBatch { deleted: max_rows - left, done: false });
    // Behind the schema fence: a bump never retires a table between this read and its delete.
    let schema = schema::load_fenced_schema()?;
    fence::exclusive_writes(partition);
    if let Some(schema) = schema {
        let _guards: Vec<EngineWrite> = schema.tables.iter().map(|t| EngineWrite::table(t.name(), Some(partition))).collect();
        for table in schema.tables.iter().rev() {
            left -= delete_rows(&table.qualified_name, true, partition, left)?;
            if left == 0 {
                return stopped(left);
            }
        }
    }
    for table in SYNC_TABLES {
        // Blob chunks weigh up to 1 MiB each: at most CHUNK_ROWS_PER_BATCH per batch, and
        // their blobs' records only once every chunk is gone.
        if table == "sync_blob_chunks" || table == "sync_segment_chunks" {
            let cap = left.min(CHUNK_ROWS_PER_BATCH);
            let deleted = delete_rows(table, false, partition, cap)?;
            left -= deleted;
            if deleted == cap {
                return stopped(left);
            }
            continue;
        }
        let deleted = delete_rows(table, false, partition, left)?;
        left -= deleted;
        if table == "sync_partition_registry" && deleted > 0 {
            // The partition is gone: gateways reload its sessions, which meet a new
            // timeline (a fresh epoch) and are told `reset-required`.
            notify::notify_scopes(partition, None)?;
        }
        if left == 0 && table != "sync_partition_registry" {
            return stopped(left);
        }
    }
    // Every table before the registry (the last) is empty of the partition (each delete
    // took fewer rows than it was allowed, and no fenced writer ran beside the batch),
    // and the registry's one row is gone: deleted by its primary key, so also when an
    // unfenced writer (a rotation) updated it meanwhile (store::lifecycle::drop).
    Ok(DropBatch { deleted: max_rows - left, done: true })
}
