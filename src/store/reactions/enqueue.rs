//! The enqueue of a push request's planned reactions (SPEC §6.9 "Atomic
//! storage"): one statement after the request's log statement (which
//! allocated the `commitSeq`s), in the same transaction, so the reactions
//! commit or roll back with their source commits. Rows start `pending`,
//! due at once, with 0 attempts. A row whose idempotency key already exists
//! (a commit applied again after its stored outcome was pruned) is kept as
//! it is (`ON CONFLICT DO NOTHING`): a source commit never adds a second row.
//!
//! The rows go in as `INSERT … VALUES` chunks
//! ([`crate::store::values_insert`]), in Citus router mode and out: a commit
//! plans a few reactions, and a one-row VALUES insert starts faster than an
//! `INSERT … SELECT … FROM unnest(…)` over arrays.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::values_insert::ValuesInsert;
use crate::store::{StoreError, StoreResult};

/// One planned row, ready to insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewReaction {
    /// The source commit's `commitSeq`.
    pub commit_seq: i64,
    /// The source commit's `clientCommitId`.
    pub client_commit_id: String,
    /// The stable JSON `[partition, clientId, clientCommitId, key]`.
    pub idempotency_key: String,
    /// Handler type.
    pub kind: String,
    /// Payload version (≥ 1).
    pub version: i32,
    /// Payload, JSON text.
    pub payload: String,
    /// 1 ..= 100.
    pub max_attempts: i32,
}

const VALUES_INSERT: ValuesInsert = ValuesInsert {
    head: "INSERT INTO syncular.sync_reactions \
           (partition, idempotency_key, type, version, payload, source_client_id, source_client_commit_id, \
            source_commit_seq, created_at_ms, available_at_ms, status, attempts, max_attempts)",
    row: "($1, {}, {}, {}, {}::jsonb, $2, {}, {}, $3, $3, 'pending', 0, {})",
    tail: " ON CONFLICT (partition, idempotency_key) DO NOTHING",
};

/// Inserts `rows` of `partition`, written by `client_id` at `now_ms`.
/// Errors: SPI failures.
pub fn insert_reactions(partition: &str, client_id: &str, now_ms: i64, rows: &[NewReaction]) -> StoreResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let shared = || {
        [DatumWithOid::from(partition), DatumWithOid::from(client_id), DatumWithOid::from(now_ms)]
    };
    Spi::connect_mut(|client| -> pgrx::spi::SpiResult<()> {
        // VALUES rows in power-of-two chunks, in router mode and out: a commit plans a few
        // reactions, and a one-row VALUES insert starts faster than an unnest over arrays.
        let values = rows
            .iter()
            .map(|r| {
                vec![
                    DatumWithOid::from(r.idempotency_key.as_str()),
                    DatumWithOid::from(r.kind.as_str()),
                    DatumWithOid::from(r.version),
                    DatumWithOid::from(r.payload.as_str()),
                    DatumWithOid::from(r.client_commit_id.as_str()),
                    DatumWithOid::from(r.commit_seq),
                    DatumWithOid::from(r.max_attempts),
                ]
            })
            .collect();
        VALUES_INSERT.execute(client, &shared(), values)?;
        Ok(())
    })
    .map_err(StoreError::spi("insert_reactions"))
}
