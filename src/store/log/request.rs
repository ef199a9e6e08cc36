//! The log of one push request in one statement (SPEC §2.1, §2.2, §2.3,
//! §6.4; DESIGN §4): the partition's `commitSeq`s are allocated and every
//! log row that carries them is written together — commit headers, changes,
//! their scope index, tombstones and the stored outcomes (`applied` and
//! `rejected`) of every new commit of the request — and, in the same
//! statement, the `sync_row_scopes` entries of the rows the request inserted
//! and left standing (§3.1: they need no `commitSeq`, but one statement
//! writes them for the price of one more table in it instead of one
//! statement per inserted row).
//!
//! This statement is where a push takes its partition's counter row (the
//! `UPDATE` locks it to the end of the caller's transaction): everything
//! before it — decoding, authorization, app-row and row-scope writes —
//! overlaps with concurrent pushers; what follows it is the response and the
//! COMMIT. Commits become visible in `commitSeq` order because the next
//! allocation waits for this transaction to end.
//!
//! Both statements run through [`crate::store::spi::pinned_plan`]: an index walk
//! on every table they probe (`sync_partitions`, `sync_tombstones`) however
//! small the table was when the backend planned them.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::log::{LogAuthor, RequestLog, MISSING_COUNTER};
use crate::store::spi::pinned_plan;
use crate::store::{StoreError, StoreResult};

/// The parts of the log statement, each a data-modifying CTE on the counter
/// row's allocation `s` (so a missing counter row writes nothing), in
/// [`log_sql`]'s order. `ts` (new tombstones) is left out of a request that
/// deletes no row; `tc` (cleared tombstones) and `rs` (row-scope entries) out
/// of one that inserts none — an update-only push plans and runs three
/// tables fewer. The parameter numbers are the same in every variant.
///
/// `cs` inserts without `ON CONFLICT`: its entries carry the `commitSeq`s
/// this statement allocates (no stored entry can have one: `sync_commits`
/// would refuse the same keys) and the engine de-duplicates them per commit,
/// so no conflict can arise — and a plain insert writes no speculative-
/// insertion confirmation (48 WAL bytes per entry). `rs` keeps `ON CONFLICT
/// DO NOTHING`: an entry left behind by a write that bypassed the capture
/// (a distributed table under Citus) must not fail the request.
const LOG_ALLOCATE: &str = "\
WITH s AS ( \
    UPDATE syncular.sync_partitions SET max_commit_seq = max_commit_seq + $5 \
    WHERE partition = $1 RETURNING max_commit_seq - $5 AS base), \
c AS ( \
    INSERT INTO syncular.sync_commits \
      (partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms) \
    SELECT $1, s.base + u.n, $2, u.id, $3, $4 \
    FROM s, unnest($6::text[]) WITH ORDINALITY AS u(id, n)), \
ch AS ( \
    INSERT INTO syncular.sync_changes \
      (partition, commit_seq, idx, tbl, row_id, op, row_version, scopes, payload) \
    SELECT $1, s.base + u.n, u.idx, u.tbl, u.row_id, u.op, u.row_version, u.scopes::jsonb, u.payload \
    FROM s, unnest($7::int4[], $8::int4[], $9::text[], $10::text[], $11::int2[], $12::int8[], \
                   $13::text[], $14::bytea[]) \
      AS u(n, idx, tbl, row_id, op, row_version, scopes, payload)), \
cs AS ( \
    INSERT INTO syncular.sync_change_scopes (partition, tbl, var, value, commit_seq) \
    SELECT $1, u.tbl, u.var, u.value, s.base + u.n \
    FROM s, unnest($15::int4[], $16::text[], $17::text[], $18::text[]) AS u(n, tbl, var, value)), \
pr AS ( \
    INSERT INTO syncular.sync_push_results (partition, client_id, client_commit_id, result) \
    SELECT $1, $2, u.id, CASE WHEN u.n > 0 \
        THEN jsonb_set(u.result::jsonb, '{commitSeq}', to_jsonb(s.base + u.n)) \
        ELSE u.result::jsonb END \
    FROM s, unnest($24::text[], $25::int4[], $26::text[]) AS u(id, n, result))";

