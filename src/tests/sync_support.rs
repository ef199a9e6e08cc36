//! Helpers for the sync-round `#[pg_test]`s: build SSP2 requests with the
//! protocol crate, call `syncular.sync` / `push` / `pull` inside a
//! subtransaction (an ERROR comes back as data), decode the response, and
//! read the sync_* tables.

use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::{json, Value};
use syncular_protocol::constants::{ACCEPT_EXTERNAL_ROWS, ACCEPT_INLINE_ROWS};
use syncular_protocol::frame_fields::Op;
use syncular_protocol::request::{
    encode_request, Operation, PullHeader, PullRequest, PushCommit, ReqHeader, Request,
};
use syncular_protocol::response::{decode_response, OpResult, PushResult, Response, ResponseFrame};
use syncular_protocol::row_codec::{encode_row, RowValue, TableLayout};
use syncular_protocol::schema_ir::Schema;

use crate::store::spi::subtransaction::{self, SubtransactionError};
use crate::tests::support;

/// Registers `support::tasks_ir(1)` (table `tasks`, scope
/// `project:{project_id}`, unique index on `code`, a crdt column `doc`).
pub fn setup_tasks() {
    support::register(&support::tasks_ir(1)).expect("register tasks IR");
}

/// The codec layout of `tasks` at version 1.
pub fn tasks_layout() -> TableLayout {
    Schema::from_value(&support::tasks_ir(1))
        .expect("tasks IR")
        .tables[0]
        .layout()
        .clone()
}

/// A `tasks` row: id, project_id, title, done = false, code; every other
/// nullable column NULL.
pub fn task(id: &str, project: &str, title: &str, code: Option<&str>) -> Vec<Option<RowValue>> {
    let layout = tasks_layout();
    layout
        .columns
        .iter()
        .map(|c| match c.name.as_str() {
            "id" => Some(RowValue::String(id.into())),
            "project_id" => Some(RowValue::String(project.into())),
            "title" => Some(RowValue::String(title.into())),
            "done" => Some(RowValue::Boolean(false)),
            "code" => code.map(|c| RowValue::String(c.into())),
            _ => None,
        })
        .collect()
}

/// Sets column `name` of a row built by [`task`].
pub fn with(
    mut row: Vec<Option<RowValue>>,
    name: &str,
    value: Option<RowValue>,
) -> Vec<Option<RowValue>> {
    let i = tasks_layout().index_of(name).expect("column");
    row[i] = value;
    row
}

/// Row-codec bytes of a `tasks` row.
pub fn payload(row: &[Option<RowValue>]) -> Vec<u8> {
    encode_row(&tasks_layout(), row).expect("encode row")
}

/// An upsert of `row` (its id is the rowId).
pub fn upsert(row: &[Option<RowValue>], base_version: Option<i64>) -> Operation {
    let id = match &row[0] {
        Some(RowValue::String(s)) => s.clone(),
        other => panic!("row id {other:?}"),
    };
    Operation {
        table: "tasks".into(),
        row_id: id,
        op: Op::Upsert,
        base_version,
        payload: Some(payload(row)),
    }
}

/// A delete of `tasks/row_id`.
pub fn delete(row_id: &str) -> Operation {
    Operation {
        table: "tasks".into(),
        row_id: row_id.into(),
        op: Op::Delete,
        base_version: None,
        payload: None,
    }
}

/// A commit.
pub fn commit(id: &str, operations: Vec<Operation>) -> PushCommit {
    PushCommit {
        client_commit_id: id.into(),
        operations,
    }
}

/// A pull header with no subscriptions (rows accepted inline and external).
pub fn empty_pull() -> PullRequest {
    PullRequest {
        header: PullHeader {
            limit_commits: 0,
            limit_snapshot_rows: 0,
            max_snapshot_pages: 0,
            accept: ACCEPT_INLINE_ROWS | ACCEPT_EXTERNAL_ROWS,
        },
        subscriptions: vec![],
    }
}

