//! Server-authored commits from SQL (SPEC §6.10, DESIGN §2
//! `syncular.commit`): the same authorization, conflict, validation,
//! atomicity, idempotency, commit-log and NOTIFY path as a replica's push —
//! only the operations arrive as JSON rows instead of row-codec payloads.
//!
//! Input `operations`: a JSON array of
//! `{"table": "tasks", "op": "upsert", "row": {"id": "t1", …}, "baseVersion": 3?}`,
//! `{"table": "tasks", "op": "patch", "row": {"id": "t1", "title": "…"}, "baseVersion": 3?}`
//! or `{"table": "tasks", "op": "delete", "rowId": "t1"}` (an upsert's
//! `rowId` defaults to its rendered primary key). An `upsert` row is the
//! whole row (a missing column is NULL); a `patch` row names the primary key
//! and the columns it changes — the others keep their stored values — and
//! needs the row to exist (`sync.row_missing`). Each operation follows the
//! rules of its payload form ([`crate::engine::push::apply::PayloadForm`]):
//! an `upsert` SPEC 0.15.48 §6.2 (a full row), a `patch` the wire-version-3
//! rules (a sparse row: column-level conflicts with `conflictColumns`),
//! whatever else the commit holds.
//! Output: the commit's result as JSON,
//! `{"clientId", "clientCommitId", "status": "applied"|"cached"|"rejected",
//!   "commitSeq"?, "results": [{"opIndex", "status": "applied"} |
//!   {"opIndex", "status": "conflict", "code", "message", "serverVersion",
//!    "serverRow": {column: value, …}, "conflictColumns"?: [column, …]} |
//!   {"opIndex", "status": "error", "code", "message", "retryable"}]}`.

use serde_json::{json, Map, Value};
use syncular_protocol::bitmap;
use syncular_protocol::frame_fields::Op;
use syncular_protocol::request::{Operation, PushCommit};
use syncular_protocol::response::{OpResult, PushStatus};
use syncular_protocol::row_codec::{decode_row, encode_row, render_row, row_from_json, Row};
use syncular_protocol::sparse_row::{encode_sparse_row, sparse_row_from_json, SparseSlot};
use syncular_protocol::{ErrorCode, ProtocolError};

use crate::engine::context::SyncContext;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::push::apply::{table_schema, PayloadForm};
use crate::engine::auth::caller::{check_caller, resolve_allowed, Caller};
use crate::engine::auth::client_id::bind_client_id;
use crate::engine::schema::RegisteredSchema;
use crate::engine::storable::{preview, unstorable};
use crate::engine::{clock, partition, push};
use crate::store::log;

/// Wire version recorded for a SQL producer's client record.
const SQL_PRODUCER_WIRE_VERSION: u16 = 2;

fn invalid(message: impl Into<String>) -> EngineError {
    EngineError::Protocol(ProtocolError::invalid(message))
}

fn str_field<'v>(op: &'v Map<String, Value>, key: &str, i: usize) -> EngineResult<Option<&'v str>> {
    match op.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(invalid(format!(
            "operations[{i}].{key} must be a string, got {other}"
        ))),
    }
}