/// New tombstones: rows whose last change in the request deletes them.
const LOG_TOMBSTONES: &str = ", \
ts AS ( \
    INSERT INTO syncular.sync_tombstones (partition, tbl, row_id, commit_seq) \
    SELECT $1, u.tbl, u.row_id, s.base + u.n \
    FROM s, unnest($19::int4[], $20::text[], $21::text[]) AS u(n, tbl, row_id) \
    ON CONFLICT (partition, tbl, row_id) DO UPDATE SET commit_seq = EXCLUDED.commit_seq)";

/// Rows the request inserted and left standing: their tombstone goes, their
/// scope entries are written.
const LOG_INSERTED: &str = ", \
tc AS ( \
    DELETE FROM syncular.sync_tombstones t \
    USING s, unnest($22::text[], $23::text[]) AS u(tbl, row_id) \
    WHERE t.partition = $1 AND t.tbl = u.tbl AND t.row_id = u.row_id), \
rs AS ( \
    INSERT INTO syncular.sync_row_scopes (partition, tbl, var, value, row_id) \
    SELECT $1, u.tbl, u.var, u.value, u.row_id \
    FROM s, unnest($27::text[], $28::text[], $29::text[], $30::text[]) AS u(tbl, var, value, row_id) \
    ON CONFLICT DO NOTHING)";

/// The log statement for a request that deletes rows (`deletes`) and/or
/// inserts rows (`inserts`); see [`LOG_ALLOCATE`].
fn log_sql(deletes: bool, inserts: bool) -> &'static str {
    static SQL: [std::sync::OnceLock<String>; 4] =
        [std::sync::OnceLock::new(), std::sync::OnceLock::new(), std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    SQL[usize::from(deletes) * 2 + usize::from(inserts)].get_or_init(|| {
        let mut sql = LOG_ALLOCATE.to_owned();
        if deletes {
            sql.push_str(LOG_TOMBSTONES);
        }
        if inserts {
            sql.push_str(LOG_INSERTED);
        }
        sql.push_str(" SELECT base FROM s");
        sql
    })
}

/// Rejections only: no `commitSeq` is allocated and the counter row is not touched.
const REJECTED_SQL: &str = "\
INSERT INTO syncular.sync_push_results (partition, client_id, client_commit_id, result) \
SELECT $1, $2, u.id, u.result::jsonb FROM unnest($3::text[], $4::text[]) AS u(id, result)";

fn unzip3<A: Clone, B: Clone, C: Clone>(v: &[(A, B, C)]) -> (Vec<A>, Vec<B>, Vec<C>) {
    (v.iter().map(|x| x.0.clone()).collect(), v.iter().map(|x| x.1.clone()).collect(), v.iter().map(|x| x.2.clone()).collect())
}

fn unzip4(v: &[(String, String, String, String)]) -> (Vec<String>, Vec<String>, Vec<String>, Vec<String>) {
    (
        v.iter().map(|x| x.0.clone()).collect(),
        v.iter().map(|x| x.1.clone()).collect(),
        v.iter().map(|x| x.2.clone()).collect(),
        v.iter().map(|x| x.3.clone()).collect(),
    )
}

