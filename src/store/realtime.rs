//! Realtime statements (SPEC §8.1, §8.2): the client record a session opens
//! from, and the batched ack write.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// The `sync_clients` record a realtime session opens from (§8.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRecord {
    /// The actor the `clientId` is bound to (§1.5).
    pub actor_id: String,
    /// Wire version of the client's last accepted request.
    pub wire_version: i32,
    /// Retention watermark / last acknowledged cursor (−1: never pulled).
    pub cursor: i64,
    /// The last pull's subscription list, JSON text `[{"id","table","scopes"}]`.
    pub subscriptions_json: String,
}

/// Reads a fresh session id (`gen_random_uuid()`) and the record of
/// `(partition, client_id)`, if any. Errors: SPI failures.
pub fn open_client(partition: &str, client_id: &str) -> StoreResult<(String, Option<ClientRecord>)> {
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = plan_cache::execute(
            client,
            "SELECT gen_random_uuid()::text, c.actor_id, c.wire_version, c.cursor, c.subscriptions::text \
             FROM (SELECT 1) AS one \
             LEFT JOIN syncular.sync_clients c ON c.partition = $1 AND c.client_id = $2",
            Some(1),
            &[DatumWithOid::from(partition), DatumWithOid::from(client_id)],
        )?;
        let row = table.first();
        let session_id = row.get::<String>(1)?.unwrap_or_default();
        let record = match row.get::<String>(2)? {
            None => None,
            Some(actor_id) => Some(ClientRecord {
                actor_id,
                wire_version: row.get::<i32>(3)?.unwrap_or(1),
                cursor: row.get::<i64>(4)?.unwrap_or(-1),
                subscriptions_json: row.get::<String>(5)?.unwrap_or_else(|| "[]".to_owned()),
            }),
        };
        Ok((session_id, record))
    })
    .map_err(StoreError::spi("open_client"))
}

/// Folds acknowledged cursors into `sync_clients` of `partition` (§8.2):
/// for each `(client_ids[i], actor_ids[i], cursors[i])` — at most one entry
/// per client id, callers pre-aggregate — `cursor = GREATEST(cursor,
/// LEAST(ack, max_commit_seq))` and `updated_at_ms = now_ms` where the record
/// is bound to that actor. Rows are locked in `client_id` order, so two
/// concurrent batches cannot deadlock. Returns the number of records
/// updated. Errors: SPI failures.
pub fn apply_acks(
    partition: &str,
    client_ids: Vec<String>,
    actor_ids: Vec<String>,
    cursors: Vec<i64>,
    now_ms: i64,
) -> StoreResult<usize> {
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = plan_cache::execute(
            client,
            "WITH a AS (SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[]) AS a(client_id, actor_id, cursor)), \
                  locked AS (SELECT c.client_id FROM syncular.sync_clients c \
                             JOIN a ON a.client_id = c.client_id AND a.actor_id = c.actor_id \
                             WHERE c.partition = $1 ORDER BY c.client_id FOR UPDATE OF c) \
             UPDATE syncular.sync_clients c \
             SET cursor = GREATEST(c.cursor, LEAST(a.cursor, p.max_commit_seq)), updated_at_ms = $5 \
             FROM a, locked, syncular.sync_partitions p \
             WHERE c.partition = $1 AND c.client_id = locked.client_id AND a.client_id = c.client_id AND a.actor_id = c.actor_id \
               AND p.partition = $1 \
             RETURNING 1",
            None,
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(client_ids),
                DatumWithOid::from(actor_ids),
                DatumWithOid::from(cursors),
                DatumWithOid::from(now_ms),
            ],
        )?;
        Ok(table.len())
    })
    .map_err(StoreError::spi("apply_acks"))
}
