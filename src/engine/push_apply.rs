//! Applying one push operation (SPEC §6.1, §6.2, §3.4, §2.2, §5.10.3) inside
//! the commit's subtransaction: the authorization row, the version check,
//! the scope-column strip, the app-row and scope-index writes, and the change
//! the operation emits. The first non-applied operation terminates the
//! commit with its result record (the caller rolls the commit back).
//!
//! Order per operation (the reference server's): unknown table →
//! resolver denied → read the stored row →
//! - delete: absent row ⇒ applied, no change, no authorization; else
//!   authorize the STORED row's scopes (`sync.forbidden`), delete row and
//!   its scope entries, emit a delete tagged with the stored scopes;
//! - upsert: payload decode (`sync.invalid_request`), primary key = `rowId`
//!   (`sync.invalid_request`); existing row ⇒ authorize the STORED row,
//!   `baseVersion` 0 or ≠ stored version ⇒ `conflict` carrying the stored
//!   row, strip the scope columns back to the stored values (re-encoding the
//!   payload when that changed it), crdt check, write version + 1;
//!   absent row ⇒ `baseVersion ≠ 0` ⇒ authorize the payload then
//!   `sync.row_missing`; else authorize the payload's scopes, crdt check,
//!   write version 1 and the row's scope entries.
//!
//! A non-null value for a `crdt` column is `sync.crdt_merge_failed` (no
//! merger registry exists yet, §5.10.6).

use std::cell::Cell;
use std::collections::BTreeMap;

use syncular_protocol::frame_fields::Op;
use syncular_protocol::request::Operation;
use syncular_protocol::row_codec::{decode_row, encode_row, ColumnType, Row};
use syncular_protocol::schema_ir::TableSchema;
use syncular_protocol::scopes::authorize_write;
use syncular_protocol::ErrorCode;

use crate::engine::context::SyncContext;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::push_result::StoredOpResult;
use crate::engine::resolver::Allowed;
use crate::engine::schema::RegisteredTable;
use crate::store::app_rows::{self, AppRowWrite, AppTableSql};
use crate::store::row_scopes;

/// A change staged by an applied operation (§2.2), written to the log once
/// the commit's `commitSeq` is allocated.
#[derive(Debug, Clone)]
pub struct StagedChange {
    pub table: String,
    pub row_id: String,
    pub op: Op,
    /// `server_version` after the write (upserts).
    pub row_version: Option<i64>,
    /// Stored scopes (variable → value) of the row (delete: before removal).
    pub scopes: BTreeMap<String, String>,
    /// Row-codec payload after the write (upserts).
    pub payload: Option<Vec<u8>>,
    /// True for an upsert that inserted a row absent before (its tombstone,
    /// if any, is cleared when the commit is recorded).
    pub inserted: bool,
}

/// How one operation ended: applied (maybe with a change) or terminated
/// with its result record.
pub type OpOutcome = Result<Option<StagedChange>, StoredOpResult>;

/// The compiled table behind a registered table.
pub fn table_schema(t: &RegisteredTable) -> &TableSchema {
    &t.table
}

/// The store's view of a registered table's app table: quoted qualified
/// name and the projection columns (quoted, typed as `register_schema`
/// created them) in layout order.
pub fn app_table_sql(t: &RegisteredTable) -> AppTableSql {
    AppTableSql::for_table(&t.qualified_name, table_schema(t))
}

fn allowed_map(allowed: &Allowed) -> Option<&BTreeMap<String, Vec<String>>> {
    match allowed {
        Allowed::Map(m) => Some(m),
        Allowed::Denied { .. } => None,
    }
}

/// Stored scopes as JSON text `{"variable":"value",…}` (sorted keys).
pub fn scopes_json(scopes: &BTreeMap<String, String>) -> String {
    serde_json::to_string(scopes).unwrap_or_else(|_| "{}".to_owned())
}

/// Parses a stored `_sync_scopes` object; non-string values are dropped (the
/// authorization then denies the missing variable).
fn parse_stored_scopes(text: &str) -> BTreeMap<String, String> {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(text) else {
        return BTreeMap::new();
    };
    map.into_iter()
        .filter_map(|(k, v)| match v {
            serde_json::Value::String(s) => Some((k, s)),
            _ => None,
        })
        .collect()
}

