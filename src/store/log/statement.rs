//! The log rows of one captured plain SQL statement (issue 9), set-based:
//! its `commitSeq` and header in one statement ([`allocate_commit`]), then
//! its changes, their commit→scope index entries, the row-scope index and
//! the tombstones, all read from the statement's transition table
//! ([`crate::store::capture::transition`]) in a handful of statements
//! whatever the row count (a 100,000-row `COPY` is not 100,000 round trips).
//! Called only by the commit writer ([`crate::engine::commit`]).

use pgrx::datum::DatumWithOid;
use pgrx::spi::{quote_identifier, quote_literal, SpiClient};

use crate::store::capture::transition::{CapturedOp, NEW_TABLE, OLD_TABLE};
use crate::store::log::MISSING_COUNTER;
use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// Runs one log statement through the backend's kept plans
/// ([`plan_cache`]). A plan over a transition table is bound to that table's
/// column numbers, so `plan_key` (naming the app table and schema version)
/// prefixes the SQL text: each app table and layout gets its own plans.
fn run(client: &mut SpiClient<'_>, plan_key: &str, statement: &'static str, sql: &str, args: &[DatumWithOid<'_>]) -> StoreResult<()> {
    plan_cache::execute(client, &format!("/* {plan_key} */ {sql}"), None, args)
        .map(|_| ())
        .map_err(StoreError::spi(statement))
}

/// The header of one captured commit.
#[derive(Debug, Clone, Copy)]
pub struct StatementAuthor<'a> {
    /// Host partition.
    pub partition: &'a str,
    /// `sql:<actor>`.
    pub client_id: &'a str,
    /// A fresh commit id.
    pub client_commit_id: &'a str,
    /// `syncular.actor_id` or the current role.
    pub actor_id: &'a str,
    /// Commit time, Unix ms.
    pub created_at_ms: i64,
}

/// What app triggers' nested writes mean for a captured statement's log.
#[derive(Debug, Clone, Copy, Default)]
pub struct Nesting<'a> {
    /// A nested statement or commit logged rows while this statement ran (an
    /// app trigger's write): the app table's qualified name, so that only
    /// the transition rows it still holds as the statement left them are
    /// logged — a row the nested write changed or removed was logged by it,
    /// before this statement's stale copy would be.
    pub current_rows: Option<&'a str>,
    /// This statement ran from an app trigger of another captured statement
    /// still in progress: a row it inserts may still have the index entries
    /// an enclosing `DELETE` removes only at its end.
    pub enclosed: bool,
}

/// Allocates the next `commitSeq` of the partition from its counter row
/// (locked from here to the caller's transaction end) and writes the
/// commit's `sync_commits` header, in one statement; returns the
/// `commitSeq`. Errors: SPI failures; a missing counter row is a
/// [`MISSING_COUNTER`] error with nothing written.
pub fn allocate_commit(client: &mut SpiClient<'_>, a: &StatementAuthor<'_>) -> StoreResult<i64> {
    let seq = plan_cache::execute(
        client,
        "WITH s AS ( \
            UPDATE syncular.sync_partitions SET max_commit_seq = max_commit_seq + 1 \
            WHERE partition = $1 RETURNING max_commit_seq) \
         INSERT INTO syncular.sync_commits \
           (partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms) \
         SELECT $1, s.max_commit_seq, $2, $3, $4, $5 FROM s RETURNING commit_seq",
        None,
        &[
            DatumWithOid::from(a.partition),
            DatumWithOid::from(a.client_id),
            DatumWithOid::from(a.client_commit_id),
            DatumWithOid::from(a.actor_id),
            DatumWithOid::from(a.created_at_ms),
        ],
    )
    .and_then(|t| if t.is_empty() { Ok(None) } else { t.first().get_one::<i64>() })
    .map_err(StoreError::spi("allocate_commit"))?;
    seq.ok_or_else(|| StoreError::new("allocate_commit", MISSING_COUNTER))
}

