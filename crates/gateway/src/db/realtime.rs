//! The realtime SQL calls besides the session rules ([`super::session`]): `realtime_ack`,
//! `error_response`, and the presence relay's `pg_notify`. One function per SQL statement;
//! transient failures are retried ([`super::with_retry`]).

use deadpool_postgres::Pool;
use serde_json::Value;

use super::{checkout, with_retry, ApiError};

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
