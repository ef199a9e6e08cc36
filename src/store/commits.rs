//! `sync_commits` statements (SPEC §2.1): the header row of an applied commit.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::plan_cache;
use crate::store::{StoreError, StoreResult};

/// The header of one applied commit.
#[derive(Debug, Clone, Copy)]
pub struct NewCommit<'a> {
    /// Host partition.
    pub partition: &'a str,
    /// Dense per-partition sequence number (≥ 1), from `allocate_commit_seq`.
    pub commit_seq: i64,
    /// Pushing client (`REQ_HEADER.clientId`).
    pub client_id: &'a str,
    /// The commit's idempotency id.
    pub client_commit_id: &'a str,
    /// The authenticated actor that pushed it.
    pub actor_id: &'a str,
    /// Server clock at push time, Unix ms.
    pub created_at_ms: i64,
}

/// Inserts the `sync_commits` row of an applied commit. Errors: SPI failures
/// (a duplicate `(partition, commit_seq)` is a Postgres ERROR).
pub fn insert_commit(c: &NewCommit<'_>) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        plan_cache::execute(
            client,
            "INSERT INTO syncular.sync_commits \
               (partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6)",
            None,
            &[
                DatumWithOid::from(c.partition),
                DatumWithOid::from(c.commit_seq),
                DatumWithOid::from(c.client_id),
                DatumWithOid::from(c.client_commit_id),
                DatumWithOid::from(c.actor_id),
                DatumWithOid::from(c.created_at_ms),
            ],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("insert_commit"))
}

/// A fresh unpredictable commit id (`gen_random_uuid()`), for a
/// server-authored commit whose caller supplied none. Errors: SPI failures.
pub fn generate_commit_id() -> StoreResult<String> {
    Spi::get_one::<String>("SELECT pg_catalog.gen_random_uuid()::text")
        .map_err(StoreError::spi("generate_commit_id"))?
        .ok_or_else(|| StoreError::new("generate_commit_id", "gen_random_uuid() returned NULL"))
}