/// Writes the log rows of one captured statement as commit `commit_seq` of
/// `partition`, table `tbl`: one change per transition-table row in its order
/// (`idx` from 0), the distinct `(tbl, var, value)` change-scope entries, and
/// per `op` the row-scope entries and tombstones. `plan_key` identifies the
/// app table's layout (see [`run`]; no `*/` in it); `scope_columns` are its
/// `(variable, column)` pairs, read straight from the typed columns (the row
/// trigger checked they are non-empty strings). A new row's scope entries
/// are inserted without `ON CONFLICT` (deletes remove a row's entries, so a
/// conflict means the index was edited behind the engine's back — the
/// statement fails rather than guess) unless `nesting` says a nested write
/// may have made them already; with `nesting.current_rows` only the
/// transition rows the table still holds as they are — an upsert's row at
/// its version and payload, a delete's row absent — are logged
/// ([`Nesting`]). Errors: SPI failures.
#[allow(clippy::too_many_arguments)]
pub fn write_statement_log(
    client: &mut SpiClient<'_>,
    plan_key: &str,
    partition: &str,
    commit_seq: i64,
    tbl: &str,
    op: CapturedOp,
    scope_columns: &[(String, String)],
    nesting: Nesting<'_>,
) -> StoreResult<()> {
    let current_rows = nesting.current_rows;
    let rows = rows_of(op, current_rows, true);
    let args = [DatumWithOid::from(partition), DatumWithOid::from(commit_seq), DatumWithOid::from(tbl)];
    // `t` → its scope entries `s(key, value)`, one per declared variable.
    let scopes = scope_columns
        .iter()
        .map(|(var, column)| format!("({}, t.{}::text)", quote_literal(var), quote_identifier(column)))
        .collect::<Vec<_>>()
        .join(", ");
    let scopes = format!("CROSS JOIN LATERAL (VALUES {scopes}) AS s(key, value)");
    let change_select = if op == CapturedOp::Delete {
        format!(
            "SELECT $1, $2, (row_number() OVER () - 1)::int4, $3, t._sync_row_id, 2::int2, NULL::int8, t._sync_scopes, NULL::bytea \
             FROM {rows}"
        )
    } else {
        format!(
            "SELECT $1, $2, (row_number() OVER () - 1)::int4, $3, t._sync_row_id, 1::int2, t._sync_version, t._sync_scopes, t._sync_payload \
             FROM {rows}"
        )
    };
    run(
        client,
        plan_key,
        "capture_changes",
        &format!(
            "INSERT INTO syncular.sync_changes (partition, commit_seq, idx, tbl, row_id, op, row_version, scopes, payload) {change_select}"
        ),
        &args,
    )?;
    if scope_columns.is_empty() {
        return write_row_index(client, plan_key, op, current_rows, &args);
    }
    run(
        client,
        plan_key,
        "capture_change_scopes",
        &format!(
            "INSERT INTO syncular.sync_change_scopes (partition, tbl, var, value, commit_seq) \
             SELECT DISTINCT $1, $3, s.key, s.value, $2::int8 FROM {rows} {scopes} \
             ON CONFLICT DO NOTHING"
        ),
        &args,
    )?;
    if op == CapturedOp::Insert {
        // A row is indexed while it exists, whatever a nested write changed of it; an entry
        // may exist already when this statement re-inserted a row an enclosing DELETE removed
        // (that statement's end drops the entries the row no longer has).
        let present = rows_of(op, current_rows, false);
        let conflict = if nesting.enclosed || current_rows.is_some() { " ON CONFLICT DO NOTHING" } else { "" };
        run(
            client,
            plan_key,
            "capture_row_scopes",
            &format!(
                "INSERT INTO syncular.sync_row_scopes (partition, tbl, var, value, row_id) \
                 SELECT $1, $3, s.key, s.value, t._sync_row_id FROM {present} {scopes}{conflict}"
            ),
            &args,
        )?;
    }
    write_row_index(client, plan_key, op, current_rows, &args)
}

/// The statement's rows as `t`: its transition table, or with `current`
/// (the app table) only those the table still holds — `exact`: as they are
/// (version and payload), else at all; a deleted row only while it is absent
/// ([`write_statement_log`]).
fn rows_of(op: CapturedOp, current: Option<&str>, exact: bool) -> String {
    let (source, alias) = if op == CapturedOp::Delete { (OLD_TABLE, "o") } else { (NEW_TABLE, "n") };
    let Some(app) = current else {
        return format!("{source} t");
    };
    let same_row = format!("a._sync_partition = $1 AND a._sync_row_id = {alias}._sync_row_id");
    let held = match (op, exact) {
        (CapturedOp::Delete, _) => format!("NOT EXISTS (SELECT 1 FROM {app} a WHERE {same_row})"),
        (_, false) => format!("EXISTS (SELECT 1 FROM {app} a WHERE {same_row})"),
        (_, true) => format!(
            "EXISTS (SELECT 1 FROM {app} a WHERE {same_row} \
               AND a._sync_version = {alias}._sync_version AND a._sync_payload = {alias}._sync_payload)"
        ),
    };
    format!("(SELECT {alias}.* FROM {source} {alias} WHERE {held}) t")
}

/// The tombstones (insert: cleared; delete: written) and, for a delete, the
/// removal of the rows' scope entries.
fn write_row_index(client: &mut SpiClient<'_>, plan_key: &str, op: CapturedOp, current_rows: Option<&str>, args: &[DatumWithOid<'_>]) -> StoreResult<()> {
    let rows = rows_of(op, current_rows, false);
    match op {
        CapturedOp::Insert => {
            run(
                client,
                plan_key,
                "capture_clear_tombstones",
                &format!(
                    "DELETE FROM syncular.sync_tombstones d USING {rows} \
                     WHERE d.partition = $1 AND d.tbl = $3 AND d.row_id = t._sync_row_id"
                ),
                args,
            )?;
        }
        CapturedOp::Update => {}
        CapturedOp::Delete => {
            run(
                client,
                plan_key,
                "capture_delete_row_scopes",
                &match current_rows {
                    None => format!(
                        "DELETE FROM syncular.sync_row_scopes r USING {rows} \
                         WHERE r.partition = $1 AND r.tbl = $3 AND r.row_id = t._sync_row_id"
                    ),
                    // A row a nested write re-inserted keeps the entries it holds now.
                    Some(app) => format!(
                        "DELETE FROM syncular.sync_row_scopes r USING {OLD_TABLE} t \
                         WHERE r.partition = $1 AND r.tbl = $3 AND r.row_id = t._sync_row_id AND NOT EXISTS \
                           (SELECT 1 FROM {app} a WHERE a._sync_partition = $1 AND a._sync_row_id = t._sync_row_id \
                              AND a._sync_scopes ->> r.var = r.value)"
                    ),
                },
                args,
            )?;
            run(
                client,
                plan_key,
                "capture_tombstones",
                &format!(
                    "INSERT INTO syncular.sync_tombstones (partition, tbl, row_id, commit_seq) \
                     SELECT $1, $3, t._sync_row_id, $2 FROM {rows} \
                     ON CONFLICT (partition, tbl, row_id) DO UPDATE SET commit_seq = EXCLUDED.commit_seq"
                ),
                args,
            )?;
        }
    }
    Ok(())
}
