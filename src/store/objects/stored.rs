//! `sync_segment_objects` and `sync_blob_objects`: which bytes the bucket holds (the mover wrote
//! them and saw their ETag) — the only rows a presigned GET is minted from.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// Whether the bucket holds segment `segment_id`. Errors: SPI failures.
pub fn segment_stored(segment_id: &str) -> StoreResult<bool> {
    Spi::connect_mut(|client| {
        plan_cache::execute(
            client,
            "SELECT 1 FROM syncular.sync_segment_objects WHERE segment_id = $1",
            None,
            &[DatumWithOid::from(segment_id)],
        )
        .map(|t| !t.is_empty())
    })
    .map_err(StoreError::spi("select_segment_object"))
}

/// A stored blob object: `(byte_length, in_postgres)`. Errors: SPI failures.
pub fn blob_object(partition: &str, blob_id: &str) -> StoreResult<Option<(i64, bool)>> {
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(
            client,
            "SELECT byte_length, in_postgres FROM syncular.sync_blob_objects WHERE partition = $1 AND blob_id = $2",
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(blob_id)],
        )?;
        let Some(row) = t.into_iter().next() else { return Ok(None) };
        Ok(Some((row.get::<i64>(1)?.unwrap_or(0), row.get::<bool>(2)?.unwrap_or(true))))
    })
    .map_err(StoreError::spi("select_blob_object"))
}

/// Records segment `segment_id` as stored (a repeat refreshes it). Errors: SPI failures.
pub fn upsert_segment(segment_id: &str, byte_length: i64, etag: &str, now_ms: i64) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                "INSERT INTO syncular.sync_segment_objects (segment_id, byte_length, etag, stored_at_ms, checked_at_ms) \
                 VALUES ($1, $2, $3, $4, $4) \
                 ON CONFLICT (segment_id) DO UPDATE SET byte_length = EXCLUDED.byte_length, etag = EXCLUDED.etag, \
                   stored_at_ms = EXCLUDED.stored_at_ms, checked_at_ms = EXCLUDED.checked_at_ms",
                None,
                &[
                    DatumWithOid::from(segment_id),
                    DatumWithOid::from(byte_length),
                    DatumWithOid::from(etag),
                    DatumWithOid::from(now_ms),
                ],
            )
            .map(|_| ())
    })
    .map_err(StoreError::spi("upsert_segment_object"))
}

/// Records blob `blob_id` of `partition` as stored. Errors: SPI failures.
pub fn upsert_blob(partition: &str, blob_id: &str, byte_length: i64, etag: &str, in_postgres: bool, now_ms: i64) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                "INSERT INTO syncular.sync_blob_objects \
                   (partition, blob_id, byte_length, etag, in_postgres, stored_at_ms, checked_at_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $6) \
                 ON CONFLICT (partition, blob_id) DO UPDATE SET byte_length = EXCLUDED.byte_length, \
                   etag = EXCLUDED.etag, in_postgres = EXCLUDED.in_postgres, \
                   stored_at_ms = EXCLUDED.stored_at_ms, checked_at_ms = EXCLUDED.checked_at_ms",
                None,
                &[
                    DatumWithOid::from(partition),
                    DatumWithOid::from(blob_id),
                    DatumWithOid::from(byte_length),
                    DatumWithOid::from(etag),
                    DatumWithOid::from(in_postgres),
                    DatumWithOid::from(now_ms),
                ],
            )
            .map(|_| ())
    })
    .map_err(StoreError::spi("upsert_blob_object"))
}

/// Forgets segment object `segment_id`; returns whether a row went. Errors: SPI failures.
pub fn delete_segment(segment_id: &str) -> StoreResult<bool> {
    Spi::connect_mut(|client| {
        client
            .update("DELETE FROM syncular.sync_segment_objects WHERE segment_id = $1", None, &[DatumWithOid::from(segment_id)])
            .map(|t| !t.is_empty())
    })
    .map_err(StoreError::spi("delete_segment_object"))
}

