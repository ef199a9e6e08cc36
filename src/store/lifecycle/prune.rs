//! Bounded pruning batches (SPEC §4.6; docs/src/sql/lifecycle.md).

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::pinned_plan;
use crate::store::{StoreError, StoreResult};

/// What one log batch deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogBatch {
    /// `sync_commits` rows.
    pub commits: i64,
    /// `sync_changes` rows.
    pub changes: i64,
    /// `sync_change_scopes` entries.
    pub change_scopes: i64,
    /// `sync_tombstones` rows (the deletes among the batch's changes whose
    /// tombstone still names that commit).
    pub tombstones: i64,
}

/// The oldest commits at or below the partition's horizon, at most `$2`
/// `commitSeq` values from the oldest one: their changes, the change-scope
/// entries derived from each change's stored scopes, the tombstones those
/// deletes wrote (skipping any a concurrent push holds: it is rewriting that
/// row's fate) and the headers. The horizon is read here, after the fence.
///
/// The change-scope entries and tombstones are found by one primary-key
/// probe each, whatever the plan: a `LATERAL` subquery that cannot be pulled
/// up (`OFFSET 0`, `FOR UPDATE`) is a parameterized nested loop. (As a plain
/// join, the generic plan hashed every change-scope entry of the partition
/// in every batch: a batch cost O(partition), not O(batch). The index has no
/// `commit_seq` prefix, and the DDL is the reference's.)
const LOG_BATCH_SQL: &str = "\
WITH lim AS (SELECT p.horizon_seq AS h FROM syncular.sync_partitions p WHERE p.partition = $1), \
lo AS (SELECT c.commit_seq AS lo FROM syncular.sync_commits c, lim \
       WHERE c.partition = $1 AND c.commit_seq <= lim.h ORDER BY c.commit_seq LIMIT 1), \
rng AS (SELECT lo.lo, LEAST(lim.h, lo.lo + $2 - 1) AS hi FROM lo, lim), \
ch AS (DELETE FROM syncular.sync_changes d USING rng \
       WHERE d.partition = $1 AND d.commit_seq >= rng.lo AND d.commit_seq <= rng.hi \
       RETURNING d.commit_seq, d.tbl, d.row_id, d.op, d.scopes), \
cs AS (DELETE FROM syncular.sync_change_scopes d \
       WHERE d.partition = $1 AND d.ctid = ANY(ARRAY( \
         SELECT s.ctid \
         FROM (SELECT DISTINCT ch.tbl, e.key, e.value, ch.commit_seq \
               FROM ch, jsonb_each_text(ch.scopes) e) x \
         CROSS JOIN LATERAL (SELECT c.ctid FROM syncular.sync_change_scopes c \
                             WHERE c.partition = $1 AND c.tbl = x.tbl AND c.var = x.key \
                               AND c.value = x.value AND c.commit_seq = x.commit_seq \
                             OFFSET 0) s)) \
       RETURNING 1), \
ts AS (DELETE FROM syncular.sync_tombstones t \
       WHERE t.partition = $1 AND t.ctid = ANY(ARRAY( \
         SELECT s.ctid FROM ch \
         CROSS JOIN LATERAL (SELECT t2.ctid FROM syncular.sync_tombstones t2 \
                             WHERE t2.partition = $1 AND t2.tbl = ch.tbl \
                               AND t2.row_id = ch.row_id AND t2.commit_seq = ch.commit_seq \
                             FOR UPDATE SKIP LOCKED) s \
         WHERE ch.op = 2)) \
       RETURNING 1), \
cm AS (DELETE FROM syncular.sync_commits d USING rng \
       WHERE d.partition = $1 AND d.commit_seq >= rng.lo AND d.commit_seq <= rng.hi \
       RETURNING 1) \
SELECT (SELECT count(*) FROM cm), (SELECT count(*) FROM ch), (SELECT count(*) FROM cs), \
       (SELECT count(*) FROM ts)";

/// Deletes one batch of at most `max_commits` commits at or below the
/// horizon (caller holds the fence exclusively). All zero: nothing left.
/// Errors: SPI failures.
pub fn delete_log_batch(partition: &str, max_commits: i32) -> StoreResult<LogBatch> {
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = pinned_plan::execute(
            client,
            LOG_BATCH_SQL,
            Some(1),
            &[DatumWithOid::from(partition), DatumWithOid::from(i64::from(max_commits))],
        )?;
        let row = table.first();
        Ok(LogBatch {
            commits: row.get::<i64>(1)?.unwrap_or(0),
            changes: row.get::<i64>(2)?.unwrap_or(0),
            change_scopes: row.get::<i64>(3)?.unwrap_or(0),
            tombstones: row.get::<i64>(4)?.unwrap_or(0),
        })
    })
    .map_err(StoreError::spi("delete_log_batch"))
}

/// Deletes at most `max_rows` stored push outcomes of `partition` recorded
/// before `before_ms` (`result.recordedAtMs`; an outcome without it is
/// kept). Returns how many. Errors: SPI failures.
pub fn delete_expired_push_results(partition: &str, before_ms: i64, max_rows: i32) -> StoreResult<i64> {
    delete_bounded(
        "delete_expired_push_results",
        "DELETE FROM syncular.sync_push_results WHERE partition = $1 AND ctid = ANY(ARRAY( \
           SELECT r.ctid FROM syncular.sync_push_results r \
           WHERE r.partition = $1 AND (r.result ->> 'recordedAtMs')::bigint < $2 \
           LIMIT $3 FOR UPDATE SKIP LOCKED))",
        partition,
        before_ms,
        max_rows,
    )
}

/// Deletes at most `max_rows` client records of `partition` not updated
/// since `before_ms`. Returns how many. Errors: SPI failures.
pub fn delete_expired_clients(partition: &str, before_ms: i64, max_rows: i32) -> StoreResult<i64> {
    delete_bounded(
        "delete_expired_clients",
        "DELETE FROM syncular.sync_clients WHERE partition = $1 AND ctid = ANY(ARRAY( \
           SELECT c.ctid FROM syncular.sync_clients c \
           WHERE c.partition = $1 AND c.updated_at_ms < $2 \
           LIMIT $3 FOR UPDATE SKIP LOCKED))",
        partition,
        before_ms,
        max_rows,
    )
}

fn delete_bounded(name: &'static str, sql: &str, partition: &str, before_ms: i64, max_rows: i32) -> StoreResult<i64> {
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = client.update(
            sql,
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(before_ms), DatumWithOid::from(i64::from(max_rows))],
        )?;
        Ok(table.len() as i64)
    })
    .map_err(StoreError::spi(name))
}

/// Whether `partition` still has a commit at or below its horizon (one
/// primary-key probe). Errors: SPI failures.
pub fn log_below_horizon(partition: &str) -> StoreResult<bool> {
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = pinned_plan::execute(
            client,
            "SELECT 1 FROM syncular.sync_partitions p \
             WHERE p.partition = $1 AND EXISTS ( \
               SELECT 1 FROM syncular.sync_commits c \
               WHERE c.partition = $1 AND c.commit_seq <= p.horizon_seq)",
            Some(1),
            &[DatumWithOid::from(partition)],
        )?;
        Ok(!table.is_empty())
    })
    .map_err(StoreError::spi("log_below_horizon"))
}
