//! Golden vectors for wire version 3, committed under `tests/vectors_v3/`
//! in the layout of the shared `ssp2-vectors` folder (`<kind>/<case>.bin`,
//! `<kind>/<case>.json` — the §11.1 rendering —, `<kind>/invalid/<case>.bin`,
//! `<kind>/manifest.json` naming each case and each invalid case's code),
//! with one more kind, `push/`: standalone sparse rows (§2.4), whose manifest
//! carries the column table and primary key (a case may override both).
//!
//! The cases are the byte fixtures of `syncular-ssp2` 0.49.2's own tests
//! (`tests/round_failure.rs`, `tests/push_result_details.rs`, the sparse-row
//! unit tests of `src/segment.rs`), rebuilt here through that crate's
//! encoder and renderer (dev-dependency `ssp2_v3`) — never hand-hexed. An
//! invalid case the reference encoder refuses to write (a bad
//! `ROUND_FAILURE.code`) is written as an unknown frame and retagged `0x05`.
//!
//! `committed_vectors_match_the_reference_generator` regenerates every file
//! in memory and compares it with the committed one (to rewrite them, run
//! that test alone: `SSP2_V3_VECTORS_REGENERATE=1 cargo test -p
//! syncular-protocol --test vectors_v3 committed_vectors`); the other tests
//! check *our* codec against the committed files: decode, render
//! deep-equal, re-encode byte-identical, every invalid case fails with its
//! code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use ssp2_v3::model::{self as r, Frame, OpResult as ROpResult, PushResultDetail as RDetail, PushStatus as RPushStatus};
use ssp2_v3::primitives::{RawJson, Writer as RWriter};
use ssp2_v3::segment::{self as rs, Column, ColumnType as RType, ColumnValue as CV, SparseSlot as RSlot};
use syncular_protocol::message::{decode_message, encode_message};
use syncular_protocol::render::render_decoded;
use syncular_protocol::row_codec::{ColumnLayout, ColumnType, TableLayout};
use syncular_protocol::sparse_row::{decode_sparse_row, encode_sparse_row, render_sparse_row};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors_v3")
}

// ---------------------------------------------------------------------------
// The generator (reference codec only)
// ---------------------------------------------------------------------------

/// One kind's files: path (relative to the kind folder) → bytes.
#[derive(Default)]
struct Kind {
    files: BTreeMap<String, Vec<u8>>,
    cases: Vec<Value>,
    invalid: Vec<Value>,
}

impl Kind {
    fn valid(&mut self, name: &str, bin: Vec<u8>, rendered: &Value, extra: Option<Value>) {
        let mut case = json!({"name": name, "bin": format!("{name}.bin"), "json": format!("{name}.json")});
        if let Some(Value::Object(extra)) = extra {
            case.as_object_mut().unwrap().extend(extra);
        }
        self.files.insert(format!("{name}.bin"), bin);
        self.files.insert(format!("{name}.json"), pretty(rendered));
        self.cases.push(case);
    }

    fn invalid(&mut self, name: &str, bin: Vec<u8>, code: &str, extra: Option<Value>) {
        let mut case = json!({"name": name, "bin": format!("invalid/{name}.bin"), "error": code});
        if let Some(Value::Object(extra)) = extra {
            case.as_object_mut().unwrap().extend(extra);
        }
        self.files.insert(format!("invalid/{name}.bin"), bin);
        self.invalid.push(case);
    }

    fn finish(mut self, head: Value) -> BTreeMap<String, Vec<u8>> {
        let mut manifest = head;
        manifest["cases"] = Value::Array(self.cases);
        manifest["invalid"] = Value::Array(self.invalid);
        self.files.insert("manifest.json".into(), pretty(&manifest));
        self.files
    }
}

fn pretty(v: &Value) -> Vec<u8> {
    let mut s = serde_json::to_string_pretty(v).unwrap();
    s.push('\n');
    s.into_bytes()
}

fn message(kind: ssp2_v3::MsgKind, frames: Vec<Frame>) -> ssp2_v3::Message {
    ssp2_v3::Message { wire_version: ssp2_v3::decode::WIRE_VERSION, msg_kind: kind, frames }
}

