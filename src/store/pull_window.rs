//! Incremental pull window reads (SPEC §4.5, §4.6): the partition bounds and
//! one page of the commit log for one table, selected through the
//! commit→scope inverted index `sync_change_scopes`.
//!
//! Candidate commits come from one lateral, ordered, LIMITed index range scan
//! of `sync_change_scopes (partition, tbl, var, value, commit_seq)` per
//! effective value of ONE scope variable, merged and de-duplicated; they are
//! then joined to `sync_commits` (metadata) and `sync_changes` (the table's
//! changes) through LATERAL probes fenced with `OFFSET 0`, so each candidate
//! is a primary-key lookup whatever the statistics say. The exact multi-variable match against each change's stored
//! scopes is the engine's job (it needs the whole effective map). Never a
//! log scan: `src/tests/sync_pull_explain.rs` asserts the plan.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::{StoreError, StoreResult};

/// `sync_partitions` bounds of one partition, read once per pull (§4.5, §4.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionBounds {
    /// Highest applied `commitSeq` (0 when the partition has no commit).
    pub max_commit_seq: i64,
    /// Pruning horizon: commits `≤ horizon_seq` may be gone (0 = nothing pruned).
    pub horizon_seq: i64,
}

/// Reads `max_commit_seq` and `horizon_seq` of `partition`; a partition with
/// no `sync_partitions` row reads as `(0, 0)`. Errors: SPI failures.
pub fn read_partition_bounds(partition: &str) -> StoreResult<PartitionBounds> {
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = client.update(
            "SELECT max_commit_seq, horizon_seq FROM syncular.sync_partitions WHERE partition = $1",
            Some(1),
            &[DatumWithOid::from(partition)],
        )?;
        if table.is_empty() {
            return Ok(PartitionBounds { max_commit_seq: 0, horizon_seq: 0 });
        }
        let (max, horizon) = table.first().get_two::<i64, i64>()?;
        Ok(PartitionBounds {
            max_commit_seq: max.unwrap_or(0),
            horizon_seq: horizon.unwrap_or(0),
        })
    })
    .map_err(StoreError::spi("read_partition_bounds"))
}

/// One row of a window page: a candidate commit joined to one of its changes
/// for the table. A candidate with no change row for the table (or whose
/// commit metadata vanished) comes back with `change == None`; it still
/// advances the window.
#[derive(Debug, Clone)]
pub struct WindowRow {
    /// The candidate commit.
    pub commit_seq: i64,
    /// `None` when the `sync_commits` row is missing (a pruned/vanished commit).
    pub meta: Option<CommitMeta>,
    /// One of its changes of the table; `None` when it has none.
    pub change: Option<WindowChange>,
}

/// `sync_commits` metadata of a window commit (§4.5 COMMIT frame fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitMeta {
    /// Server commit time, ms since the Unix epoch.
    pub created_at_ms: i64,
    /// The pushing actor.
    pub actor_id: String,
}

/// One `sync_changes` row (§2.2, §4.5 change record).
#[derive(Debug, Clone)]
pub struct WindowChange {
    /// Position of the change inside its commit (0-based).
    pub idx: i32,
    /// Primary key of the changed row.
    pub row_id: String,
    /// `1` = upsert, `2` = delete.
    pub op: i16,
    /// Present for upserts.
    pub row_version: Option<i64>,
    /// Stored scopes as JSON text: `{"variable":"value",…}`.
    pub scopes_json: String,
    /// Present for upserts: the verbatim row-codec payload.
    pub payload: Option<Vec<u8>>,
}

const WINDOW_PAGE_SQL: &str = "\
SELECT c.commit_seq, m.created_at_ms, m.actor_id, \
       ch.idx, ch.row_id, ch.op, ch.row_version, ch.scopes::text, ch.payload \
FROM (SELECT DISTINCT s.commit_seq \
      FROM unnest($4::text[]) AS v(value) \
      CROSS JOIN LATERAL ( \
          SELECT cs.commit_seq FROM syncular.sync_change_scopes cs \
          WHERE cs.partition = $1 AND cs.tbl = $2 AND cs.var = $3 AND cs.value = v.value \
            AND cs.commit_seq > $5 AND cs.commit_seq <= $6 \
          ORDER BY cs.commit_seq LIMIT $7) s \
      ORDER BY s.commit_seq LIMIT $7) c \
LEFT JOIN LATERAL ( \
    SELECT cm.created_at_ms, cm.actor_id FROM syncular.sync_commits cm \
    WHERE cm.partition = $1 AND cm.commit_seq = c.commit_seq OFFSET 0) m ON true \
LEFT JOIN LATERAL ( \
    SELECT x.idx, x.row_id, x.op, x.row_version, x.scopes, x.payload FROM syncular.sync_changes x \
    WHERE x.partition = $1 AND x.commit_seq = c.commit_seq AND x.tbl = $2 OFFSET 0) ch ON true \
ORDER BY c.commit_seq, ch.idx";

