//! Incremental pull window reads (SPEC §4.5, §4.6): the partition bounds and
//! the pieces of one page of the commit log for one table, selected through
//! the commit→scope inverted index `sync_change_scopes`.
//!
//! A page is three statements, each one table's index walk, merged by the
//! engine ([`crate::engine::pull::window`]):
//!
//! 1. [`read_window_candidates`]: the candidate commits — an ordered,
//!    LIMITed range scan of `sync_change_scopes (partition, tbl, var, value,
//!    commit_seq)` per effective value of ONE scope variable (merged and
//!    de-duplicated when there are several);
//! 2. [`read_commit_metas`]: `sync_commits` metadata of the candidates, read
//!    as maximal runs of consecutive `commit_seq`s ([`SeqRuns`]): one range
//!    walk `partition = $1 AND commit_seq BETWEEN lo AND hi ORDER BY
//!    commit_seq` of `sync_commits_pkey` per run — one walk when the
//!    candidates are dense (every commit of the window matches), one
//!    primary-key probe per candidate when they are scattered, never a row
//!    outside the candidates;
//! 3. [`read_window_changes`]: the table's `sync_changes` rows of the same
//!    runs in `(commit_seq, idx)` order, cut at a row limit so a page never
//!    loads far more changes than the response can carry.
//!
//! What fixes the plans (asserted by `src/tests/sync_pull_explain.rs` on
//! never-analyzed tables, on tables analyzed before the partition existed,
//! and on analyzed ones):
//! - every statement runs through [`crate::store::spi::pinned_plan`]: one generic
//!   plan per backend (its estimates never look at the partition's value, so
//!   statistics about particular partitions cannot steer it), planned with
//!   sequential and bitmap scans disabled — an index walk whenever the table
//!   has a usable index;
//! - every statement names the partition, bounds `commit_seq` on the index it
//!   must walk and asks for that index's order. `sync_change_scopes` has only
//!   its primary key. On `sync_commits`, `sync_commits_by_time` could only
//!   use `partition`: it would need a filter on `commit_seq` and a sort,
//!   and the two indexes have the same key width, so it never costs less
//!   than the primary key — not even in an exact tie, which the planner
//!   would otherwise resolve towards the newer index (that is how per-commit
//!   equality probes used to land on it, 1000 probes × the whole partition,
//!   when the statistics knew nothing about the partition). On
//!   `sync_changes`, the primary key and `sync_changes_by_table` both carry
//!   `partition` and the `commit_seq` range as index conditions and deliver
//!   `(commit_seq, idx)` order; either is a walk of the run.
//!
//! The exact multi-variable match against each change's stored scopes is
//! the engine's job (it needs the whole effective map).

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::spi::Spi;

use crate::store::{spi::pinned_plan, spi::result_rows};
use crate::store::{StoreError, StoreResult};

/// `sync_partitions` bounds of one partition, read once per pull (§4.5, §4.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionBounds {
    /// Highest applied `commitSeq` (0 when the partition has no commit).
    pub max_commit_seq: i64,
    /// Pruning horizon: commits `≤ horizon_seq` may be gone (0 = nothing pruned).
    pub horizon_seq: i64,
}

const PARTITION_BOUNDS_SQL: &str =
    "SELECT max_commit_seq, horizon_seq FROM syncular.sync_partitions WHERE partition = $1";

