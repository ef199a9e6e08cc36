//! Helpers for the pull-half `#[pg_test]`s (`sync_pull_*`): a two-table
//! schema, SSP2 requests encoded with the protocol crate and sent through
//! `syncular.sync`, and responses decoded back into per-subscription
//! sections.

use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::{json, Value};
use syncular_protocol::constants::{ACCEPT_EXTERNAL_ROWS, ACCEPT_INLINE_ROWS, WIRE_VERSION_2};
use syncular_protocol::frame_fields::Op;
use syncular_protocol::request::{
    encode_request, Operation, PullHeader, PullRequest, PushCommit, ReqHeader, Request, Subscription,
};
use syncular_protocol::response::{
    decode_response, Commit, PushResult, Response, ResponseFrame, SegmentRef, SubEnd, SubStart,
};
use syncular_protocol::row_codec::{decode_row, encode_row, ColumnLayout, ColumnType, RowValue, TableLayout};
use syncular_protocol::segment::{decode_rows_segment, RowsSegment};

use crate::store::spi::subtransaction::{self, SubtransactionError};
use crate::tests::support::{register, run};

/// Default accept mask of the reference clients without sqlite (§4.2).
pub const ACCEPT_ROWS: u8 = ACCEPT_INLINE_ROWS | ACCEPT_EXTERNAL_ROWS;

/// `tasks` (scope `ws:{ws}`) and `notes` (scopes `ws:{ws}` and `proj:{proj}`).
pub fn pull_ir() -> Value {
    json!({
        "version": 1,
        "tables": [
            {
                "name": "tasks",
                "primaryKey": "id",
                "columns": [
                    {"name": "id", "type": "string", "nullable": false},
                    {"name": "ws", "type": "string", "nullable": false},
                    {"name": "title", "type": "string", "nullable": true}
                ],
                "scopes": ["ws:{ws}"]
            },
            {
                "name": "notes",
                "primaryKey": "id",
                "columns": [
                    {"name": "id", "type": "string", "nullable": false},
                    {"name": "ws", "type": "string", "nullable": false},
                    {"name": "proj", "type": "string", "nullable": false},
                    {"name": "body", "type": "string", "nullable": true}
                ],
                "scopes": ["ws:{ws}", "proj:{proj}"]
            }
        ]
    })
}

/// Registers [`pull_ir`] in schema `public`.
pub fn setup() {
    register(&pull_ir()).expect("register the pull test schema");
}

/// Codec layout of `tasks`.
pub fn tasks_layout() -> TableLayout {
    TableLayout::new(vec![
        ColumnLayout::new("id", ColumnType::String, false),
        ColumnLayout::new("ws", ColumnType::String, false),
        ColumnLayout::new("title", ColumnType::String, true),
    ])
}

/// Codec layout of `notes`.
pub fn notes_layout() -> TableLayout {
    TableLayout::new(vec![
        ColumnLayout::new("id", ColumnType::String, false),
        ColumnLayout::new("ws", ColumnType::String, false),
        ColumnLayout::new("proj", ColumnType::String, false),
        ColumnLayout::new("body", ColumnType::String, true),
    ])
}

fn s(v: &str) -> Option<RowValue> {
    Some(RowValue::String(v.to_owned()))
}

/// An upsert of `tasks` row `(id, ws, title)`.
pub fn task(id: &str, ws: &str, title: &str) -> Operation {
    Operation {
        table: "tasks".into(),
        row_id: id.into(),
        op: Op::Upsert,
        base_version: None,
        payload: Some(encode_row(&tasks_layout(), &[s(id), s(ws), s(title)]).unwrap()),
    }
}

/// An upsert of `notes` row `(id, ws, proj, body)`.
pub fn note(id: &str, ws: &str, proj: &str, body: &str) -> Operation {
    Operation {
        table: "notes".into(),
        row_id: id.into(),
        op: Op::Upsert,
        base_version: None,
        payload: Some(encode_row(&notes_layout(), &[s(id), s(ws), s(proj), s(body)]).unwrap()),
    }
}

/// A delete of `table` row `id`.
pub fn delete(table: &str, id: &str) -> Operation {
    Operation { table: table.into(), row_id: id.into(), op: Op::Delete, base_version: None, payload: None }
}

/// Decodes a `tasks` payload into `(id, ws, title)`.
pub fn task_values(payload: &[u8]) -> (String, String, String) {
    let row = decode_row(&tasks_layout(), payload).expect("tasks payload decodes");
    let text = |i: usize| match &row[i] {
        Some(RowValue::String(v)) => v.clone(),
        other => panic!("column {i}: {other:?}"),
    };
    (text(0), text(1), text(2))
}

/// A `SUBSCRIPTION` frame.
pub fn sub(id: &str, table: &str, scopes: &[(&str, &[&str])], cursor: i64, token: Option<&str>) -> Subscription {
    Subscription {
        id: id.into(),
        table: table.into(),
        scopes: scopes
            .iter()
            .map(|(k, v)| (k.to_string(), v.iter().map(|x| x.to_string()).collect()))
            .collect(),
        params: None,
        cursor,
        bootstrap_state: token.map(str::to_owned),
    }
}

