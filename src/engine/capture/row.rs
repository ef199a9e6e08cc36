//! The per-row half of the capture (module docs of [`super`]): what a plain
//! SQL write stores in the computed columns, and what it may not do.

use std::collections::BTreeMap;

use serde_json::Value;
use syncular_protocol::row_codec::{decode_row, encode_row, identical, ColumnType, Row, RowValue};
use syncular_protocol::ErrorCode;

use super::CaptureTable;
use crate::engine::column_versions::ColumnVersions;
use crate::engine::crdt;
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::store::app_table_ddl::{PARTITION_COLUMN, ROW_ID_COLUMN};

/// The storage columns of a row as the statement gave them (insert) or as
/// they are stored (update, delete).
#[derive(Debug, Clone, Default)]
pub struct RowStorage {
    /// `_sync_partition`.
    pub partition: Option<String>,
    /// `_sync_row_id`.
    pub row_id: Option<String>,
    /// `_sync_version`.
    pub version: Option<i64>,
    /// `_sync_scopes` is not NULL.
    pub scopes_set: bool,
    /// `_sync_payload` is not NULL.
    pub payload_set: bool,
    /// `_sync_column_versions` as given (insert) or stored (update).
    pub column_versions: Option<Vec<u8>>,
}

/// The computed columns of an inserted row.
#[derive(Debug, Clone)]
pub struct Inserted {
    /// `_sync_row_id`: the rendered primary key (§2.2).
    pub row_id: String,
    /// `_sync_version`: 1.
    pub version: i64,
    /// `_sync_scopes`: `{"variable": "value", …}`.
    pub scopes: Value,
    /// `_sync_payload`: the row-codec payload of the typed columns.
    pub payload: Vec<u8>,
    /// The row `payload` encodes (crdt values merged).
    pub row: Row,
    /// `crdt` columns (layout position) whose merged value differs from the
    /// written one: the trigger stores the merged bytes (§5.10.3).
    pub merged: Vec<(usize, Vec<u8>)>,
}

/// The computed columns of an updated row.
#[derive(Debug, Clone)]
pub struct Updated {
    /// `_sync_version`: the stored one + 1.
    pub version: i64,
    /// `_sync_payload` re-encoded from the new typed columns.
    pub payload: Vec<u8>,
    /// `_sync_column_versions`: the columns whose value the statement
    /// changed move to `version`, the others keep theirs
    /// ([`crate::engine::column_versions`]).
    pub column_versions: Option<Vec<u8>>,
    /// The row `payload` encodes (with the values only the payload held,
    /// crdt values merged).
    pub row: Row,
    /// `crdt` columns (layout position) whose merged value differs from the
    /// written one: the trigger stores the merged bytes (§5.10.3).
    pub merged: Vec<(usize, Vec<u8>)>,
}

fn refused(message: String) -> EngineError {
    EngineError::host(HostCode::WriteRefused, message)
}

/// The refusal of an app trigger's rewrite of computed column `column` of a
/// row the engine writes (docs "What your own triggers may do").
pub fn refused_rewrite(tbl: &str, column: &str) -> EngineError {
    refused(format!("a trigger on synced table {tbl:?} rewrote {column} while the engine wrote the row: computed columns are the engine's"))
}

fn invalid_row(message: String) -> EngineError {
    EngineError::host(HostCode::InvalidRow, message)
}

/// Refuses a row of another partition than `syncular.partition`.
fn check_partition(t: &CaptureTable, stored: &RowStorage, verb: &str) -> EngineResult<()> {
    match stored.partition.as_deref() {
        Some(p) if p == t.partition => Ok(()),
        other => Err(refused(format!(
            "{verb} of synced table {:?} touches a row of partition {:?} while syncular.partition is {:?}: a statement writes one partition (add WHERE {PARTITION_COLUMN} = current_setting('syncular.partition'))",
            t.name(),
            other.unwrap_or(""),
            t.partition
        ))),
    }
}

