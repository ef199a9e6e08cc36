//! Wire-version-3 fixtures, built in-test byte by byte: every new decode
//! rejection fails with its code and a message naming the fault, what must
//! still decode does, version 1/2 behaviour around the new frame type and
//! fields is unchanged, and the encoders refuse what the decoders reject.

use syncular_protocol::constants::*;
use syncular_protocol::envelope::UnknownFrame;
use syncular_protocol::message::{decode_message, encode_message, Message};
use syncular_protocol::render::render_message;
use syncular_protocol::request::*;
use syncular_protocol::response::*;
use syncular_protocol::row_codec::{ColumnLayout, ColumnType, RowValue, TableLayout};
use syncular_protocol::sparse_row::{decode_sparse_row, encode_sparse_row, SparseSlot};
use syncular_protocol::{ErrorCode, ProtocolError};

#[path = "common/bytes.rs"]
mod bytes;
use bytes::{frame, message, payload};

// ---- byte builders ----------------------------------------------------------

fn str_payload(v: &str) -> Vec<u8> {
    payload(|w| w.str(v, "t").unwrap())
}

/// `REQ_HEADER` for wire version `v` (versions 2 and 3 carry `logEpoch`).
fn req_header(v: u16) -> Vec<u8> {
    frame(FRAME_REQ_HEADER, &payload(|w| {
        w.str("client-1", "t").unwrap();
        w.i32(1);
        if v >= 2 {
            w.u8(1);
            w.str("epoch-1", "t").unwrap();
        }
    }))
}

fn pull_header() -> Vec<u8> {
    frame(FRAME_PULL_HEADER, &payload(|w| {
        w.i32(10);
        w.i32(100);
        w.i32(2);
        w.u8(3);
    }))
}

fn push_commit() -> Vec<u8> {
    frame(FRAME_PUSH_COMMIT, &payload(|w| {
        w.str("commit-1", "t").unwrap();
        w.u32(1);
        w.str("tasks", "t").unwrap();
        w.str("row-1", "t").unwrap();
        w.u8(OP_DELETE);
        w.u8(0);
        w.u8(0);
    }))
}

fn round_failure(code: &str) -> Vec<u8> {
    frame(FRAME_ROUND_FAILURE, &str_payload(code))
}

fn req3(frames: &[Vec<u8>]) -> Vec<u8> {
    message(3, MSG_KIND_REQUEST, frames)
}

fn resp_header(v: u16) -> Vec<u8> {
    frame(FRAME_RESP_HEADER, &payload(|w| {
        w.u8(0);
        w.u8(1);
        w.i32(1);
        if v >= 2 {
            w.str("epoch-1", "t").unwrap();
            w.u8(0);
        }
    }))
}

/// A rejected `PUSH_RESULT` with one error record (opIndex 0).
fn rejected_result() -> Vec<u8> {
    frame(FRAME_PUSH_RESULT, &payload(|w| {
        w.str("commit-1", "t").unwrap();
        w.u8(PUSH_STATUS_REJECTED);
        w.u8(0);
        w.u32(1);
        w.i32(0);
        w.u8(RESULT_STATUS_ERROR);
        w.str("app.invalid", "t").unwrap();
        w.str("diagnostic only", "t").unwrap();
        w.u8(0);
    }))
}

/// A `PUSH_RESULT` with one conflict record; `conflict_columns` is written
/// only when given (the v3 layout).
fn conflict_result(conflict_columns: Option<&[u8]>) -> Vec<u8> {
    frame(FRAME_PUSH_RESULT, &payload(|w| {
        w.str("commit-1", "t").unwrap();
        w.u8(PUSH_STATUS_REJECTED);
        w.u8(0);
        w.u32(1);
        w.i32(0);
        w.u8(RESULT_STATUS_CONFLICT);
        w.str("sync.version_conflict", "t").unwrap();
        w.str("stale", "t").unwrap();
        w.raw(&7i64.to_le_bytes());
        w.bytes(&[1, 2], "t").unwrap();
        if let Some(cc) = conflict_columns {
            w.bytes(cc, "t").unwrap();
        }
    }))
}

fn details(json: &str) -> Vec<u8> {
    frame(FRAME_PUSH_RESULT_DETAILS, &payload(|w| {
        w.str("commit-1", "t").unwrap();
        w.u32(1);
        w.i32(0);
        w.str(json, "t").unwrap();
    }))
}