/// The parameters of one window page read.
#[derive(Debug, Clone, Copy)]
pub struct WindowPageQuery<'a> {
    /// Host partition.
    pub partition: &'a str,
    /// Table name (`tbl`).
    pub table: &'a str,
    /// The scope variable whose values select candidates (§3.1 index key).
    pub variable: &'a str,
    /// Effective values of `variable` (non-empty).
    pub values: &'a [String],
    /// Exclusive lower bound (`cursor`).
    pub after_seq: i64,
    /// Inclusive upper bound (`maxCommitSeq` read for this pull).
    pub through_seq: i64,
    /// Max candidate commits in this page (≥ 1).
    pub candidate_limit: i64,
}

/// The bound parameters `$1..$7` of [`WINDOW_PAGE_SQL`].
fn window_args<'a>(q: &WindowPageQuery<'a>) -> [DatumWithOid<'a>; 7] {
    [
        DatumWithOid::from(q.partition),
        DatumWithOid::from(q.table),
        DatumWithOid::from(q.variable),
        DatumWithOid::from(q.values.to_vec()),
        DatumWithOid::from(q.after_seq),
        DatumWithOid::from(q.through_seq),
        DatumWithOid::from(q.candidate_limit),
    ]
}

/// Reads one page of the §4.5 window: up to `candidate_limit` candidate
/// commits in `(after_seq, through_seq]` that carry a change of `table` with
/// `variable ∈ values`, oldest first, each with all of its `table` changes
/// in `idx` order. Errors: SPI failures.
pub fn read_window_page(q: &WindowPageQuery<'_>) -> StoreResult<Vec<WindowRow>> {
    let args = window_args(q);
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = client.update(WINDOW_PAGE_SQL, None, &args)?;
        let mut out = Vec::with_capacity(table.len());
        for row in table {
            let commit_seq = row.get::<i64>(1)?.unwrap_or_default();
            let created_at_ms = row.get::<i64>(2)?;
            let actor_id = row.get::<String>(3)?;
            let meta = match (created_at_ms, actor_id) {
                (Some(created_at_ms), Some(actor_id)) => Some(CommitMeta { created_at_ms, actor_id }),
                _ => None,
            };
            let change = match (row.get::<i32>(4)?, row.get::<String>(5)?, row.get::<i16>(6)?) {
                (Some(idx), Some(row_id), Some(op)) => Some(WindowChange {
                    idx,
                    row_id,
                    op,
                    row_version: row.get::<i64>(7)?,
                    scopes_json: row.get::<String>(8)?.unwrap_or_else(|| "{}".to_owned()),
                    payload: row.get::<Vec<u8>>(9)?,
                }),
                _ => None,
            };
            out.push(WindowRow { commit_seq, meta, change });
        }
        Ok(out)
    })
    .map_err(StoreError::spi("read_window_page"))
}

/// `EXPLAIN (FORMAT JSON)` of the window page statement with the given
/// parameters (`analyze` = also run it: `EXPLAIN (ANALYZE, FORMAT JSON)`,
/// actual row counts included) — for the plan tests only.
pub fn explain_window_page(q: &WindowPageQuery<'_>, analyze: bool) -> StoreResult<String> {
    let args = window_args(q);
    explain_json(WINDOW_PAGE_SQL, &args, analyze).map_err(StoreError::spi("explain_window_page"))
}

/// `EXPLAIN ([ANALYZE,] FORMAT JSON) <sql>` with bound `args`, as JSON text.
pub(crate) fn explain_json(
    sql: &str,
    args: &[DatumWithOid<'_>],
    analyze: bool,
) -> Result<String, pgrx::spi::Error> {
    let statement = format!("EXPLAIN (ANALYZE {analyze}, FORMAT JSON) {sql}");
    Spi::connect_mut(|client| {
        let table = client.update(statement.as_str(), None, args)?;
        let plan = table.first().get_one::<pgrx::Json>()?;
        Ok(plan.map(|p| p.0.to_string()).unwrap_or_default())
    })
}
