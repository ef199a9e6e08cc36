//! The set-based log statements of one captured statement (issue 9): its
//! changes, their commit→scope index entries, the row-scope index and the
//! tombstones, all read from the statement's transition table in a handful
//! of statements whatever the row count (a 100,000-row `COPY` is not
//! 100,000 round trips). The commit header, the `commitSeq` and the NOTIFY
//! come from the same store functions a pushed commit uses.
//!
//! The transition table is registered with SPI by the caller
//! ([`with_transition_tables`]) under the names the capture triggers declare:
//! [`NEW_TABLE`] (INSERT, UPDATE) and [`OLD_TABLE`] (DELETE). Each has the app
//! table's columns, so `_sync_row_id`, `_sync_version`, `_sync_scopes` and
//! `_sync_payload` are the values the row trigger computed.

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::spi::{quote_identifier, quote_literal, Spi, SpiClient};

use crate::store::plan_cache;
use crate::store::{StoreError, StoreResult};

/// Transition table of inserted / updated rows (`REFERENCING NEW TABLE AS`).
pub const NEW_TABLE: &str = "syncular_new_rows";
/// Transition table of deleted rows (`REFERENCING OLD TABLE AS`).
pub const OLD_TABLE: &str = "syncular_old_rows";

/// What a captured statement did to its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapturedOp {
    /// Rows inserted (new row ids: scope entries added, tombstones cleared).
    Insert,
    /// Rows updated (scopes are immutable, so no index change).
    Update,
    /// Rows deleted (scope entries removed, tombstones written).
    Delete,
}

