//! Request builders of the wire benchmark: `tasks` rows and `wide` rows
//! (primary key, scope column, 18 text columns `c01`…`c18`), encoded by the
//! published reference codecs — `syncular-ssp2` 0.15.48 for wire 2 (full
//! rows), 0.49.2 for wire 3 (sparse rows) — and responses decoded by them.

use serde_json::{json, Value};

use super::Wire;

/// The `wide` table's text columns.
pub const WIDE_TEXT_COLUMNS: usize = 18;

/// The benchmark's schema IR: the sample `tasks` table and `wide`.
pub fn schema_ir() -> Value {
    let mut ir = crate::fixtures::schema_ir();
    let mut columns = vec![
        json!({"name": "id", "type": "string", "nullable": false}),
        json!({"name": "project_id", "type": "string", "nullable": false}),
    ];
    columns.extend((1..=WIDE_TEXT_COLUMNS).map(|i| json!({"name": format!("c{i:02}"), "type": "string", "nullable": true})));
    ir["tables"].as_array_mut().expect("tables").push(json!({
        "name": "wide", "primaryKey": "id", "columns": columns, "scopes": ["project:{project_id}"]
    }));
    ir
}

/// One value of a column: `None` = absent (v3 only), `Some(None)` = NULL.
pub type Slot = Option<Option<String>>;

/// A `PUSH_COMMIT` of one upsert of `table`/`row_id` whose columns are
/// `slots` (layout order, all string-typed but `tasks.done`/`priority`,
/// which [`task_slots`] fills), encoded in `wire`.
pub struct Upsert<'a> {
    pub table: &'a str,
    pub row_id: &'a str,
    pub base_version: Option<i64>,
    pub slots: Vec<Slot>,
}

fn v2_columns(table: &str) -> Vec<ssp2::segment::Column> {
    use ssp2::segment::{Column, ColumnType};
    let col = |name: &str, ty, nullable| Column { name: name.to_owned(), ty, nullable };
    match table {
        "tasks" => crate::wire::task_columns(),
        _ => {
            let mut c = vec![col("id", ColumnType::String, false), col("project_id", ColumnType::String, false)];
            c.extend((1..=WIDE_TEXT_COLUMNS).map(|i| col(&format!("c{i:02}"), ColumnType::String, true)));
            c
        }
    }
}

fn v3_columns(table: &str) -> Vec<ssp2_v3::segment::Column> {
    v2_columns(table)
        .into_iter()
        .map(|c| ssp2_v3::segment::Column {
            name: c.name,
            ty: ssp2_v3::segment::ColumnType::from_name(c.ty.name()).expect("same column types"),
            nullable: c.nullable,
        })
        .collect()
}

/// The slots of a `tasks` row: id, project, title, `done` = false, no priority.
pub fn task_slots(id: &str, project: &str, title: &str) -> Vec<Slot> {
    vec![Some(Some(id.into())), Some(Some(project.into())), Some(Some(title.into())), Some(Some("false".into())), Some(None)]
}

/// The payload of `u` in `wire` (absent slots are NULL in a v2 full row).
pub fn payload(wire: Wire, u: &Upsert<'_>) -> Vec<u8> {
    match wire {
        Wire::V2 => {
            use ssp2::segment::{ColumnType, ColumnValue};
            let columns = v2_columns(u.table);
            let row: Vec<Option<ColumnValue>> = columns
                .iter()
                .zip(&u.slots)
                .map(|(c, s)| {
                    s.clone().flatten().map(|v| match c.ty {
                        ColumnType::Boolean => ColumnValue::Boolean(v == "true"),
                        ColumnType::Integer => ColumnValue::Integer(v.parse().expect("integer")),
                        _ => ColumnValue::String(v),
                    })
                })
                .collect();
            let mut w = ssp2::primitives::Writer::new();
            ssp2::segment::encode_row(&mut w, &columns, &row);
            w.into_bytes()
        }
        Wire::V3 => {
            use ssp2_v3::segment::{ColumnType, ColumnValue, SparseSlot};
            let columns = v3_columns(u.table);
            let row: Vec<SparseSlot> = columns
                .iter()
                .zip(&u.slots)
                .map(|(c, s)| match s {
                    None => SparseSlot::Absent,
                    Some(None) => SparseSlot::Null,
                    Some(Some(v)) => SparseSlot::Value(match c.ty {
                        ColumnType::Boolean => ColumnValue::Boolean(v == "true"),
                        ColumnType::Integer => ColumnValue::Integer(v.parse().expect("integer")),
                        _ => ColumnValue::String(v.clone()),
                    }),
                })
                .collect();
            ssp2_v3::encode_sparse_row(&columns, 0, &row)
        }
    }
}

