//! Wire version 3 parity against the published reference codec
//! `syncular-ssp2 = "=0.49.2"` (dev-dependency `ssp2_v3`), which speaks only
//! version 3:
//!
//! 1. random valid v3 messages (requests with `ROUND_FAILURE`, responses
//!    with `conflictColumns` and `PUSH_RESULT_DETAILS`) encoded by ours
//!    decode with theirs to the same value, and their encoder writes the
//!    same bytes from that value;
//! 2. their encoding of the same value decodes with ours to the value, with
//!    the same §11.1 rendering;
//! 3. random byte mutations are accepted or rejected alike (same code, same
//!    value and rendering when both accept);
//! 4. the same three for sparse rows (§2.4) over random layouts.
//!
//! `PARITY_CASES` (or `SSP2_PARITY_CASES`; default 10,000) cases per
//! property. Disagreements that hit a documented difference
//! (`KNOWN_DIFFERENCES.md`, "Wire version 3") are counted and left out of
//! the comparison; nothing else is.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use ssp2_v3::model as r;
use ssp2_v3::primitives::RawJson;
use ssp2_v3::segment as rs;
use syncular_protocol::frame_fields::Op;
use syncular_protocol::message::{decode_message, encode_message, Message};
use syncular_protocol::primitives::MAX_SAFE_INTEGER;
use syncular_protocol::render::render_decoded;
use syncular_protocol::request::*;
use syncular_protocol::response::*;
use syncular_protocol::row_codec::{ColumnLayout, ColumnType, RowValue, TableLayout};
use syncular_protocol::sparse_row::{decode_sparse_row, encode_sparse_row, render_sparse_row, SparseRow, SparseSlot};
use syncular_protocol::{ErrorCode, ProtocolError};

#[path = "common/message_gen.rs"]
mod message_gen;
use message_gen::{apply, mutation};

fn cases() -> u32 {
    ["PARITY_CASES", "SSP2_PARITY_CASES"]
        .iter()
        .find_map(|k| std::env::var(k).ok().and_then(|v| v.parse().ok()))
        .unwrap_or(10_000)
}

fn runner() -> TestRunner {
    TestRunner::new(Config { cases: cases(), failure_persistence: None, ..Config::default() })
}

// ---------------------------------------------------------------------------
// Our model → theirs (0.49.2)
// ---------------------------------------------------------------------------

fn op_to(o: Op) -> r::Op {
    match o {
        Op::Upsert => r::Op::Upsert,
        Op::Delete => r::Op::Delete,
    }
}

fn json_to(j: &Option<String>) -> Option<RawJson> {
    j.clone().map(RawJson)
}

fn to_theirs(m: &Message) -> ssp2_v3::Message {
    match m {
        Message::Request(req) => {
            let frames = req
                .frames()
                .expect("valid positions")
                .into_iter()
                .map(|f| match f {
                    RequestFrameRef::ReqHeader(h) => r::Frame::ReqHeader {
                        client_id: h.client_id.clone(),
                        schema_version: h.schema_version,
                        log_epoch: h.log_epoch.clone(),
                    },
                    RequestFrameRef::RoundFailure(code) => r::Frame::RoundFailure { code: code.to_owned() },
                    RequestFrameRef::PushCommit(c) => r::Frame::PushCommit {
                        client_commit_id: c.client_commit_id.clone(),
                        operations: c
                            .operations
                            .iter()
                            .map(|o| r::Operation {
                                table: o.table.clone(),
                                row_id: o.row_id.clone(),
                                op: op_to(o.op),
                                base_version: o.base_version,
                                payload: o.payload.clone(),
                            })
                            .collect(),
                    },
                    RequestFrameRef::PullHeader(p) => r::Frame::PullHeader {
                        limit_commits: p.limit_commits,
                        limit_snapshot_rows: p.limit_snapshot_rows,
                        max_snapshot_pages: p.max_snapshot_pages,
                        accept: p.accept,
                    },
                    RequestFrameRef::Subscription(s) => r::Frame::Subscription {
                        id: s.id.clone(),
                        table: s.table.clone(),
                        scopes: s.scopes.clone(),
                        params: json_to(&s.params),
                        cursor: s.cursor,
                        bootstrap_state: json_to(&s.bootstrap_state),
                    },
                    RequestFrameRef::Unknown(u) => {
                        r::Frame::Unknown { frame_type: u.frame_type, payload: u.payload.clone() }
                    }
                })
                .collect();
            ssp2_v3::Message { wire_version: req.wire_version, msg_kind: ssp2_v3::MsgKind::Request, frames }
        }
        Message::Response(resp) => {
            let mut frames = vec![r::Frame::RespHeader {
                required_schema_version: resp.header.required_schema_version,
                latest_schema_version: resp.header.latest_schema_version,
                log_epoch: resp.header.epoch.as_ref().map(|e| e.log_epoch.clone()),
                reset_required: resp.header.epoch.as_ref().map(|e| e.reset_required),
            }];
            frames.extend(resp.frames.iter().map(response_frame_to));
            ssp2_v3::Message { wire_version: resp.wire_version, msg_kind: ssp2_v3::MsgKind::Response, frames }
        }
    }
}

