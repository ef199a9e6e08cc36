//! `sync_blobs` / `sync_blob_chunks` statements: the blob store (§5.9.2,
//! §5.9.3, §5.9.5), one row per stored blob of a partition and its bytes in
//! chunks of at most 1 MiB (`idx` from 0).
//!
//! Locks that keep "referenced ⇒ present" true under concurrency: a writer
//! that references a blob holds its `sync_blobs` row `FOR KEY SHARE`
//! ([`lock_present_blobs`]) until its transaction ends; the sweep deletes a
//! blob only after locking its row `FOR UPDATE SKIP LOCKED`
//! ([`lock_for_sweep`]) and re-reading the reference index in a later
//! statement ([`blob_referenced`]) — so a reference committed before the
//! sweep's lock is seen, and none can be added while the sweep holds it.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::{pinned_plan, plan_cache};
use crate::store::{StoreError, StoreResult};

/// A stored blob's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobRecord {
    /// Size in bytes.
    pub byte_length: i64,
    /// Number of chunk rows (`idx` 0 .. chunk_count).
    pub chunk_count: i32,
    /// When it was uploaded (or last re-uploaded), Unix ms.
    pub uploaded_at_ms: i64,
}

fn exec(statement: &'static str, sql: &str, limit: Option<i64>, args: &[DatumWithOid<'_>]) -> StoreResult<u64> {
    Spi::connect_mut(|client| plan_cache::execute(client, sql, limit, args).map(|t| t.len() as u64))
        .map_err(StoreError::spi(statement))
}

/// Marks a stored blob as uploaded again at `now_ms` (never back in time),
/// locking its row to the transaction's end; `false` when the partition has
/// no such blob (the sweep may just have deleted it). Errors: SPI failures.
pub fn refresh_blob(partition: &str, blob_id: &str, now_ms: i64) -> StoreResult<bool> {
    exec(
        "refresh_blob",
        "UPDATE syncular.sync_blobs SET uploaded_at_ms = GREATEST(uploaded_at_ms, $3) \
         WHERE partition = $1 AND blob_id = $2 RETURNING 1",
        None,
        &[DatumWithOid::from(partition), DatumWithOid::from(blob_id), DatumWithOid::from(now_ms)],
    )
    .map(|n| n > 0)
}

/// Deletes every chunk row of a blob; returns how many. Errors: SPI failures.
pub fn delete_blob_chunks(partition: &str, blob_id: &str) -> StoreResult<u64> {
    exec(
        "delete_blob_chunks",
        "DELETE FROM syncular.sync_blob_chunks WHERE partition = $1 AND blob_id = $2",
        None,
        &[DatumWithOid::from(partition), DatumWithOid::from(blob_id)],
    )
}

/// Stores chunk `idx` of a blob. Errors: SPI failures; a duplicate `idx`
/// is a unique violation.
pub fn insert_blob_chunk(partition: &str, blob_id: &str, idx: i32, bytes: &[u8]) -> StoreResult<()> {
    exec(
        "insert_blob_chunk",
        "INSERT INTO syncular.sync_blob_chunks (partition, blob_id, idx, bytes) VALUES ($1, $2, $3, $4)",
        None,
        &[DatumWithOid::from(partition), DatumWithOid::from(blob_id), DatumWithOid::from(idx), DatumWithOid::from(bytes)],
    )
    .map(|_| ())
}

/// Records a stored blob. Errors: SPI failures; an existing record is a
/// unique violation (uploads of one blob are serialized, so it means the
/// tables were edited by hand).
pub fn insert_blob(partition: &str, blob_id: &str, record: BlobRecord) -> StoreResult<()> {
    exec(
        "insert_blob",
        "INSERT INTO syncular.sync_blobs (partition, blob_id, byte_length, chunk_count, uploaded_at_ms) \
         VALUES ($1, $2, $3, $4, $5)",
        None,
        &[
            DatumWithOid::from(partition),
            DatumWithOid::from(blob_id),
            DatumWithOid::from(record.byte_length),
            DatumWithOid::from(record.chunk_count),
            DatumWithOid::from(record.uploaded_at_ms),
        ],
    )
    .map(|_| ())
}

