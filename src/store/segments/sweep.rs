//! Segment expiry and garbage collection statements (docs/src/sql/segments.md "Segment
//! expiry and garbage collection"), used by
//! [`crate::engine::segments::sweep`].
//!
//! Locks that keep "published ⇒ bytes present" true under concurrency: a
//! publisher that reuses stored bytes holds their `sync_segments` row
//! `FOR KEY SHARE` ([`lock_segment_bytes`]) from before it relies on them
//! until its transaction ends (an insert of the row holds it anyway); the
//! sweep deletes bytes only after locking the row `FOR UPDATE SKIP LOCKED`
//! ([`lock_segment_for_sweep`]) and finding, in a later statement, no
//! publication ([`segment_published`]) — so a publication committed before
//! the sweep's lock is seen, none can be added while the sweep holds it, and
//! a publisher that waited for the sweep finds the row gone and stores the
//! bytes again.
//!
//! The candidate listings span partitions (a maintenance read); every other
//! statement names one partition.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

fn exec(statement: &'static str, sql: &str, args: &[DatumWithOid<'_>]) -> StoreResult<u64> {
    Spi::connect_mut(|client| plan_cache::execute(client, sql, None, args).map(|t| t.len() as u64))
        .map_err(StoreError::spi(statement))
}

/// The primary key of one publication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicationKey {
    /// Partition.
    pub partition: String,
    /// Log epoch.
    pub log_epoch: String,
    /// Table.
    pub tbl: String,
    /// Schema version.
    pub schema_version: i32,
    /// Media type.
    pub media_type: i16,
    /// Scope digest.
    pub scope_digest: String,
    /// Pin.
    pub as_of_commit_seq: i64,
    /// Page starts at the table start.
    pub from_start: bool,
    /// Page start cursor.
    pub row_cursor: String,
    /// Page window.
    pub page_rows: i32,
}

/// Up to `limit` publications that expired before `cutoff_ms`, oldest
/// expiry first (every partition). Candidates only:
/// [`delete_expired_publication`] re-checks. Errors: SPI failures.
pub fn expired_publications(cutoff_ms: i64, limit: i64) -> StoreResult<Vec<PublicationKey>> {
    Spi::connect_mut(|client| {
        let t = client.update(
            "SELECT partition, log_epoch, tbl, schema_version, media_type, scope_digest, as_of_commit_seq, \
                    from_start, row_cursor, page_rows \
             FROM syncular.sync_segment_publications WHERE expires_at_ms < $1 ORDER BY expires_at_ms LIMIT $2",
            None,
            &[DatumWithOid::from(cutoff_ms), DatumWithOid::from(limit)],
        )?;
        let mut out = Vec::with_capacity(t.len());
        for row in t {
            out.push(PublicationKey {
                partition: row.get::<String>(1)?.unwrap_or_default(),
                log_epoch: row.get::<String>(2)?.unwrap_or_default(),
                tbl: row.get::<String>(3)?.unwrap_or_default(),
                schema_version: row.get::<i32>(4)?.unwrap_or_default(),
                media_type: row.get::<i16>(5)?.unwrap_or_default(),
                scope_digest: row.get::<String>(6)?.unwrap_or_default(),
                as_of_commit_seq: row.get::<i64>(7)?.unwrap_or_default(),
                from_start: row.get::<bool>(8)?.unwrap_or_default(),
                row_cursor: row.get::<String>(9)?.unwrap_or_default(),
                page_rows: row.get::<i32>(10)?.unwrap_or_default(),
            });
        }
        Ok(out)
    })
    .map_err(StoreError::spi("expired_segment_publications"))
}

/// Deletes one publication if it still expired before `cutoff_ms` (a
/// publisher that refreshed it meanwhile wins: under READ COMMITTED the
/// DELETE re-checks the row's latest version). Errors: SPI failures.
pub fn delete_expired_publication(k: &PublicationKey, cutoff_ms: i64) -> StoreResult<bool> {
    exec(
        "delete_expired_segment_publication",
        "DELETE FROM syncular.sync_segment_publications \
         WHERE partition = $1 AND log_epoch = $2 AND tbl = $3 AND schema_version = $4 AND media_type = $5 \
           AND scope_digest = $6 AND as_of_commit_seq = $7 AND from_start = $8 AND row_cursor = $9 \
           AND page_rows = $10 AND expires_at_ms < $11",
        &[
            DatumWithOid::from(k.partition.as_str()),
            DatumWithOid::from(k.log_epoch.as_str()),
            DatumWithOid::from(k.tbl.as_str()),
            DatumWithOid::from(k.schema_version),
            DatumWithOid::from(k.media_type),
            DatumWithOid::from(k.scope_digest.as_str()),
            DatumWithOid::from(k.as_of_commit_seq),
            DatumWithOid::from(k.from_start),
            DatumWithOid::from(k.row_cursor.as_str()),
            DatumWithOid::from(k.page_rows),
            DatumWithOid::from(cutoff_ms),
        ],
    )
    .map(|n| n > 0)
}

