//! `sync_clients` pull bookkeeping (SPEC §4.5, §4.1, §8.1): the minimum
//! `nextCursor` across a pull's active subscriptions (retention watermark,
//! §4.6) and the subscription list the pull carried (omission is
//! unregistration). The row itself is created by the request entry's client
//! binding (`store::clients::binding`) before any pull runs.
//!
//! The update and the existence check are primary-key lookups; they run through
//! [`crate::store::spi::pinned_plan`] (one generic plan per backend, never a
//! sequential scan kept from when `sync_clients` was small).

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::pinned_plan;
use crate::store::{StoreError, StoreResult};

/// Sets `subscriptions` (JSON text of `[{"id","table","scopes"}]`),
/// `updated_at_ms`, and — when `cursor` is `Some` — `cursor` of the
/// `(partition, client_id)` record — written only when one of them changed
/// or `updated_at_ms` is `syncular.activity_refresh_ms` old. Returns whether
/// the record exists (`false` = an engine ordering bug).
/// Errors: SPI failures.
pub fn record_pull(
    partition: &str,
    client_id: &str,
    cursor: Option<i64>,
    subscriptions_json: &str,
    updated_at_ms: i64,
) -> StoreResult<bool> {
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = pinned_plan::execute(
            client,
            "WITH u AS ( \
                 UPDATE syncular.sync_clients \
                 SET cursor = COALESCE($3, cursor), subscriptions = $4::jsonb, updated_at_ms = $5 \
                 WHERE partition = $1 AND client_id = $2 \
                   AND (cursor IS DISTINCT FROM COALESCE($3, cursor) \
                        OR subscriptions IS DISTINCT FROM $4::jsonb \
                        OR updated_at_ms > $5 OR updated_at_ms <= $5 - $6)) \
             SELECT 1 FROM syncular.sync_clients WHERE partition = $1 AND client_id = $2",
            None,
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(client_id),
                DatumWithOid::from(cursor),
                DatumWithOid::from(subscriptions_json),
                DatumWithOid::from(updated_at_ms),
                DatumWithOid::from(crate::settings::activity_refresh_ms()),
            ],
        )?;
        Ok(!table.is_empty())
    })
    .map_err(StoreError::spi("record_pull"))
}