fn response_frame_to(f: &ResponseFrame) -> r::Frame {
    match f {
        ResponseFrame::Lease(l) => r::Frame::Lease { lease_id: l.lease_id.clone(), expires_at_ms: l.expires_at_ms },
        ResponseFrame::PushResult(p) => r::Frame::PushResult {
            client_commit_id: p.client_commit_id.clone(),
            status: match p.status {
                PushStatus::Applied => r::PushStatus::Applied,
                PushStatus::Cached => r::PushStatus::Cached,
                PushStatus::Rejected => r::PushStatus::Rejected,
            },
            commit_seq: p.commit_seq,
            results: p
                .results
                .iter()
                .map(|x| match x.clone() {
                    OpResult::Applied { op_index } => r::OpResult::Applied { op_index },
                    OpResult::Conflict { op_index, code, message, server_version, server_row, conflict_columns } => {
                        r::OpResult::Conflict { op_index, code, message, server_version, server_row, conflict_columns }
                    }
                    OpResult::Error { op_index, code, message, retryable } => {
                        r::OpResult::Error { op_index, code, message, retryable }
                    }
                })
                .collect(),
        },
        ResponseFrame::PushResultDetails(d) => r::Frame::PushResultDetails {
            client_commit_id: d.client_commit_id.clone(),
            entries: d
                .entries
                .iter()
                .map(|e| r::PushResultDetail { op_index: e.op_index, details: RawJson(e.details_json.clone()) })
                .collect(),
        },
        ResponseFrame::SubStart(s) => r::Frame::SubStart {
            id: s.id.clone(),
            status: match s.status {
                SubStatus::Active => r::SubStatus::Active,
                SubStatus::Revoked => r::SubStatus::Revoked,
                SubStatus::Reset => r::SubStatus::Reset,
            },
            reason_code: s.reason_code.clone(),
            effective_scopes: s.effective_scopes.clone(),
            bootstrap: s.bootstrap,
        },
        ResponseFrame::Commit(c) => r::Frame::Commit {
            commit_seq: c.commit_seq,
            created_at_ms: c.created_at_ms,
            actor_id: c.actor_id.clone(),
            tables: c.tables.clone(),
            changes: c
                .changes
                .iter()
                .map(|ch| r::Change {
                    table_index: ch.table_index,
                    row_id: ch.row_id.clone(),
                    op: op_to(ch.op),
                    row_version: ch.row_version,
                    scopes: ch.scopes.clone(),
                    row: ch.row.clone(),
                })
                .collect(),
        },
        ResponseFrame::SegmentRef(s) => r::Frame::SegmentRef {
            segment_id: s.segment_id.clone(),
            media_type: match s.media_type {
                MediaType::Rows => r::MediaType::Rows,
                MediaType::Sqlite => r::MediaType::Sqlite,
            },
            table: s.table.clone(),
            byte_length: s.byte_length,
            row_count: s.row_count,
            as_of_commit_seq: s.as_of_commit_seq,
            scope_digest: s.scope_digest.clone(),
            row_cursor: s.row_cursor.clone(),
            next_row_cursor: s.next_row_cursor.clone(),
            url: s.url.clone(),
            url_expires_at_ms: s.url_expires_at_ms,
        },
        ResponseFrame::SegmentInline(b) => r::Frame::SegmentInline { payload: b.clone() },
        ResponseFrame::SubEnd(s) => {
            r::Frame::SubEnd { next_cursor: s.next_cursor, bootstrap_state: json_to(&s.bootstrap_state) }
        }
        ResponseFrame::Error(e) => r::Frame::Error {
            code: e.code.clone(),
            message: e.message.clone(),
            category: e.category.clone(),
            retryable: e.retryable,
            recommended_action: e.recommended_action.clone(),
            details: json_to(&e.details),
        },
        ResponseFrame::Unknown(u) => r::Frame::Unknown { frame_type: u.frame_type, payload: u.payload.clone() },
    }
}