/// Reads `max_commit_seq` and `horizon_seq` of `partition`; a partition with
/// no `sync_partitions` row reads as `(0, 0)`. Errors: SPI failures.
pub fn read_partition_bounds(partition: &str) -> StoreResult<PartitionBounds> {
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = pinned_plan::execute(
            client,
            PARTITION_BOUNDS_SQL,
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

/// The candidate query of one window page.
#[derive(Debug, Clone, Copy)]
pub struct CandidateQuery<'a> {
    /// Host partition.
    pub partition: &'a str,
    /// Table name (`tbl`).
    pub table: &'a str,
    /// The scope variable whose values select candidates (§3.1 index key).
    pub variable: &'a str,
    /// Effective values of `variable` (non-empty).
    pub values: &'a [String],
    /// Exclusive lower bound (`cursor`, or the last commit already handled).
    pub after_seq: i64,
    /// Inclusive upper bound (`maxCommitSeq` read for this pull).
    pub through_seq: i64,
    /// Max candidate commits (≥ 1).
    pub limit: i64,
}

/// One effective value: a single ordered, LIMITed index range scan.
const CANDIDATES_ONE_SQL: &str = "\
SELECT cs.commit_seq FROM syncular.sync_change_scopes cs \
WHERE cs.partition = $1 AND cs.tbl = $2 AND cs.var = $3 AND cs.value = $4 \
  AND cs.commit_seq > $5 AND cs.commit_seq <= $6 \
ORDER BY cs.commit_seq LIMIT $7";

/// Several values: the same scan per value, merged and de-duplicated.
const CANDIDATES_MANY_SQL: &str = "\
SELECT DISTINCT s.commit_seq \
FROM unnest($4::text[]) AS v(value) \
CROSS JOIN LATERAL ( \
    SELECT cs.commit_seq FROM syncular.sync_change_scopes cs \
    WHERE cs.partition = $1 AND cs.tbl = $2 AND cs.var = $3 AND cs.value = v.value \
      AND cs.commit_seq > $5 AND cs.commit_seq <= $6 \
    ORDER BY cs.commit_seq LIMIT $7) s \
ORDER BY s.commit_seq LIMIT $7";

fn candidate_statement<'a>(q: &CandidateQuery<'a>) -> (&'static str, [DatumWithOid<'a>; 7]) {
    let (sql, values) = match q.values {
        [one] => (CANDIDATES_ONE_SQL, DatumWithOid::from(one.as_str())),
        many => (CANDIDATES_MANY_SQL, DatumWithOid::from(many.to_vec())),
    };
    let args = [
        DatumWithOid::from(q.partition),
        DatumWithOid::from(q.table),
        DatumWithOid::from(q.variable),
        values,
        DatumWithOid::from(q.after_seq),
        DatumWithOid::from(q.through_seq),
        DatumWithOid::from(q.limit),
    ];
    (sql, args)
}

/// Up to `limit` candidate commits in `(after_seq, through_seq]` that carry a
/// change of `table` with `variable ∈ values`, ascending. Errors: SPI
/// failures.
pub fn read_window_candidates(q: &CandidateQuery<'_>) -> StoreResult<Vec<i64>> {
    let (sql, args) = candidate_statement(q);
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = pinned_plan::execute(client, sql, None, &args)?;
        let mut out = Vec::with_capacity(table.len());
        result_rows::for_each(&table, [pg_sys::INT8OID], |row| {
            out.push(row.get::<i64>(0).unwrap_or_default());
            Ok::<_, pgrx::spi::Error>(())
        })?;
        Ok(out)
    })
    .map_err(StoreError::spi("read_window_candidates"))
}

/// Ascending candidate `commit_seq`s as maximal runs of consecutive values:
/// `[3, 4, 5, 9]` → `lo = [3, 9]`, `hi = [5, 9]`. Every seq of a run is a
/// candidate, so a run walk reads no other commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqRuns {
    /// First seq of each run.
    pub lo: Vec<i64>,
    /// Last seq of each run (`lo[i] ≤ hi[i] < lo[i + 1]`).
    pub hi: Vec<i64>,
}

impl SeqRuns {
    /// The runs of `seqs` (ascending, distinct).
    pub fn of(seqs: &[i64]) -> SeqRuns {
        let mut runs = SeqRuns::default();
        for &seq in seqs {
            match runs.hi.last_mut() {
                Some(hi) if seq == *hi + 1 => *hi = seq,
                _ => {
                    runs.lo.push(seq);
                    runs.hi.push(seq);
                }
            }
        }
        runs
    }

    /// Number of runs.
    pub fn len(&self) -> usize {
        self.lo.len()
    }

    /// True when there is no run.
    pub fn is_empty(&self) -> bool {
        self.lo.is_empty()
    }
}

/// `sync_commits` metadata of a window commit (§4.5 COMMIT frame fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitMeta {
    /// The commit.
    pub commit_seq: i64,
    /// Server commit time, ms since the Unix epoch.
    pub created_at_ms: i64,
    /// The pushing actor.
    pub actor_id: String,
}