fn unknown(ty: u8) -> Vec<u8> {
    frame(ty, &[1])
}

fn invalid(bytes: &[u8], needle: &str) -> ProtocolError {
    let e = decode_message(bytes).expect_err(needle);
    assert_eq!(e.code, ErrorCode::InvalidRequest, "{e}");
    assert!(e.message.contains(needle), "expected {needle:?} in {:?}", e.message);
    e
}

fn round_trips(bytes: &[u8]) -> Message {
    let m = decode_message(bytes).unwrap_or_else(|e| panic!("decode: {e}"));
    assert_eq!(encode_message(&m).unwrap(), bytes, "re-encode is not byte-identical");
    render_message(bytes).unwrap();
    m
}

// ---- envelope -----------------------------------------------------------------

#[test]
fn wire_versions_1_to_3_decode_and_0_and_4_do_not() {
    for v in [1u16, 2, 3] {
        round_trips(&message(v, MSG_KIND_REQUEST, &[req_header(v), pull_header()]));
        round_trips(&message(v, MSG_KIND_RESPONSE, &[resp_header(v)]));
    }
    for v in [0u16, 4] {
        invalid(&message(v, MSG_KIND_REQUEST, &[req_header(3), pull_header()]), "unsupported wireVersion");
        invalid(&message(v, MSG_KIND_RESPONSE, &[resp_header(3)]), "unsupported wireVersion");
    }
}

#[test]
fn v3_headers_carry_the_epoch_like_v2() {
    let Message::Request(r) = round_trips(&req3(&[req_header(3), pull_header()])) else { panic!() };
    assert_eq!(r.header.log_epoch.as_deref(), Some("epoch-1"));
    let Message::Response(r) = round_trips(&message(3, MSG_KIND_RESPONSE, &[resp_header(3)])) else { panic!() };
    assert_eq!(r.header.epoch, Some(RespEpoch { log_epoch: "epoch-1".into(), reset_required: false }));
    // A v1-shaped header in a v3 message is truncated.
    invalid(&req3(&[req_header(1), pull_header()]), "REQ_HEADER.logEpoch");
}

// ---- ROUND_FAILURE (§1.5) -------------------------------------------------------

#[test]
fn round_failure_decodes_renders_and_round_trips() {
    let bytes = req3(&[req_header(3), round_failure("transport.timeout"), pull_header()]);
    let Message::Request(r) = round_trips(&bytes) else { panic!() };
    assert_eq!(r.round_failure.as_deref(), Some("transport.timeout"));
    let v = render_message(&bytes).unwrap();
    assert_eq!(v["frames"][1], serde_json::json!({"type": "ROUND_FAILURE", "code": "transport.timeout"}));
    // Unknown frames after it keep their place (ROUND_FAILURE is known frame 2).
    let bytes = req3(&[req_header(3), round_failure("a.b"), unknown(0x30), push_commit()]);
    let Message::Request(r) = round_trips(&bytes) else { panic!() };
    assert_eq!(r.unknown[0].after_known_frames, 2);
}

#[test]
fn round_failure_code_syntax() {
    let overlong = format!("a.{}", "b".repeat(63));
    let longest = format!("a.{}", "b".repeat(62));
    for code in ["sync.transport_failed", "client.round_download_missing", "a.b", "a1.b_2.c3", longest.as_str()] {
        assert!(is_round_failure_code(code), "{code}");
        round_trips(&req3(&[req_header(3), round_failure(code), pull_header()]));
    }
    for code in [
        "", "transport", "Transport.timeout", "transport..timeout", "transport.Timeout", ".timeout",
        "transport.timeout.", "transport_t imeout.x", "1transport.timeout", "_transport.timeout",
        "transport.1x", "transport.t-o", "tränsport.x", overlong.as_str(),
    ] {
        assert!(!is_round_failure_code(code), "{code:?}");
        invalid(&req3(&[req_header(3), round_failure(code), pull_header()]), "ROUND_FAILURE.code");
    }
}

