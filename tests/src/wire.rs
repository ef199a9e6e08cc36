//! Hand-built SSP2 requests for tests where the real client is not the point
//! (concurrency, NOTIFY, bad input, benchmark): frames are built and
//! responses decoded with the published reference codec `syncular-ssp2`
//! (=0.15.48), so the extension's own codec is checked against an
//! independent implementation.
//!
//! Rows use the sample `tasks` layout of [`crate::fixtures::schema_ir`].

use postgres::Client;
use serde_json::Value;
use ssp2::model::{Frame, Message, MsgKind, Op, OpResult, Operation, PushStatus};
use ssp2::primitives::{Reader, Writer};
use ssp2::segment::{decode_row, encode_row, Column, ColumnType, ColumnValue};

use crate::fixtures::TASKS;
use crate::transport::call_sync;

/// The wire version every hand-built request uses.
pub const WIRE_VERSION: u16 = 2;
/// The sample schema version (matches [`crate::fixtures::schema_ir`]).
pub const SCHEMA_VERSION: i32 = 1;

/// One `tasks` row in typed form.
#[derive(Clone, Debug, PartialEq)]
pub struct Task {
    pub id: String,
    pub project_id: String,
    pub title: String,
    pub done: bool,
    pub priority: Option<i64>,
}

impl Task {
    /// A not-done task without priority.
    pub fn new(
        id: impl Into<String>,
        project_id: impl Into<String>,
        title: impl Into<String>,
    ) -> Self {
        Task {
            id: id.into(),
            project_id: project_id.into(),
            title: title.into(),
            done: false,
            priority: None,
        }
    }
}

/// The §2.4 codec layout of `tasks`, in IR column order.
pub fn task_columns() -> Vec<Column> {
    let col = |name: &str, ty, nullable| Column {
        name: name.to_owned(),
        ty,
        nullable,
    };
    vec![
        col("id", ColumnType::String, false),
        col("project_id", ColumnType::String, false),
        col("title", ColumnType::String, false),
        col("done", ColumnType::Boolean, false),
        col("priority", ColumnType::Integer, true),
    ]
}

/// Encodes a task with the §2.4 row codec.
pub fn encode_task(task: &Task) -> Vec<u8> {
    let row = vec![
        Some(ColumnValue::String(task.id.clone())),
        Some(ColumnValue::String(task.project_id.clone())),
        Some(ColumnValue::String(task.title.clone())),
        Some(ColumnValue::Boolean(task.done)),
        task.priority.map(ColumnValue::Integer),
    ];
    let mut w = Writer::new();
    encode_row(&mut w, &task_columns(), &row);
    w.into_bytes()
}

/// Decodes a §2.4 row-codec payload of `tasks`.
///
/// Errors: the codec's decode error text, or a type mismatch / trailing bytes.
pub fn decode_task(bytes: &[u8]) -> Result<Task, String> {
    let mut r = Reader::new(bytes);
    let row = decode_row(&mut r, &task_columns()).map_err(|e| e.to_string())?;
    if !r.is_empty() {
        return Err(format!("{} trailing bytes after the row", r.remaining()));
    }
    decode_task_values(&row)
}

/// Converts decoded `tasks` values (IR column order) into a [`Task`].
pub fn decode_task_values(row: &[Option<ColumnValue>]) -> Result<Task, String> {
    let string = |v: &Option<ColumnValue>| match v {
        Some(ColumnValue::String(s)) => Ok(s.clone()),
        other => Err(format!("expected string, got {other:?}")),
    };
    let done = match &row[3] {
        Some(ColumnValue::Boolean(b)) => *b,
        other => return Err(format!("expected boolean, got {other:?}")),
    };
    let priority = match &row[4] {
        None => None,
        Some(ColumnValue::Integer(i)) => Some(*i),
        other => return Err(format!("expected integer, got {other:?}")),
    };
    Ok(Task {
        id: string(&row[0])?,
        project_id: string(&row[1])?,
        title: string(&row[2])?,
        done,
        priority,
    })
}

/// An upsert operation on `tasks` carrying the encoded row.
pub fn upsert(task: &Task, base_version: Option<i64>) -> Operation {
    Operation {
        table: TASKS.to_owned(),
        row_id: task.id.clone(),
        op: Op::Upsert,
        base_version,
        payload: Some(encode_task(task)),
    }
}

/// A delete operation on `tasks`.
pub fn delete(row_id: &str, base_version: Option<i64>) -> Operation {
    Operation {
        table: TASKS.to_owned(),
        row_id: row_id.to_owned(),
        op: Op::Delete,
        base_version,
        payload: None,
    }
}