/// Runs `f` with an SPI connection on which the firing trigger's transition
/// tables are visible by name. Errors: SPI failures.
///
/// # Safety
/// `trigger_data` must be the `TriggerData` of the trigger call in progress.
pub unsafe fn with_transition_tables<T>(
    trigger_data: *mut pg_sys::TriggerData,
    f: impl FnOnce(&mut SpiClient<'_>) -> StoreResult<T>,
) -> StoreResult<T> {
    Spi::connect_mut(|client| {
        // SAFETY: called inside SPI_connect (Spi::connect_mut), with the live trigger data.
        let rc = unsafe { pg_sys::SPI_register_trigger_data(trigger_data) };
        if rc < 0 {
            return Err(StoreError::new("register_trigger_data", format!("SPI_register_trigger_data returned {rc}")));
        }
        f(client)
    })
}

/// Runs one log statement through the backend's kept plans
/// ([`plan_cache`]). A plan over a transition table is bound to that table's
/// column numbers, so `plan_key` (naming the app table and schema version)
/// prefixes the SQL text: each app table and layout gets its own plans.
fn run(client: &mut SpiClient<'_>, plan_key: &str, statement: &'static str, sql: &str, args: &[DatumWithOid<'_>]) -> StoreResult<()> {
    plan_cache::execute(client, &format!("/* {plan_key} */ {sql}"), None, args)
        .map(|_| ())
        .map_err(StoreError::spi(statement))
}

/// How many rows of the statement's transition table (`op`'s) are not in
/// `partition` — 0 unless the partition setting changed mid-statement (a
/// nested statement). Errors: SPI failures.
pub fn rows_outside_partition(client: &mut SpiClient<'_>, plan_key: &str, partition: &str, op: CapturedOp) -> StoreResult<i64> {
    let source = if op == CapturedOp::Delete { OLD_TABLE } else { NEW_TABLE };
    plan_cache::execute(
        client,
        &format!("/* {plan_key} */ SELECT count(*) FROM {source} t WHERE t._sync_partition IS DISTINCT FROM $1"),
        Some(1),
        &[DatumWithOid::from(partition)],
    )
    .and_then(|t| t.first().get_one::<i64>())
    .map(Option::unwrap_or_default)
    .map_err(StoreError::spi("capture_rows_outside_partition"))
}

/// Writes the log rows of one captured statement as commit `commit_seq` of
/// `partition`, table `tbl`: one change per transition-table row in its order
/// (`idx` from 0), the distinct `(tbl, var, value)` change-scope entries, and
/// per `op` the row-scope entries and tombstones. `plan_key` identifies the
/// app table's layout (see [`run`]; no `*/` in it); `scope_columns` are its
/// `(variable, column)` pairs, read straight from the typed columns (the row
/// trigger checked they are non-empty strings). A new row's scope entries
/// are inserted without `ON CONFLICT`: deletes remove a row's entries, so a
/// conflict means the index was edited behind the engine's back — the
/// statement fails rather than guess. Errors: SPI failures.
pub fn write_statement_log(
    client: &mut SpiClient<'_>,
    plan_key: &str,
    partition: &str,
    commit_seq: i64,
    tbl: &str,
    op: CapturedOp,
    scope_columns: &[(String, String)],
) -> StoreResult<()> {
    let args = [DatumWithOid::from(partition), DatumWithOid::from(commit_seq), DatumWithOid::from(tbl)];
    // `t` → its scope entries `s(key, value)`, one per declared variable.
    let scopes = scope_columns
        .iter()
        .map(|(var, column)| format!("({}, t.{}::text)", quote_literal(var), quote_identifier(column)))
        .collect::<Vec<_>>()
        .join(", ");
    let scopes = format!("CROSS JOIN LATERAL (VALUES {scopes}) AS s(key, value)");
    let source = if op == CapturedOp::Delete { OLD_TABLE } else { NEW_TABLE };
    let change_select = if op == CapturedOp::Delete {
        format!(
            "SELECT $1, $2, (row_number() OVER () - 1)::int4, $3, t._sync_row_id, 2::int2, NULL::int8, t._sync_scopes, NULL::bytea \
             FROM {OLD_TABLE} t"
        )
    } else {
        format!(
            "SELECT $1, $2, (row_number() OVER () - 1)::int4, $3, t._sync_row_id, 1::int2, t._sync_version, t._sync_scopes, t._sync_payload \
             FROM {NEW_TABLE} t"
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
        return write_row_index(client, plan_key, op, &args);
    }
    run(
        client,
        plan_key,
        "capture_change_scopes",
        &format!(
            "INSERT INTO syncular.sync_change_scopes (partition, tbl, var, value, commit_seq) \
             SELECT DISTINCT $1, $3, s.key, s.value, $2::int8 FROM {source} t {scopes} \
             ON CONFLICT DO NOTHING"
        ),
        &args,
    )?;
    if op == CapturedOp::Insert {
        run(
            client,
            plan_key,
            "capture_row_scopes",
            &format!(
                "INSERT INTO syncular.sync_row_scopes (partition, tbl, var, value, row_id) \
                 SELECT $1, $3, s.key, s.value, t._sync_row_id FROM {NEW_TABLE} t {scopes}"
            ),
            &args,
        )?;
    }
    write_row_index(client, plan_key, op, &args)
}

/// The tombstones (insert: cleared; delete: written) and, for a delete, the
/// removal of the rows' scope entries.
fn write_row_index(client: &mut SpiClient<'_>, plan_key: &str, op: CapturedOp, args: &[DatumWithOid<'_>]) -> StoreResult<()> {
    match op {
        CapturedOp::Insert => {
            run(
                client,
                plan_key,
                "capture_clear_tombstones",
                &format!(
                    "DELETE FROM syncular.sync_tombstones d USING {NEW_TABLE} t \
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
                &format!(
                    "DELETE FROM syncular.sync_row_scopes r USING {OLD_TABLE} t \
                     WHERE r.partition = $1 AND r.tbl = $3 AND r.row_id = t._sync_row_id"
                ),
                args,
            )?;
            run(
                client,
                plan_key,
                "capture_tombstones",
                &format!(
                    "INSERT INTO syncular.sync_tombstones (partition, tbl, row_id, commit_seq) \
                     SELECT $1, $3, t._sync_row_id, $2 FROM {OLD_TABLE} t \
                     ON CONFLICT (partition, tbl, row_id) DO UPDATE SET commit_seq = EXCLUDED.commit_seq"
                ),
                args,
            )?;
        }
    }
    Ok(())
}