/// Encodes `row` (the bytes a client would push), refusing values the codec
/// cannot carry (`syncular.invalid_row`).
fn encode(t: &CaptureTable, row: &Row) -> EngineResult<Vec<u8>> {
    let table = &t.registered().table;
    encode_row(table.layout(), row)
        .map_err(|e| invalid_row(format!("a row of synced table {:?} cannot be encoded for clients: {}", t.name(), e.message)))
}

/// §5.10.3 as for a push: every non-NULL `crdt` value of `row` that `skip`
/// does not exclude becomes `merge(stored, value)`; returns the columns
/// whose value changed with their merged bytes (the trigger writes them
/// back into the typed columns). Errors: `sync.crdt_merge_failed`.
fn merge_crdt(
    t: &CaptureTable,
    row: &mut Row,
    stored: Option<&Row>,
    skip: &dyn Fn(usize) -> bool,
) -> EngineResult<Vec<(usize, Vec<u8>)>> {
    let table = &t.registered().table;
    let changed = crdt::merge_row(table, row, stored, skip)
        .map_err(|f| EngineError::protocol(ErrorCode::CrdtMergeFailed, f.describe(t.name())))?;
    Ok(changed
        .into_iter()
        .filter_map(|i| match &row[i] {
            Some(RowValue::Crdt(b)) => Some((i, b.clone())),
            _ => None,
        })
        .collect())
}

/// Stored scopes of `row`: every declared variable's column value, which
/// must be a non-empty string (§3.1).
fn scopes_of(t: &CaptureTable, row: &Row) -> EngineResult<BTreeMap<String, String>> {
    let table = &t.registered().table;
    let mut out = BTreeMap::new();
    for (variable, value) in table.stored_scopes(row) {
        match value.filter(|v| !v.is_empty()) {
            Some(v) => {
                out.insert(variable.to_owned(), v.to_owned());
            }
            None => {
                let column = table.scope(variable).map_or(variable, |s| s.column.as_str());
                return Err(invalid_row(format!(
                    "a row of synced table {:?} needs scope column {column:?} (variable {variable:?}): it is NULL or empty",
                    t.name()
                )));
            }
        }
    }
    Ok(out)
}

/// The computed columns of a row inserted with typed values `row` (its crdt
/// values merged against the empty document, §5.10.3) and the
/// storage columns `given` (which must be absent, or equal to what would be
/// computed for the partition and row id). Errors: `syncular.write_refused`
/// (computed columns written, another partition, a mismatching row id),
/// `syncular.invalid_row`, `sync.crdt_merge_failed`.
pub fn insert_row(t: &CaptureTable, mut row: Row, given: &RowStorage) -> EngineResult<Inserted> {
    let tbl = t.name();
    if given.version.is_some() || given.scopes_set || given.payload_set || given.column_versions.is_some() {
        return Err(refused(format!(
            "INSERT into synced table {tbl:?} writes _sync_version, _sync_scopes, _sync_payload or _sync_column_versions: they are computed from the typed columns — leave them out"
        )));
    }
    if given.partition.is_some() {
        check_partition(t, given, "INSERT")?;
    }
    let merged = merge_crdt(t, &mut row, None, &|_| false)?;
    let payload = encode(t, &row)?;
    let table = &t.registered().table;
    let row_id = table.row_id(&row).ok_or_else(|| {
        invalid_row(format!("a row of synced table {tbl:?} needs its primary key column {:?}: it is NULL", table.primary_key))
    })?;
    if let Some(given_id) = given.row_id.as_deref().filter(|g| *g != row_id) {
        return Err(refused(format!(
            "INSERT into synced table {tbl:?} writes {ROW_ID_COLUMN} {given_id:?}, but it is derived from the primary key ({row_id:?}) — leave it out"
        )));
    }
    let scopes = scopes_of(t, &row)?;
    Ok(Inserted {
        row_id,
        version: 1,
        scopes: Value::Object(scopes.into_iter().map(|(k, v)| (k, Value::String(v))).collect()),
        payload,
        row,
        merged,
    })
}