/// `(rows, bytes)` of the chunks stored for a blob (sizes read from the
/// values' headers, not their bytes). Errors: SPI failures.
pub fn chunk_totals(partition: &str, blob_id: &str) -> StoreResult<(i64, i64)> {
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(
            client,
            "SELECT count(*), COALESCE(sum(pg_catalog.octet_length(bytes)), 0)::int8 \
             FROM syncular.sync_blob_chunks WHERE partition = $1 AND blob_id = $2",
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(blob_id)],
        )?;
        let row = t.first();
        Ok((row.get::<i64>(1)?.unwrap_or(0), row.get::<i64>(2)?.unwrap_or(0)))
    })
    .map_err(StoreError::spi("blob_chunk_totals"))
}

/// The record of a stored blob, `None` when absent. Errors: SPI failures.
pub fn select_blob(partition: &str, blob_id: &str) -> StoreResult<Option<BlobRecord>> {
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(
            client,
            "SELECT byte_length, chunk_count, uploaded_at_ms FROM syncular.sync_blobs \
             WHERE partition = $1 AND blob_id = $2",
            Some(1),
            &[DatumWithOid::from(partition), DatumWithOid::from(blob_id)],
        )?;
        if t.is_empty() {
            return Ok(None);
        }
        let row = t.first();
        Ok(Some(BlobRecord {
            byte_length: row.get::<i64>(1)?.unwrap_or(0),
            chunk_count: row.get::<i32>(2)?.unwrap_or(0),
            uploaded_at_ms: row.get::<i64>(3)?.unwrap_or(0),
        }))
    })
    .map_err(StoreError::spi("select_blob"))
}

/// Chunk `idx` of a blob, `None` when absent. Errors: SPI failures.
pub fn select_blob_chunk(partition: &str, blob_id: &str, idx: i32) -> StoreResult<Option<Vec<u8>>> {
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(
            client,
            "SELECT bytes FROM syncular.sync_blob_chunks WHERE partition = $1 AND blob_id = $2 AND idx = $3",
            Some(1),
            &[DatumWithOid::from(partition), DatumWithOid::from(blob_id), DatumWithOid::from(idx)],
        )?;
        if t.is_empty() {
            return Ok(None);
        }
        t.first().get::<Vec<u8>>(1)
    })
    .map_err(StoreError::spi("select_blob_chunk"))
}

/// [`lock_present_blobs`]' statement: `$1` partition, `$2` the sorted, distinct ids.
const LOCK_PRESENT_SQL: &str = "SELECT b.blob_id FROM unnest($2::text[]) WITH ORDINALITY AS u(id, n) \
     CROSS JOIN LATERAL (SELECT s.blob_id FROM syncular.sync_blobs s \
        WHERE s.partition = $1 AND s.blob_id = u.id FOR KEY SHARE) b \
     ORDER BY u.n";

/// `EXPLAIN (FORMAT JSON)` of [`lock_present_blobs`]' pinned plan (for the
/// plan tests). Errors: SPI failures.
pub fn explain_lock_present(partition: &str, blob_ids: &[String]) -> StoreResult<String> {
    pinned_plan::explain(LOCK_PRESENT_SQL, &[DatumWithOid::from(partition), DatumWithOid::from(blob_ids.to_vec())], false)
        .map_err(StoreError::spi("explain_lock_present"))
}

/// Of `blob_ids`, the ones stored in `partition`, each locked `FOR KEY
/// SHARE` to the end of the transaction (the sweep cannot delete them
/// before the referencing write commits), in ascending id order — one
/// primary-key probe per id (a `= ANY($2)` filter over the partition's blobs
/// is what the planner chose on never-analyzed tables), through a pinned
/// plan. Errors: SPI failures.
pub fn lock_present_blobs(partition: &str, blob_ids: &[String]) -> StoreResult<Vec<String>> {
    let mut ids: Vec<String> = blob_ids.to_vec();
    ids.sort();
    ids.dedup();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Spi::connect_mut(|client| {
        let t = pinned_plan::execute(client, LOCK_PRESENT_SQL, None, &[DatumWithOid::from(partition), DatumWithOid::from(ids)])?;
        let mut out = Vec::with_capacity(t.len());
        for row in t {
            if let Some(id) = row.get::<String>(1)? {
                out.push(id);
            }
        }
        Ok(out)
    })
    .map_err(StoreError::spi("lock_present_blobs"))
}