/// Writes `log` and returns the allocated base: the applied commit at
/// position `n` (1-based) has `commitSeq = base + n`. `None` when nothing was
/// applied (only rejections were stored; no sequence allocated). Errors:
/// SPI failures; a missing counter row (`touch` creates it) is a
/// [`MISSING_COUNTER`] error, with nothing written; a stored outcome for the same key (only possible when the caller's
/// snapshot predates a concurrent delivery: REPEATABLE READ) raises 23505.
///
/// With `syncular.router_statements` on, the same rows are written by
/// [`crate::store::log::request_router`] instead (one single-shard statement per
/// table, for Citus).
pub fn write_request_log(author: &LogAuthor<'_>, log: &RequestLog) -> StoreResult<Option<i64>> {
    if crate::settings::router_statements() {
        return crate::store::log::request_router::write_request_log(author, log);
    }
    if log.applied.is_empty() {
        if !log.outcomes.is_empty() {
            let ids: Vec<String> = log.outcomes.iter().map(|o| o.0.clone()).collect();
            let results: Vec<String> = log.outcomes.iter().map(|o| o.2.clone()).collect();
            Spi::connect_mut(|client| {
                pinned_plan::execute(
                    client,
                    REJECTED_SQL,
                    None,
                    &[
                        DatumWithOid::from(author.partition),
                        DatumWithOid::from(author.client_id),
                        DatumWithOid::from(ids),
                        DatumWithOid::from(results),
                    ],
                )?;
                Ok(())
            })
            .map_err(StoreError::spi("write_rejections"))?;
        }
        return Ok(None);
    }
    let n = i64::try_from(log.applied.len()).map_err(|_| StoreError::new("write_request_log", "too many commits"))?;
    let ch = &log.changes;
    let (cs_n, cs_rest): (Vec<i32>, Vec<(String, String, String)>) =
        log.change_scopes.iter().map(|(n, t, v, x)| (*n, (t.clone(), v.clone(), x.clone()))).unzip();
    let (cs_tbl, cs_var, cs_value) = unzip3(&cs_rest);
    let (ts_n, ts_tbl, ts_row) = unzip3(&log.tombstones);
    let (tc_tbl, tc_row): (Vec<String>, Vec<String>) = log.cleared_tombstones.iter().cloned().unzip();
    let (pr_id, pr_n, pr_result) = unzip3(&log.outcomes);
    let (rs_tbl, rs_var, rs_value, rs_row) = unzip4(&log.row_scopes);
    let args = [
        DatumWithOid::from(author.partition),
        DatumWithOid::from(author.client_id),
        DatumWithOid::from(author.actor_id),
        DatumWithOid::from(author.created_at_ms),
        DatumWithOid::from(n),
        DatumWithOid::from(log.applied.clone()),
        DatumWithOid::from(ch.iter().map(|c| c.commit).collect::<Vec<i32>>()),
        DatumWithOid::from(ch.iter().map(|c| c.idx).collect::<Vec<i32>>()),
        DatumWithOid::from(ch.iter().map(|c| c.table.clone()).collect::<Vec<String>>()),
        DatumWithOid::from(ch.iter().map(|c| c.row_id.clone()).collect::<Vec<String>>()),
        DatumWithOid::from(ch.iter().map(|c| c.op).collect::<Vec<i16>>()),
        DatumWithOid::from(ch.iter().map(|c| c.row_version).collect::<Vec<Option<i64>>>()),
        DatumWithOid::from(ch.iter().map(|c| c.scopes_json.clone()).collect::<Vec<String>>()),
        DatumWithOid::from(ch.iter().map(|c| c.payload.clone()).collect::<Vec<Option<Vec<u8>>>>()),
        DatumWithOid::from(cs_n),
        DatumWithOid::from(cs_tbl),
        DatumWithOid::from(cs_var),
        DatumWithOid::from(cs_value),
        DatumWithOid::from(ts_n),
        DatumWithOid::from(ts_tbl),
        DatumWithOid::from(ts_row),
        DatumWithOid::from(tc_tbl),
        DatumWithOid::from(tc_row),
        DatumWithOid::from(pr_id),
        DatumWithOid::from(pr_n),
        DatumWithOid::from(pr_result),
        DatumWithOid::from(rs_tbl),
        DatumWithOid::from(rs_var),
        DatumWithOid::from(rs_value),
        DatumWithOid::from(rs_row),
    ];
    let base = Spi::connect_mut(|client| {
        let sql = log_sql(!log.tombstones.is_empty(), !log.cleared_tombstones.is_empty() || !log.row_scopes.is_empty());
        let table = pinned_plan::execute(client, sql, None, &args)?;
        if table.is_empty() {
            return Ok(None);
        }
        table.first().get_one::<i64>()
    })
    .map_err(StoreError::spi("write_request_log"))?;
    base.map(Some).ok_or_else(|| StoreError::new("write_request_log", MISSING_COUNTER))
}