/// A `PUSH_COMMIT` frame (§6.1).
pub fn commit(client_commit_id: impl Into<String>, operations: Vec<Operation>) -> Frame {
    Frame::PushCommit {
        client_commit_id: client_commit_id.into(),
        operations,
    }
}

/// A `PULL_HEADER` frame (§4.2).
pub fn pull_header(
    limit_commits: i32,
    limit_snapshot_rows: i32,
    max_snapshot_pages: i32,
    accept: u8,
) -> Frame {
    Frame::PullHeader {
        limit_commits,
        limit_snapshot_rows,
        max_snapshot_pages,
        accept,
    }
}

/// A `SUBSCRIPTION` frame on `table` with the given requested scopes.
pub fn subscription(
    id: &str,
    table: &str,
    scopes: &[(&str, &[&str])],
    cursor: i64,
    bootstrap_state: Option<String>,
) -> Frame {
    Frame::Subscription {
        id: id.to_owned(),
        table: table.to_owned(),
        scopes: scopes
            .iter()
            .map(|(k, vs)| {
                (
                    (*k).to_owned(),
                    vs.iter().map(|v| (*v).to_owned()).collect(),
                )
            })
            .collect(),
        params: None,
        cursor,
        bootstrap_state: bootstrap_state.map(ssp2::primitives::RawJson),
    }
}

/// Encodes a wire-version-2 request: `REQ_HEADER` then `frames` then `END`.
pub fn request(client_id: &str, log_epoch: Option<&str>, frames: Vec<Frame>) -> Vec<u8> {
    encode_request(WIRE_VERSION, client_id, log_epoch, frames)
}

/// A wire-version-1 request of `client_id`: a `REQ_HEADER` without `logEpoch`, then `frames`.
pub fn v1_request(client_id: &str, frames: Vec<Frame>) -> Vec<u8> {
    encode_request(1, client_id, None, frames)
}

fn encode_request(wire_version: u16, client_id: &str, log_epoch: Option<&str>, frames: Vec<Frame>) -> Vec<u8> {
    let mut all = Vec::with_capacity(frames.len() + 1);
    all.push(Frame::ReqHeader {
        client_id: client_id.to_owned(),
        schema_version: SCHEMA_VERSION,
        log_epoch: log_epoch.map(str::to_owned),
    });
    all.extend(frames);
    ssp2::encode_message(&Message {
        wire_version,
        msg_kind: MsgKind::Request,
        frames: all,
    })
}

/// Decodes a response with the reference codec.
///
/// Errors: the decode error, rendered (`sync.invalid_request: …`).
pub fn decode_response(bytes: &[u8]) -> Result<Message, String> {
    let msg = ssp2::decode_message(bytes).map_err(|e| e.to_string())?;
    if msg.msg_kind != MsgKind::Response {
        return Err("expected a response message".to_owned());
    }
    Ok(msg)
}

/// One `PUSH_RESULT` in plain form.
#[derive(Clone, Debug, PartialEq)]
pub struct PushOutcome {
    pub client_commit_id: String,
    pub status: PushStatus,
    pub commit_seq: Option<i64>,
    pub results: Vec<OpResult>,
}

impl PushOutcome {
    /// The error codes of the operation results (`sync.*`), in order.
    pub fn error_codes(&self) -> Vec<String> {
        self.results
            .iter()
            .filter_map(|r| match r {
                OpResult::Error { code, .. } | OpResult::Conflict { code, .. } => {
                    Some(code.clone())
                }
                OpResult::Applied { .. } => None,
            })
            .collect()
    }
}