#[test]
fn round_failure_grammar_rejections() {
    let h = req_header(3);
    let rf = || round_failure("transport.timeout");
    invalid(&req3(&[h.clone(), rf(), round_failure("transport.failed"), pull_header()]), "duplicate ROUND_FAILURE");
    invalid(&req3(&[h.clone(), push_commit(), rf(), pull_header()]), "must immediately follow REQ_HEADER");
    invalid(&req3(&[h.clone(), pull_header(), rf()]), "must immediately follow REQ_HEADER");
    // An unknown frame counts as a frame for the "immediately after" rule.
    invalid(&req3(&[h.clone(), unknown(0x2f), rf(), pull_header()]), "must immediately follow REQ_HEADER");
    // It does not make a request legal on its own.
    invalid(&req3(&[h.clone(), rf()]), "neither PUSH_COMMIT nor PULL_HEADER");
    // Before the header it is out of order like any known frame.
    invalid(&req3(&[rf(), h.clone(), pull_header()]), "first frame of a request must be REQ_HEADER");
    // Trailing bytes inside the frame.
    let mut p = str_payload("transport.timeout");
    p.push(0);
    invalid(&req3(&[h.clone(), frame(FRAME_ROUND_FAILURE, &p), pull_header()]), "ROUND_FAILURE: 1 trailing byte");
    // Truncated code.
    invalid(&req3(&[h.clone(), frame(FRAME_ROUND_FAILURE, &[9, 0, 0, 0, b'a']), pull_header()]), "ROUND_FAILURE.code");
    // A registered request frame in a response.
    invalid(&message(3, MSG_KIND_RESPONSE, &[resp_header(3), rf()]), "registered for request messages");
}

#[test]
fn frame_0x05_below_v3_is_an_unknown_frame_as_before() {
    for v in [1u16, 2] {
        // Anywhere after the header, any payload, twice: preserved in place.
        let bytes = message(v, MSG_KIND_REQUEST, &[req_header(v), push_commit(), round_failure("NOT A CODE"), unknown(0x05), pull_header()]);
        let Message::Request(r) = round_trips(&bytes) else { panic!() };
        assert_eq!(r.round_failure, None);
        assert_eq!(r.unknown.len(), 2);
        assert!(r.unknown.iter().all(|u| u.frame.frame_type == 0x05 && u.after_known_frames == 2));
        assert_eq!(render_message(&bytes).unwrap()["frames"][2]["type"], "UNKNOWN");
        // In a v1/v2 response too.
        let Message::Response(r) = round_trips(&message(v, MSG_KIND_RESPONSE, &[resp_header(v), unknown(0x05)])) else { panic!() };
        assert!(matches!(&r.frames[0], ResponseFrame::Unknown(u) if u.frame_type == 0x05));
        // Still illegal before the header.
        invalid(&message(v, MSG_KIND_REQUEST, &[unknown(0x05), req_header(v), pull_header()]), "before REQ_HEADER");
    }
}

#[test]
fn round_failure_encoder_refusals() {
    let base = Request {
        wire_version: 3,
        header: ReqHeader { client_id: "c".into(), schema_version: 1, log_epoch: Some("e".into()) },
        round_failure: Some("transport.timeout".into()),
        commits: vec![],
        pull: Some(PullRequest { header: PullHeader { limit_commits: 0, limit_snapshot_rows: 0, max_snapshot_pages: 0, accept: 3 }, subscriptions: vec![] }),
        unknown: vec![],
    };
    let bytes = encode_request(&base).unwrap();
    assert_eq!(decode_request(&bytes).unwrap(), base);
    let refuse = |r: Request, needle: &str| {
        let e = encode_request(&r).expect_err(needle);
        assert!(e.message.starts_with("encoder:") && e.message.contains(needle), "{e}");
    };
    refuse(Request { round_failure: Some("Bad".into()), ..base.clone() }, "ROUND_FAILURE.code");
    refuse(Request { wire_version: 2, ..base.clone() }, "requires wire version 3");
    let placed = |at: usize, ty: u8| vec![PlacedUnknown { after_known_frames: at, frame: UnknownFrame { frame_type: ty, payload: vec![] } }];
    refuse(Request { unknown: placed(1, 0x30), ..base.clone() }, "must immediately follow REQ_HEADER");
    refuse(Request { unknown: placed(2, 0x05), ..base.clone() }, "registered in wire version 3");
    // Below v3, 0x05 is an ordinary preserved unknown frame.
    let v2 = Request { wire_version: 2, round_failure: None, unknown: placed(1, 0x05), ..base.clone() };
    assert_eq!(decode_request(&encode_request(&v2).unwrap()).unwrap(), v2);
}

