//! `sync_object_store` (the one configuration row) and `sync_object_store_keys` (per-day derived
//! SigV4 signing keys, readable by the extension owner only).

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// What presigning needs: the configuration joined with the signing key of one day.
#[derive(Debug, Clone)]
pub struct SignerRow {
    /// Origin of the presigned URLs (`http(s)://host[:port]`).
    pub endpoint: String,
    /// The bucket (path-style addressing).
    pub bucket: String,
    /// The SigV4 region.
    pub region: String,
    /// The key prefix (empty or ending in `/`).
    pub key_prefix: String,
    /// Presigned-URL lifetime, seconds.
    pub url_ttl_s: i32,
    /// Keys the partition token of blob object keys.
    pub partition_salt: Vec<u8>,
    /// The access key id the day's key was derived for.
    pub access_key_id: String,
    /// The day's derived SigV4 signing key.
    pub signing_key: Vec<u8>,
}

/// The configuration, when the mover is healthy at `now_ms`, with the signing key of `day`
/// (`YYYYMMDD`); `None` otherwise (nothing is presigned). Errors: SPI failures.
pub fn select_signer(day: &str, now_ms: i64) -> StoreResult<Option<SignerRow>> {
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(
            client,
            "SELECT o.endpoint, o.bucket, o.region, o.key_prefix, o.url_ttl_s, o.partition_salt, \
                    k.access_key_id, k.signing_key \
               FROM syncular.sync_object_store o \
               JOIN syncular.sync_object_store_keys k ON k.day = $1 \
              WHERE o.healthy_until_ms > $2",
            None,
            &[DatumWithOid::from(day), DatumWithOid::from(now_ms)],
        )?;
        let Some(row) = t.into_iter().next() else { return Ok(None) };
        Ok(Some(SignerRow {
            endpoint: row.get::<String>(1)?.unwrap_or_default(),
            bucket: row.get::<String>(2)?.unwrap_or_default(),
            region: row.get::<String>(3)?.unwrap_or_default(),
            key_prefix: row.get::<String>(4)?.unwrap_or_default(),
            url_ttl_s: row.get::<i32>(5)?.unwrap_or(0),
            partition_salt: row.get::<Vec<u8>>(6)?.unwrap_or_default(),
            access_key_id: row.get::<String>(7)?.unwrap_or_default(),
            signing_key: row.get::<Vec<u8>>(8)?.unwrap_or_default(),
        }))
    })
    .map_err(StoreError::spi("select_object_store_signer"))
}

/// Where the configured bucket is: `(endpoint, bucket, region, key_prefix)`, if configured.
/// Errors: SPI failures.
pub fn select_location() -> StoreResult<Option<(String, String, String, String)>> {
    Spi::connect_mut(|client| {
        let t = client.update("SELECT endpoint, bucket, region, key_prefix FROM syncular.sync_object_store", None, &[])?;
        let Some(row) = t.into_iter().next() else { return Ok(None) };
        Ok(Some((
            row.get::<String>(1)?.unwrap_or_default(),
            row.get::<String>(2)?.unwrap_or_default(),
            row.get::<String>(3)?.unwrap_or_default(),
            row.get::<String>(4)?.unwrap_or_default(),
        )))
    })
    .map_err(StoreError::spi("select_object_store_location"))
}

/// The stored key prefix and partition salt (the mover's object keys), if configured.
/// Errors: SPI failures.
pub fn select_layout() -> StoreResult<Option<(String, Vec<u8>)>> {
    Spi::connect_mut(|client| {
        let t = client.update("SELECT key_prefix, partition_salt FROM syncular.sync_object_store", None, &[])?;
        let Some(row) = t.into_iter().next() else { return Ok(None) };
        Ok(Some((row.get::<String>(1)?.unwrap_or_default(), row.get::<Vec<u8>>(2)?.unwrap_or_default())))
    })
    .map_err(StoreError::spi("select_object_store_layout"))
}