/// Up to `limit` blobs uploaded before `cutoff_ms` that no row references
/// now (in `partition`, or in every partition when `None`), oldest first:
/// `(partition, blob_id)`. Candidates only: [`lock_for_sweep`] and
/// [`blob_referenced`] decide. Errors: SPI failures.
pub fn sweep_candidates(partition: Option<&str>, cutoff_ms: i64, limit: i64) -> StoreResult<Vec<(String, String)>> {
    let (sql, args) = match partition {
        Some(p) => (
            "SELECT b.partition, b.blob_id FROM syncular.sync_blobs b \
             WHERE b.partition = $1 AND b.uploaded_at_ms < $2 \
               AND NOT EXISTS (SELECT 1 FROM syncular.sync_blob_refs r WHERE r.partition = $1 AND r.blob_id = b.blob_id) \
             ORDER BY b.uploaded_at_ms LIMIT $3",
            vec![DatumWithOid::from(p), DatumWithOid::from(cutoff_ms), DatumWithOid::from(limit)],
        ),
        None => (
            "SELECT b.partition, b.blob_id FROM syncular.sync_blobs b \
             WHERE b.uploaded_at_ms < $1 \
               AND NOT EXISTS (SELECT 1 FROM syncular.sync_blob_refs r WHERE r.partition = b.partition AND r.blob_id = b.blob_id) \
             ORDER BY b.uploaded_at_ms LIMIT $2",
            vec![DatumWithOid::from(cutoff_ms), DatumWithOid::from(limit)],
        ),
    };
    Spi::connect_mut(|client| {
        let t = client.update(sql, None, &args)?;
        let mut out = Vec::with_capacity(t.len());
        for row in t {
            if let (Some(p), Some(b)) = (row.get::<String>(1)?, row.get::<String>(2)?) {
                out.push((p, b));
            }
        }
        Ok(out)
    })
    .map_err(StoreError::spi("blob_sweep_candidates"))
}

/// Locks a blob for deletion (`FOR UPDATE SKIP LOCKED`) if it is still
/// stored and uploaded before `cutoff_ms`; `false` when it is gone,
/// re-uploaded, or locked by a writer referencing it (or an upload).
/// Errors: SPI failures.
pub fn lock_for_sweep(partition: &str, blob_id: &str, cutoff_ms: i64) -> StoreResult<bool> {
    exec(
        "lock_blob_for_sweep",
        "SELECT 1 FROM syncular.sync_blobs WHERE partition = $1 AND blob_id = $2 AND uploaded_at_ms < $3 \
         FOR UPDATE SKIP LOCKED",
        None,
        &[DatumWithOid::from(partition), DatumWithOid::from(blob_id), DatumWithOid::from(cutoff_ms)],
    )
    .map(|n| n > 0)
}

/// Whether any row of `partition` references the blob (a fresh read: run
/// it after [`lock_for_sweep`]). Errors: SPI failures.
pub fn blob_referenced(partition: &str, blob_id: &str) -> StoreResult<bool> {
    exec(
        "blob_referenced",
        "SELECT 1 FROM syncular.sync_blob_refs WHERE partition = $1 AND blob_id = $2 LIMIT 1",
        None,
        &[DatumWithOid::from(partition), DatumWithOid::from(blob_id)],
    )
    .map(|n| n > 0)
}

/// Deletes a blob's record (its chunks go first: [`delete_blob_chunks`]).
/// Errors: SPI failures.
pub fn delete_blob(partition: &str, blob_id: &str) -> StoreResult<bool> {
    exec(
        "delete_blob",
        "DELETE FROM syncular.sync_blobs WHERE partition = $1 AND blob_id = $2",
        None,
        &[DatumWithOid::from(partition), DatumWithOid::from(blob_id)],
    )
    .map(|n| n > 0)
}
