//! The mover's work queue: bytes to copy into the bucket, uploads to verify, objects to delete or
//! re-check. Whole-database maintenance statements (like the sweeps), run by the mover only.

use pgrx::datum::DatumWithOid;
use pgrx::spi::{Spi, SpiHeapTupleData, SpiResult};

use crate::store::{StoreError, StoreResult};

/// Segments with a live publication (at `now_ms`) whose bytes the bucket does not hold, created
/// at or after `since_ms` (0: all; otherwise an index range): `(partition, segment_id,
/// byte_length, chunk_count)`, oldest first. Errors: SPI failures.
pub fn segments_to_copy(now_ms: i64, since_ms: i64, limit: i64) -> StoreResult<Vec<(String, String, i64, i32)>> {
    rows(
        "segments_to_copy",
        "SELECT s.partition, s.segment_id, s.byte_length, s.chunk_count \
           FROM syncular.sync_segments s \
          WHERE s.created_at_ms >= $3 \
            AND NOT EXISTS (SELECT 1 FROM syncular.sync_segment_objects o WHERE o.segment_id = s.segment_id) \
            AND EXISTS (SELECT 1 FROM syncular.sync_segment_publications p \
                         WHERE p.partition = s.partition AND p.segment_id = s.segment_id AND p.expires_at_ms > $1) \
          ORDER BY s.created_at_ms, s.segment_id LIMIT $2",
        &[DatumWithOid::from(now_ms), DatumWithOid::from(limit), DatumWithOid::from(since_ms)],
        |r| Ok((text(r, 1)?, text(r, 2)?, r.get::<i64>(3)?.unwrap_or(0), r.get::<i32>(4)?.unwrap_or(0))),
    )
}

/// Blobs stored in Postgres that the bucket does not hold, uploaded at or after `since_ms` (0:
/// all; otherwise an index range): `(partition, blob_id, byte_length, chunk_count)`, oldest
/// first. Errors: SPI failures.
pub fn blobs_to_copy(since_ms: i64, limit: i64) -> StoreResult<Vec<(String, String, i64, i32)>> {
    rows(
        "blobs_to_copy",
        "SELECT b.partition, b.blob_id, b.byte_length, b.chunk_count FROM syncular.sync_blobs b \
          WHERE b.uploaded_at_ms >= $2 \
            AND NOT EXISTS (SELECT 1 FROM syncular.sync_blob_objects o \
                             WHERE o.partition = b.partition AND o.blob_id = b.blob_id) \
          ORDER BY b.uploaded_at_ms, b.partition, b.blob_id LIMIT $1",
        &[DatumWithOid::from(limit), DatumWithOid::from(since_ms)],
        |r| Ok((text(r, 1)?, text(r, 2)?, r.get::<i64>(3)?.unwrap_or(0), r.get::<i32>(4)?.unwrap_or(0))),
    )
}

/// Grants whose next check is due at `now_ms`: `(partition, blob_id, byte_length, staging_key)`.
/// Errors: SPI failures.
pub fn grants_due(now_ms: i64, limit: i64) -> StoreResult<Vec<(String, String, i64, String)>> {
    rows(
        "grants_due",
        "SELECT g.partition, g.blob_id, g.byte_length, g.staging_key FROM syncular.sync_blob_grants g \
          WHERE g.next_check_at_ms <= $1 \
          ORDER BY g.next_check_at_ms LIMIT $2",
        &[DatumWithOid::from(now_ms), DatumWithOid::from(limit)],
        |r| Ok((text(r, 1)?, text(r, 2)?, r.get::<i64>(3)?.unwrap_or(0), text(r, 4)?)),
    )
}

/// Segment objects no partition stores any more. Errors: SPI failures.
pub fn segments_to_delete(limit: i64) -> StoreResult<Vec<String>> {
    rows(
        "segments_to_delete",
        "SELECT o.segment_id FROM syncular.sync_segment_objects o \
          WHERE NOT EXISTS (SELECT 1 FROM syncular.sync_segments s WHERE s.segment_id = o.segment_id) \
          ORDER BY o.stored_at_ms LIMIT $1",
        &[DatumWithOid::from(limit)],
        |r| text(r, 1),
    )
}

/// Blob objects whose blob is gone (swept, partition dropped) and that no pending grant is about
/// to bring back: `(partition, blob_id)`. Errors: SPI failures.
pub fn blobs_to_delete(limit: i64) -> StoreResult<Vec<(String, String)>> {
    rows(
        "blobs_to_delete",
        "SELECT o.partition, o.blob_id FROM syncular.sync_blob_objects o \
          WHERE NOT EXISTS (SELECT 1 FROM syncular.sync_blobs b \
                             WHERE b.partition = o.partition AND b.blob_id = o.blob_id) \
            AND NOT EXISTS (SELECT 1 FROM syncular.sync_blob_grants g \
                             WHERE g.partition = o.partition AND g.blob_id = o.blob_id) \
          ORDER BY o.stored_at_ms LIMIT $1",
        &[DatumWithOid::from(limit)],
        |r| Ok((text(r, 1)?, text(r, 2)?)),
    )
}

/// Stored objects last checked before `before_ms`, oldest check first:
/// `(partition or "" for a segment, id, byte_length, etag)`. Errors: SPI failures.
pub fn objects_to_check(before_ms: i64, limit: i64) -> StoreResult<Vec<(String, String, i64, String)>> {
    rows(
        "objects_to_check",
        "SELECT kind_partition, id, byte_length, etag FROM ( \
           SELECT '' AS kind_partition, segment_id AS id, byte_length, etag, checked_at_ms \
             FROM syncular.sync_segment_objects WHERE checked_at_ms < $1 \
           UNION ALL \
           SELECT partition, blob_id, byte_length, etag, checked_at_ms \
             FROM syncular.sync_blob_objects WHERE checked_at_ms < $1) c \
          ORDER BY checked_at_ms LIMIT $2",
        &[DatumWithOid::from(before_ms), DatumWithOid::from(limit)],
        |r| Ok((text(r, 1)?, text(r, 2)?, r.get::<i64>(3)?.unwrap_or(0), text(r, 4)?)),
    )
}

/// Column `i` of `row` as text (NULL: empty).
fn text(row: &SpiHeapTupleData<'_>, i: usize) -> SpiResult<String> {
    Ok(row.get::<String>(i)?.unwrap_or_default())
}

/// Every row `sql` answers, each read by `read`; SPI failures named `name`.
fn rows<T>(
    name: &'static str,
    sql: &str,
    args: &[DatumWithOid<'_>],
    read: impl Fn(&SpiHeapTupleData<'_>) -> SpiResult<T>,
) -> StoreResult<Vec<T>> {
    Spi::connect_mut(|client| client.update(sql, None, args)?.map(|row| read(&row)).collect::<SpiResult<Vec<T>>>())
        .map_err(StoreError::spi(name))
}