// ---- PUSH_RESULT conflictColumns (§6.3) --------------------------------------------

#[test]
fn conflict_columns_are_v3_only() {
    let bytes = message(3, MSG_KIND_RESPONSE, &[resp_header(3), conflict_result(Some(&[0b101, 0x01]))]);
    let Message::Response(r) = round_trips(&bytes) else { panic!() };
    let ResponseFrame::PushResult(p) = &r.frames[0] else { panic!() };
    assert!(matches!(&p.results[0], OpResult::Conflict { conflict_columns, .. } if conflict_columns == &[0b101, 1]));
    assert_eq!(render_message(&bytes).unwrap()["frames"][1]["results"][0]["conflictColumns"], "BQE=");
    // v3 without the field is truncated; v2 with it has trailing bytes.
    invalid(&message(3, MSG_KIND_RESPONSE, &[resp_header(3), conflict_result(None)]), "conflict.conflictColumns");
    invalid(&message(2, MSG_KIND_RESPONSE, &[resp_header(2), conflict_result(Some(&[1]))]), "trailing byte");
    // v2 decodes an empty Vec, renders no key, and the v2 encoder drops a
    // non-empty one.
    let v2 = message(2, MSG_KIND_RESPONSE, &[resp_header(2), conflict_result(None)]);
    let Message::Response(mut r) = round_trips(&v2) else { panic!() };
    assert!(render_message(&v2).unwrap()["frames"][1]["results"][0].get("conflictColumns").is_none());
    let ResponseFrame::PushResult(p) = &mut r.frames[0] else { panic!() };
    let OpResult::Conflict { conflict_columns, .. } = &mut p.results[0] else { panic!() };
    assert!(conflict_columns.is_empty());
    *conflict_columns = vec![0xff];
    assert_eq!(encode_response(&r).unwrap(), v2);
}

// ---- PUSH_RESULT_DETAILS (§6.3.1) -----------------------------------------------------