/// The computed columns of a row updated from `old` to `new` (typed values),
/// `stored` its storage columns and `changed` the storage columns the
/// statement itself changed. `old_payload` (the stored payload, when some
/// column is NULL in both `old` and `new`) supplies the values only the
/// payload holds — a `json` or `string` value Postgres cannot store projects
/// as NULL — so updating other columns keeps them. Errors: `syncular.write_refused` (a computed
/// column written, a scope or primary-key column changed — §3.4 rule 5 —, a
/// row of another partition), `syncular.invalid_row`, `sync.crdt_merge_failed`.
pub fn update_row(
    t: &CaptureTable,
    old: &Row,
    mut new: Row,
    stored: &RowStorage,
    changed: &[&str],
    old_payload: Option<&[u8]>,
) -> EngineResult<Updated> {
    let tbl = t.name();
    check_partition(t, stored, "UPDATE")?;
    if let Some(column) = changed.first() {
        return Err(refused(format!(
            "UPDATE of synced table {tbl:?} writes {column}: the _sync_* columns are computed from the typed columns"
        )));
    }
    let table = &t.registered().table;
    let columns = &table.layout().columns;
    if old.get(table.primary_key_index) != new.get(table.primary_key_index) {
        return Err(refused(format!(
            "UPDATE of synced table {tbl:?} changes primary key column {:?}: a row's id is immutable — DELETE it and INSERT the new one",
            table.primary_key
        )));
    }
    for scope in &table.scopes {
        let i = scope.column_index;
        if old.get(i) != new.get(i) {
            return Err(refused(format!(
                "UPDATE of synced table {tbl:?} changes scope column {:?}: scope columns are immutable (§3.4 rule 5) — DELETE the row and INSERT it with the new scope to move it",
                columns[i].name
            )));
        }
    }
    // Which values the statement changed, from the typed columns before the payload-only
    // values are restored below (NULL in both = kept, not changed).
    let moved: Vec<bool> = old.iter().zip(&new).map(|(o, n)| !identical(o, n)).collect();
    if let Some(bytes) = old_payload {
        let before = decode_row(table.layout(), bytes)
            .map_err(|e| EngineError::internal(format!("stored payload of a row of {tbl:?} does not decode: {}", e.message)))?;
        for ((slot, was), kept) in new.iter_mut().zip(old).zip(before) {
            if slot.is_none() && was.is_none() {
                *slot = kept;
            }
        }
    }
    // A crdt column the statement left as it was is not merged again.
    let unchanged: Vec<usize> = columns
        .iter()
        .enumerate()
        .filter(|(i, c)| c.ty == ColumnType::Crdt && old.get(*i) == new.get(*i))
        .map(|(i, _)| i)
        .collect();
    let merged = merge_crdt(t, &mut new, Some(old), &|i| unchanged.contains(&i))?;
    let payload = encode(t, &new)?;
    let stored_version = stored.version.unwrap_or(0);
    let version = stored_version.checked_add(1).ok_or_else(|| invalid_row(format!("row version overflow in {tbl:?}")))?;
    // The columns whose value the statement changed move to the new version; the others
    // keep theirs.
    let versions = ColumnVersions::read_or_reset(
        stored.column_versions.as_deref(),
        stored_version,
        format_args!("a row of {tbl:?}"),
    );
    let column_versions = versions.next(columns.len(), table.primary_key_index, version, |i| moved.get(i).copied().unwrap_or(false));
    Ok(Updated { version, payload, column_versions, row: new, merged })
}

/// Checks a deleted row (stored columns `stored`). Errors:
/// `syncular.write_refused` (a row of another partition).
pub fn delete_row(t: &CaptureTable, stored: &RowStorage) -> EngineResult<()> {
    check_partition(t, stored, "DELETE")
}

