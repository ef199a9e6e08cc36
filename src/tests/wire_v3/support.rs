//! Helpers for the wire-version-3 `#[pg_test]`s: v3 requests with sparse
//! upsert payloads (built with the protocol crate), and reads of a `tasks`
//! row's stored state (version, payload, column versions). The `tasks`
//! table is `support::tasks_ir(1)` (id, project_id, title, n, f, done, meta,
//! bin, att, doc (crdt), secret, code; scope `project:{project_id}`).

use std::collections::BTreeMap;

use syncular_protocol::bitmap;
use syncular_protocol::column_versions::decode_column_versions;
use syncular_protocol::constants::WIRE_VERSION_3;
use syncular_protocol::frame_fields::Op;
use syncular_protocol::request::{encode_request, Operation, PullRequest, PushCommit, ReqHeader, Request};
use syncular_protocol::response::{OpResult, PushResult, PushStatus};
use syncular_protocol::row_codec::{decode_row, Row, RowValue};
use syncular_protocol::sparse_row::{encode_sparse_row, SparseRow, SparseSlot};

use crate::tests::sync_support::{acquire_epoch, allowed_p1_p2, commit, push_results, setup_tasks, sync, task, tasks_layout};

/// A string value.
pub fn s(v: &str) -> Option<RowValue> {
    Some(RowValue::String(v.into()))
}

/// A sparse `tasks` row: the primary key `id` and exactly the `present`
/// columns (a `None` value is a present NULL); every other column absent.
pub fn sparse(id: &str, present: &[(&str, Option<RowValue>)]) -> SparseRow {
    let layout = tasks_layout();
    let mut row: SparseRow = vec![SparseSlot::Absent; layout.len()];
    row[0] = SparseSlot::Value(RowValue::String(id.into()));
    for (name, value) in present {
        let i = layout.index_of(name).unwrap_or_else(|| panic!("no column {name}"));
        row[i] = value.clone().map_or(SparseSlot::Null, SparseSlot::Value);
    }
    row
}

/// A full `tasks` row ([`task`]) as a sparse row with every column present.
pub fn full(id: &str, project: &str, title: &str) -> SparseRow {
    task(id, project, title, None).into_iter().map(|v| v.map_or(SparseSlot::Null, SparseSlot::Value)).collect()
}

/// A v3 upsert of `tasks` with the sparse payload `row`.
pub fn upsert3(row: &SparseRow, base_version: Option<i64>) -> Operation {
    let Some(SparseSlot::Value(RowValue::String(id))) = row.first() else { panic!("sparse row without its id") };
    Operation {
        table: "tasks".into(),
        row_id: id.clone(),
        op: Op::Upsert,
        base_version,
        payload: Some(encode_sparse_row(&tasks_layout(), 0, row).expect("encode sparse row")),
    }
}

/// An upsert whose payload is `bytes` verbatim (malformed input).
pub fn raw_upsert(row_id: &str, bytes: Vec<u8>) -> Operation {
    Operation { table: "tasks".into(), row_id: row_id.into(), op: Op::Upsert, base_version: None, payload: Some(bytes) }
}

/// A wire-version-3 request (`round_failure` right after the header).
pub fn request3(
    client_id: &str,
    epoch: Option<&str>,
    round_failure: Option<&str>,
    commits: Vec<PushCommit>,
    pull: Option<PullRequest>,
) -> Vec<u8> {
    encode_request(&Request {
        wire_version: WIRE_VERSION_3,
        header: ReqHeader { client_id: client_id.into(), schema_version: 1, log_epoch: epoch.map(str::to_owned) },
        round_failure: round_failure.map(str::to_owned),
        commits,
        pull,
        unknown: vec![],
    })
    .expect("encode v3 request")
}

/// A push-only v3 request of `commits` by `alice` (allowed p1, p2): its results.
pub fn push3(partition: &str, client_id: &str, epoch: &str, commits: Vec<PushCommit>) -> Vec<PushResult> {
    let resp = sync(partition, "alice", &request3(client_id, Some(epoch), None, commits, None), Some(&allowed_p1_p2()));
    assert_eq!(resp.wire_version, WIRE_VERSION_3, "a v3 request is answered in v3");
    push_results(&resp)
}

/// Registers `tasks`, binds client `client_id` of `alice` in `partition`
/// and seeds `t1` (project p1, title "first") at version 1 with a v3
/// insert: the request's log epoch.
pub fn seeded(partition: &str, client_id: &str) -> String {
    setup_tasks();
    let epoch = acquire_epoch(partition, "alice", client_id);
    let r = push3(partition, client_id, &epoch, vec![commit("seed", vec![upsert3(&full("t1", "p1", "first"), Some(0))])]);
    assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
    epoch
}

/// The stored state of `tasks/id` in `partition`: version, decoded row and
/// column versions (`None` = NULL).
pub fn stored(partition: &str, id: &str) -> (i64, Row, Option<BTreeMap<usize, i64>>) {
    let (version, payload, versions) = pgrx::Spi::get_three::<i64, Vec<u8>, Vec<u8>>(&format!(
        "SELECT _sync_version, _sync_payload, _sync_column_versions FROM public.tasks \
          WHERE _sync_partition = '{partition}' AND _sync_row_id = '{id}'"
    ))
    .unwrap_or_else(|e| panic!("no row {id}: {e}"));
    let version = version.unwrap_or_else(|| panic!("no row {id}"));
    let row = decode_row(&tasks_layout(), &payload.expect("payload")).expect("stored payload decodes");
    let versions = versions.map(|blob| decode_column_versions(Some(&blob)).expect("stored column versions decode"));
    (version, row, versions)
}

/// The version of column `name` of a stored row read by [`stored`].
pub fn version_of(state: &(i64, Row, Option<BTreeMap<usize, i64>>), name: &str) -> i64 {
    let i = tasks_layout().index_of(name).expect("column");
    syncular_protocol::column_versions::column_version(state.2.as_ref(), state.0, i)
}

/// The value of column `name` in `row`.
pub fn value(row: &Row, name: &str) -> Option<RowValue> {
    row[tasks_layout().index_of(name).expect("column")].clone()
}

/// The names of the columns a `conflictColumns` bitmap marks.
pub fn marked(bitmap: &[u8]) -> Vec<String> {
    let layout = tasks_layout();
    bitmap::set_bits(bitmap, layout.len()).map(|i| layout.columns[i].name.clone()).collect()
}

/// The single conflict record of a rejected result: `(serverVersion,
/// serverRow, conflictColumns)`.
pub fn conflict(result: &PushResult) -> (i64, Vec<u8>, Vec<u8>) {
    match result.results.as_slice() {
        [OpResult::Conflict { server_version, server_row, conflict_columns, code, .. }] => {
            assert_eq!(code, "sync.version_conflict");
            (*server_version, server_row.clone(), conflict_columns.clone())
        }
        other => panic!("expected one conflict record, got {other:?}"),
    }
}