/// Parses the JSON operations into push operations (payloads encoded with
/// the registered row codec: a full row for an `upsert`, a sparse row for a
/// `patch`) and the payload form of each. Errors: `sync.invalid_request`
/// naming the operation; `sync.empty_commit` for an empty array.
pub fn parse_operations(
    schema: &RegisteredSchema,
    operations: &Value,
) -> EngineResult<(Vec<Operation>, Vec<PayloadForm>)> {
    let items = operations
        .as_array()
        .ok_or_else(|| invalid(format!("operations must be a JSON array, got {operations}")))?;
    if items.is_empty() {
        return Err(EngineError::protocol(
            ErrorCode::EmptyCommit,
            "a commit needs at least one operation (§6.1)",
        ));
    }
    let mut out = Vec::with_capacity(items.len());
    let mut forms = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let op = item
            .as_object()
            .ok_or_else(|| invalid(format!("operations[{i}] must be an object")))?;
        let table = str_field(op, "table", i)?
            .ok_or_else(|| invalid(format!("operations[{i}].table is required")))?;
        let base_version = match op.get("baseVersion") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_i64().ok_or_else(|| {
                invalid(format!("operations[{i}].baseVersion must be an integer"))
            })?),
        };
        let row_id = str_field(op, "rowId", i)?;
        let kind = str_field(op, "op", i)?.unwrap_or("upsert");
        forms.push(if kind == "patch" { PayloadForm::Sparse } else { PayloadForm::Full });
        match kind {
            "delete" => out.push(Operation {
                table: table.to_owned(),
                row_id: row_id
                    .ok_or_else(|| invalid(format!("operations[{i}]: a delete needs rowId")))?
                    .to_owned(),
                op: Op::Delete,
                base_version,
                payload: None,
            }),
            "upsert" | "patch" => {
                let row_json = op
                    .get("row")
                    .ok_or_else(|| invalid(format!("operations[{i}]: an upsert needs row")))?;
                let Some(registered) = schema.table(table) else {
                    // Commit-level sync.unknown_table, decided by the push path.
                    out.push(Operation {
                        table: table.to_owned(),
                        row_id: row_id.unwrap_or_default().to_owned(),
                        op: Op::Upsert,
                        base_version,
                        payload: Some(Vec::new()),
                    });
                    continue;
                };
                let t = table_schema(registered);
                let bad_row = |e: ProtocolError| invalid(format!("operations[{i}].row: {}", e.message));
                // An upsert is the whole row (a missing column is NULL); a patch the columns it
                // names (a named null is a present NULL).
                let (row, payload) = if kind == "upsert" {
                    let row = row_from_json(t.layout(), row_json).map_err(bad_row)?;
                    let payload = encode_row(t.layout(), &row).map_err(bad_row)?;
                    (row, payload)
                } else {
                    let slots = sparse_row_from_json(t.layout(), row_json).map_err(bad_row)?;
                    let payload = encode_sparse_row(t.layout(), t.primary_key_index, &slots).map_err(bad_row)?;
                    (slots.into_iter().map(SparseSlot::into_value).collect::<Row>(), payload)
                };
                let row_id = match (row_id, t.row_id(&row)) {
                    (Some(given), _) => given.to_owned(),
                    (None, Some(pk)) => pk,
                    (None, None) => {
                        return Err(invalid(format!(
                            "operations[{i}].row has no primary key value"
                        )))
                    }
                };
                out.push(Operation {
                    table: table.to_owned(),
                    row_id,
                    op: Op::Upsert,
                    base_version,
                    payload: Some(payload),
                });
            }
            other => {
                return Err(invalid(format!(
                    "operations[{i}].op must be \"upsert\", \"patch\" or \"delete\", got {other:?}"
                )))
            }
        }
    }
    Ok((out, forms))
}

fn result_json(schema: &RegisteredSchema, ops: &[Operation], r: &OpResult) -> Value {
    match r {
        OpResult::Applied { op_index } => json!({"opIndex": op_index, "status": "applied"}),
        OpResult::Error {
            op_index,
            code,
            message,
            retryable,
        } => {
            json!({"opIndex": op_index, "status": "error", "code": code, "message": message, "retryable": retryable})
        }
        OpResult::Conflict {
            op_index,
            code,
            message,
            server_version,
            server_row,
            conflict_columns,
        } => {
            let layout = usize::try_from(*op_index)
                .ok()
                .and_then(|i| ops.get(i))
                .and_then(|op| schema.table(&op.table))
                .map(|t| table_schema(t).layout());
            let rendered = layout
                .and_then(|layout| decode_row(layout, server_row).ok().map(|row| render_row(layout, &row)))
                .unwrap_or(Value::Null);
            let mut out = json!({"opIndex": op_index, "status": "conflict", "code": code, "message": message,
                   "serverVersion": server_version, "serverRow": rendered});
            if let Some(layout) = layout.filter(|_| !conflict_columns.is_empty()) {
                let names: Vec<&str> =
                    bitmap::set_bits(conflict_columns, layout.len()).map(|i| layout.columns[i].name.as_str()).collect();
                out["conflictColumns"] = json!(names);
            }
            out
        }
    }
}