fn authorize(
    table: &TableSchema,
    scopes: &BTreeMap<String, String>,
    allowed: &Allowed,
) -> Result<(), StoredOpResult> {
    let view: BTreeMap<&str, Option<&str>> =
        table.scopes.iter().map(|s| (s.variable.as_str(), scopes.get(&s.variable).map(String::as_str))).collect();
    Ok(())
        .and_then(|()| authorize_write(table, &view, allowed_map(allowed)))
        .map_err(|e| StoredOpResult::error(0, ErrorCode::Forbidden, e.message))
}

/// Scope values of a decoded row for every declared variable; `Err` names the
/// first variable whose column is NULL or empty.
fn extract_scopes(table: &TableSchema, row: &Row) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (variable, value) in table.stored_scopes(row) {
        match value.filter(|v| !v.is_empty()) {
            Some(v) => {
                out.insert(variable.to_owned(), v.to_owned());
            }
            None => return Err(variable.to_owned()),
        }
    }
    Ok(out)
}

fn with_index(r: StoredOpResult, op_index: i32) -> StoredOpResult {
    match r {
        StoredOpResult::Applied { .. } => StoredOpResult::Applied { op_index },
        StoredOpResult::Conflict { code, message, server_version, server_row, .. } => {
            StoredOpResult::Conflict { op_index, code, message, server_version, server_row }
        }
        StoredOpResult::Error { code, message, retryable, .. } => {
            StoredOpResult::Error { op_index, code, message, retryable }
        }
    }
}

fn crdt_check(table: &TableSchema, row: &Row, op_index: i32) -> Result<(), StoredOpResult> {
    for (i, col) in table.layout().columns.iter().enumerate() {
        if col.ty == ColumnType::Crdt && matches!(row.get(i), Some(Some(_))) {
            return Err(StoredOpResult::error(
                op_index,
                ErrorCode::CrdtMergeFailed,
                format!(
                    "column {:?} of table {:?} is a crdt column and this server has no merger for it (§5.10.6)",
                    col.name, table.name
                ),
            ));
        }
    }
    Ok(())
}