/// An engine-written row as a user trigger left it ([`stored_truth`]).
#[derive(Debug, Clone)]
pub struct Rewritten {
    /// The row the table holds.
    pub row: Row,
    /// Its payload.
    pub payload: Vec<u8>,
    /// The columns (layout positions) the trigger changed.
    pub changed: Vec<usize>,
}

/// What the table holds for a row the engine wrote itself, when a user
/// BEFORE ROW trigger ran before the capture's and may have rewritten its
/// typed columns (docs/src/guide/plain-sql.md "Writing with plain SQL", "What your own triggers
/// may do"): `actual` the typed values as stored, `payload` the payload the
/// engine wrote, `same` whether a payload value projects to a typed value
/// (`json` compares as `jsonb` does). A column keeps the payload's value
/// when its typed value is that value's projection (also a value only the
/// payload can hold: NULL in the column); any other typed value is the
/// trigger's and replaces it. Returns the row, its payload and the columns
/// the trigger changed when there is one, `None` when the payload already
/// is what the table holds.
/// Errors: `syncular.invalid_row` (the rewritten row cannot be encoded),
/// `syncular.internal` (the engine's payload does not decode).
pub fn stored_truth(
    t: &CaptureTable,
    actual: &Row,
    payload: &[u8],
    same: &dyn Fn(&RowValue, &RowValue) -> bool,
) -> EngineResult<Option<Rewritten>> {
    let table = &t.registered().table;
    let mut row = decode_row(table.layout(), payload).map_err(|e| {
        EngineError::internal(format!("the engine's payload for a row of {:?} does not decode: {}", t.name(), e.message))
    })?;
    let mut changed = Vec::new();
    for (i, (slot, typed)) in row.iter_mut().zip(actual).enumerate() {
        let kept = match (&*slot, typed) {
            (None, None) => true,
            (Some(v), Some(a)) => same(v, a),
            (Some(v), None) => crate::store::app_rows::projects_as_null(v),
            (None, Some(_)) => false,
        };
        if !kept {
            slot.clone_from(typed);
            changed.push(i);
        }
    }
    if changed.is_empty() {
        return Ok(None);
    }
    let payload = encode(t, &row)?;
    Ok(Some(Rewritten { row, payload, changed }))
}

/// The stored scopes of a row the engine wrote, after a user trigger
/// rewrote it to `row` (see [`stored_truth`]); `written` the scopes the
/// engine wrote, `update` whether the row existed. Errors:
/// `syncular.write_refused` (a trigger moved an updated row to other scopes
/// — scope columns are immutable, §3.4 rule 5 — or changed the primary key),
/// `syncular.invalid_row` (a scope column NULL or empty).
pub fn restamped_scopes(
    t: &CaptureTable,
    row: &Row,
    row_id: &str,
    written: &BTreeMap<String, String>,
    update: bool,
) -> EngineResult<BTreeMap<String, String>> {
    let tbl = t.name();
    if t.registered().table.row_id(row).as_deref() != Some(row_id) {
        return Err(refused(format!(
            "a trigger on synced table {tbl:?} changed the primary key of row {row_id:?} while the engine wrote it: a row's id is immutable"
        )));
    }
    let scopes = scopes_of(t, row)?;
    if update && scopes != *written {
        return Err(refused(format!(
            "a trigger on synced table {tbl:?} changed a scope column of row {row_id:?} on update: scope columns are immutable (§3.4 rule 5)"
        )));
    }
    Ok(scopes)
}

/// The `_sync_column_versions` of an updated row the engine wrote at
/// `version` (`written` its value) after a user trigger also changed the
/// columns `changed`: they move to `version` too.
pub fn restamped_column_versions(t: &CaptureTable, written: Option<&[u8]>, version: i64, changed: &[usize]) -> Option<Vec<u8>> {
    let table = &t.registered().table;
    ColumnVersions::read_or_reset(written, version, format_args!("a row of {:?}", t.name())).next(
        table.layout().columns.len(),
        table.primary_key_index,
        version,
        |i| changed.contains(&i),
    )
}
