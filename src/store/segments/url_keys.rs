//! `sync_segment_url_keys` statements: the keys of the §5.4 native signed
//! segment URLs (a Citus reference table, readable by the extension owner
//! only). The newest key (highest `key_id`) signs, every stored key
//! verifies; [`crate::engine::segments::signed_url`] computes and checks
//! the MACs, this module only moves rows.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// One stored key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlKey {
    /// Its id (the newest signs).
    pub key_id: i64,
    /// The HMAC-SHA256 key bytes.
    pub key: Vec<u8>,
    /// When it was created, Unix ms (its predecessor stopped signing then).
    pub created_at_ms: i64,
}

/// Every stored key, newest first. Errors: SPI failures.
pub fn select_keys() -> StoreResult<Vec<UrlKey>> {
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(
            client,
            "SELECT key_id, key, created_at_ms FROM syncular.sync_segment_url_keys ORDER BY key_id DESC",
            None,
            &[],
        )?;
        let mut out = Vec::with_capacity(t.len());
        for row in t {
            if let (Some(key_id), Some(key), Some(created_at_ms)) = (row.get::<i64>(1)?, row.get::<Vec<u8>>(2)?, row.get::<i64>(3)?) {
                out.push(UrlKey { key_id, key, created_at_ms });
            }
        }
        Ok(out)
    })
    .map_err(StoreError::spi("select_segment_url_keys"))
}

/// Stores `key` as key 1 unless a key exists (concurrent first mints agree:
/// `ON CONFLICT DO NOTHING`), under the rotation's table lock: a first mint
/// waiting on another transaction's uncommitted key 1 must not hold the
/// table's `ROW EXCLUSIVE` lock, or that transaction's rotation
/// ([`insert_next_key`]) would deadlock on it. Runs once per database (no
/// key yet). Errors: SPI failures.
pub fn insert_first_key(key: &[u8], now_ms: i64) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client.update("LOCK TABLE syncular.sync_segment_url_keys IN SHARE ROW EXCLUSIVE MODE", None, &[])?;
        plan_cache::execute(
            client,
            "INSERT INTO syncular.sync_segment_url_keys (key_id, key, created_at_ms) VALUES (1, $1, $2) \
             ON CONFLICT (key_id) DO NOTHING",
            None,
            &[DatumWithOid::from(key), DatumWithOid::from(now_ms)],
        )
        .map(|_| ())
    })
    .map_err(StoreError::spi("insert_first_segment_url_key"))
}

/// Adds `key` as the newest key (id = the highest + 1), after locking the
/// table against concurrent rotations (`SHARE ROW EXCLUSIVE`: readers go
/// on); returns its id. Errors: SPI failures.
pub fn insert_next_key(key: &[u8], now_ms: i64) -> StoreResult<i64> {
    Spi::connect_mut(|client| {
        client.update("LOCK TABLE syncular.sync_segment_url_keys IN SHARE ROW EXCLUSIVE MODE", None, &[])?;
        let t = client.update(
            "INSERT INTO syncular.sync_segment_url_keys (key_id, key, created_at_ms) \
             SELECT COALESCE(max(k.key_id), 0) + 1, $1, $2 FROM syncular.sync_segment_url_keys k \
             RETURNING key_id",
            None,
            &[DatumWithOid::from(key), DatumWithOid::from(now_ms)],
        )?;
        Ok(t.first().get::<i64>(1)?.unwrap_or(0))
    })
    .map_err(StoreError::spi("insert_next_segment_url_key"))
}

/// Deletes every key older than key `keep_from` (ids below it); returns how
/// many. Errors: SPI failures.
pub fn delete_keys_before(keep_from: i64) -> StoreResult<u64> {
    Spi::connect_mut(|client| {
        plan_cache::execute(
            client,
            "DELETE FROM syncular.sync_segment_url_keys WHERE key_id < $1",
            None,
            &[DatumWithOid::from(keep_from)],
        )
        .map(|t| t.len() as u64)
    })
    .map_err(StoreError::spi("delete_segment_url_keys_before"))
}

/// Deletes every key that stopped signing at or before `retired_by_ms`: a
/// newer key was created then or earlier. Returns how many. Errors: SPI
/// failures.
pub fn delete_keys_retired_by(retired_by_ms: i64) -> StoreResult<u64> {
    Spi::connect_mut(|client| {
        plan_cache::execute(
            client,
            "DELETE FROM syncular.sync_segment_url_keys k WHERE EXISTS (\
               SELECT 1 FROM syncular.sync_segment_url_keys n \
                WHERE n.key_id > k.key_id AND n.created_at_ms <= $1)",
            None,
            &[DatumWithOid::from(retired_by_ms)],
        )
        .map(|t| t.len() as u64)
    })
    .map_err(StoreError::spi("delete_retired_segment_url_keys"))
}