/// Applies operation `op_index` of a commit. `writing` is set to the
/// operation index while app-table statements run, so a Postgres ERROR they
/// raise (unique violation, …) can be attributed to the operation.
/// `Ok(Err(record))` terminates the commit; `Err` is a request-level failure.
pub fn apply_operation(
    ctx: &SyncContext<'_>,
    op_index: i32,
    op: &Operation,
    writing: &Cell<Option<i32>>,
) -> EngineResult<OpOutcome> {
    let Some(registered) = ctx.schema.table(&op.table) else {
        return Ok(Err(StoredOpResult::error(
            op_index,
            ErrorCode::UnknownTable,
            format!("table {:?} is not handled by this server", op.table),
        )));
    };
    if let Allowed::Denied { .. } = ctx.allowed {
        return Ok(Err(StoredOpResult::error(
            op_index,
            ErrorCode::Forbidden,
            "no allowed scopes for this actor (resolver failed or none configured, §3.4 step 4)",
        )));
    }
    let table = table_schema(registered);
    let sql = app_table_sql(registered);
    let partition = ctx.partition.as_str();
    let stored = app_rows::select_app_row(&sql, partition, &op.row_id)?;

    match op.op {
        Op::Delete => {
            let Some(stored) = stored else {
                // §6.2: deleting an absent row is applied, emits nothing.
                return Ok(Ok(None));
            };
            let scopes = parse_stored_scopes(&stored.scopes_json);
            if let Err(r) = authorize(table, &scopes, &ctx.allowed) {
                return Ok(Err(with_index(r, op_index)));
            }
            writing.set(Some(op_index));
            app_rows::delete_app_row(&sql, partition, &op.row_id)?;
            row_scopes::delete_row_scopes(partition, &table.name, &op.row_id)?;
            writing.set(None);
            Ok(Ok(Some(StagedChange {
                table: table.name.clone(),
                row_id: op.row_id.clone(),
                op: Op::Delete,
                row_version: None,
                scopes,
                payload: None,
                inserted: false,
            })))
        }
        Op::Upsert => {
            let Some(payload) = op.payload.as_deref() else {
                return Ok(Err(StoredOpResult::error(op_index, ErrorCode::InvalidRequest, "upsert without payload")));
            };
            let mut row = match decode_row(table.layout(), payload) {
                Ok(row) => row,
                Err(e) => {
                    return Ok(Err(StoredOpResult::error(
                        op_index,
                        ErrorCode::InvalidRequest,
                        format!("row payload failed row-codec decode (§1.7): {}", e.message),
                    )))
                }
            };
            if table.row_id(&row).as_deref() != Some(op.row_id.as_str()) {
                return Ok(Err(StoredOpResult::error(
                    op_index,
                    ErrorCode::InvalidRequest,
                    "payload primary key does not match rowId",
                )));
            }
            match stored {
                Some(stored) => {
                    let scopes = parse_stored_scopes(&stored.scopes_json);
                    if let Err(r) = authorize(table, &scopes, &ctx.allowed) {
                        return Ok(Err(with_index(r, op_index)));
                    }
                    if op.base_version.is_some_and(|b| b == 0 || b != stored.version) {
                        return Ok(Err(StoredOpResult::conflict(op_index, stored.version, &stored.payload)));
                    }
                    // §3.4 rule 5: scope columns keep their stored values.
                    let stored_row = decode_row(table.layout(), &stored.payload).map_err(|e| {
                        EngineError::internal(format!(
                            "stored payload of {:?}/{:?} does not decode: {}",
                            table.name, op.row_id, e.message
                        ))
                    })?;
                    let mut stripped = false;
                    for s in &table.scopes {
                        if row[s.column_index] != stored_row[s.column_index] {
                            row[s.column_index] = stored_row[s.column_index].clone();
                            stripped = true;
                        }
                    }
                    if let Err(r) = crdt_check(table, &row, op_index) {
                        return Ok(Err(r));
                    }
                    let new_payload = if stripped {
                        encode_row(table.layout(), &row).map_err(EngineError::from)?
                    } else {
                        payload.to_vec()
                    };
                    let version = stored.version + 1;
                    let scopes_text = scopes_json(&scopes);
                    writing.set(Some(op_index));
                    app_rows::upsert_app_row(
                        &sql,
                        &AppRowWrite {
                            partition,
                            row_id: &op.row_id,
                            values: &row,
                            version,
                            scopes_json: &scopes_text,
                            payload: &new_payload,
                        },
                    )?;
                    writing.set(None);
                    // The row's scopes are unchanged (rule 5): its sync_row_scopes entries stay.
                    Ok(Ok(Some(StagedChange {
                        table: table.name.clone(),
                        row_id: op.row_id.clone(),
                        op: Op::Upsert,
                        row_version: Some(version),
                        scopes,
                        payload: Some(new_payload),
                        inserted: false,
                    })))
                }
                None => {
                    let extracted = extract_scopes(table, &row);
                    let scopes = match extracted {
                        Ok(scopes) => scopes,
                        Err(variable) => {
                            return Ok(Err(StoredOpResult::error(
                                op_index,
                                ErrorCode::Forbidden,
                                format!(
                                    "insert into {:?} has no value for scope variable {variable:?} (§3.4)",
                                    table.name
                                ),
                            )))
                        }
                    };
                    if let Err(r) = authorize(table, &scopes, &ctx.allowed) {
                        return Ok(Err(with_index(r, op_index)));
                    }
                    if op.base_version.is_some_and(|b| b != 0) {
                        return Ok(Err(StoredOpResult::error(
                            op_index,
                            ErrorCode::RowMissing,
                            "upsert with a non-zero baseVersion targets an absent row (§6.2)",
                        )));
                    }
                    if let Err(r) = crdt_check(table, &row, op_index) {
                        return Ok(Err(r));
                    }
                    let scopes_text = scopes_json(&scopes);
                    let entries: Vec<(String, String)> =
                        scopes.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    writing.set(Some(op_index));
                    app_rows::upsert_app_row(
                        &sql,
                        &AppRowWrite {
                            partition,
                            row_id: &op.row_id,
                            values: &row,
                            version: 1,
                            scopes_json: &scopes_text,
                            payload,
                        },
                    )?;
                    writing.set(None);
                    row_scopes::delete_row_scopes(partition, &table.name, &op.row_id)?;
                    row_scopes::insert_row_scopes(partition, &table.name, &op.row_id, &entries)?;
                    Ok(Ok(Some(StagedChange {
                        table: table.name.clone(),
                        row_id: op.row_id.clone(),
                        op: Op::Upsert,
                        row_version: Some(1),
                        scopes,
                        payload: Some(payload.to_vec()),
                        inserted: true,
                    })))
                }
            }
        }
    }
}