/// Up to `limit` stored segments created before `cutoff_ms` that no
/// publication references now, oldest first: `(partition, segment_id)`
/// (every partition). Candidates only: [`lock_segment_for_sweep`] and
/// [`segment_published`] decide. Errors: SPI failures.
pub fn unpublished_segments(cutoff_ms: i64, limit: i64) -> StoreResult<Vec<(String, String)>> {
    Spi::connect_mut(|client| {
        let t = client.update(
            "SELECT s.partition, s.segment_id FROM syncular.sync_segments s \
             WHERE s.created_at_ms < $1 \
               AND NOT EXISTS (SELECT 1 FROM syncular.sync_segment_publications p \
                                WHERE p.partition = s.partition AND p.segment_id = s.segment_id) \
             ORDER BY s.created_at_ms LIMIT $2",
            None,
            &[DatumWithOid::from(cutoff_ms), DatumWithOid::from(limit)],
        )?;
        let mut out = Vec::with_capacity(t.len());
        for row in t {
            if let (Some(p), Some(s)) = (row.get::<String>(1)?, row.get::<String>(2)?) {
                out.push((p, s));
            }
        }
        Ok(out)
    })
    .map_err(StoreError::spi("unpublished_segments"))
}

/// Locks a stored segment's row for deletion (`FOR UPDATE SKIP LOCKED`);
/// `false` when it is gone or a publisher holds it. Errors: SPI failures.
pub fn lock_segment_for_sweep(partition: &str, segment_id: &str) -> StoreResult<bool> {
    exec(
        "lock_segment_for_sweep",
        "SELECT 1 FROM syncular.sync_segments WHERE partition = $1 AND segment_id = $2 FOR UPDATE SKIP LOCKED",
        &[DatumWithOid::from(partition), DatumWithOid::from(segment_id)],
    )
    .map(|n| n > 0)
}

/// For a publisher about to publish (or serve) bytes already stored: locks
/// the segment's row `FOR KEY SHARE` to the end of the transaction so the
/// sweep cannot delete them meanwhile; `false` when they are not stored
/// (never stored, or swept — the publisher waits for a sweep holding the
/// row, then sees it gone): store them again. Errors: SPI failures.
pub fn lock_segment_bytes(partition: &str, segment_id: &str) -> StoreResult<bool> {
    exec(
        "lock_segment_bytes",
        "SELECT 1 FROM syncular.sync_segments WHERE partition = $1 AND segment_id = $2 FOR KEY SHARE",
        &[DatumWithOid::from(partition), DatumWithOid::from(segment_id)],
    )
    .map(|n| n > 0)
}

/// Whether any publication references the segment (a fresh read: run it
/// after [`lock_segment_for_sweep`]). Errors: SPI failures.
pub fn segment_published(partition: &str, segment_id: &str) -> StoreResult<bool> {
    exec(
        "segment_published",
        "SELECT 1 FROM syncular.sync_segment_publications WHERE partition = $1 AND segment_id = $2 LIMIT 1",
        &[DatumWithOid::from(partition), DatumWithOid::from(segment_id)],
    )
    .map(|n| n > 0)
}

/// Deletes a segment's chunks, then its row; `true` when the row was
/// deleted. Errors: SPI failures.
pub fn delete_segment(partition: &str, segment_id: &str) -> StoreResult<bool> {
    exec(
        "delete_segment_chunks",
        "DELETE FROM syncular.sync_segment_chunks WHERE partition = $1 AND segment_id = $2",
        &[DatumWithOid::from(partition), DatumWithOid::from(segment_id)],
    )?;
    exec(
        "delete_segment",
        "DELETE FROM syncular.sync_segments WHERE partition = $1 AND segment_id = $2",
        &[DatumWithOid::from(partition), DatumWithOid::from(segment_id)],
    )
    .map(|n| n > 0)
}