/// Forgets blob object `blob_id` of `partition`; returns `in_postgres` of the row that went.
/// Errors: SPI failures.
pub fn delete_blob(partition: &str, blob_id: &str) -> StoreResult<Option<bool>> {
    Spi::connect_mut(|client| {
        let t = client.update(
            "DELETE FROM syncular.sync_blob_objects WHERE partition = $1 AND blob_id = $2 RETURNING in_postgres",
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(blob_id)],
        )?;
        match t.into_iter().next() {
            Some(row) => Ok(Some(row.get::<bool>(1)?.unwrap_or(true))),
            None => Ok(None),
        }
    })
    .map_err(StoreError::spi("delete_blob_object"))
}

/// Marks segment object `segment_id` checked at `now_ms` when its ETag is still `etag`; returns
/// whether it was. Errors: SPI failures.
pub fn touch_segment(segment_id: &str, etag: &str, now_ms: i64) -> StoreResult<bool> {
    Spi::connect_mut(|client| {
        client
            .update(
                "UPDATE syncular.sync_segment_objects SET checked_at_ms = $3 WHERE segment_id = $1 AND etag = $2",
                None,
                &[DatumWithOid::from(segment_id), DatumWithOid::from(etag), DatumWithOid::from(now_ms)],
            )
            .map(|t| !t.is_empty())
    })
    .map_err(StoreError::spi("touch_segment_object"))
}

/// Marks blob object `blob_id` of `partition` checked at `now_ms` when its ETag is still `etag`;
/// returns whether it was. Errors: SPI failures.
pub fn touch_blob(partition: &str, blob_id: &str, etag: &str, now_ms: i64) -> StoreResult<bool> {
    Spi::connect_mut(|client| {
        client
            .update(
                "UPDATE syncular.sync_blob_objects SET checked_at_ms = $4 \
                  WHERE partition = $1 AND blob_id = $2 AND etag = $3",
                None,
                &[
                    DatumWithOid::from(partition),
                    DatumWithOid::from(blob_id),
                    DatumWithOid::from(etag),
                    DatumWithOid::from(now_ms),
                ],
            )
            .map(|t| !t.is_empty())
    })
    .map_err(StoreError::spi("touch_blob_object"))
}

/// Forgets every segment object and every blob copy Postgres also holds (another bucket is
/// configured: they are copied there again); blobs only the old bucket holds are kept. Returns
/// how many rows went. Errors: SPI failures.
pub fn forget_copies() -> StoreResult<u64> {
    Spi::connect_mut(|client| {
        let a = client.update("DELETE FROM syncular.sync_segment_objects", None, &[])?.len();
        let b = client.update("DELETE FROM syncular.sync_blob_objects WHERE in_postgres", None, &[])?.len();
        Ok((a + b) as u64)
    })
    .map_err(StoreError::spi("forget_object_copies"))
}

/// Marks blob object `blob_id` of `partition` checked at `now_ms` whatever its ETag (a missing
/// object the bucket held alone: kept, so restoring the object brings it back). Errors: SPI
/// failures.
pub fn touch_blob_any(partition: &str, blob_id: &str, now_ms: i64) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                "UPDATE syncular.sync_blob_objects SET checked_at_ms = $3 WHERE partition = $1 AND blob_id = $2",
                None,
                &[DatumWithOid::from(partition), DatumWithOid::from(blob_id), DatumWithOid::from(now_ms)],
            )
            .map(|_| ())
    })
    .map_err(StoreError::spi("touch_blob_object_any"))
}

/// Whether Postgres holds a copy of blob object `blob_id` of `partition` (`None`: no such row).
/// Errors: SPI failures.
pub fn blob_in_postgres(partition: &str, blob_id: &str) -> StoreResult<Option<bool>> {
    Ok(blob_object(partition, blob_id)?.map(|(_, in_postgres)| in_postgres))
}

/// The size of segment `segment_id` as some partition stores it, if any does. Errors: SPI
/// failures.
pub fn segment_length(segment_id: &str) -> StoreResult<Option<i64>> {
    Spi::connect_mut(|client| {
        let t = client.update(
            "SELECT byte_length FROM syncular.sync_segments WHERE segment_id = $1 LIMIT 1",
            None,
            &[DatumWithOid::from(segment_id)],
        )?;
        match t.into_iter().next() {
            Some(row) => row.get::<i64>(1),
            None => Ok(None),
        }
    })
    .map_err(StoreError::spi("select_segment_length"))
}
