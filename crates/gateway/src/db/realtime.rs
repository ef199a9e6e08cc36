//! The realtime SQL calls of the contract (§2 `realtime_open`, §3 `realtime_deltas`, §4
//! `realtime_ack`, §6 `error_response`) and the presence relay's `pg_notify`. One function
//! per SQL statement; transient failures are retried ([`super::with_retry`]).

use deadpool_postgres::Pool;
use serde_json::Value;
use syncular_protocol::realtime_open::Opened;

use super::{checkout, with_retry, ApiError};

/// `syncular.realtime_open(partition, actor_id, client_id, allowed_scopes)`.
///
/// Errors: §10.1 errors of the call (`sync.invalid_client_id` 400, `sync.invalid_request`
/// 400, `syncular.no_schema` 500, …); `syncular.internal` when the answer does not parse.
pub async fn realtime_open(
    pool: &Pool,
    partition: &str,
    actor_id: &str,
    client_id: &str,
    allowed_scopes: Option<&Value>,
) -> Result<Opened, ApiError> {
    let value: Value = with_retry(|| async {
        let client = checkout(pool).await?;
        let row = client
            .query_one(
                "SELECT syncular.realtime_open($1::text, $2::text, $3::text, $4::jsonb)",
                &[&partition, &actor_id, &client_id, &allowed_scopes],
            )
            .await
            .map_err(|e| ApiError::from_pg(&e))?;
        row.try_get::<_, Value>(0).map_err(|e| ApiError::from_pg(&e))
    })
    .await?;
    serde_json::from_value(value).map_err(|e| ApiError::internal(format!("realtime_open answered an unexpected shape: {e}")))
}

/// One row of `syncular.realtime_deltas` (contract §3).
#[derive(Debug, Clone, PartialEq)]
pub struct DeltaRow {
    /// 0-based index of the input group.
    pub group_index: usize,
    /// `none` | `delta` | `delta-too-large` | `catchup-required` | `reset-required`.
    pub kind: String,
    /// The window's end: `max_commit_seq` read by the call, capped by `through_seq`.
    pub cursor: i64,
    /// The complete SSP2 response for `kind = delta`.
    pub delta: Option<Vec<u8>>,
}

/// `syncular.realtime_deltas(partition, groups, max_delta_bytes, through_seq)`: one call per
/// burst, the window capped at `through_seq` (the highest commitSeq notified in order).
///
/// Errors: §10.1 errors of the call (`syncular.invalid_argument` for malformed groups).
pub async fn realtime_deltas(
    pool: &Pool,
    partition: &str,
    groups: &Value,
    max_delta_bytes: i32,
    through_seq: i64,
) -> Result<Vec<DeltaRow>, ApiError> {
    with_retry(|| async {
        let client = checkout(pool).await?;
        let statement = client
            .prepare_cached(
                "SELECT group_index, kind, cursor, delta \
                 FROM syncular.realtime_deltas($1::text, $2::jsonb, $3::integer, $4::bigint)",
            )
            .await
            .map_err(|e| ApiError::from_pg(&e))?;
        let rows = client
            .query(&statement, &[&partition, groups, &max_delta_bytes, &through_seq])
            .await
            .map_err(|e| ApiError::from_pg(&e))?;
        rows.iter()
            .map(|r| {
                let index: i32 = r.try_get(0)?;
                Ok(DeltaRow {
                    group_index: usize::try_from(index).unwrap_or(usize::MAX),
                    kind: r.try_get(1)?,
                    cursor: r.try_get(2)?,
                    delta: r.try_get(3)?,
                })
            })
            .collect::<Result<Vec<_>, tokio_postgres::Error>>()
            .map_err(|e| ApiError::from_pg(&e))
    })
    .await
}

/// `syncular.realtime_ack(partition, acks)` with `acks = [{"clientId","actorId","cursor",
/// "logEpoch"}]`; returns the number of client records updated.
///
/// Errors: §10.1 errors of the call.
pub async fn realtime_ack(pool: &Pool, partition: &str, acks: &Value) -> Result<i32, ApiError> {
    with_retry(|| async {
        let client = checkout(pool).await?;
        let row = client
            .query_one("SELECT syncular.realtime_ack($1::text, $2::jsonb)", &[&partition, acks])
            .await
            .map_err(|e| ApiError::from_pg(&e))?;
        row.try_get::<_, i32>(0).map_err(|e| ApiError::from_pg(&e))
    })
    .await
}

/// `syncular.error_response(partition, wire_version, error)`: the §8.7 failure response
/// (`RESP_HEADER`, `ERROR`, `END`) of a socket round.
///
/// Errors: §10.1 errors of the call.
pub async fn error_response(pool: &Pool, partition: &str, wire_version: u16, error: &Value) -> Result<Vec<u8>, ApiError> {
    let wire = i32::from(wire_version);
    with_retry(|| async {
        let client = checkout(pool).await?;
        let row = client
            .query_one("SELECT syncular.error_response($1::text, $2::integer, $3::jsonb)", &[&partition, &wire, error])
            .await
            .map_err(|e| ApiError::from_pg(&e))?;
        row.try_get::<_, Vec<u8>>(0).map_err(|e| ApiError::from_pg(&e))
    })
    .await
}

/// `pg_notify(channel, payload)` (presence relay). Payload ≤ 7999 bytes.
///
/// Errors: §10.1 errors of the call.
pub async fn notify(pool: &Pool, channel: &str, payload: &str) -> Result<(), ApiError> {
    with_retry(|| async {
        let client = checkout(pool).await?;
        client
            .execute("SELECT pg_notify($1::text, $2::text)", &[&channel, &payload])
            .await
            .map_err(|e| ApiError::from_pg(&e))?;
        Ok(())
    })
    .await
}

/// `SELECT 1` on a pooled connection (health check).
pub async fn ping(pool: &Pool) -> bool {
    match checkout(pool).await {
        Ok(client) => client.simple_query("SELECT 1").await.is_ok(),
        Err(_) => false,
    }
}
