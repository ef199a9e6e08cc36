//! `sync_push_results` statements (SPEC §2.3, §6.3): the persisted outcome of
//! each `(partition, clientId, clientCommitId)`, replayed byte-equivalently.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::plan_cache;
use crate::store::{StoreError, StoreResult};

/// Reads the persisted result JSON text of one idempotency key, or `None`.
/// Errors: SPI failures.
pub fn select_push_result(
    partition: &str,
    client_id: &str,
    client_commit_id: &str,
) -> StoreResult<Option<String>> {
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(
            client,
            "SELECT result::text FROM syncular.sync_push_results \
             WHERE partition = $1 AND client_id = $2 AND client_commit_id = $3",
            Some(1),
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(client_id),
                DatumWithOid::from(client_commit_id),
            ],
        )?;
        if t.is_empty() {
            return Ok(None);
        }
        t.first().get_one::<String>()
    })
    .map_err(StoreError::spi("select_push_result"))
}

/// Persists the result JSON of one idempotency key; first writer wins
/// (`ON CONFLICT DO NOTHING`). Returns whether this call stored it.
/// Errors: SPI failures.
pub fn insert_push_result(
    partition: &str,
    client_id: &str,
    client_commit_id: &str,
    result_json: &str,
) -> StoreResult<bool> {
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(client,
            "INSERT INTO syncular.sync_push_results (partition, client_id, client_commit_id, result) \
             VALUES ($1, $2, $3, $4::jsonb) \
             ON CONFLICT (partition, client_id, client_commit_id) DO NOTHING RETURNING 1",
            None,
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(client_id),
                DatumWithOid::from(client_commit_id),
                DatumWithOid::from(result_json),
            ],
        )?;
        Ok(!t.is_empty())
    })
    .map_err(StoreError::spi("insert_push_result"))
}