/// Encodes a message the reference accepts and returns (bytes, rendering),
/// checking the reference decodes it back byte-identically.
fn reference_valid(m: &ssp2_v3::Message) -> (Vec<u8>, Value) {
    let bytes = ssp2_v3::encode_message(m);
    let back = ssp2_v3::decode_message(&bytes).unwrap_or_else(|e| panic!("reference rejects its own vector: {e}"));
    assert_eq!(&back, m);
    (bytes, ssp2_v3::render_message(&back))
}

/// The reference's error code for bytes it must reject.
fn reference_code(bytes: &[u8]) -> &'static str {
    ssp2_v3::decode_message(bytes).expect_err("reference accepts an invalid vector").code.as_str()
}

/// Replaces the type byte of the first frame of type `from` with `to`.
fn retag(mut bytes: Vec<u8>, from: u8, to: u8) -> Vec<u8> {
    let mut at = 8;
    while at + 5 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        if bytes[at] == from {
            bytes[at] = to;
            return bytes;
        }
        at += 5 + len;
    }
    panic!("no frame of type {from:#04x}");
}

fn req_header() -> Frame {
    Frame::ReqHeader { client_id: "client-1".into(), schema_version: 1, log_epoch: Some("epoch-1".into()) }
}

fn pull_header() -> Frame {
    Frame::PullHeader { limit_commits: 10, limit_snapshot_rows: 100, max_snapshot_pages: 2, accept: 0x03 }
}

fn push_commit(ops: Vec<r::Operation>) -> Frame {
    Frame::PushCommit { client_commit_id: "commit-1".into(), operations: ops }
}

fn delete_op() -> r::Operation {
    r::Operation { table: "tasks".into(), row_id: "row-1".into(), op: r::Op::Delete, base_version: None, payload: None }
}

fn rf(code: &str) -> Frame {
    Frame::RoundFailure { code: code.into() }
}

fn str_bytes(s: &str) -> Vec<u8> {
    let mut w = RWriter::new();
    w.str(s);
    w.into_bytes()
}

fn requests() -> BTreeMap<String, Vec<u8>> {
    use ssp2_v3::MsgKind::Request;
    let mut k = Kind::default();
    let valid = |k: &mut Kind, name: &str, frames: Vec<Frame>| {
        let (bin, rendered) = reference_valid(&message(Request, frames));
        k.valid(name, bin, &rendered, None);
    };
    valid(&mut k, "round-failure-pull", vec![req_header(), rf("transport.timeout"), pull_header()]);
    valid(&mut k, "round-failure-push-pull", vec![req_header(), rf("sync.transport_failed"), push_commit(vec![delete_op()]), pull_header()]);
    for code in ["client.round_download_missing", "a.b", "a1.b_2.c3"] {
        valid(&mut k, &format!("round-failure-code-{}", code.replace(['.', '_'], "-")), vec![req_header(), rf(code), pull_header()]);
    }
    let longest = format!("a.{}", "b".repeat(62));
    valid(&mut k, "round-failure-code-64-bytes", vec![req_header(), rf(&longest), pull_header()]);
    valid(&mut k, "no-round-failure", vec![req_header(), pull_header()]);
    valid(
        &mut k,
        "round-failure-then-unknown",
        vec![req_header(), rf("transport.timeout"), Frame::Unknown { frame_type: 0x2f, payload: vec![1] }, pull_header()],
    );
    let upsert = r::Operation {
        table: "tasks".into(),
        row_id: "n-1".into(),
        op: r::Op::Upsert,
        base_version: Some(4),
        payload: Some(rs::encode_sparse_row(&sparse_columns(), 0, &partial_row())),
    };
    valid(&mut k, "sparse-upsert", vec![req_header(), push_commit(vec![upsert]), pull_header()]);

    let invalid = |k: &mut Kind, name: &str, bin: Vec<u8>| {
        let code = reference_code(&bin);
        k.invalid(name, bin, code, None);
    };
    let enc = |frames: Vec<Frame>| ssp2_v3::encode_message(&message(Request, frames));
    invalid(&mut k, "round-failure-twice", enc(vec![req_header(), rf("transport.timeout"), rf("transport.failed"), pull_header()]));
    invalid(&mut k, "round-failure-after-push-commit", enc(vec![req_header(), push_commit(vec![delete_op()]), rf("transport.timeout"), pull_header()]));
    invalid(&mut k, "round-failure-after-pull-header", enc(vec![req_header(), pull_header(), rf("transport.timeout")]));
    invalid(
        &mut k,
        "round-failure-after-unknown-frame",
        enc(vec![req_header(), Frame::Unknown { frame_type: 0x2f, payload: vec![1] }, rf("transport.timeout"), pull_header()]),
    );
    invalid(&mut k, "round-failure-without-content", enc(vec![req_header(), rf("transport.timeout")]));
    // Payloads the reference encoder refuses to write: an unknown frame
    // carrying them, retagged ROUND_FAILURE.
    let raw_rf = |payload: Vec<u8>| {
        retag(enc(vec![req_header(), Frame::Unknown { frame_type: 0x30, payload }, pull_header()]), 0x30, 0x05)
    };
    let mut trailing = str_bytes("transport.timeout");
    trailing.push(0);
    invalid(&mut k, "round-failure-trailing-byte", raw_rf(trailing));
    let overlong = format!("a.{}", "b".repeat(63));
    let bad_codes = [
        ("empty", ""),
        ("one-segment", "transport"),
        ("uppercase-first", "Transport.timeout"),
        ("empty-segment", "transport..timeout"),
        ("uppercase-later", "transport.Timeout"),
        ("leading-dot", ".timeout"),
        ("trailing-dot", "transport.timeout."),
        ("space", "transport_t imeout.x"),
        ("digit-first", "1transport.timeout"),
        ("underscore-first", "_transport.timeout"),
        ("65-bytes", overlong.as_str()),
    ];
    for (slug, code) in bad_codes {
        invalid(&mut k, &format!("round-failure-code-{slug}"), raw_rf(str_bytes(code)));
    }
    for v in [0u16, 4] {
        let mut bin = enc(vec![req_header(), pull_header()]);
        bin[4..6].copy_from_slice(&v.to_le_bytes());
        invalid(&mut k, &format!("wire-version-{v}"), bin);
    }
    k.finish(json!({"kind": "request", "wireVersion": 3}))
}