/// A `PULL_HEADER` with the given limits and `accept`.
pub fn header(limit_commits: i32, limit_snapshot_rows: i32, max_snapshot_pages: i32, accept: u8) -> PullHeader {
    PullHeader { limit_commits, limit_snapshot_rows, max_snapshot_pages, accept }
}

/// One client of one partition, speaking wire version 2.
pub struct Client {
    pub partition: String,
    pub actor: String,
    pub client_id: String,
    /// Allowed map passed as `allowed_scopes` (`None` → the resolver).
    pub allowed: Option<Value>,
    epoch: Option<String>,
    commit_counter: u32,
}

impl Client {
    /// A client allowed everything (`{"ws":["*"],"proj":["*"]}`).
    pub fn new(partition: &str, actor: &str, client_id: &str) -> Self {
        Self::with_allowed(partition, actor, client_id, Some(json!({"ws": ["*"], "proj": ["*"]})))
    }

    /// A client with an explicit allowed map.
    pub fn with_allowed(partition: &str, actor: &str, client_id: &str, allowed: Option<Value>) -> Self {
        Client {
            partition: partition.into(),
            actor: actor.into(),
            client_id: client_id.into(),
            allowed,
            epoch: None,
            commit_counter: 0,
        }
    }

    /// `syncular.sync(partition, actor, bytes, allowed)` in a subtransaction.
    pub fn sync_bytes(&self, bytes: Vec<u8>) -> Result<Vec<u8>, SubtransactionError> {
        let partition = self.partition.clone();
        let actor = self.actor.clone();
        let allowed = self.allowed.clone();
        subtransaction::run(move || {
            Spi::get_one_with_args::<Vec<u8>>(
                "SELECT syncular.sync($1, $2, $3, $4)",
                &[
                    partition.as_str().into(),
                    actor.as_str().into(),
                    bytes.into(),
                    allowed.map(JsonB).into(),
                ],
            )
            .unwrap_or_else(|e| panic!("SPI: {e}"))
            .expect("sync returns bytes")
        })
    }

    fn ensure_epoch(&mut self) {
        if self.epoch.is_some() {
            return;
        }
        // §2.1: a request without logEpoch (and no push) acquires the epoch.
        let req = Request {
            wire_version: WIRE_VERSION_2,
            header: ReqHeader { client_id: self.client_id.clone(), schema_version: 1, log_epoch: None },
            round_failure: None,
            commits: vec![],
            pull: Some(PullRequest { header: header(0, 0, 0, ACCEPT_ROWS), subscriptions: vec![] }),
            unknown: vec![],
        };
        let resp = decode_response(&self.sync_bytes(encode_request(&req).unwrap()).expect("epoch acquisition"))
            .expect("response decodes");
        let epoch = resp.header.epoch.expect("v2 header carries the epoch");
        assert!(epoch.reset_required, "acquisition answers resetRequired");
        self.epoch = Some(epoch.log_epoch);
    }

    /// Encodes a v2 request with this client's epoch.
    pub fn request(&mut self, commits: Vec<PushCommit>, pull: Option<PullRequest>) -> Vec<u8> {
        self.ensure_epoch();
        encode_request(&Request {
            wire_version: WIRE_VERSION_2,
            header: ReqHeader {
                client_id: self.client_id.clone(),
                schema_version: 1,
                log_epoch: self.epoch.clone(),
            },
            round_failure: None,
            commits,
            pull,
            unknown: vec![],
        })
        .expect("request encodes")
    }

    /// Pushes one commit of `operations`; returns its `PUSH_RESULT`.
    pub fn push(&mut self, operations: Vec<Operation>) -> PushResult {
        self.commit_counter += 1;
        let commit = PushCommit { client_commit_id: format!("{}-c{}", self.client_id, self.commit_counter), operations };
        let bytes = self.request(vec![commit], None);
        let resp = decode_response(&self.sync_bytes(bytes).expect("push succeeds")).expect("decodes");
        match resp.frames.into_iter().next() {
            Some(ResponseFrame::PushResult(r)) => r,
            other => panic!("expected PUSH_RESULT, got {other:?}"),
        }
    }

    /// Pushes one commit and asserts it applied; returns its `commitSeq`.
    pub fn push_ok(&mut self, operations: Vec<Operation>) -> i64 {
        let r = self.push(operations);
        r.commit_seq.unwrap_or_else(|| panic!("commit not applied: {r:?}"))
    }

    /// Runs a pull; `Err` carries the Postgres error of a failed request.
    pub fn try_pull(&mut self, header: PullHeader, subs: Vec<Subscription>) -> Result<Pulled, SubtransactionError> {
        let bytes = self.request(vec![], Some(PullRequest { header, subscriptions: subs }));
        self.sync_bytes(bytes).map(|b| Pulled::from_bytes(&b))
    }