/// The new configuration (`salt` is kept when a row exists: object keys of stored blobs depend on
/// it); the next work call scans whole tables. Errors: SPI failures.
#[allow(clippy::too_many_arguments)]
pub fn upsert_config(
    endpoint: &str,
    bucket: &str,
    region: &str,
    key_prefix: &str,
    access_key_id: &str,
    url_ttl_s: i32,
    salt: &[u8],
    fingerprint: &str,
    now_ms: i64,
) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client.update(
            "INSERT INTO syncular.sync_object_store AS o \
               (id, endpoint, bucket, region, key_prefix, access_key_id, url_ttl_s, partition_salt, \
                healthy_until_ms, updated_at_ms, mover_fingerprint) \
             VALUES (true, $1, $2, $3, $4, $5, $6, $7, 0, $8, $9) \
             ON CONFLICT (id) DO UPDATE SET endpoint = EXCLUDED.endpoint, bucket = EXCLUDED.bucket, \
               region = EXCLUDED.region, key_prefix = EXCLUDED.key_prefix, \
               access_key_id = EXCLUDED.access_key_id, url_ttl_s = EXCLUDED.url_ttl_s, \
               updated_at_ms = EXCLUDED.updated_at_ms, scanned_at_ms = 0, \
               mover_fingerprint = EXCLUDED.mover_fingerprint",
            None,
            &[
                DatumWithOid::from(endpoint),
                DatumWithOid::from(bucket),
                DatumWithOid::from(region),
                DatumWithOid::from(key_prefix),
                DatumWithOid::from(access_key_id),
                DatumWithOid::from(url_ttl_s),
                DatumWithOid::from(salt),
                DatumWithOid::from(now_ms),
                DatumWithOid::from(fingerprint),
            ],
        )
        .map(|_| ())
    })
    .map_err(StoreError::spi("upsert_object_store_config"))
}

/// Claims the work queue's whole-table scan when the last one is `every_ms` old at `now_ms`
/// (recording `now_ms`); returns whether this call scans. Errors: SPI failures.
pub fn claim_full_scan(now_ms: i64, every_ms: i64) -> StoreResult<bool> {
    Spi::connect_mut(|client| {
        client
            .update(
                "UPDATE syncular.sync_object_store SET scanned_at_ms = $1 WHERE scanned_at_ms <= $1 - $2 RETURNING id",
                None,
                &[DatumWithOid::from(now_ms), DatumWithOid::from(every_ms)],
            )
            .map(|t| !t.is_empty())
    })
    .map_err(StoreError::spi("claim_object_store_full_scan"))
}

/// Sets the heartbeat (`healthy_until_ms`); returns whether a configuration exists.
/// Errors: SPI failures.
pub fn set_healthy_until(until_ms: i64) -> StoreResult<bool> {
    Spi::connect_mut(|client| {
        client
            .update(
                "UPDATE syncular.sync_object_store SET healthy_until_ms = $1 RETURNING id",
                None,
                &[DatumWithOid::from(until_ms)],
            )
            .map(|t| !t.is_empty())
    })
    .map_err(StoreError::spi("set_object_store_healthy_until"))
}

/// Stores the signing key of `day` (replacing one stored for it). Errors: SPI failures.
pub fn upsert_key(day: &str, access_key_id: &str, signing_key: &[u8], now_ms: i64) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                "INSERT INTO syncular.sync_object_store_keys AS k (day, access_key_id, signing_key, created_at_ms) \
                 VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (day) DO UPDATE SET access_key_id = EXCLUDED.access_key_id, \
                   signing_key = EXCLUDED.signing_key, created_at_ms = EXCLUDED.created_at_ms",
                None,
                &[
                    DatumWithOid::from(day),
                    DatumWithOid::from(access_key_id),
                    DatumWithOid::from(signing_key),
                    DatumWithOid::from(now_ms),
                ],
            )
            .map(|_| ())
    })
    .map_err(StoreError::spi("upsert_object_store_key"))
}

/// Deletes the keys of days before `day` (`YYYYMMDD` sorts as text). Errors: SPI failures.
pub fn delete_keys_before(day: &str) -> StoreResult<u64> {
    Spi::connect_mut(|client| {
        client
            .update("DELETE FROM syncular.sync_object_store_keys WHERE day < $1", None, &[DatumWithOid::from(day)])
            .map(|t| t.len() as u64)
    })
    .map_err(StoreError::spi("delete_object_store_keys_before"))
}

/// The fingerprint of the mover configuration that owns the row, if configured. Errors: SPI
/// failures.
pub fn select_fingerprint() -> StoreResult<Option<String>> {
    Spi::connect_mut(|client| {
        let t = client.update("SELECT mover_fingerprint FROM syncular.sync_object_store", None, &[])?;
        match t.into_iter().next() {
            Some(row) => Ok(Some(row.get::<String>(1)?.unwrap_or_default())),
            None => Ok(None),
        }
    })
    .map_err(StoreError::spi("select_object_store_fingerprint"))
}

/// Re-opens the whole-table scan (the last one was cut at its limit: more to list). Errors: SPI
/// failures.
pub fn reopen_full_scan() -> StoreResult<()> {
    Spi::connect_mut(|client| client.update("UPDATE syncular.sync_object_store SET scanned_at_ms = 0", None, &[]).map(|_| ()))
        .map_err(StoreError::spi("reopen_object_store_full_scan"))
}
