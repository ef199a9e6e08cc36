//! The commit notification statement (DESIGN §4, SPEC §8.3 fanout): a
//! `pg_notify` issued inside the caller's transaction, so Postgres delivers
//! it at COMMIT, in commit order, and never for a rollback.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::plan_cache;
use crate::store::{StoreError, StoreResult};

/// Queues `pg_notify(channel, payload)` in the current (sub)transaction.
/// Errors: SPI failures (a payload over 8000 bytes is a Postgres ERROR).
pub fn queue_notification(channel: &str, payload: &str) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        plan_cache::execute(
            client,
            "SELECT pg_notify($1, $2)",
            None,
            &[DatumWithOid::from(channel), DatumWithOid::from(payload)],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("queue_notification"))
}