/// A push request of one commit `commit_id` carrying `ops`, in `wire`.
pub fn push_request(wire: Wire, client_id: &str, epoch: &str, commit_id: &str, ops: &[Upsert<'_>]) -> Vec<u8> {
    match wire {
        Wire::V2 => {
            let operations = ops
                .iter()
                .map(|u| ssp2::model::Operation {
                    table: u.table.to_owned(),
                    row_id: u.row_id.to_owned(),
                    op: ssp2::model::Op::Upsert,
                    base_version: u.base_version,
                    payload: Some(payload(wire, u)),
                })
                .collect();
            crate::wire::request(client_id, Some(epoch), vec![crate::wire::commit(commit_id, operations)])
        }
        Wire::V3 => {
            use ssp2_v3::model::{Frame, Message, MsgKind, Op, Operation};
            let operations = ops
                .iter()
                .map(|u| Operation {
                    table: u.table.to_owned(),
                    row_id: u.row_id.to_owned(),
                    op: Op::Upsert,
                    base_version: u.base_version,
                    payload: Some(payload(wire, u)),
                })
                .collect();
            ssp2_v3::encode_message(&Message {
                wire_version: 3,
                msg_kind: MsgKind::Request,
                frames: vec![
                    Frame::ReqHeader { client_id: client_id.into(), schema_version: 1, log_epoch: Some(epoch.into()) },
                    Frame::PushCommit { client_commit_id: commit_id.into(), operations },
                ],
            })
        }
    }
}

/// A pull request of one `tasks` subscription of `project` from `cursor`, in `wire`.
pub fn pull_request(wire: Wire, client_id: &str, epoch: &str, project: &str, cursor: i64) -> Vec<u8> {
    match wire {
        Wire::V2 => crate::wire::request(
            client_id,
            Some(epoch),
            vec![
                crate::wire::pull_header(0, 0, 0, 0b0011),
                crate::wire::subscription("s", "tasks", &[("project_id", &[project])], cursor, None),
            ],
        ),
        Wire::V3 => {
            use ssp2_v3::model::{Frame, Message, MsgKind};
            ssp2_v3::encode_message(&Message {
                wire_version: 3,
                msg_kind: MsgKind::Request,
                frames: vec![
                    Frame::ReqHeader { client_id: client_id.into(), schema_version: 1, log_epoch: Some(epoch.into()) },
                    Frame::PullHeader { limit_commits: 0, limit_snapshot_rows: 0, max_snapshot_pages: 0, accept: 0b0011 },
                    Frame::Subscription {
                        id: "s".into(),
                        table: "tasks".into(),
                        scopes: vec![("project_id".into(), vec![project.into()])],
                        params: None,
                        cursor,
                        bootstrap_state: None,
                    },
                ],
            })
        }
    }
}

/// What a response says, decoded by the reference codec of its version:
/// `(push statuses, COMMIT frames, changes)`.
pub fn summary(wire: Wire, bytes: &[u8]) -> Result<(Vec<String>, usize, usize), String> {
    match wire {
        Wire::V2 => {
            let msg = ssp2::decode_message(bytes).map_err(|e| e.to_string())?;
            let mut out = (Vec::new(), 0, 0);
            for f in &msg.frames {
                match f {
                    ssp2::model::Frame::PushResult { status, .. } => out.0.push(format!("{status:?}")),
                    ssp2::model::Frame::Commit { changes, .. } => {
                        out.1 += 1;
                        out.2 += changes.len();
                    }
                    _ => {}
                }
            }
            Ok(out)
        }
        Wire::V3 => {
            let msg = ssp2_v3::decode_message(bytes).map_err(|e| e.to_string())?;
            let mut out = (Vec::new(), 0, 0);
            for f in &msg.frames {
                match f {
                    ssp2_v3::model::Frame::PushResult { status, .. } => out.0.push(format!("{status:?}")),
                    ssp2_v3::model::Frame::Commit { changes, .. } => {
                        out.1 += 1;
                        out.2 += changes.len();
                    }
                    _ => {}
                }
            }
            Ok(out)
        }
    }
}
