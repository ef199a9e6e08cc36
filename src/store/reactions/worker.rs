//! The delivery state machine's statements (SPEC §6.9 "Delivery state
//! machine", "Terminal retention"): claim, lease extension, completion,
//! failure, the operator's dead-letter reset, the bounded cleanup and the
//! admin listing. Every transition of a leased row compares the lease
//! owner (`status = 'leased' AND lease_owner = $3`): a stale worker changes
//! nothing. Times are the caller's (the engine's clock).

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::SpiTupleTable;
use pgrx::JsonB;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// One `sync_reactions` row (without its partition).
#[derive(Debug, Clone, PartialEq)]
pub struct ReactionRow {
    /// `[partition, clientId, clientCommitId, key]` as JSON text.
    pub idempotency_key: String,
    /// Handler type.
    pub kind: String,
    /// Payload version.
    pub version: i32,
    /// Payload.
    pub payload: serde_json::Value,
    /// Source `clientId`.
    pub source_client_id: String,
    /// Source `clientCommitId`.
    pub source_client_commit_id: String,
    /// Source `commitSeq`.
    pub source_commit_seq: i64,
    /// Enqueue time (ms).
    pub created_at_ms: i64,
    /// Due time (pending), failure time (dead-letter), ms.
    pub available_at_ms: i64,
    /// `pending`, `leased`, `completed`, `dead-letter`.
    pub status: String,
    /// Claims so far.
    pub attempts: i32,
    /// Claims allowed.
    pub max_attempts: i32,
    /// The current lease's owner token.
    pub lease_owner: Option<String>,
    /// The current lease's expiry (ms).
    pub lease_expires_at_ms: Option<i64>,
    /// Completion time (ms).
    pub completed_at_ms: Option<i64>,
    /// `{"code", "atMs", "details"?}` of the last failure.
    pub last_failure: Option<serde_json::Value>,
}

const COLUMNS: &str = "idempotency_key, type, version, payload, source_client_id, source_client_commit_id, \
    source_commit_seq, created_at_ms, available_at_ms, status, attempts, max_attempts, lease_owner, \
    lease_expires_at_ms, completed_at_ms, last_failure";

fn rows(table: SpiTupleTable<'_>, statement: &'static str) -> StoreResult<Vec<ReactionRow>> {
    let e = move |x: pgrx::spi::Error| StoreError::new(statement, x.to_string());
    let mut out = Vec::with_capacity(table.len());
    for row in table {
        let text = |i: usize| -> StoreResult<String> { Ok(row.get::<String>(i).map_err(e)?.unwrap_or_default()) };
        out.push(ReactionRow {
            idempotency_key: text(1)?,
            kind: text(2)?,
            version: row.get::<i32>(3).map_err(e)?.unwrap_or(0),
            payload: row.get::<JsonB>(4).map_err(e)?.map_or(serde_json::Value::Null, |j| j.0),
            source_client_id: text(5)?,
            source_client_commit_id: text(6)?,
            source_commit_seq: row.get::<i64>(7).map_err(e)?.unwrap_or(0),
            created_at_ms: row.get::<i64>(8).map_err(e)?.unwrap_or(0),
            available_at_ms: row.get::<i64>(9).map_err(e)?.unwrap_or(0),
            status: text(10)?,
            attempts: row.get::<i32>(11).map_err(e)?.unwrap_or(0),
            max_attempts: row.get::<i32>(12).map_err(e)?.unwrap_or(0),
            lease_owner: row.get::<String>(13).map_err(e)?,
            lease_expires_at_ms: row.get::<i64>(14).map_err(e)?,
            completed_at_ms: row.get::<i64>(15).map_err(e)?,
            last_failure: row.get::<JsonB>(16).map_err(e)?.map(|j| j.0),
        });
    }
    Ok(out)
}

/// What a claim asks for.
#[derive(Debug, Clone)]
pub struct Claim<'a> {
    /// The partition.
    pub partition: &'a str,
    /// The worker's fresh lease-owner token.
    pub lease_owner: &'a str,
    /// The handler types the worker runs.
    pub types: &'a [String],
    /// At most this many rows.
    pub max_rows: i64,
    /// Now (ms): due pending rows and leases expired at or before it.
    pub now_ms: i64,
    /// The new leases' expiry (ms).
    pub lease_expires_at_ms: i64,
}