/// Encodes a request.
pub fn request(
    wire_version: u16,
    client_id: &str,
    schema_version: i32,
    log_epoch: Option<&str>,
    commits: Vec<PushCommit>,
    pull: Option<PullRequest>,
) -> Vec<u8> {
    encode_request(&Request {
        wire_version,
        header: ReqHeader {
            client_id: client_id.into(),
            schema_version,
            log_epoch: log_epoch.map(str::to_owned),
        },
        round_failure: None,
        commits,
        pull,
        unknown: vec![],
    })
    .expect("encode request")
}

/// The allowed map every test actor holds unless a test says otherwise.
pub fn allowed_p1_p2() -> Value {
    json!({"project_id": ["p1", "p2"]})
}

/// Calls `syncular.<function>(partition, actor, request, allowed)` in a
/// subtransaction: the response bytes, or the ERROR raised.
pub fn call(
    function: &str,
    partition: &str,
    actor: &str,
    request: &[u8],
    allowed: Option<&Value>,
) -> Result<Vec<u8>, SubtransactionError> {
    let sql = format!("SELECT syncular.{function}($1, $2, $3, $4)");
    let request = request.to_vec();
    let allowed = allowed.cloned().map(JsonB);
    subtransaction::run(move || {
        Spi::get_one_with_args::<Vec<u8>>(
            &sql,
            &[
                partition.into(),
                actor.into(),
                request.into(),
                allowed.into(),
            ],
        )
        .unwrap_or_else(|e| panic!("SPI: {e}"))
        .expect("non-NULL response")
    })
}

/// `syncular.sync` decoded; panics on an ERROR.
pub fn sync(partition: &str, actor: &str, request: &[u8], allowed: Option<&Value>) -> Response {
    let bytes = call("sync", partition, actor, request, allowed)
        .unwrap_or_else(|e| panic!("sync failed: {e:?}"));
    decode_response(&bytes).expect("decodable response")
}

/// Acquires the partition's log epoch (a v2 request without `logEpoch`).
pub fn acquire_epoch(partition: &str, actor: &str, client_id: &str) -> String {
    let resp = sync(
        partition,
        actor,
        &request(2, client_id, 1, None, vec![], Some(empty_pull())),
        None,
    );
    let epoch = resp.header.epoch.expect("v2 header");
    assert!(epoch.reset_required, "acquisition answers resetRequired");
    assert!(
        resp.frames.is_empty(),
        "reset response ends after RESP_HEADER"
    );
    epoch.log_epoch
}

/// A push-only v2 request on the current epoch, sent with `allowed`.
pub fn push(
    partition: &str,
    actor: &str,
    client_id: &str,
    epoch: &str,
    commits: Vec<PushCommit>,
    allowed: Option<&Value>,
) -> Vec<PushResult> {
    let resp = sync(
        partition,
        actor,
        &request(2, client_id, 1, Some(epoch), commits, None),
        allowed,
    );
    push_results(&resp)
}

/// The `PUSH_RESULT` frames of a response, in order.
pub fn push_results(resp: &Response) -> Vec<PushResult> {
    resp.frames
        .iter()
        .filter_map(|f| match f {
            ResponseFrame::PushResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// The single error record of a rejected result: `(opIndex, code, retryable)`.
pub fn rejection(result: &PushResult) -> (i32, String, bool) {
    assert_eq!(
        result.results.len(),
        1,
        "a rejection carries the terminating record only: {result:?}"
    );
    match &result.results[0] {
        OpResult::Error {
            op_index,
            code,
            retryable,
            ..
        } => (*op_index, code.clone(), *retryable),
        other => panic!("expected an error record, got {other:?}"),
    }
}

/// `SELECT count(*) …` as i64.
pub fn count(sql: &str) -> i64 {
    support::int8(sql).unwrap_or(0)
}