#[test]
fn v3_details_shape_rejections() {
    let resp3 = |json: &str| message(3, MSG_KIND_RESPONSE, &[resp_header(3), rejected_result(), details(json)]);
    round_trips(&resp3(r#"{"reason":"invalid_value"}"#));
    let oversized = format!(r#"{{"reason":"r"{}}}"#, " ".repeat(DETAILS_MAX_ENCODED_BYTES));
    let too_big_refs: Vec<String> = (0..16).map(|i| format!("\"k{i}\":\"{}\"", "v".repeat(256))).collect();
    let too_big_refs = format!(r#"{{"references":{{{}}}}}"#, too_big_refs.join(","));
    for (json, needle) in [
        (r#"{"bogus":1}"#, "unknown member"),
        ("{}", "at least one of"),
        (r#"{"reason":"Not_A_Token"}"#, "stable token"),
        (r#"{"reason":"trailing-"}"#, "stable token"),
        (r#"{"fieldPaths":["a","a"]}"#, "duplicate field path"),
        (r#"{"fieldPaths":["1bad"]}"#, "malformed field path"),
        (r#"{"references":{"parent":" padded"}}"#, "trimmed"),
        (oversized.as_str(), "raw text"),
        (too_big_refs.as_str(), "over 4096"),
    ] {
        let e = invalid(&resp3(json), needle);
        assert!(e.message.starts_with("PUSH_RESULT_DETAILS.detailsJson"), "{e}");
    }
    // The raw-size bound is new in v3: v2 takes the padded text.
    round_trips(&message(2, MSG_KIND_RESPONSE, &[resp_header(2), rejected_result(), details(&oversized)]));
}

#[test]
fn v3_details_and_lease_must_directly_follow() {
    let lease = frame(FRAME_LEASE, &payload(|w| {
        w.str("l", "t").unwrap();
        w.raw(&5i64.to_le_bytes());
    }));
    let ok = r#"{"reason":"r"}"#;
    for v in [1u16, 2] {
        // Before v3 unknown frames are transparent to ordering.
        round_trips(&message(v, MSG_KIND_RESPONSE, &[resp_header(v), rejected_result(), unknown(0xfe), details(ok)]));
        round_trips(&message(v, MSG_KIND_RESPONSE, &[resp_header(v), unknown(0x30), lease.clone()]));
    }
    invalid(
        &message(3, MSG_KIND_RESPONSE, &[resp_header(3), rejected_result(), unknown(0xfe), details(ok)]),
        "PUSH_RESULT_DETAILS must immediately follow a PUSH_RESULT",
    );
    invalid(&message(3, MSG_KIND_RESPONSE, &[resp_header(3), unknown(0x30), lease.clone()]), "LEASE must come at most once");
    invalid(&message(3, MSG_KIND_RESPONSE, &[resp_header(3), details(ok)]), "PUSH_RESULT_DETAILS must immediately follow");
    round_trips(&message(3, MSG_KIND_RESPONSE, &[resp_header(3), lease, rejected_result(), details(ok), unknown(0xfe)]));
}

#[test]
fn v3_writer_refuses_what_the_v3_decoder_rejects() {
    let header = RespHeader { epoch: Some(RespEpoch { log_epoch: "e".into(), reset_required: false }), ..RespHeader::default() };
    let result = PushResult {
        client_commit_id: "c".into(),
        status: PushStatus::Rejected,
        commit_seq: None,
        results: vec![OpResult::Error { op_index: 0, code: "x.y".into(), message: "m".into(), retryable: false }],
    };
    let d = |json: &str| PushResultDetails {
        client_commit_id: "c".into(),
        entries: vec![PushResultDetail { op_index: 0, details_json: json.into() }],
    };
    let mut w = ResponseWriter::new(Vec::new(), 3, &header).unwrap();
    w.push_result(&result).unwrap();
    let padded = format!(r#"{{"reason":"r"{}}}"#, " ".repeat(DETAILS_MAX_ENCODED_BYTES));
    let e = w.push_result_details(&d(&padded)).unwrap_err();
    assert!(e.message.starts_with("encoder:"), "{e}");
    w.unknown(&UnknownFrame { frame_type: 0x30, payload: vec![] }).unwrap();
    let e = w.push_result_details(&d(r#"{"reason":"r"}"#)).unwrap_err();
    assert!(e.message.contains("immediately follow"), "{e}");
    // The refused frames left the writer usable and the output valid.
    let bytes = w.finish().unwrap();
    round_trips(&bytes);
    // At v3 the writer refuses a preserved unknown frame of type 0x05.
    let mut w = ResponseWriter::new(Vec::new(), 3, &header).unwrap();
    assert!(w.unknown(&UnknownFrame { frame_type: 0x05, payload: vec![] }).is_err());
}

// ---- sparse rows (§2.4, wire version 3) ------------------------------------------------

/// The 9-column table of the reference's own sparse-row tests: every column
/// type, both bitmaps with padding bits.
fn sparse_layout() -> TableLayout {
    TableLayout::new(vec![
        ColumnLayout::new("id", ColumnType::String, false),
        ColumnLayout::new("title", ColumnType::String, true),
        ColumnLayout::new("body", ColumnType::String, false),
        ColumnLayout::new("count", ColumnType::Integer, true),
        ColumnLayout::new("score", ColumnType::Float, false),
        ColumnLayout::new("done", ColumnType::Boolean, false),
        ColumnLayout::new("meta", ColumnType::Json, true),
        ColumnLayout::new("blob", ColumnType::Bytes, true),
        ColumnLayout::new("doc", ColumnType::Crdt, true),
    ])
}

fn partial_row() -> Vec<SparseSlot> {
    let mut row = vec![SparseSlot::Absent; 9];
    row[0] = SparseSlot::Value(RowValue::String("n-1".into()));
    row[1] = SparseSlot::Null;
    row[6] = SparseSlot::Value(RowValue::Json("{\"tags\": [\"a\"]}".into()));
    row
}

fn sparse_invalid(bytes: &[u8], needle: &str) {
    let e = decode_sparse_row(&sparse_layout(), 0, bytes).expect_err(needle);
    assert_eq!(e.code, ErrorCode::InvalidRequest, "{e}");
    assert!(e.message.contains(needle), "expected {needle:?} in {:?}", e.message);
}

#[test]
fn sparse_row_partial_and_full() {
    let l = sparse_layout();
    let bytes = encode_sparse_row(&l, 0, &partial_row()).unwrap();
    assert_eq!(&bytes[..3], &[0b0100_0011, 0x00, 0b0000_0010]);
    assert_eq!(decode_sparse_row(&l, 0, &bytes).unwrap(), partial_row());
    let full: Vec<SparseSlot> = vec![
        SparseSlot::Value(RowValue::String("n-2".into())),
        SparseSlot::Null,
        SparseSlot::Value(RowValue::String("body".into())),
        SparseSlot::Value(RowValue::Integer(-7)),
        SparseSlot::Value(RowValue::Float(0.125)),
        SparseSlot::Value(RowValue::Boolean(false)),
        SparseSlot::Value(RowValue::Json("{\"k\":true}".into())),
        SparseSlot::Value(RowValue::Bytes(vec![0, 1, 254, 255])),
        SparseSlot::Value(RowValue::Crdt(vec![1, 2, 0xfe])),
    ];
    let bytes = encode_sparse_row(&l, 0, &full).unwrap();
    assert_eq!(&bytes[..2], &[0xff, 0x01]);
    assert_eq!(decode_sparse_row(&l, 0, &bytes).unwrap(), full);
}

#[test]
fn sparse_row_rejections() {
    // Presence bit 9 of a 9-column table is padding.
    sparse_invalid(&[0b0000_0001, 0b0000_0010], "presence bitmap has a set padding bit");
    // Only column 0 present, so null-bitmap bit 3 is padding.
    sparse_invalid(&[0b0000_0001, 0x00, 0b0000_1000], "null bit for an absent column");
    // Present indices 0 and 1 are id and title; bit 0 marks id NULL.
    sparse_invalid(&[0b0000_0011, 0x00, 0b0000_0001], "null bit set for non-nullable column \"id\"");
    // Title only, no id.
    let mut no_pk = vec![0b0000_0010, 0x00, 0x00];
    no_pk.extend(str_payload("unnamed"));
    sparse_invalid(&no_pk, "missing the primary-key column \"id\"");
    // Trailing bytes.
    let mut bytes = encode_sparse_row(&sparse_layout(), 0, &partial_row()).unwrap();
    bytes.push(0);
    sparse_invalid(&bytes, "trailing byte");
    // Truncations: presence bitmap, null bitmap, a value.
    sparse_invalid(&[0b0000_0001], "presence bitmap");
    sparse_invalid(&[0b0000_0001, 0x00], "null bitmap");
    sparse_invalid(&[0b0000_0001, 0x00, 0x00, 3, 0, 0, 0, b'a'], "id");
    // Every full-row value check applies: JSON text, safe integer, bool byte.
    let row_with = |i: usize, v: Vec<u8>| {
        let mut b = vec![1 | (1 << i), 0x00, 0x00];
        b.extend(str_payload("n"));
        b.extend(v);
        b
    };
    sparse_invalid(&row_with(6, str_payload("{nope")), "meta");
    sparse_invalid(&row_with(3, (1i64 << 53).to_le_bytes().to_vec()), "count");
    sparse_invalid(&row_with(5, vec![2]), "done");
    // A primary-key index outside the layout.
    let e = decode_sparse_row(&sparse_layout(), 9, &[0xff, 0x01]).unwrap_err();
    assert!(e.message.contains("outside the layout"), "{e}");
}

#[test]
fn sparse_row_blob_ref_checks_match_the_full_row_codec() {
    let l = TableLayout::new(vec![
        ColumnLayout::new("id", ColumnType::String, false),
        ColumnLayout::new("file", ColumnType::BlobRef, true),
    ]);
    let id = format!("sha256:{}", "a".repeat(64));
    let row = |json: String| vec![SparseSlot::Value(RowValue::String("r".into())), SparseSlot::Value(RowValue::BlobRef(json))];
    let ok = format!(r#"{{"blobId":"{id}","byteLength":9007199254740991}}"#);
    let bytes = encode_sparse_row(&l, 0, &row(ok)).unwrap();
    decode_sparse_row(&l, 0, &bytes).unwrap();
    for bad in [
        format!(r#"{{"blobId":"{id}","byteLength":9007199254740992}}"#),
        format!(r#"{{"byteLength":1,"blobId":"{id}"}}"#),
        format!(r#"{{"blobId":"{id}","blobId":"{id}","byteLength":1}}"#),
    ] {
        assert!(encode_sparse_row(&l, 0, &row(bad.clone())).is_err(), "{bad}");
        let mut b = vec![0b11, 0x00];
        b.extend(str_payload("r"));
        b.extend(str_payload(&bad));
        assert!(decode_sparse_row(&l, 0, &b).is_err(), "{bad}");
    }
}
