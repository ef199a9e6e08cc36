//! `sync_push_results` statements (SPEC §2.3, §6.3): the persisted outcome of
//! each `(partition, clientId, clientCommitId)`, replayed byte-equivalently.
//!
//! A sync request reads the stored outcomes of its commits with its context
//! ([`crate::store::round::context::read`], [`OUTCOMES_JOIN`]); a server
//! commit (`syncular.commit`) reads them here.

use std::collections::HashMap;

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::pinned_plan;
use crate::store::{StoreError, StoreResult};

/// Persisted outcome JSON texts by `clientCommitId`.
pub type StoredOutcomes = HashMap<String, String>;

/// The stored outcomes of the keys `$3` (`text[]`) of client `$2` in
/// partition `$1`, as a lateral join of zero or more rows — one primary-key
/// probe per key (a `LIMIT 1` subquery per element of the array, so the key
/// is always part of the index condition: with `= ANY($3)` the planner,
/// before `ANALYZE`, walked every outcome of the client and filtered, a
/// push slowing with each stored outcome): columns `client_commit_id`,
/// `result` (text) of `pr`.
pub const OUTCOMES_JOIN: &str = "LEFT JOIN LATERAL (SELECT u.id AS client_commit_id, o.result \
     FROM unnest($3::text[]) AS u(id) \
     CROSS JOIN LATERAL (SELECT p.result::text AS result FROM syncular.sync_push_results p \
        WHERE p.partition = $1 AND p.client_id = $2 AND p.client_commit_id = u.id LIMIT 1) o) pr ON true";

/// [`OUTCOMES_JOIN`]'s probes as a statement of their own.
const SELECT_OUTCOMES_SQL: &str = "SELECT u.id, o.result FROM unnest($3::text[]) AS u(id) \
     CROSS JOIN LATERAL (SELECT p.result::text AS result FROM syncular.sync_push_results p \
        WHERE p.partition = $1 AND p.client_id = $2 AND p.client_commit_id = u.id LIMIT 1) o";

/// Reads the persisted result JSON texts of the keys `client_commit_ids`
/// (those that have one). Errors: SPI failures.
pub fn select_push_results(
    partition: &str,
    client_id: &str,
    client_commit_ids: &[String],
) -> StoreResult<StoredOutcomes> {
    Spi::connect_mut(|client| {
        let table = pinned_plan::execute(
            client,
            SELECT_OUTCOMES_SQL,
            None,
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(client_id),
                DatumWithOid::from(client_commit_ids.to_vec()),
            ],
        )?;
        let mut out = StoredOutcomes::new();
        for row in table {
            if let (Some(id), Some(result)) = (row.get::<String>(1)?, row.get::<String>(2)?) {
                out.insert(id, result);
            }
        }
        Ok(out)
    })
    .map_err(StoreError::spi("select_push_results"))
}