/// One range walk of `sync_commits_pkey` per run.
const COMMIT_METAS_SQL: &str = "\
SELECT m.commit_seq, m.created_at_ms, m.actor_id \
FROM unnest($2::int8[], $3::int8[]) AS r(lo, hi) \
CROSS JOIN LATERAL ( \
    SELECT cm.commit_seq, cm.created_at_ms, cm.actor_id FROM syncular.sync_commits cm \
    WHERE cm.partition = $1 AND cm.commit_seq >= r.lo AND cm.commit_seq <= r.hi \
    ORDER BY cm.commit_seq) m";

fn commit_metas_args<'a>(partition: &'a str, runs: &SeqRuns) -> [DatumWithOid<'a>; 3] {
    [
        DatumWithOid::from(partition),
        DatumWithOid::from(runs.lo.clone()),
        DatumWithOid::from(runs.hi.clone()),
    ]
}

/// `sync_commits` rows of every seq in `runs`, ascending; a seq without a row
/// (a vanished commit) is simply absent. Errors: SPI failures.
pub fn read_commit_metas(partition: &str, runs: &SeqRuns) -> StoreResult<Vec<CommitMeta>> {
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let args = commit_metas_args(partition, runs);
    let mut out = Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = pinned_plan::execute(client, COMMIT_METAS_SQL, None, &args)?;
        let mut out = Vec::with_capacity(table.len());
        let types = [pg_sys::INT8OID, pg_sys::INT8OID, pg_sys::TEXTOID];
        result_rows::for_each(&table, types, |row| {
            out.push(CommitMeta {
                commit_seq: row.get::<i64>(0).unwrap_or_default(),
                created_at_ms: row.get::<i64>(1).unwrap_or_default(),
                actor_id: row.get::<String>(2).unwrap_or_default(),
            });
            Ok::<_, pgrx::spi::Error>(())
        })?;
        Ok(out)
    })
    .map_err(StoreError::spi("read_commit_metas"))?;
    // Runs are ascending and disjoint, so this is already sorted; the sort
    // makes the order a guarantee rather than a property of the plan.
    out.sort_unstable_by_key(|m| m.commit_seq);
    Ok(out)
}

/// One `sync_changes` row (§2.2, §4.5 change record).
#[derive(Debug, Clone)]
pub struct WindowChange {
    /// The commit it belongs to.
    pub commit_seq: i64,
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

/// One run: one ordered range walk of `sync_changes`, LIMITed.
const CHANGES_ONE_RUN_SQL: &str = "\
SELECT x.commit_seq, x.idx, x.row_id, x.op, x.row_version, x.scopes, x.payload \
FROM syncular.sync_changes x \
WHERE x.partition = $1 AND x.tbl = $2 AND x.commit_seq >= $3 AND x.commit_seq <= $4 \
ORDER BY x.commit_seq, x.idx LIMIT $5";

/// Several runs: the same walk per run (each LIMITed), in run order.
const CHANGES_RUNS_SQL: &str = "\
SELECT c.commit_seq, c.idx, c.row_id, c.op, c.row_version, c.scopes, c.payload \
FROM unnest($3::int8[], $4::int8[]) WITH ORDINALITY AS r(lo, hi, n) \
CROSS JOIN LATERAL ( \
    SELECT x.commit_seq, x.idx, x.row_id, x.op, x.row_version, x.scopes, x.payload \
    FROM syncular.sync_changes x \
    WHERE x.partition = $1 AND x.tbl = $2 AND x.commit_seq >= r.lo AND x.commit_seq <= r.hi \
    ORDER BY x.commit_seq, x.idx LIMIT $5) c \
ORDER BY r.n, c.commit_seq, c.idx LIMIT $5";

fn changes_statement<'a>(
    partition: &'a str,
    table: &'a str,
    runs: &SeqRuns,
    row_limit: Option<i64>,
) -> (&'static str, [DatumWithOid<'a>; 5]) {
    let (sql, lo, hi) = match runs.len() {
        1 => (CHANGES_ONE_RUN_SQL, DatumWithOid::from(runs.lo[0]), DatumWithOid::from(runs.hi[0])),
        _ => (
            CHANGES_RUNS_SQL,
            DatumWithOid::from(runs.lo.clone()),
            DatumWithOid::from(runs.hi.clone()),
        ),
    };
    let args = [
        DatumWithOid::from(partition),
        DatumWithOid::from(table),
        lo,
        hi,
        // `LIMIT NULL` is no limit.
        DatumWithOid::from(row_limit),
    ];
    (sql, args)
}

