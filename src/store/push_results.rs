//! `sync_push_results` statements (SPEC §2.3, §6.3): the persisted outcome of
//! each `(partition, clientId, clientCommitId)`, replayed byte-equivalently.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::pinned_plan;
use crate::store::{StoreError, StoreResult};

/// Reads the persisted result JSON text of one idempotency key, or `None`.
/// Errors: SPI failures.
pub fn select_push_result(
    partition: &str,
    client_id: &str,
    client_commit_id: &str,
) -> StoreResult<Option<String>> {
    Spi::connect_mut(|client| {
        let t = pinned_plan::execute(
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