fn resp_header() -> Frame {
    Frame::RespHeader {
        required_schema_version: None,
        latest_schema_version: Some(1),
        log_epoch: Some("epoch-1".into()),
        reset_required: Some(false),
    }
}

fn rejected() -> Frame {
    Frame::PushResult {
        client_commit_id: "commit-1".into(),
        status: RPushStatus::Rejected,
        commit_seq: None,
        results: vec![ROpResult::Error { op_index: 0, code: "app.invalid".into(), message: "diagnostic only".into(), retryable: false }],
    }
}

fn details(raw: &str) -> Frame {
    Frame::PushResultDetails {
        client_commit_id: "commit-1".into(),
        entries: vec![RDetail { op_index: 0, details: RawJson(raw.into()) }],
    }
}

fn conflict(conflict_columns: Vec<u8>) -> Frame {
    let mut w = RWriter::new();
    rs::encode_row(&mut w, &sparse_columns(), &full_row().into_iter().map(|s| match s {
        RSlot::Value(v) => Some(v),
        _ => None,
    }).collect());
    Frame::PushResult {
        client_commit_id: "commit-1".into(),
        status: RPushStatus::Rejected,
        commit_seq: None,
        results: vec![ROpResult::Conflict {
            op_index: 0,
            code: "sync.version_conflict".into(),
            message: "present columns moved past baseVersion".into(),
            server_version: 7,
            server_row: w.into_bytes(),
            conflict_columns,
        }],
    }
}

