//! `sync_blob_grants`: presigned uploads granted and not yet verified (§5.9.3).

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// Records (or renews) the grant of `blob_id` in `partition` to `staging_key`; the first check is
/// due at once.
/// Errors: SPI failures.
pub fn upsert_grant(partition: &str, blob_id: &str, byte_length: i64, now_ms: i64, expires_at_ms: i64, staging_key: &str) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                "INSERT INTO syncular.sync_blob_grants AS g \
                   (partition, blob_id, byte_length, granted_at_ms, expires_at_ms, next_check_at_ms, checks, staging_key) \
                 VALUES ($1, $2, $3, $4, $5, $4, 0, $6) \
                 ON CONFLICT (partition, blob_id) DO UPDATE SET byte_length = EXCLUDED.byte_length, \
                   granted_at_ms = EXCLUDED.granted_at_ms, expires_at_ms = EXCLUDED.expires_at_ms, \
                   next_check_at_ms = EXCLUDED.next_check_at_ms, checks = 0, staging_key = EXCLUDED.staging_key",
                None,
                &[
                    DatumWithOid::from(partition),
                    DatumWithOid::from(blob_id),
                    DatumWithOid::from(byte_length),
                    DatumWithOid::from(now_ms),
                    DatumWithOid::from(expires_at_ms),
                    DatumWithOid::from(staging_key),
                ],
            )
            .map(|_| ())
    })
    .map_err(StoreError::spi("upsert_blob_grant"))
}

/// Whether `blob_id` has a grant in `partition` that is still checked (its URL expired no
/// earlier than `abandon_before_ms`): its upload may have landed and not be verified yet — a
/// primary-key probe. Errors: SPI failures.
pub fn pending(partition: &str, blob_id: &str, abandon_before_ms: i64) -> StoreResult<bool> {
    Spi::connect_mut(|client| {
        plan_cache::execute(
            client,
            "SELECT 1 FROM syncular.sync_blob_grants WHERE partition = $1 AND blob_id = $2 AND expires_at_ms >= $3",
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(blob_id), DatumWithOid::from(abandon_before_ms)],
        )
        .map(|t| !t.is_empty())
    })
    .map_err(StoreError::spi("select_pending_blob_grant"))
}

/// Deletes the grant of `blob_id` in `partition`; returns whether one went. Errors: SPI failures.
pub fn delete_grant(partition: &str, blob_id: &str) -> StoreResult<bool> {
    Spi::connect_mut(|client| {
        client
            .update(
                "DELETE FROM syncular.sync_blob_grants WHERE partition = $1 AND blob_id = $2",
                None,
                &[DatumWithOid::from(partition), DatumWithOid::from(blob_id)],
            )
            .map(|t| !t.is_empty())
    })
    .map_err(StoreError::spi("delete_blob_grant"))
}

/// Schedules the next check of a grant (`checks` + 1). Errors: SPI failures.
pub fn reschedule(partition: &str, blob_id: &str, next_check_at_ms: i64) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                "UPDATE syncular.sync_blob_grants SET next_check_at_ms = $3, checks = checks + 1 \
                  WHERE partition = $1 AND blob_id = $2",
                None,
                &[DatumWithOid::from(partition), DatumWithOid::from(blob_id), DatumWithOid::from(next_check_at_ms)],
            )
            .map(|_| ())
    })
    .map_err(StoreError::spi("reschedule_blob_grant"))
}

/// The grant of `blob_id` in `partition`: `(byte_length, granted_at_ms, expires_at_ms, checks)`.
/// Errors: SPI failures.
pub fn select_grant(partition: &str, blob_id: &str) -> StoreResult<Option<(i64, i64, i64, i32)>> {
    Spi::connect_mut(|client| {
        let t = client.update(
            "SELECT byte_length, granted_at_ms, expires_at_ms, checks FROM syncular.sync_blob_grants \
              WHERE partition = $1 AND blob_id = $2",
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(blob_id)],
        )?;
        let Some(row) = t.into_iter().next() else { return Ok(None) };
        Ok(Some((
            row.get::<i64>(1)?.unwrap_or(0),
            row.get::<i64>(2)?.unwrap_or(0),
            row.get::<i64>(3)?.unwrap_or(0),
            row.get::<i32>(4)?.unwrap_or(0),
        )))
    })
    .map_err(StoreError::spi("select_blob_grant"))
}