/// Every `PUSH_RESULT` of a response, in order.
pub fn push_outcomes(msg: &Message) -> Vec<PushOutcome> {
    msg.frames
        .iter()
        .filter_map(|f| match f {
            Frame::PushResult {
                client_commit_id,
                status,
                commit_seq,
                results,
            } => Some(PushOutcome {
                client_commit_id: client_commit_id.clone(),
                status: *status,
                commit_seq: *commit_seq,
                results: results.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// `(logEpoch, resetRequired)` of the response's `RESP_HEADER`.
pub fn resp_header_epoch(msg: &Message) -> (Option<String>, bool) {
    match msg.frames.first() {
        Some(Frame::RespHeader {
            log_epoch,
            reset_required,
            ..
        }) => (log_epoch.clone(), reset_required.unwrap_or(false)),
        _ => (None, false),
    }
}

/// A raw protocol session: one connection, one partition, one actor, one
/// `clientId`, the partition's `logEpoch` once acquired, and the allowed map
/// passed as the gateway-resolved `allowed_scopes` argument.
pub struct RawSession {
    pub conn: Client,
    pub partition: String,
    pub actor_id: String,
    pub client_id: String,
    pub log_epoch: Option<String>,
    pub allowed: Option<Value>,
}

impl RawSession {
    /// Wraps `conn` (and bounds its statements, [`crate::fixtures::STATEMENT_TIMEOUT`]);
    /// no round is made yet.
    pub fn new(
        mut conn: Client,
        partition: &str,
        actor_id: &str,
        client_id: &str,
        allowed: Option<Value>,
    ) -> Self {
        // Bounded: a statement that waits forever fails instead of hanging.
        let _ = crate::fixtures::bound_statements(&mut conn);
        RawSession {
            conn,
            partition: partition.to_owned(),
            actor_id: actor_id.to_owned(),
            client_id: client_id.to_owned(),
            log_epoch: None,
            allowed,
        }
    }

    /// Acquires the partition's `logEpoch` (§2.1): a pull-only request
    /// without `logEpoch` must be answered by a reset response carrying it.
    ///
    /// Errors: a Postgres error, or a response that is not a reset response.
    pub fn acquire_epoch(&mut self) -> Result<String, String> {
        let bytes = request(&self.client_id, None, vec![pull_header(0, 0, 0, 0b0011)]);
        let response = self.send_bytes(&bytes).map_err(|e| db_message(&e))?;
        let msg = decode_response(&response)?;
        match resp_header_epoch(&msg) {
            (Some(epoch), true) if msg.frames.len() == 1 => {
                self.log_epoch = Some(epoch.clone());
                Ok(epoch)
            }
            other => Err(format!(
                "expected a reset response with a logEpoch, got {other:?}: {msg:?}"
            )),
        }
    }

    /// Sends raw request bytes through `syncular.sync`.
    ///
    /// Errors: the Postgres error (message starts with the SSP2 code).
    pub fn send_bytes(&mut self, bytes: &[u8]) -> Result<Vec<u8>, postgres::Error> {
        call_sync(
            &mut self.conn,
            &self.partition,
            &self.actor_id,
            bytes,
            self.allowed.as_ref(),
        )
    }

    /// Encodes `frames` after a `REQ_HEADER` carrying the acquired epoch.
    pub fn encode(&self, frames: Vec<Frame>) -> Vec<u8> {
        request(&self.client_id, self.log_epoch.as_deref(), frames)
    }

    /// Sends `frames` and decodes the response.
    ///
    /// Errors: the Postgres error text (starting with the SSP2 code) or a
    /// response decode error.
    pub fn round(&mut self, frames: Vec<Frame>) -> Result<Message, String> {
        let bytes = self.encode(frames);
        let response = self.send_bytes(&bytes).map_err(|e| db_message(&e))?;
        decode_response(&response)
    }

    /// Pushes commits and returns their results (one per commit, in order).
    ///
    /// Errors: as [`RawSession::round`], or a result count mismatch.
    pub fn push(&mut self, commits: Vec<Frame>) -> Result<Vec<PushOutcome>, String> {
        let n = commits.len();
        let msg = self.round(commits)?;
        let outcomes = push_outcomes(&msg);
        if outcomes.len() != n {
            return Err(format!(
                "expected {n} PUSH_RESULT frames, got {}: {msg:?}",
                outcomes.len()
            ));
        }
        Ok(outcomes)
    }
}

/// The server message of a Postgres error (the `sync.*: …` text), or the
/// client-side error text when there is no server message.
pub fn db_message(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => error.to_string(),
    }
}

/// What a response delivered to the client: every `tasks` row carried by a
/// `COMMIT` change or an inline rows segment, every deleted row id, and every
/// stored-scope value attached to a change.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Delivered {
    pub rows: Vec<Task>,
    pub deleted: Vec<String>,
    pub change_scopes: Vec<(String, String)>,
    pub commit_seqs: Vec<i64>,
}

/// Collects what `msg` delivered (see [`Delivered`]).
///
/// Errors: a row payload or inline segment that does not decode.
pub fn delivered(msg: &Message) -> Result<Delivered, String> {
    let mut out = Delivered::default();
    for frame in &msg.frames {
        match frame {
            Frame::Commit {
                commit_seq,
                changes,
                ..
            } => {
                out.commit_seqs.push(*commit_seq);
                for change in changes {
                    out.change_scopes.extend(change.scopes.iter().cloned());
                    match (&change.op, &change.row) {
                        (Op::Upsert, Some(row)) => out.rows.push(decode_task(row)?),
                        (Op::Delete, _) => out.deleted.push(change.row_id.clone()),
                        (Op::Upsert, None) => {
                            return Err(format!("upsert change without a row: {change:?}"))
                        }
                    }
                }
            }
            Frame::SegmentInline { payload } => {
                let segment = ssp2::decode_rows_segment(payload).map_err(|e| e.to_string())?;
                for block in &segment.blocks {
                    for row in block {
                        out.rows.push(decode_task_values(&row.values)?);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(out)
}