/// Claims due rows (pending with `available_at_ms <= now`, or leased with
/// `lease_expires_at_ms <= now`) of the worker's types, oldest first, rows
/// other claimers hold locked skipped (`FOR UPDATE SKIP LOCKED`), and
/// leases them: owner, expiry, `attempts + 1`. Returns them in claim order.
/// An expired lease that already used its last attempt (its worker died
/// without recording a failure — a handler that kills its worker would
/// otherwise loop forever, §6.9 `maxAttempts`) is dead-lettered instead, with
/// `last_failure` `{"code": "reaction.lease_expired", "atMs": now}`, and not
/// returned.
pub fn claim(c: &Claim<'_>) -> StoreResult<Vec<ReactionRow>> {
    let sql = format!(
        "WITH due AS ( \
           SELECT idempotency_key FROM syncular.sync_reactions \
            WHERE partition = $1 AND type = ANY($3::text[]) \
              AND ((status = 'pending' AND available_at_ms <= $5) \
                OR (status = 'leased' AND lease_expires_at_ms <= $5)) \
            ORDER BY CASE WHEN status = 'leased' THEN lease_expires_at_ms ELSE available_at_ms END, \
                     created_at_ms, idempotency_key \
            LIMIT $4 FOR UPDATE SKIP LOCKED) \
         UPDATE syncular.sync_reactions r \
            SET status = CASE WHEN {spent} THEN 'dead-letter' ELSE 'leased' END, \
                attempts = CASE WHEN {spent} THEN r.attempts ELSE r.attempts + 1 END, \
                lease_owner = CASE WHEN {spent} THEN NULL ELSE $2 END, \
                lease_expires_at_ms = CASE WHEN {spent} THEN NULL ELSE $6 END, \
                available_at_ms = CASE WHEN {spent} THEN $5 ELSE r.available_at_ms END, \
                last_failure = CASE WHEN {spent} \
                  THEN pg_catalog.jsonb_build_object('code', 'reaction.lease_expired', 'atMs', $5) \
                  ELSE r.last_failure END, \
                completed_at_ms = NULL \
           FROM due WHERE r.partition = $1 AND r.idempotency_key = due.idempotency_key \
         RETURNING {}",
        COLUMNS.split(", ").map(|c| format!("r.{c}")).collect::<Vec<_>>().join(", "),
        spent = "(r.status = 'leased' AND r.attempts >= r.max_attempts)",
    );
    let mut out = Spi::connect_mut(|client| {
        let table = plan_cache::execute(
            client,
            &sql,
            None,
            &[
                DatumWithOid::from(c.partition),
                DatumWithOid::from(c.lease_owner),
                DatumWithOid::from(c.types.to_vec()),
                DatumWithOid::from(c.max_rows),
                DatumWithOid::from(c.now_ms),
                DatumWithOid::from(c.lease_expires_at_ms),
            ],
        )
        .map_err(StoreError::spi("claim_reactions"))?;
        rows(table, "claim_reactions")
    })?;
    out.retain(|r| r.status == "leased");
    out.sort_by(|a, b| (a.created_at_ms, &a.idempotency_key).cmp(&(b.created_at_ms, &b.idempotency_key)));
    Ok(out)
}

fn update_leased(statement: &'static str, sql: &str, args: &[DatumWithOid<'_>]) -> StoreResult<Option<i64>> {
    Spi::connect_mut(|client| {
        let table = plan_cache::execute(client, sql, None, args).map_err(StoreError::spi(statement))?;
        if table.is_empty() {
            return Ok(None);
        }
        table.first().get_one::<i64>().map_err(StoreError::spi(statement))
    })
}

/// Sets the lease's expiry to `expires_at_ms` if `owner` still holds it.
/// Returns the new expiry, `None` when the lease is not `owner`'s.
pub fn extend_lease(partition: &str, key: &str, owner: &str, expires_at_ms: i64) -> StoreResult<Option<i64>> {
    update_leased(
        "extend_reaction_lease",
        "UPDATE syncular.sync_reactions SET lease_expires_at_ms = $4 \
          WHERE partition = $1 AND idempotency_key = $2 AND status = 'leased' AND lease_owner = $3 \
         RETURNING lease_expires_at_ms",
        &[partition.into(), key.into(), owner.into(), expires_at_ms.into()],
    )
}

/// Marks the row completed at `now_ms` if `owner` still holds its lease.
pub fn complete(partition: &str, key: &str, owner: &str, now_ms: i64) -> StoreResult<bool> {
    update_leased(
        "complete_reaction",
        "UPDATE syncular.sync_reactions \
            SET status = 'completed', completed_at_ms = $4, lease_owner = NULL, lease_expires_at_ms = NULL \
          WHERE partition = $1 AND idempotency_key = $2 AND status = 'leased' AND lease_owner = $3 \
         RETURNING completed_at_ms",
        &[partition.into(), key.into(), owner.into(), now_ms.into()],
    )
    .map(|r| r.is_some())
}

/// Locks the row if `owner` holds its lease; returns `(attempts,
/// max_attempts)`, `None` when the lease is not `owner`'s.
pub fn lock_lease(partition: &str, key: &str, owner: &str) -> StoreResult<Option<(i32, i32)>> {
    const STATEMENT: &str = "lock_reaction_lease";
    Spi::connect_mut(|client| {
        let table = plan_cache::execute(
            client,
            "SELECT attempts, max_attempts FROM syncular.sync_reactions \
              WHERE partition = $1 AND idempotency_key = $2 AND status = 'leased' AND lease_owner = $3 \
              FOR UPDATE",
            None,
            &[partition.into(), key.into(), owner.into()],
        )
        .map_err(StoreError::spi(STATEMENT))?;
        if table.is_empty() {
            return Ok(None);
        }
        let row = table.first();
        let attempts = row.get::<i32>(1).map_err(StoreError::spi(STATEMENT))?.unwrap_or(0);
        let max = row.get::<i32>(2).map_err(StoreError::spi(STATEMENT))?.unwrap_or(0);
        Ok(Some((attempts, max)))
    })
}