/// Applies one server-authored commit for `caller` and returns its result
/// JSON (module docs). `client_id` defaults to `"sql:<actor_id>"`,
/// `client_commit_id` to a fresh UUID (no idempotency across calls then);
/// a repeated `(client_id, client_commit_id)` replays the stored outcome.
/// Errors (request-level): `sync.invalid_request`, `sync.empty_commit`,
/// `sync.invalid_client_id`, `sync.too_many_operations`,
/// `sync.invalid_subscription` (allowed-map keys), `syncular.no_schema`.
pub fn run(
    caller: &Caller<'_>,
    client_id: Option<&str>,
    client_commit_id: Option<&str>,
    operations: &Value,
) -> EngineResult<Value> {
    check_caller(caller)?;
    let now_ms = clock::now_ms()?;
    // A schema change waits for this commit, or this commit reads the changed
    // marker (schema_store::SCHEMA_FENCE_CLASS).
    let schema = crate::engine::schema::require_fenced_schema()?;
    let schema: &RegisteredSchema = &schema;
    // A drop batch of the partition waits for this commit, or this commit for it.
    crate::store::lifecycle::fence::share_writes(caller.partition);
    let registry = partition::touch(caller.partition, now_ms)?;
    let client_id = match client_id {
        Some(id) => id.to_owned(),
        // No client id passed: an error names the default, not a clientId the caller never sent.
        None => {
            let default = format!("sql:{}", caller.actor_id);
            if let Some(why) = unstorable(&default) {
                return Err(invalid(format!("client_id defaults to \"sql:\" + actor_id, which {why}; pass client_id")));
            }
            default
        }
    };
    if client_id.is_empty() {
        return Err(invalid("client_id must be non-empty"));
    }
    let client_commit_id = match client_commit_id {
        Some("") => return Err(invalid("client_commit_id must be non-empty")),
        Some(id) => match unstorable(id) {
            Some(why) => return Err(invalid(format!("client_commit_id {} {why}", preview(id)))),
            None => id.to_owned(),
        },
        None => log::generate_commit_id()?,
    };
    let (ops, forms) = parse_operations(schema, operations)?;
    bind_client_id(caller.partition, &client_id, caller.actor_id, SQL_PRODUCER_WIRE_VERSION, now_ms)?;
    let max_operations = crate::settings::max_operations();
    if ops.len() > max_operations {
        return Err(EngineError::protocol(
            ErrorCode::TooManyOperations,
            format!(
                "commit carries {} operations; the limit is {max_operations} (§6.1)",
                ops.len()
            ),
        ));
    }
    let allowed = resolve_allowed(caller, schema, &client_id, now_ms, None)?.allowed;
    let ctx = SyncContext {
        partition: caller.partition.to_owned(),
        actor_id: caller.actor_id.to_owned(),
        client_id: client_id.clone(),
        wire_version: SQL_PRODUCER_WIRE_VERSION,
        schema,
        allowed,
        log_epoch: registry.log_epoch,
        now_ms,
        response_budget_bytes: crate::settings::response_budget_bytes(),
        max_operations,
        notification_key: None,
    };
    let commit = PushCommit {
        client_commit_id: client_commit_id.clone(),
        operations: ops,
    };
    let answer = push::run(&ctx, std::slice::from_ref(&commit), Some(&[forms]))?
        .pop()
        .ok_or_else(|| EngineError::internal("push answered no result"))?;
    let status = match answer.result.status {
        PushStatus::Applied => "applied",
        PushStatus::Cached => "cached",
        PushStatus::Rejected => "rejected",
    };
    let mut results: Vec<Value> =
        answer.result.results.iter().map(|r| result_json(schema, &commit.operations, r)).collect();
    // §6.3.1 details (a write validator's rejection) ride on their error record.
    for entry in answer.details.iter().flat_map(|d| &d.entries) {
        let details: Value = serde_json::from_str(&entry.details_json).unwrap_or(Value::Null);
        if let Some(r) = results.iter_mut().find(|r| r["opIndex"] == json!(entry.op_index)) {
            r["details"] = details;
        }
    }
    let mut out = json!({
        "clientId": client_id,
        "clientCommitId": client_commit_id,
        "status": status,
        "results": results,
    });
    if let Some(seq) = answer.result.commit_seq {
        out["commitSeq"] = json!(seq);
    }
    Ok(out)
}