    /// Runs a pull that must succeed.
    pub fn pull(&mut self, header: PullHeader, subs: Vec<Subscription>) -> Pulled {
        self.try_pull(header, subs).unwrap_or_else(|e| panic!("pull failed: {} {}", e.sqlstate, e.message))
    }
}

/// One `SUB_START … SUB_END` section of a response.
#[derive(Debug, Clone)]
pub struct Section {
    pub start: SubStart,
    pub commits: Vec<Commit>,
    pub segments: Vec<RowsSegment>,
    /// `SEGMENT_REF` descriptors, in order (their bytes are not fetched).
    pub refs: Vec<SegmentRef>,
    pub end: SubEnd,
}

impl Section {
    /// `(rowId, serverVersion, payload)` of every segment row, in order.
    pub fn segment_rows(&self) -> Vec<(String, i64, Vec<u8>)> {
        let mut out = Vec::new();
        for seg in &self.segments {
            for block in &seg.blocks {
                for row in block {
                    let payload = encode_row(&seg.header.layout, &row.values).unwrap();
                    let id = match &row.values[0] {
                        Some(RowValue::String(v)) => v.clone(),
                        other => panic!("row id column: {other:?}"),
                    };
                    out.push((id, row.server_version, payload));
                }
            }
        }
        out
    }

    /// Row ids delivered by segments, in order.
    pub fn segment_ids(&self) -> Vec<String> {
        self.segment_rows().into_iter().map(|(id, _, _)| id).collect()
    }

    /// `commitSeq`s of the delivered commits.
    pub fn commit_seqs(&self) -> Vec<i64> {
        self.commits.iter().map(|c| c.commit_seq).collect()
    }

    /// Changes delivered across commits.
    pub fn change_count(&self) -> usize {
        self.commits.iter().map(|c| c.changes.len()).sum()
    }
}

/// A decoded pull response.
#[derive(Debug, Clone)]
pub struct Pulled {
    pub response: Response,
    pub sections: Vec<Section>,
    /// Encoded response length in bytes.
    pub bytes: usize,
}

impl Pulled {
    /// Decodes `bytes` and splits the frames into sections.
    pub fn from_bytes(bytes: &[u8]) -> Pulled {
        let response = decode_response(bytes).expect("response decodes");
        let mut sections = Vec::new();
        let mut open: Option<(SubStart, Vec<Commit>, Vec<RowsSegment>)> = None;
        let mut refs: Vec<SegmentRef> = Vec::new();
        for frame in &response.frames {
            match frame {
                ResponseFrame::SubStart(s) => open = Some((s.clone(), vec![], vec![])),
                ResponseFrame::Commit(c) => open.as_mut().expect("COMMIT inside a section").1.push(c.clone()),
                ResponseFrame::SegmentInline(bytes) => open
                    .as_mut()
                    .expect("segment inside a section")
                    .2
                    .push(decode_rows_segment(bytes).expect("segment decodes")),
                ResponseFrame::SegmentRef(r) => {
                    assert!(open.is_some(), "SEGMENT_REF inside a section");
                    refs.push(r.clone());
                }
                ResponseFrame::SubEnd(e) => {
                    let (start, commits, segments) = open.take().expect("SUB_END closes a section");
                    let refs = std::mem::take(&mut refs);
                    sections.push(Section { start, commits, segments, refs, end: e.clone() });
                }
                ResponseFrame::PushResult(_) | ResponseFrame::PushResultDetails(_) | ResponseFrame::Lease(_) => {}
                other => panic!("unexpected frame in a pull response: {other:?}"),
            }
        }
        assert!(open.is_none(), "every section is closed");
        Pulled { response, sections, bytes: bytes.len() }
    }

    /// The only section.
    pub fn one(&self) -> &Section {
        assert_eq!(self.sections.len(), 1, "one section expected");
        &self.sections[0]
    }
}

/// `sync_clients.(cursor, subscriptions)` of a client.
pub fn client_record(partition: &str, client_id: &str) -> Option<(i64, Value)> {
    Spi::connect(|c| {
        let t = c
            .select(
                "SELECT cursor, subscriptions FROM syncular.sync_clients WHERE partition = $1 AND client_id = $2",
                None,
                &[partition.into(), client_id.into()],
            )
            .unwrap();
        if t.is_empty() {
            return None;
        }
        let (cursor, subs) = t.first().get_two::<i64, JsonB>().unwrap();
        Some((cursor.unwrap(), subs.unwrap().0))
    })
}

/// Sets the pruning horizon of `partition` (§4.6) as a prune would.
pub fn set_horizon(partition: &str, horizon: i64) {
    run(&format!(
        "UPDATE syncular.sync_partitions SET horizon_seq = {horizon} WHERE partition = {}",
        pgrx::spi::quote_literal(partition)
    ));
}