/// Records a failure of `owner`'s lease (locked by [`lock_lease`]): the row
/// becomes `status` (`pending` or `dead-letter`) with `available_at_ms`
/// (the retry time, or the failure time for a dead letter) and
/// `last_failure`; the lease is cleared. Returns whether a row changed.
pub fn record_failure(
    partition: &str,
    key: &str,
    owner: &str,
    status: &str,
    available_at_ms: i64,
    failure: &serde_json::Value,
) -> StoreResult<bool> {
    Spi::connect_mut(|client| {
        let table = plan_cache::execute(
            client,
            "UPDATE syncular.sync_reactions \
                SET status = $4, available_at_ms = $5, last_failure = $6, lease_owner = NULL, \
                    lease_expires_at_ms = NULL \
              WHERE partition = $1 AND idempotency_key = $2 AND status = 'leased' AND lease_owner = $3 \
             RETURNING 1",
            None,
            &[
                partition.into(),
                key.into(),
                owner.into(),
                status.into(),
                available_at_ms.into(),
                DatumWithOid::from(JsonB(failure.clone())),
            ],
        )
        .map_err(StoreError::spi("fail_reaction"))?;
        Ok(!table.is_empty())
    })
}

/// Resets a dead-lettered row: pending, due at `now_ms`, attempts 0,
/// failure, lease and completion cleared. Returns whether it was dead-lettered.
pub fn retry_dead_letter(partition: &str, key: &str, now_ms: i64) -> StoreResult<bool> {
    Spi::connect_mut(|client| {
        let table = plan_cache::execute(
            client,
            "UPDATE syncular.sync_reactions \
                SET status = 'pending', attempts = 0, available_at_ms = $3, last_failure = NULL, \
                    lease_owner = NULL, lease_expires_at_ms = NULL, completed_at_ms = NULL \
              WHERE partition = $1 AND idempotency_key = $2 AND status = 'dead-letter' \
             RETURNING 1",
            None,
            &[partition.into(), key.into(), now_ms.into()],
        )
        .map_err(StoreError::spi("retry_dead_letter_reaction"))?;
        Ok(!table.is_empty())
    })
}

const PRUNE_COMPLETED_SQL: &str = "\
DELETE FROM syncular.sync_reactions r USING ( \
    SELECT idempotency_key FROM syncular.sync_reactions \
     WHERE partition = $1 AND status = 'completed' AND completed_at_ms < $2 \
     ORDER BY completed_at_ms, idempotency_key LIMIT $3 FOR UPDATE SKIP LOCKED) d \
WHERE r.partition = $1 AND r.idempotency_key = d.idempotency_key \
  AND r.status = 'completed' AND r.completed_at_ms < $2 \
RETURNING 1";

const PRUNE_DEAD_LETTER_SQL: &str = "\
DELETE FROM syncular.sync_reactions r USING ( \
    SELECT idempotency_key FROM syncular.sync_reactions \
     WHERE partition = $1 AND status = 'dead-letter' AND available_at_ms < $2 \
     ORDER BY available_at_ms, idempotency_key LIMIT $3 FOR UPDATE SKIP LOCKED) d \
WHERE r.partition = $1 AND r.idempotency_key = d.idempotency_key \
  AND r.status = 'dead-letter' AND r.available_at_ms < $2 \
RETURNING 1";

/// Deletes at most `max_rows` `completed` rows whose completion time is
/// strictly before `cutoff_ms` (`dead_letter`: `dead-letter` rows whose
/// failure time is); rows another transaction holds locked (a concurrent
/// reset) are skipped. Returns the number deleted.
pub fn prune(partition: &str, dead_letter: bool, cutoff_ms: i64, max_rows: i64) -> StoreResult<i64> {
    let sql = if dead_letter { PRUNE_DEAD_LETTER_SQL } else { PRUNE_COMPLETED_SQL };
    Spi::connect_mut(|client| {
        let table = plan_cache::execute(client, sql, None, &[partition.into(), cutoff_ms.into(), max_rows.into()])
            .map_err(StoreError::spi("prune_reactions"))?;
        Ok(i64::try_from(table.len()).unwrap_or(i64::MAX))
    })
}

/// At most `max_rows` rows of `partition` (of `status` when given), oldest
/// first (`created_at_ms`, then key).
pub fn list(partition: &str, status: Option<&str>, max_rows: i64) -> StoreResult<Vec<ReactionRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM syncular.sync_reactions \
          WHERE partition = $1 AND ($2::text IS NULL OR status = $2) \
          ORDER BY created_at_ms, idempotency_key LIMIT $3"
    );
    Spi::connect_mut(|client| {
        let table = plan_cache::execute(client, &sql, None, &[partition.into(), status.into(), max_rows.into()])
            .map_err(StoreError::spi("list_reactions"))?;
        rows(table, "list_reactions")
    })
}