fn v3_message() -> impl Strategy<Value = Message> {
    message_gen::message(3..=3)
}

// ---------------------------------------------------------------------------
// Known differences (KNOWN_DIFFERENCES.md, "Wire version 3")
// ---------------------------------------------------------------------------

/// Names the documented difference behind a split verdict (ours accepted /
/// theirs rejected or the reverse); `None` = a real bug. `theirs` is their
/// decoded message when they accepted.
fn known_difference(ours: &Result<Message, ProtocolError>, theirs: Option<&ssp2_v3::Message>) -> Option<&'static str> {
    match (ours, theirs) {
        (Ok(m), None) => {
            if m.wire_version() != 3 {
                return Some("mutated wireVersion 1/2: outside the 0.49.2 window");
            }
            let texts = match m {
                Message::Request(r) => r
                    .pull
                    .iter()
                    .flat_map(|p| p.subscriptions.iter())
                    .flat_map(|s| s.params.iter().chain(s.bootstrap_state.iter()))
                    .cloned()
                    .collect::<Vec<_>>(),
                Message::Response(r) => r
                    .frames
                    .iter()
                    .flat_map(|f| match f {
                        ResponseFrame::SubEnd(e) => e.bootstrap_state.clone(),
                        ResponseFrame::Error(e) => e.details.clone(),
                        _ => None,
                    })
                    .collect(),
            };
            if texts.iter().any(|t| serde_json::from_str::<serde_json::Value>(t).is_err()) {
                return Some("KD8 JSON text serde_json::Value cannot hold");
            }
            match m {
                Message::Request(req) => {
                    (req.header.log_epoch.as_deref() == Some("")).then_some("KD1 empty REQ_HEADER.logEpoch")
                }
                Message::Response(resp) => {
                    if resp.header.epoch.as_ref().is_some_and(|e| e.log_epoch.is_empty()) {
                        return Some("KD4 empty RESP_HEADER.logEpoch");
                    }
                    let mut last: Option<&PushResult> = None;
                    for f in &resp.frames {
                        match f {
                            ResponseFrame::Lease(l) if l.lease_id.is_empty() => return Some("KD5 empty LEASE.leaseId"),
                            ResponseFrame::PushResult(p) => last = Some(p),
                            ResponseFrame::PushResultDetails(d) => {
                                if d.client_commit_id.is_empty() {
                                    return Some("KD7 empty PUSH_RESULT_DETAILS.clientCommitId");
                                }
                                let p = last.expect("grammar: details follow a result");
                                let errors: Vec<i32> = p
                                    .results
                                    .iter()
                                    .filter(|r| matches!(r, OpResult::Error { .. }))
                                    .map(OpResult::op_index)
                                    .collect();
                                if p.status != PushStatus::Rejected
                                    || p.client_commit_id != d.client_commit_id
                                    || d.entries.iter().any(|e| !errors.contains(&e.op_index))
                                {
                                    return Some("KD2 PUSH_RESULT_DETAILS cross-checked against its PUSH_RESULT");
                                }
                            }
                            _ => {}
                        }
                    }
                    None
                }
            }
        }
        (Err(e), Some(t)) => {
            // Ours rejects a detailsJson theirs takes: a repeated member
            // name (their map collapses it) or a U+FEFF at either end of a
            // reference value (JavaScript's trim removes it, Rust's does not).
            let prefix = syncular_protocol::rejection_details::DETAILS_ERROR_PREFIX;
            if e.message.starts_with(prefix) {
                let details = t.frames.iter().flat_map(|f| match f {
                    r::Frame::PushResultDetails { entries, .. } => entries.iter().map(|e| e.details.0.clone()).collect(),
                    _ => vec![],
                });
                for d in details {
                    let dup = syncular_protocol::rejection_details::validate_details_json(&d)
                        .is_err_and(|e| e.message.contains("duplicate member"));
                    if dup || d.contains('\u{feff}') {
                        return Some("KD9 v3 detailsJson: repeated member or U+FEFF-padded reference");
                    }
                }
            }
            None
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Message properties
// ---------------------------------------------------------------------------

#[test]
fn ours_encodes_v3_theirs_decodes_same_value_and_bytes() {
    runner()
        .run(&v3_message(), |m| {
            let ours = encode_message(&m).expect("ours encodes a valid v3 message");
            let theirs = ssp2_v3::decode_message(&ours)
                .map_err(|e| TestCaseError::fail(format!("0.49.2 rejects ours: {e}")))?;
            let expected = to_theirs(&m);
            prop_assert_eq!(&theirs, &expected);
            prop_assert_eq!(ssp2_v3::encode_message(&expected), ours, "encoders differ");
            Ok(())
        })
        .unwrap();
}

#[test]
fn theirs_encodes_v3_ours_decodes_same_value_and_rendering() {
    runner()
        .run(&v3_message(), |m| {
            let theirs = to_theirs(&m);
            let bytes = ssp2_v3::encode_message(&theirs);
            let decoded = decode_message(&bytes).map_err(|e| TestCaseError::fail(format!("ours rejects 0.49.2: {e}")))?;
            prop_assert_eq!(&decoded, &m);
            prop_assert_eq!(render_decoded(&decoded).unwrap(), ssp2_v3::render_message(&theirs));
            Ok(())
        })
        .unwrap();
}

/// The generator reaches every v3 addition (so the properties above are not
/// vacuous about them).
#[test]
fn v3_generator_covers_the_new_fields() {
    let mut runner = runner();
    let (mut rf, mut cc, mut details) = (0, 0, 0);
    for _ in 0..2_000 {
        let m = v3_message().new_tree(&mut runner).unwrap().current();
        match &m {
            Message::Request(r) => rf += usize::from(r.round_failure.is_some()),
            Message::Response(r) => {
                for f in &r.frames {
                    match f {
                        ResponseFrame::PushResult(p) => {
                            cc += p
                                .results
                                .iter()
                                .filter(|x| matches!(x, OpResult::Conflict { conflict_columns, .. } if !conflict_columns.is_empty()))
                                .count()
                        }
                        ResponseFrame::PushResultDetails(_) => details += 1,
                        _ => {}
                    }
                }
            }
        }
    }
    assert!(rf > 100 && cc > 100 && details > 20, "ROUND_FAILURE {rf}, conflictColumns {cc}, details {details}");
}

/// The bytes a `Set` mutation favours at wire version 3 (0x05: `ROUND_FAILURE`).
const V3_SET_BYTES: &[u8] = &[0, 1, 2, 3, 5, 0xff];

fn their_code(e: &ssp2_v3::DecodeError) -> ErrorCode {
    match e.code {
        ssp2_v3::ErrorCode::InvalidRequest => ErrorCode::InvalidRequest,
        ssp2_v3::ErrorCode::EmptyCommit => ErrorCode::EmptyCommit,
    }
}

#[test]
fn v3_mutations_are_accepted_or_rejected_alike() {
    let accepted = AtomicUsize::new(0);
    let tally = Mutex::new(BTreeMap::<&'static str, usize>::new());
    runner()
        .run(&(v3_message(), proptest::collection::vec(mutation(V3_SET_BYTES), 1..4)), |(m, muts)| {
            let mut bytes = encode_message(&m).unwrap();
            for mu in &muts {
                apply(&mut bytes, mu);
            }
            let ours = decode_message(&bytes);
            let theirs = ssp2_v3::decode_message(&bytes);
            match (&ours, &theirs) {
                (Ok(o), Ok(t)) => {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    prop_assert_eq!(render_decoded(o).unwrap(), ssp2_v3::render_message(t));
                    prop_assert_eq!(&to_theirs(o), t);
                    prop_assert_eq!(&encode_message(o).unwrap(), &bytes, "accepted bytes re-encode exactly");
                }
                (Err(o), Err(t)) => prop_assert_eq!(o.code, their_code(t), "ours: {} / theirs: {}", o, t),
                _ => match known_difference(&ours, theirs.as_ref().ok()) {
                    Some(kd) => *tally.lock().unwrap().entry(kd).or_default() += 1,
                    None => {
                        return Err(TestCaseError::fail(format!(
                            "verdicts differ on {:02x?}: ours {:?}, theirs {:?}",
                            bytes,
                            ours.as_ref().map(|_| "accepted").map_err(|e| e.to_string()),
                            theirs.as_ref().map(|_| "accepted").map_err(|e| e.to_string()),
                        )))
                    }
                },
            }
            Ok(())
        })
        .unwrap();
    eprintln!(
        "v3 mutation parity: {} cases, {} accepted by both, known differences {:?}",
        cases(),
        accepted.load(Ordering::Relaxed),
        tally.lock().unwrap()
    );
}

// ---------------------------------------------------------------------------
// Sparse rows
// ---------------------------------------------------------------------------

fn json_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("{}".to_string()),
        Just(" { \"tags\" : [\"a\", 1, -2.5e3, null, true] } ".to_string()),
        Just("\"s\\u00e9\\ud83d\\ude00\"".to_string()),
        (any::<i32>(), "[a-z\u{e9}]{0,5}").prop_map(|(n, s)| format!("{{\"n\":{n},\"s\":\"{s}\"}}")),
    ]
}

fn blob_ref_text() -> impl Strategy<Value = String> {
    ("[0-9a-f]{64}", 0..=MAX_SAFE_INTEGER, prop::option::of("[a-z/]{0,5}"), prop::option::of(".{0,5}")).prop_map(
        |(hex, len, media, name)| {
            let mut m = serde_json::Map::new();
            m.insert("blobId".into(), format!("sha256:{hex}").into());
            m.insert("byteLength".into(), len.into());
            if let Some(x) = media {
                m.insert("mediaType".into(), x.into());
            }
            if let Some(x) = name {
                m.insert("name".into(), x.into());
            }
            serde_json::Value::Object(m).to_string()
        },
    )
}

fn value(ty: ColumnType) -> BoxedStrategy<RowValue> {
    match ty {
        ColumnType::String => ".{0,8}".prop_map(RowValue::String).boxed(),
        ColumnType::Integer => (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).prop_map(RowValue::Integer).boxed(),
        ColumnType::Float => any::<u64>().prop_map(|b| RowValue::Float(f64::from_bits(b))).boxed(),
        ColumnType::Boolean => any::<bool>().prop_map(RowValue::Boolean).boxed(),
        ColumnType::Json => json_text().prop_map(RowValue::Json).boxed(),
        ColumnType::Bytes => prop::collection::vec(any::<u8>(), 0..10).prop_map(RowValue::Bytes).boxed(),
        ColumnType::BlobRef => blob_ref_text().prop_map(RowValue::BlobRef).boxed(),
        ColumnType::Crdt => prop::collection::vec(any::<u8>(), 0..10).prop_map(RowValue::Crdt).boxed(),
    }
}

/// A layout of 1–18 columns (both bitmaps cross byte boundaries), a primary
/// key index, and a sparse row with the key present.
fn sparse_case() -> impl Strategy<Value = (TableLayout, usize, SparseRow)> {
    let cols = prop::collection::vec(((1u8..=8).prop_map(|t| ColumnType::from_tag(t).unwrap()), any::<bool>()), 1..19);
    (cols, any::<prop::sample::Index>()).prop_flat_map(|(cols, pk)| {
        let layout = TableLayout::new(
            cols.iter().enumerate().map(|(i, (ty, nullable))| ColumnLayout::new(format!("c{i}"), *ty, *nullable)).collect(),
        );
        let pk = pk.index(layout.len());
        let slots: Vec<BoxedStrategy<SparseSlot>> = layout
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let v = value(c.ty).prop_map(SparseSlot::Value);
                match (i == pk, c.nullable) {
                    (true, _) => v.boxed(),
                    (false, true) => prop_oneof![Just(SparseSlot::Absent), Just(SparseSlot::Null), v].boxed(),
                    (false, false) => prop_oneof![Just(SparseSlot::Absent), v].boxed(),
                }
            })
            .collect();
        (Just(layout), Just(pk), slots)
    })
}