/// The `table` changes of every commit in `runs`, in `(commit_seq, idx)`
/// order, at most `row_limit` rows (`None` = all): when exactly `row_limit`
/// rows come back, the last commit's changes may be cut. Errors: SPI
/// failures.
pub fn read_window_changes(
    partition: &str,
    table: &str,
    runs: &SeqRuns,
    row_limit: Option<i64>,
) -> StoreResult<Vec<WindowChange>> {
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let (sql, args) = changes_statement(partition, table, runs, row_limit);
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = pinned_plan::execute(client, sql, None, &args)?;
        let mut out = Vec::with_capacity(table.len());
        let types = [
            pg_sys::INT8OID,
            pg_sys::INT4OID,
            pg_sys::TEXTOID,
            pg_sys::INT2OID,
            pg_sys::INT8OID,
            pg_sys::JSONBOID,
            pg_sys::BYTEAOID,
        ];
        let mut scopes = result_rows::JsonbTextCache::default();
        result_rows::for_each(&table, types, |row| {
            out.push(WindowChange {
                commit_seq: row.get::<i64>(0).unwrap_or_default(),
                idx: row.get::<i32>(1).unwrap_or_default(),
                row_id: row.get::<String>(2).unwrap_or_default(),
                op: row.get::<i16>(3).unwrap_or_default(),
                row_version: row.get::<i64>(4),
                scopes_json: row.jsonb_text(5, &mut scopes).unwrap_or_else(|| "{}".to_owned()),
                payload: row.get::<Vec<u8>>(6),
            });
            Ok::<_, pgrx::spi::Error>(())
        })?;
        Ok(out)
    })
    .map_err(StoreError::spi("read_window_changes"))
}

/// Which statement of a window page to explain.
#[derive(Debug, Clone, Copy)]
pub enum WindowStatement<'a> {
    /// [`read_window_candidates`].
    Candidates(&'a CandidateQuery<'a>),
    /// [`read_commit_metas`] of `runs` in the partition.
    CommitMetas { partition: &'a str, runs: &'a SeqRuns },
    /// [`read_window_changes`].
    Changes { partition: &'a str, table: &'a str, runs: &'a SeqRuns, row_limit: Option<i64> },
}

/// `EXPLAIN ([ANALYZE,] FORMAT JSON)` of the plan a window statement runs
/// with these parameters (the pinned generic plan, see
/// [`crate::store::spi::pinned_plan::explain`]); `analyze` also runs it (actual
/// row counts included) — for the plan tests only.
pub fn explain_window_statement(statement: WindowStatement<'_>, analyze: bool) -> StoreResult<String> {
    let explained = match statement {
        WindowStatement::Candidates(q) => {
            let (sql, args) = candidate_statement(q);
            pinned_plan::explain(sql, &args, analyze)
        }
        WindowStatement::CommitMetas { partition, runs } => {
            pinned_plan::explain(COMMIT_METAS_SQL, &commit_metas_args(partition, runs), analyze)
        }
        WindowStatement::Changes { partition, table, runs, row_limit } => {
            let (sql, args) = changes_statement(partition, table, runs, row_limit);
            pinned_plan::explain(sql, &args, analyze)
        }
    };
    explained.map_err(StoreError::spi("explain_window_statement"))
}

/// `EXPLAIN ([ANALYZE,] FORMAT JSON)` of the partition-bounds statement
/// ([`read_partition_bounds`]) — for the plan tests only.
pub fn explain_partition_bounds(partition: &str) -> StoreResult<String> {
    pinned_plan::explain(PARTITION_BOUNDS_SQL, &[DatumWithOid::from(partition)], false)
        .map_err(StoreError::spi("explain_partition_bounds"))
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