fn responses() -> BTreeMap<String, Vec<u8>> {
    use ssp2_v3::MsgKind::Response;
    let mut k = Kind::default();
    let valid = |k: &mut Kind, name: &str, frames: Vec<Frame>| {
        let (bin, rendered) = reference_valid(&message(Response, frames));
        k.valid(name, bin, &rendered, None);
    };
    valid(&mut k, "push-details-companion", vec![resp_header(), rejected(), details(r#"{"reason":"invalid_value"}"#)]);
    valid(
        &mut k,
        "push-details-every-member",
        vec![
            resp_header(),
            rejected(),
            details(r#"{"fieldPaths":["title","meta.due_at"],"reason":"outside_schedule.day","requiredAction":"edit-fields","references":{"parent":"T-1","a.b":"x y"}}"#),
        ],
    );
    valid(&mut k, "push-details-then-unknown", vec![resp_header(), rejected(), details(r#"{"reason":"r"}"#), Frame::Unknown { frame_type: 0xfe, payload: vec![1] }]);
    valid(&mut k, "push-conflict-columns", vec![resp_header(), conflict(vec![0b0100_0010, 0x00])]);
    valid(&mut k, "push-conflict-no-columns", vec![resp_header(), conflict(vec![])]);

    let invalid = |k: &mut Kind, name: &str, frames: Vec<Frame>| {
        let bin = ssp2_v3::encode_message(&message(Response, frames));
        let code = reference_code(&bin);
        k.invalid(name, bin, code, None);
    };
    let oversized = format!(r#"{{"reason":"r"{}}}"#, " ".repeat(4096));
    for (slug, raw) in [
        ("unknown-member", r#"{"bogus":1}"#),
        ("empty", "{}"),
        ("not-a-token", r#"{"reason":"Not_A_Token"}"#),
        ("trailing-separator", r#"{"reason":"trailing-"}"#),
        ("duplicate-path", r#"{"fieldPaths":["a","a"]}"#),
        ("bad-path", r#"{"fieldPaths":["1bad"]}"#),
        ("padded-reference", r#"{"references":{"parent":" padded"}}"#),
        ("oversized", oversized.as_str()),
    ] {
        invalid(&mut k, &format!("details-{slug}"), vec![resp_header(), rejected(), details(raw)]);
    }
    let ok = || details(r#"{"reason":"invalid_value"}"#);
    invalid(&mut k, "details-after-unknown-frame", vec![resp_header(), rejected(), Frame::Unknown { frame_type: 0xfe, payload: vec![1] }, ok()]);
    invalid(&mut k, "details-without-push-result", vec![resp_header(), ok()]);
    invalid(
        &mut k,
        "lease-after-unknown-frame",
        vec![resp_header(), Frame::Unknown { frame_type: 0x30, payload: vec![] }, Frame::Lease { lease_id: "l".into(), expires_at_ms: 5 }],
    );
    invalid(&mut k, "round-failure-in-response", vec![resp_header(), rf("transport.timeout")]);
    k.finish(json!({"kind": "response", "wireVersion": 3}))
}

/// The reference's 9-column sparse-row table (`src/segment.rs` tests).
fn sparse_columns() -> Vec<Column> {
    [
        ("id", RType::String, false),
        ("title", RType::String, true),
        ("body", RType::String, false),
        ("count", RType::Integer, true),
        ("score", RType::Float, false),
        ("done", RType::Boolean, false),
        ("meta", RType::Json, true),
        ("blob", RType::Bytes, true),
        ("doc", RType::Crdt, true),
    ]
    .into_iter()
    .map(|(name, ty, nullable)| Column { name: name.into(), ty, nullable })
    .collect()
}

fn partial_row() -> rs::SparseRow {
    let mut row = vec![RSlot::Absent; 9];
    row[0] = RSlot::Value(CV::String("n-1".into()));
    row[1] = RSlot::Null;
    row[6] = RSlot::Value(CV::Json(RawJson("{\"tags\": [\"a\"]}".into())));
    row
}

fn full_row() -> rs::SparseRow {
    vec![
        RSlot::Value(CV::String("n-2".into())),
        RSlot::Null,
        RSlot::Value(CV::String("body".into())),
        RSlot::Value(CV::Integer(-7)),
        RSlot::Value(CV::Float(0.125)),
        RSlot::Value(CV::Boolean(false)),
        RSlot::Value(CV::Json(RawJson("{\"k\":true}".into()))),
        RSlot::Value(CV::Bytes(vec![0, 1, 254, 255])),
        RSlot::Value(CV::Crdt(vec![0x01, 0x02, 0xfe])),
    ]
}

fn column_table(columns: &[Column]) -> Value {
    Value::Array(columns.iter().map(|c| json!({"name": c.name, "type": c.ty.name(), "nullable": c.nullable})).collect())
}

fn push_rows() -> BTreeMap<String, Vec<u8>> {
    let mut k = Kind::default();
    let cols = sparse_columns();
    let valid = |k: &mut Kind, name: &str, cols: &[Column], row: rs::SparseRow, extra: Option<Value>| {
        let bin = rs::encode_sparse_row(cols, 0, &row);
        let back = rs::decode_sparse_row(cols, 0, &bin).expect("reference decodes its own row");
        assert_eq!(back, row);
        k.valid(name, bin, &ssp2_v3::render_sparse_row(cols, &back), extra);
    };
    valid(&mut k, "partial-row", &cols, partial_row(), None);
    valid(&mut k, "full-row", &cols, full_row(), None);
    let mut pk_only = vec![RSlot::Absent; 9];
    pk_only[0] = RSlot::Value(CV::String("n-3".into()));
    valid(&mut k, "primary-key-only", &cols, pk_only, None);
    let nulls: rs::SparseRow = cols
        .iter()
        .enumerate()
        .map(|(i, c)| match (i, c.nullable) {
            (0, _) => RSlot::Value(CV::String("n-4".into())),
            (_, true) => RSlot::Null,
            _ => RSlot::Absent,
        })
        .collect();
    valid(&mut k, "present-nulls", &cols, nulls, None);
    for count in [1usize, 7, 8, 9] {
        let cols: Vec<Column> =
            (0..count).map(|i| Column { name: format!("c{i}"), ty: RType::String, nullable: true }).collect();
        let row = (0..count)
            .map(|i| match i {
                i if i > 0 && i % 3 == 0 => RSlot::Absent,
                1 => RSlot::Null,
                i => RSlot::Value(CV::String(format!("v{i}"))),
            })
            .collect();
        let extra = json!({"columns": column_table(&cols), "primaryKey": "c0"});
        valid(&mut k, &format!("boundary-{count}-columns"), &cols, row, Some(extra));
    }

    let invalid = |k: &mut Kind, name: &str, bin: Vec<u8>| {
        let code = rs::decode_sparse_row(&cols, 0, &bin).expect_err("reference accepts an invalid row").code.as_str();
        k.invalid(name, bin, code, None);
    };
    invalid(&mut k, "presence-padding-bit", vec![0b0000_0001, 0b0000_0010]);
    invalid(&mut k, "null-bit-for-absent-column", vec![0b0000_0001, 0x00, 0b0000_1000]);
    invalid(&mut k, "null-for-non-nullable-column", vec![0b0000_0011, 0x00, 0b0000_0001]);
    let mut w = RWriter::new();
    w.raw(&[0b0000_0010, 0x00, 0x00]);
    w.str("unnamed");
    invalid(&mut k, "missing-primary-key", w.into_bytes());
    let mut trailing = rs::encode_sparse_row(&cols, 0, &partial_row());
    trailing.push(0);
    invalid(&mut k, "trailing-byte", trailing);
    let mut w = RWriter::new();
    w.raw(&[0b0100_0001, 0x00, 0x00]);
    w.str("n-5");
    w.str("{nope");
    invalid(&mut k, "json-not-json", w.into_bytes());
    invalid(&mut k, "truncated-null-bitmap", vec![0b0000_0001, 0x00]);
    k.finish(json!({"kind": "push", "columns": column_table(&cols), "primaryKey": "id"}))
}

fn generate() -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for (kind, files) in [("request", requests()), ("response", responses()), ("push", push_rows())] {
        for (rel, bytes) in files {
            out.insert(Path::new(kind).join(rel), bytes);
        }
    }
    out
}

#[test]
fn committed_vectors_match_the_reference_generator() {
    let generated = generate();
    let root = dir();
    if std::env::var("SSP2_V3_VECTORS_REGENERATE").is_ok_and(|v| v == "1") {
        let _ = std::fs::remove_dir_all(&root);
        for (rel, bytes) in &generated {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, bytes).unwrap();
        }
        eprintln!("wrote {} files under {}", generated.len(), root.display());
    }
    for (rel, bytes) in &generated {
        let committed = std::fs::read(root.join(rel))
            .unwrap_or_else(|e| panic!("{}: {e} (run with SSP2_V3_VECTORS_REGENERATE=1)", rel.display()));
        assert!(&committed == bytes, "{} differs from the reference generator's output", rel.display());
    }
    let mut on_disk = 0;
    for kind in ["request", "response", "push"] {
        for sub in ["", "invalid"] {
            if let Ok(rd) = std::fs::read_dir(root.join(kind).join(sub)) {
                on_disk += rd.filter(|e| e.as_ref().unwrap().path().is_file()).count();
            }
        }
    }
    assert_eq!(on_disk, generated.len(), "stray files under tests/vectors_v3");
}

// ---------------------------------------------------------------------------
// Our codec against the committed files
// ---------------------------------------------------------------------------

fn manifest(kind: &str) -> Value {
    serde_json::from_slice(&std::fs::read(dir().join(kind).join("manifest.json")).unwrap()).unwrap()
}

fn read(kind: &str, rel: &Value) -> Vec<u8> {
    std::fs::read(dir().join(kind).join(rel.as_str().unwrap())).unwrap()
}

fn run_message_kind(kind: &str) -> (usize, usize) {
    let m = manifest(kind);
    let cases = m["cases"].as_array().unwrap();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let bin = read(kind, &case["bin"]);
        let want: Value = serde_json::from_slice(&read(kind, &case["json"])).unwrap();
        let msg = decode_message(&bin).unwrap_or_else(|e| panic!("{kind}/{name}: {e}"));
        assert_eq!(msg.wire_version(), 3, "{kind}/{name}");
        assert_eq!(render_decoded(&msg).unwrap(), want, "{kind}/{name}: rendering differs");
        assert_eq!(encode_message(&msg).unwrap(), bin, "{kind}/{name}: re-encode differs");
    }
    let invalid = m["invalid"].as_array().unwrap();
    for case in invalid {
        let name = case["name"].as_str().unwrap();
        let e = decode_message(&read(kind, &case["bin"])).expect_err(name);
        assert_eq!(e.code.as_str(), case["error"].as_str().unwrap(), "{kind}/invalid/{name}: {e}");
    }
    (cases.len(), invalid.len())
}

#[test]
fn v3_request_vectors() {
    let (valid, invalid) = run_message_kind("request");
    assert!(valid >= 9 && invalid >= 19, "{valid} valid / {invalid} invalid");
}

#[test]
fn v3_response_vectors() {
    let (valid, invalid) = run_message_kind("response");
    assert!(valid >= 5 && invalid >= 12, "{valid} valid / {invalid} invalid");
}

fn layout_of(columns: &Value) -> TableLayout {
    TableLayout::new(
        columns
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                ColumnLayout::new(
                    c["name"].as_str().unwrap(),
                    ColumnType::from_name(c["type"].as_str().unwrap()).unwrap(),
                    c["nullable"].as_bool().unwrap(),
                )
            })
            .collect(),
    )
}

#[test]
fn v3_push_sparse_row_vectors() {
    let m = manifest("push");
    let table = |case: &Value| {
        let layout = layout_of(if case.get("columns").is_some() { &case["columns"] } else { &m["columns"] });
        let pk = case.get("primaryKey").unwrap_or(&m["primaryKey"]).as_str().unwrap();
        let pk = layout.index_of(pk).unwrap();
        (layout, pk)
    };
    let cases = m["cases"].as_array().unwrap();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let (layout, pk) = table(case);
        let bin = read("push", &case["bin"]);
        let want: Value = serde_json::from_slice(&read("push", &case["json"])).unwrap();
        let row = decode_sparse_row(&layout, pk, &bin).unwrap_or_else(|e| panic!("push/{name}: {e}"));
        assert_eq!(render_sparse_row(&layout, &row), want, "push/{name}: rendering differs");
        assert_eq!(encode_sparse_row(&layout, pk, &row).unwrap(), bin, "push/{name}: re-encode differs");
    }
    let invalid = m["invalid"].as_array().unwrap();
    for case in invalid {
        let name = case["name"].as_str().unwrap();
        let (layout, pk) = table(case);
        let e = decode_sparse_row(&layout, pk, &read("push", &case["bin"])).expect_err(name);
        assert_eq!(e.code.as_str(), case["error"].as_str().unwrap(), "push/invalid/{name}: {e}");
    }
    assert!(cases.len() >= 8 && invalid.len() >= 7);
}