fn columns_to(layout: &TableLayout) -> Vec<rs::Column> {
    layout
        .columns
        .iter()
        .map(|c| rs::Column { name: c.name.clone(), ty: rs::ColumnType::from_tag(c.ty.tag()).unwrap(), nullable: c.nullable })
        .collect()
}

fn value_to(v: &RowValue) -> rs::ColumnValue {
    match v {
        RowValue::String(s) => rs::ColumnValue::String(s.clone()),
        RowValue::Integer(n) => rs::ColumnValue::Integer(*n),
        RowValue::Float(f) => rs::ColumnValue::Float(*f),
        RowValue::Boolean(b) => rs::ColumnValue::Boolean(*b),
        RowValue::Json(j) => rs::ColumnValue::Json(RawJson(j.clone())),
        RowValue::Bytes(b) => rs::ColumnValue::Bytes(b.clone()),
        RowValue::BlobRef(j) => rs::ColumnValue::BlobRef(RawJson(j.clone())),
        RowValue::Crdt(b) => rs::ColumnValue::Crdt(b.clone()),
    }
}

fn sparse_to(row: &[SparseSlot]) -> rs::SparseRow {
    row.iter()
        .map(|s| match s {
            SparseSlot::Absent => rs::SparseSlot::Absent,
            SparseSlot::Null => rs::SparseSlot::Null,
            SparseSlot::Value(v) => rs::SparseSlot::Value(value_to(v)),
        })
        .collect()
}

/// Slot equality with floats compared by bit pattern (NaN payloads too).
fn same_sparse(a: &[SparseSlot], b: &[SparseSlot]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (SparseSlot::Value(RowValue::Float(p)), SparseSlot::Value(RowValue::Float(q))) => p.to_bits() == q.to_bits(),
            _ => x == y,
        })
}

fn same_theirs(a: &rs::SparseRow, b: &rs::SparseRow) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (rs::SparseSlot::Value(rs::ColumnValue::Float(p)), rs::SparseSlot::Value(rs::ColumnValue::Float(q))) => {
                p.to_bits() == q.to_bits()
            }
            _ => x == y,
        })
}

#[test]
fn sparse_rows_encode_and_decode_alike_both_ways() {
    runner()
        .run(&sparse_case(), |(layout, pk, row)| {
            let cols = columns_to(&layout);
            let ours = encode_sparse_row(&layout, pk, &row).expect("ours encodes a valid sparse row");
            let theirs_row = sparse_to(&row);
            prop_assert_eq!(&rs::encode_sparse_row(&cols, pk, &theirs_row), &ours, "encoders differ");
            let back = rs::decode_sparse_row(&cols, pk, &ours).map_err(|e| TestCaseError::fail(format!("0.49.2 rejects ours: {e}")))?;
            prop_assert!(same_theirs(&back, &theirs_row), "0.49.2 decoded another row");
            let mine = decode_sparse_row(&layout, pk, &ours).map_err(|e| TestCaseError::fail(format!("ours rejects: {e}")))?;
            prop_assert!(same_sparse(&mine, &row), "ours decoded another row");
            prop_assert_eq!(render_sparse_row(&layout, &mine), ssp2_v3::render_sparse_row(&cols, &back));
            Ok(())
        })
        .unwrap();
}

/// Data-half known differences on a row both would otherwise judge alike:
/// (KD-data 1) JSON text serde_json's `Value` cannot hold — ours accepts;
/// (KD-data 3) a `blob_ref` with a repeated key — ours rejects.
fn sparse_known_difference(ours: &Result<SparseRow, ProtocolError>, theirs: &Result<rs::SparseRow, ssp2_v3::DecodeError>) -> Option<&'static str> {
    match (ours, theirs) {
        (Ok(row), Err(_)) => row
            .iter()
            .any(|s| matches!(s, SparseSlot::Value(RowValue::Json(t) | RowValue::BlobRef(t)) if serde_json::from_str::<serde_json::Value>(t).is_err()))
            .then_some("data KD1 JSON text serde_json::Value cannot hold"),
        (Err(_), Ok(row)) => row
            .iter()
            .any(|s| match s {
                rs::SparseSlot::Value(rs::ColumnValue::BlobRef(t)) => {
                    ["\"blobId\"", "\"byteLength\"", "\"mediaType\"", "\"name\""].iter().any(|k| t.0.matches(k).count() > 1)
                }
                _ => false,
            })
            .then_some("data KD3 blob_ref with a repeated key"),
        _ => None,
    }
}

#[test]
fn sparse_row_mutations_are_accepted_or_rejected_alike() {
    let accepted = AtomicUsize::new(0);
    let tally = Mutex::new(BTreeMap::<&'static str, usize>::new());
    runner()
        .run(&(sparse_case(), proptest::collection::vec(mutation(V3_SET_BYTES), 1..4)), |((layout, pk, row), muts)| {
            let mut bytes = encode_sparse_row(&layout, pk, &row).unwrap();
            for mu in &muts {
                apply(&mut bytes, mu);
            }
            let cols = columns_to(&layout);
            let ours = decode_sparse_row(&layout, pk, &bytes);
            let theirs = rs::decode_sparse_row(&cols, pk, &bytes);
            if let Err(e) = &ours {
                prop_assert_eq!(e.code, ErrorCode::InvalidRequest);
            }
            match (&ours, &theirs) {
                (Ok(o), Ok(t)) => {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    prop_assert!(same_theirs(&sparse_to(o), t), "both accept, values differ");
                    prop_assert_eq!(&encode_sparse_row(&layout, pk, o).unwrap(), &bytes, "accepted bytes re-encode exactly");
                    prop_assert_eq!(render_sparse_row(&layout, o), ssp2_v3::render_sparse_row(&cols, t));
                }
                (Err(_), Err(t)) => prop_assert_eq!(their_code(t), ErrorCode::InvalidRequest),
                _ => match sparse_known_difference(&ours, &theirs) {
                    Some(kd) => *tally.lock().unwrap().entry(kd).or_default() += 1,
                    None => {
                        return Err(TestCaseError::fail(format!(
                            "verdicts differ on {bytes:02x?}: ours {:?}, theirs {:?}",
                            ours.as_ref().map(|_| "accepted").map_err(|e| e.to_string()),
                            theirs.as_ref().map(|_| "accepted").map_err(|e| e.to_string()),
                        )))
                    }
                },
            }
            Ok(())
        })
        .unwrap();
    eprintln!(
        "sparse-row mutation parity: {} cases, {} accepted by both, known differences {:?}",
        cases(),
        accepted.load(Ordering::Relaxed),
        tally.lock().unwrap()
    );
}

// ---------------------------------------------------------------------------
// Every v3 known difference is real
// ---------------------------------------------------------------------------

/// KD9 (v3 detailsJson): one message per half of the item, decided
/// differently by the two codecs and classified by [`known_difference`].
#[test]
fn every_v3_known_difference_is_real() {
    let details = |json: &str| {
        let header = RespHeader {
            required_schema_version: None,
            latest_schema_version: None,
            epoch: Some(RespEpoch { log_epoch: "e".into(), reset_required: false }),
        };
        let rejected = PushResult {
            client_commit_id: "c".into(),
            status: PushStatus::Rejected,
            commit_seq: None,
            results: vec![OpResult::Error { op_index: 0, code: "x.y".into(), message: "m".into(), retryable: false }],
        };
        let m = to_theirs(&Message::Response(Response { wire_version: 3, header, frames: vec![ResponseFrame::PushResult(rejected)] }));
        let mut frames = m.frames;
        frames.push(r::Frame::PushResultDetails {
            client_commit_id: "c".into(),
            entries: vec![r::PushResultDetail { op_index: 0, details: RawJson(json.into()) }],
        });
        ssp2_v3::encode_message(&ssp2_v3::Message { frames, ..m })
    };
    for json in [r#"{"reason":"a","reason":"b"}"#, "{\"references\":{\"k\":\"\u{feff}v\"}}"] {
        let bytes = details(json);
        let ours = decode_message(&bytes);
        let theirs = ssp2_v3::decode_message(&bytes);
        assert!(ours.is_err() && theirs.is_ok(), "{json}: ours {ours:?}");
        let kd = known_difference(&ours, theirs.as_ref().ok()).expect("classified");
        assert!(kd.starts_with("KD9"), "{kd}");
    }
}
