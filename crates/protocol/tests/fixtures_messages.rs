//! Our own message fixtures, built in-test byte by byte, so the codec is
//! tested without the shared vectors folder: every frame type round-trips,
//! every §1.7 decode error fails with its named code, everything §1.7 leaves
//! to request validation decodes, and the encoders refuse illegal messages.

use syncular_protocol::constants::*;
use syncular_protocol::envelope::UnknownFrame;
use syncular_protocol::frame_fields::Op;
use syncular_protocol::message::{decode_message, encode_message, Message};
use syncular_protocol::primitives::Writer;
use syncular_protocol::render::render_message;
use syncular_protocol::request::*;
use syncular_protocol::response::*;
use syncular_protocol::row_codec::{ColumnLayout, ColumnType, RowValue, TableLayout};
use syncular_protocol::segment::{encode_rows_segment, RowsSegment, SegmentHeader, SegmentRow};
use syncular_protocol::ErrorCode;

#[path = "common/bytes.rs"]
mod bytes;
use bytes::{frame, message, payload};

// ---- byte builders ----------------------------------------------------------

fn s(w: &mut Writer, v: &str) {
    w.str(v, "t").unwrap();
}

fn i64w(w: &mut Writer, v: i64) {
    w.raw(&v.to_le_bytes());
}

fn req(frames: &[Vec<u8>]) -> Vec<u8> {
    message(1, MSG_KIND_REQUEST, frames)
}

fn resp(frames: &[Vec<u8>]) -> Vec<u8> {
    message(1, MSG_KIND_RESPONSE, frames)
}

fn req_header_v1(client_id: &str, schema_version: i32) -> Vec<u8> {
    frame(FRAME_REQ_HEADER, &payload(|w| {
        s(w, client_id);
        w.i32(schema_version);
    }))
}

fn hdr() -> Vec<u8> {
    req_header_v1("client-a", 1)
}

/// One operation record: (table, rowId, op byte, baseVersion, payload).
fn op_record(w: &mut Writer, op: u8, base: Option<i64>, pay: Option<&[u8]>) {
    s(w, "notes");
    s(w, "n-1");
    w.u8(op);
    match base {
        Some(b) => {
            w.u8(1);
            i64w(w, b);
        }
        None => w.u8(0),
    }
    match pay {
        Some(p) => {
            w.u8(1);
            w.bytes(p, "p").unwrap();
        }
        None => w.u8(0),
    }
}

/// (op byte, baseVersion, payload) of one operation record.
type OpSpec<'a> = (u8, Option<i64>, Option<&'a [u8]>);

fn push_commit(id: &str, ops: &[OpSpec<'_>]) -> Vec<u8> {
    frame(FRAME_PUSH_COMMIT, &payload(|w| {
        s(w, id);
        w.u32(ops.len() as u32);
        for (op, base, pay) in ops {
            op_record(w, *op, *base, *pay);
        }
    }))
}

fn upsert_commit() -> Vec<u8> {
    push_commit("c-1", &[(OP_UPSERT, Some(3), Some(b"\x00row"))])
}

fn pull_header(accept: u8) -> Vec<u8> {
    frame(FRAME_PULL_HEADER, &payload(|w| {
        w.i32(0);
        w.i32(0);
        w.i32(0);
        w.u8(accept);
    }))
}

fn scope_map_bytes(w: &mut Writer, entries: &[(&str, &[&str])]) {
    w.u32(entries.len() as u32);
    for (k, vs) in entries {
        s(w, k);
        w.u32(vs.len() as u32);
        for v in *vs {
            s(w, v);
        }
    }
}

fn subscription_with(scopes: &[(&str, &[&str])], params: Option<&str>, cursor: i64) -> Vec<u8> {
    frame(FRAME_SUBSCRIPTION, &payload(|w| {
        s(w, "sub-1");
        s(w, "notes");
        scope_map_bytes(w, scopes);
        match params {
            Some(p) => {
                w.u8(1);
                s(w, p);
            }
            None => w.u8(0),
        }
        i64w(w, cursor);
        w.u8(1);
        s(w, r#"{"asOfCommitSeq":5}"#);
    }))
}

fn subscription() -> Vec<u8> {
    subscription_with(&[("project", &["p1", "p2"])], Some(r#"{"a":[1,2]}"#), -1)
}

fn resp_header_v1() -> Vec<u8> {
    frame(FRAME_RESP_HEADER, &payload(|w| {
        w.u8(1);
        w.i32(3);
        w.u8(0);
    }))
}

fn resp_header_v2(epoch: &str, reset: u8) -> Vec<u8> {
    frame(FRAME_RESP_HEADER, &payload(|w| {
        w.u8(0);
        w.u8(0);
        s(w, epoch);
        w.u8(reset);
    }))
}

fn lease(id: &str) -> Vec<u8> {
    frame(FRAME_LEASE, &payload(|w| {
        s(w, id);
        i64w(w, 1_782_994_500_000);
    }))
}

fn push_result_rejected(id: &str) -> Vec<u8> {
    frame(FRAME_PUSH_RESULT, &payload(|w| {
        s(w, id);
        w.u8(PUSH_STATUS_REJECTED);
        w.u8(0);
        w.u32(2);
        w.i32(0);
        w.u8(RESULT_STATUS_CONFLICT);
        s(w, "sync.version_conflict");
        s(w, "stale");
        i64w(w, 7);
        w.bytes(b"\x01\x02", "r").unwrap();
        w.i32(1);
        w.u8(RESULT_STATUS_ERROR);
        s(w, "sync.forbidden");
        s(w, "no");
        w.u8(0);
    }))
}

fn push_result_applied(status: u8, seq: Option<i64>) -> Vec<u8> {
    frame(FRAME_PUSH_RESULT, &payload(|w| {
        s(w, "c-1");
        w.u8(status);
        match seq {
            Some(v) => {
                w.u8(1);
                i64w(w, v);
            }
            None => w.u8(0),
        }
        w.u32(1);
        w.i32(0);
        w.u8(RESULT_STATUS_APPLIED);
    }))
}

fn details(id: &str, entries: &[(i32, &str)]) -> Vec<u8> {
    frame(FRAME_PUSH_RESULT_DETAILS, &payload(|w| {
        s(w, id);
        w.u32(entries.len() as u32);
        for (i, j) in entries {
            w.i32(*i);
            s(w, j);
        }
    }))
}

fn sub_start_with(status: u8, bootstrap: u8) -> Vec<u8> {
    frame(FRAME_SUB_START, &payload(|w| {
        s(w, "sub-1");
        w.u8(status);
        s(w, if status == SUB_STATUS_ACTIVE { "" } else { "sync.scope_revoked" });
        scope_map_bytes(w, &[("project", &["p1"])]);
        w.u8(bootstrap);
    }))
}

fn sub_start() -> Vec<u8> {
    sub_start_with(SUB_STATUS_ACTIVE, 0)
}

fn change(w: &mut Writer, table_index: u16, op: u8, row_version: Option<i64>, row: Option<&[u8]>) {
    w.u16(table_index);
    s(w, "n-1");
    w.u8(op);
    match row_version {
        Some(v) => {
            w.u8(1);
            i64w(w, v);
        }
        None => w.u8(0),
    }
    w.u32(1);
    s(w, "project");
    s(w, "p1");
    match row {
        Some(r) => {
            w.u8(1);
            w.bytes(r, "r").unwrap();
        }
        None => w.u8(0),
    }
}

fn commit_with(changes: impl FnOnce(&mut Writer)) -> Vec<u8> {
    frame(FRAME_COMMIT, &payload(|w| {
        i64w(w, 43);
        i64w(w, 1_782_993_600_000);
        s(w, "actor-1");
        w.u32(2);
        s(w, "notes");
        s(w, "tasks");
        changes(w);
    }))
}

fn commit() -> Vec<u8> {
    commit_with(|w| {
        w.u32(2);
        change(w, 0, OP_UPSERT, Some(1), Some(b"\x00abc"));
        change(w, 1, OP_DELETE, None, None);
    })
}

fn segment_ref_with(url: Option<&str>, expires: Option<i64>, media: u8) -> Vec<u8> {
    frame(FRAME_SEGMENT_REF, &payload(|w| {
        s(w, "sha256:abcd");
        w.u8(media);
        s(w, "notes");
        i64w(w, 171);
        i64w(w, 1);
        i64w(w, 100);
        s(w, "5a99");
        w.u8(1);
        s(w, "n-0250");
        w.u8(0);
        match url {
            Some(u) => {
                w.u8(1);
                s(w, u);
            }
            None => w.u8(0),
        }
        match expires {
            Some(e) => {
                w.u8(1);
                i64w(w, e);
            }
            None => w.u8(0),
        }
    }))
}

fn segment_ref() -> Vec<u8> {
    segment_ref_with(Some("https://x/seg"), Some(1_782_994_500_000), MEDIA_TYPE_SQLITE)
}

fn valid_segment() -> Vec<u8> {
    let layout = TableLayout::new(vec![
        ColumnLayout::new("id", ColumnType::String, false),
        ColumnLayout::new("n", ColumnType::Integer, true),
    ]);
    encode_rows_segment(&RowsSegment {
        header: SegmentHeader { table: "notes".into(), schema_version: 1, layout },
        blocks: vec![vec![SegmentRow {
            server_version: 1,
            values: vec![Some(RowValue::String("n-1".into())), None],
        }]],
    })
    .unwrap()
}

fn segment_inline() -> Vec<u8> {
    frame(FRAME_SEGMENT_INLINE, &valid_segment())
}

fn sub_end() -> Vec<u8> {
    frame(FRAME_SUB_END, &payload(|w| {
        i64w(w, 57);
        w.u8(1);
        s(w, r#"{"tableIndex":0, "rowCursor":"n-1"}"#);
    }))
}

fn error_frame() -> Vec<u8> {
    frame(FRAME_ERROR, &payload(|w| {
        s(w, "sync.missing_scopes");
        s(w, "boom");
        s(w, "internal");
        w.u8(0);
        s(w, "inspectServer");
        w.u8(1);
        s(w, r#"{"table":"notes"}"#);
    }))
}

fn unknown(ty: u8) -> Vec<u8> {
    frame(ty, b"\xde\xad")
}

// ---- assertions ---------------------------------------------------------------

#[track_caller]
fn round_trips(bytes: &[u8]) -> Message {
    let msg = decode_message(bytes).unwrap_or_else(|e| panic!("decode failed: {e}"));
    assert_eq!(encode_message(&msg).expect("encode"), bytes, "re-encode differs");
    let rendered = render_message(bytes).expect("render");
    assert_eq!(rendered["magic"], "SSP2");
    msg
}

#[track_caller]
fn fails(bytes: &[u8], code: ErrorCode, needle: &str) {
    let e = decode_message(bytes).expect_err("must not decode");
    assert_eq!(e.code, code, "{e}");
    assert!(
        e.message.to_lowercase().contains(&needle.to_lowercase()),
        "error {e:?} lacks {needle:?}"
    );
}

#[track_caller]
fn invalid(bytes: &[u8], needle: &str) {
    fails(bytes, ErrorCode::InvalidRequest, needle)
}

// ---- valid messages: every frame type round-trips -----------------------------

#[test]
fn request_with_every_frame_type_round_trips() {
    let bytes = req(&[
        hdr(),
        upsert_commit(),
        push_commit("c-2", &[(OP_DELETE, Some(4), None), (OP_UPSERT, None, Some(b""))]),
        pull_header(ACCEPT_INLINE_ROWS | ACCEPT_EXTERNAL_ROWS | ACCEPT_SQLITE | ACCEPT_SIGNED_URLS),
        subscription(),
        subscription_with(&[], None, 0),
    ]);
    let Message::Request(r) = round_trips(&bytes) else { panic!("kind") };
    assert_eq!(r.header.client_id, "client-a");
    assert_eq!(r.commits.len(), 2);
    assert_eq!(r.commits[1].operations[0].op, Op::Delete);
    assert_eq!(r.commits[1].operations[0].base_version, Some(4));
    assert_eq!(r.commits[1].operations[1].payload.as_deref(), Some(&b""[..]));
    let pull = r.pull.unwrap();
    assert_eq!(pull.header.accept, 0b1111);
    assert_eq!(pull.subscriptions[0].scopes, vec![("project".to_string(), vec!["p1".to_string(), "p2".to_string()])]);
    assert_eq!(pull.subscriptions[0].params.as_deref(), Some(r#"{"a":[1,2]}"#));
    assert_eq!(pull.subscriptions[0].cursor, -1);
    let rendered = render_message(&bytes).unwrap();
    assert_eq!(rendered["frames"][1]["operations"][0]["op"], "upsert");
    assert_eq!(rendered["frames"][1]["operations"][0]["payload"], "AHJvdw==");
    assert_eq!(rendered["frames"][4]["params"]["a"][1], 2);
    assert!(rendered["frames"][5].get("params").is_none(), "absent opt omitted");
}

#[test]
fn wire_version_2_headers_round_trip_with_and_without_log_epoch() {
    for epoch in [None, Some(""), Some("epoch-1")] {
        let h = frame(FRAME_REQ_HEADER, &payload(|w| {
            s(w, "client-a");
            w.i32(2);
            match epoch {
                Some(e) => {
                    w.u8(1);
                    s(w, e);
                }
                None => w.u8(0),
            }
        }));
        let bytes = message(2, MSG_KIND_REQUEST, &[h, pull_header(3)]);
        let Message::Request(r) = round_trips(&bytes) else { panic!() };
        assert_eq!(r.header.log_epoch.as_deref(), epoch);
    }
    for (epoch, reset) in [("", 0u8), ("epoch-b", 1u8)] {
        let bytes = message(2, MSG_KIND_RESPONSE, &[resp_header_v2(epoch, reset)]);
        let Message::Response(r) = round_trips(&bytes) else { panic!() };
        let e = r.header.epoch.unwrap();
        assert_eq!((e.log_epoch.as_str(), e.reset_required), (epoch, reset == 1));
    }
    // A version 1 header carries no logEpoch: the presence byte is a trailing byte.
    let h = frame(FRAME_REQ_HEADER, &payload(|w| {
        s(w, "c");
        w.i32(1);
        w.u8(0);
    }));
    invalid(&req(&[h, pull_header(3)]), "trailing");
}

#[test]
fn response_with_every_frame_type_round_trips() {
    let bytes = resp(&[
        resp_header_v1(),
        lease("lease-1"),
        push_result_applied(PUSH_STATUS_APPLIED, Some(58)),
        push_result_applied(PUSH_STATUS_CACHED, Some(59)),
        push_result_rejected("c-3"),
        details("c-3", &[(1, r#"{"fieldPaths":["title"],"reason":"too_long"}"#)]),
        sub_start(),
        commit(),
        sub_end(),
        sub_start_with(SUB_STATUS_ACTIVE, 1),
        segment_ref(),
        segment_ref_with(None, None, MEDIA_TYPE_ROWS),
        segment_inline(),
        sub_end(),
        sub_start_with(SUB_STATUS_REVOKED, 0),
        sub_end(),
        sub_start_with(SUB_STATUS_RESET, 0),
        error_frame(),
    ]);
    let Message::Response(r) = round_trips(&bytes) else { panic!() };
    assert_eq!(r.header.required_schema_version, Some(3));
    assert_eq!(r.frames.len(), 17);
    let ResponseFrame::PushResult(p) = &r.frames[3] else { panic!() };
    assert_eq!(p.status, PushStatus::Rejected);
    assert_eq!(p.results[0], OpResult::Conflict {
        op_index: 0,
        code: "sync.version_conflict".into(),
        message: "stale".into(),
        server_version: 7,
        server_row: vec![1, 2],
        conflict_columns: vec![],
    });
    let ResponseFrame::Commit(c) = &r.frames[6] else { panic!() };
    assert_eq!(c.changes[1].op, Op::Delete);
    assert_eq!(c.changes[0].scopes, vec![("project".to_string(), "p1".to_string())]);
    let v = render_message(&bytes).unwrap();
    let f = &v["frames"];
    assert_eq!(f[1]["type"], "LEASE");
    assert_eq!(f[4]["results"][1]["status"], "error");
    assert_eq!(f[4]["results"][0]["serverRow"], "AQI=");
    assert_eq!(f[5]["entries"][0]["details"]["reason"], "too_long");
    assert_eq!(f[7]["changes"][0]["rowVersion"], 1);
    assert!(f[7]["changes"][1].get("row").is_none());
    assert_eq!(f[10]["mediaType"], "sqlite");
    assert_eq!(f[10]["urlExpiresAtMs"], 1_782_994_500_000i64);
    assert!(f[11].get("url").is_none());
    assert_eq!(f[12]["type"], "SEGMENT_INLINE");
    assert!(f[12]["payload"].is_string(), "inline segment renders as base64, not expanded");
    assert_eq!(f[13]["bootstrapState"]["rowCursor"], "n-1");
    assert_eq!(f[14]["status"], "revoked");
    assert_eq!(f[17]["details"]["table"], "notes");
}

#[test]
fn unknown_and_reserved_frames_are_preserved_in_place() {
    let reserved: Vec<u8> = [0x05u8, 0x0f, 0x17, 0x18, 0x1a, 0x1c, 0x1d, 0x1e, 0x20, 0x2f, 0x7f, 0xff].to_vec();
    for &ty in &reserved {
        let bytes = req(&[hdr(), unknown(ty), upsert_commit(), unknown(ty), pull_header(3), subscription(), unknown(ty)]);
        let Message::Request(r) = round_trips(&bytes) else { panic!() };
        let positions: Vec<usize> = r.unknown.iter().map(|u| u.after_known_frames).collect();
        assert_eq!(positions, vec![1, 2, 4]);
        let v = render_message(&bytes).unwrap();
        assert_eq!(v["frames"][1]["type"], "UNKNOWN");
        assert_eq!(v["frames"][1]["frameType"], ty);
        assert_eq!(v["frames"][1]["payload"], "3q0=");

        let bytes = resp(&[resp_header_v1(), unknown(ty), lease("l"), sub_start(), unknown(ty), commit(), unknown(ty), sub_end(), unknown(ty)]);
        let Message::Response(r) = round_trips(&bytes) else { panic!() };
        assert_eq!(r.frames[0], ResponseFrame::Unknown(UnknownFrame { frame_type: ty, payload: vec![0xde, 0xad] }));
    }
    // Unknown frames are transparent to ordering: between a result and its details.
    round_trips(&resp(&[resp_header_v1(), push_result_rejected("c"), unknown(0x30), details("c", &[(1, r#"{"reason":"x"}"#)])]));
}

#[test]
fn things_left_to_request_validation_still_decode() {
    // accept without rows bits, duplicate subscription ids, empty ids/tables, '*' scopes.
    round_trips(&req(&[hdr(), pull_header(0), subscription_with(&[("p", &["*"])], None, -5), subscription_with(&[], None, 0)]));
    // Empty LEASE id and RESP_HEADER logEpoch are producer rules, not decode errors.
    round_trips(&resp(&[resp_header_v1(), lease("")]));
    // Details not matching their PUSH_RESULT (applied, other id, applied opIndex) are cross-frame.
    round_trips(&resp(&[resp_header_v1(), push_result_applied(PUSH_STATUS_APPLIED, Some(1)), details("other", &[(9, r#"{"reason":"x"}"#), (0, r#"{"requiredAction":"y"}"#)])]));
    round_trips(&resp(&[resp_header_v1(), push_result_rejected("c"), details("", &[(0, r#"{"reason":"x"}"#)])]));
    // ERROR may end a message inside an open subscription context.
    round_trips(&resp(&[resp_header_v1(), sub_start(), commit(), error_frame()]));
    round_trips(&resp(&[resp_header_v1(), error_frame()]));
    // Empty response and a header-only schema-floor response.
    round_trips(&resp(&[resp_header_v1()]));
    // Active SUB_START with a reason code, empty table dictionary with zero changes.
    round_trips(&resp(&[resp_header_v1(), sub_start_with(SUB_STATUS_REVOKED, 1), commit_with(|w| w.u32(0)), sub_end()]));
    // Top-level JSON scalars are JSON documents.
    round_trips(&req(&[hdr(), pull_header(3), subscription_with(&[], Some("7"), 1)]));
}

// ---- decode errors: envelope and framing (§1.2) -------------------------------

#[test]
fn envelope_errors() {
    let good = req(&[hdr(), pull_header(3)]);
    invalid(&good[..3], "magic");
    let mut b = good.clone();
    b[3] = b'1';
    invalid(&b, "magic");
    for v in [0u16, 4, 999] {
        let mut b = good.clone();
        b[4..6].copy_from_slice(&v.to_le_bytes());
        invalid(&b, "wireVersion");
    }
    for k in [0u8, 3, 0xff] {
        let mut b = good.clone();
        b[6] = k;
        invalid(&b, "msgKind");
    }
    let mut b = good.clone();
    b[7] = 1;
    invalid(&b, "flags");
    invalid(&good[..good.len() - 5], "without an END");
    invalid(&good[..good.len() - 2], "truncated frame header");
    let mut b = good.clone();
    b.push(0);
    invalid(&b, "after the END");
    // END with a non-zero length.
    let mut b = good[..good.len() - 5].to_vec();
    b.extend_from_slice(&[0, 1, 0, 0, 0, 0]);
    invalid(&b, "END frame must have frameLength 0");
    // A frameLength past the input.
    let mut b = req(&[hdr()]);
    b.truncate(8);
    b.extend_from_slice(&[FRAME_REQ_HEADER, 0xff, 0xff, 0xff, 0x7f, 1, 2]);
    invalid(&b, "exceeds");
}

#[test]
fn framing_errors() {
    invalid(&req(&[]), "no REQ_HEADER");
    invalid(&resp(&[]), "no RESP_HEADER");
    invalid(&req(&[unknown(0x30), hdr(), pull_header(3)]), "before REQ_HEADER");
    invalid(&resp(&[unknown(0x17), resp_header_v1()]), "before RESP_HEADER");
    invalid(&req(&[pull_header(3)]), "first frame");
    invalid(&resp(&[sub_start()]), "first frame");
    // Registered for the other kind: an error, not unknown, anywhere.
    invalid(&req(&[hdr(), pull_header(3), sub_start()]), "registered for response");
    invalid(&req(&[resp_header_v1()]), "registered for response");
    invalid(&resp(&[resp_header_v1(), subscription()]), "registered for request");
    // Trailing bytes inside a known frame.
    let mut h = hdr();
    h.push(0);
    let len = (h.len() - 5) as u32;
    h[1..5].copy_from_slice(&len.to_le_bytes());
    invalid(&req(&[h, pull_header(3)]), "trailing");
    let mut e = sub_end();
    e.push(0);
    let len = (e.len() - 5) as u32;
    e[1..5].copy_from_slice(&len.to_le_bytes());
    invalid(&resp(&[resp_header_v1(), sub_start(), e]), "trailing");
    // A request/response handed to the other typed decoder.
    assert!(decode_request(&resp(&[resp_header_v1()])).is_err());
    assert!(decode_response(&req(&[hdr(), pull_header(3)])).is_err());
}

// ---- decode errors: grammar (§1.5, §1.6) --------------------------------------

#[test]
fn request_grammar_errors() {
    invalid(&req(&[hdr(), hdr(), pull_header(3)]), "duplicate REQ_HEADER");
    invalid(&req(&[hdr(), pull_header(3), upsert_commit()]), "after PULL_HEADER");
    invalid(&req(&[hdr(), pull_header(3), pull_header(3)]), "duplicate PULL_HEADER");
    invalid(&req(&[hdr(), subscription()]), "without a preceding PULL_HEADER");
    invalid(&req(&[hdr()]), "no-content");
    invalid(&req(&[hdr(), unknown(0x40)]), "no-content");
}

#[test]
fn response_grammar_errors() {
    let h = resp_header_v1;
    invalid(&resp(&[h(), h()]), "duplicate RESP_HEADER");
    invalid(&resp(&[h(), lease("a"), lease("b")]), "LEASE");
    invalid(&resp(&[h(), push_result_applied(1, Some(1)), lease("a")]), "LEASE");
    invalid(&resp(&[h(), sub_start(), sub_end(), lease("a")]), "LEASE");
    invalid(&resp(&[h(), sub_start(), sub_end(), push_result_applied(1, Some(1))]), "after SUB_START");
    invalid(&resp(&[h(), details("c", &[(0, r#"{"reason":"x"}"#)])]), "immediately follow");
    invalid(&resp(&[h(), lease("l"), details("c", &[(0, r#"{"reason":"x"}"#)])]), "immediately follow");
    invalid(
        &resp(&[h(), push_result_rejected("c"), details("c", &[(1, r#"{"reason":"x"}"#)]), details("c", &[(1, r#"{"reason":"x"}"#)])]),
        "immediately follow",
    );
    invalid(&resp(&[h(), sub_start(), sub_start()]), "is open");
    invalid(&resp(&[h(), commit()]), "outside");
    invalid(&resp(&[h(), segment_ref()]), "outside");
    invalid(&resp(&[h(), segment_inline()]), "outside");
    invalid(&resp(&[h(), sub_end()]), "without an open");
    invalid(&resp(&[h(), sub_start(), commit(), segment_ref(), sub_end()]), "no-mixing");
    invalid(&resp(&[h(), sub_start(), segment_inline(), commit(), sub_end()]), "no-mixing");
    invalid(&resp(&[h(), sub_start(), commit()]), "missing SUB_END");
    invalid(&resp(&[h(), error_frame(), error_frame()]), "after ERROR");
    invalid(&resp(&[h(), error_frame(), unknown(0x30)]), "after ERROR");
    invalid(&resp(&[h(), error_frame(), sub_end()]), "after ERROR");
    // The no-mixing rule is per subscription context.
    round_trips(&resp(&[h(), sub_start(), commit(), sub_end(), sub_start(), segment_ref(), sub_end()]));
}

// ---- decode errors: primitives, enums, ties, field constraints (§1.7) --------

#[test]
fn primitive_errors() {
    // bool byte 2 (SUB_START.bootstrap).
    invalid(&resp(&[resp_header_v1(), sub_start_with(SUB_STATUS_ACTIVE, 2), sub_end()]), "bool byte");
    // presence byte 2 (RESP_HEADER.requiredSchemaVersion).
    invalid(&resp(&[frame(FRAME_RESP_HEADER, &[2, 0])]), "presence byte");
    // i64 outside ±(2^53−1).
    invalid(&req(&[hdr(), pull_header(3), subscription_with(&[], None, 1 << 53)]), "2^53");
    invalid(&req(&[hdr(), pull_header(3), subscription_with(&[], None, -(1 << 53))]), "2^53");
    // Invalid UTF-8.
    let h = frame(FRAME_REQ_HEADER, &payload(|w| {
        w.bytes(&[0xc3, 0x28], "x").unwrap();
        w.i32(1);
    }));
    invalid(&req(&[h, pull_header(3)]), "UTF-8");
    // Invalid JSON in a json field.
    invalid(&req(&[hdr(), pull_header(3), subscription_with(&[], Some("{nope"), 0)]), "JSON");
    // Map keys: duplicate, out of order, and UTF-16 (not UTF-8) order.
    invalid(&req(&[hdr(), pull_header(3), subscription_with(&[("a", &[]), ("a", &[])], None, 0)]), "map keys");
    invalid(&req(&[hdr(), pull_header(3), subscription_with(&[("b", &[]), ("a", &[])], None, 0)]), "map keys");
    invalid(&req(&[hdr(), pull_header(3), subscription_with(&[("\u{FF61}", &[]), ("\u{10000}", &[])], None, 0)]), "map keys");
    round_trips(&req(&[hdr(), pull_header(3), subscription_with(&[("\u{10000}", &[]), ("\u{FF61}", &[])], None, 0)]));
    // A list count larger than the remaining bytes.
    let sub = frame(FRAME_SUBSCRIPTION, &payload(|w| {
        s(w, "s");
        s(w, "t");
        w.u32(u32::MAX);
    }));
    invalid(&req(&[hdr(), pull_header(3), sub]), "exceeds");
}

#[test]
fn enum_byte_errors() {
    invalid(&req(&[hdr(), push_commit("c", &[(3, None, None)])]), "op");
    invalid(&req(&[hdr(), push_commit("c", &[(0, None, None)])]), "op");
    invalid(&resp(&[resp_header_v1(), sub_start_with(0, 0)]), "SUB_START.status");
    invalid(&resp(&[resp_header_v1(), sub_start_with(4, 0)]), "SUB_START.status");
    invalid(&resp(&[resp_header_v1(), push_result_applied(4, Some(1))]), "PUSH_RESULT.status");
    let bad_record = frame(FRAME_PUSH_RESULT, &payload(|w| {
        s(w, "c");
        w.u8(PUSH_STATUS_REJECTED);
        w.u8(0);
        w.u32(1);
        w.i32(0);
        w.u8(4);
    }));
    invalid(&resp(&[resp_header_v1(), bad_record]), "result.status");
    invalid(&resp(&[resp_header_v1(), sub_start_with(1, 1), segment_ref_with(None, None, 3)]), "mediaType");
    let bad_change = commit_with(|w| {
        w.u32(1);
        change(w, 0, 9, None, None);
    });
    invalid(&resp(&[resp_header_v1(), sub_start(), bad_change]), "op");
}

#[test]
fn presence_tie_errors() {
    invalid(&req(&[hdr(), push_commit("c", &[(OP_UPSERT, None, None)])]), "payload must be present iff");
    invalid(&req(&[hdr(), push_commit("c", &[(OP_DELETE, None, Some(b"x"))])]), "payload must be present iff");
    for (op, rv, row) in [
        (OP_UPSERT, None, Some(&b"r"[..])),
        (OP_UPSERT, Some(1), None),
        (OP_DELETE, Some(1), None),
        (OP_DELETE, None, Some(&b"r"[..])),
    ] {
        let c = commit_with(|w| {
            w.u32(1);
            change(w, 0, op, rv, row);
        });
        invalid(&resp(&[resp_header_v1(), sub_start(), c, sub_end()]), "present iff");
    }
    invalid(&resp(&[resp_header_v1(), push_result_applied(PUSH_STATUS_APPLIED, None)]), "commitSeq");
    invalid(&resp(&[resp_header_v1(), push_result_applied(PUSH_STATUS_CACHED, None)]), "commitSeq");
    invalid(&resp(&[resp_header_v1(), push_result_applied(PUSH_STATUS_REJECTED, Some(3))]), "commitSeq");
    invalid(&resp(&[resp_header_v1(), sub_start(), segment_ref_with(Some("u"), None, 1)]), "urlExpiresAtMs");
    invalid(&resp(&[resp_header_v1(), sub_start(), segment_ref_with(None, Some(1), 1)]), "urlExpiresAtMs");
}

#[test]
fn field_constraint_errors() {
    invalid(&req(&[req_header_v1("", 1), pull_header(3)]), "clientId");
    invalid(&req(&[req_header_v1("c", 0), pull_header(3)]), "schemaVersion");
    invalid(&req(&[req_header_v1("c", -1), pull_header(3)]), "schemaVersion");
    invalid(&req(&[hdr(), push_commit("", &[(OP_DELETE, None, None)])]), "clientCommitId");
    fails(&req(&[hdr(), push_commit("c", &[])]), ErrorCode::EmptyCommit, "zero operations");
    for bit in 4..8 {
        invalid(&req(&[hdr(), pull_header(3 | (1 << bit))]), "accept");
    }
    let c = commit_with(|w| {
        w.u32(1);
        change(w, 2, OP_DELETE, None, None);
    });
    invalid(&resp(&[resp_header_v1(), sub_start(), c, sub_end()]), "tableIndex");
    // SEGMENT_INLINE must be a structurally valid rows segment (§5.7).
    let mut seg = valid_segment();
    seg.push(0);
    invalid(&resp(&[resp_header_v1(), sub_start(), frame(FRAME_SEGMENT_INLINE, &seg), sub_end()]), "");
    invalid(&resp(&[resp_header_v1(), sub_start(), frame(FRAME_SEGMENT_INLINE, b"SSG2"), sub_end()]), "");
    invalid(&resp(&[resp_header_v1(), sub_start(), frame(FRAME_SEGMENT_INLINE, b""), sub_end()]), "");
}

#[test]
fn push_result_details_errors() {
    let r = || push_result_rejected("c");
    invalid(&resp(&[resp_header_v1(), r(), details("c", &[])]), "non-empty");
    invalid(&resp(&[resp_header_v1(), r(), details("c", &[(-1, r#"{"reason":"x"}"#)])]), "negative or duplicated");
    invalid(&resp(&[resp_header_v1(), r(), details("c", &[(1, r#"{"reason":"x"}"#), (1, r#"{"reason":"y"}"#)])]), "negative or duplicated");
    for bad in [r#"{"reason":"x","x":1}"#, "{}", r#"{"reason":"Bad"}"#, "[]", "nope", r#"{"reason":"a","reason":"a"}"#] {
        invalid(&resp(&[resp_header_v1(), r(), details("c", &[(1, bad)])]), "detailsJson");
    }
}

// ---- encoders ---------------------------------------------------------------------

fn sample_sub_start() -> SubStart {
    SubStart {
        id: "s".into(),
        status: SubStatus::Active,
        reason_code: String::new(),
        effective_scopes: vec![("project".into(), vec!["p1".into()])],
        bootstrap: false,
    }
}

fn sample_commit() -> Commit {
    Commit {
        commit_seq: 5,
        created_at_ms: 1_000,
        actor_id: "a".into(),
        tables: vec!["notes".into()],
        changes: vec![Change {
            table_index: 0,
            row_id: "r".into(),
            op: Op::Upsert,
            row_version: Some(1),
            scopes: vec![("project".into(), "p1".into())],
            row: Some(vec![0]),
        }],
    }
}

#[test]
fn response_writer_streams_and_counts_bytes() {
    let mut w = ResponseWriter::new(Vec::new(), 1, &RespHeader::default()).unwrap();
    let after_header = w.bytes_written();
    assert_eq!(after_header, 8 + 5 + 2);
    w.lease(&Lease { lease_id: "l".into(), expires_at_ms: 9 }).unwrap();
    w.sub_start(&sample_sub_start()).unwrap();
    assert!(w.subscription_open());
    w.commit(&sample_commit()).unwrap();
    w.sub_end(&SubEnd { next_cursor: 5, bootstrap_state: None }).unwrap();
    let counted = w.bytes_written();
    let out = w.finish().unwrap();
    assert_eq!(out.len() as u64, counted + 5);
    let Message::Response(r) = decode_message(&out).unwrap() else { panic!() };
    assert_eq!(r.frames[2], ResponseFrame::Commit(sample_commit()));
    assert_eq!(encode_response(&r).unwrap(), out);
}

#[test]
fn response_writer_refuses_illegal_frames_without_writing() {
    let mut w = ResponseWriter::new(Vec::new(), 1, &RespHeader::default()).unwrap();
    let before = w.bytes_written();
    let e = w.commit(&sample_commit()).unwrap_err();
    assert!(e.message.starts_with("encoder:"), "{e}");
    assert_eq!(w.bytes_written(), before, "refused frame wrote nothing");
    w.sub_start(&sample_sub_start()).unwrap();
    w.commit(&sample_commit()).unwrap();
    assert!(w.segment_inline(&valid_segment()).is_err(), "no-mixing at encode time");
    assert!(w.segment_ref(&SegmentRef {
        segment_id: "x".into(), media_type: MediaType::Rows, table: "t".into(), byte_length: 1,
        row_count: 1, as_of_commit_seq: 1, scope_digest: "d".into(), row_cursor: None,
        next_row_cursor: None, url: None, url_expires_at_ms: None,
    }).is_err());
    assert!(w.push_result(&PushResult { client_commit_id: "c".into(), status: PushStatus::Applied, commit_seq: Some(1), results: vec![] }).is_err());
    assert!(w.lease(&Lease { lease_id: "l".into(), expires_at_ms: 1 }).is_err());
    // Field-level refusals keep the writer usable.
    let mut bad = sample_commit();
    bad.changes[0].table_index = 3;
    assert!(w.commit(&bad).is_err());
    let mut bad = sample_commit();
    bad.changes[0].scopes = vec![("b".into(), "1".into()), ("a".into(), "2".into())];
    assert!(w.commit(&bad).is_err());
    let mut bad = sample_commit();
    bad.commit_seq = 1 << 53;
    assert!(w.commit(&bad).is_err());
    assert!(w.unknown(&UnknownFrame { frame_type: FRAME_COMMIT, payload: vec![] }).is_err());
    assert!(w.sub_end(&SubEnd { next_cursor: 1, bootstrap_state: Some("{bad".into()) }).is_err());
    let mid = w.bytes_written();
    // finish is refused inside an open context...
    let w2_out = {
        let mut w2 = ResponseWriter::new(Vec::new(), 1, &RespHeader::default()).unwrap();
        w2.sub_start(&sample_sub_start()).unwrap();
        w2.finish()
    };
    assert!(w2_out.is_err());
    // ...but legal after ERROR, which admits nothing else.
    w.error(&ErrorFrame::from_code(ErrorCode::MissingScopes, "boom", None)).unwrap();
    assert!(w.bytes_written() > mid);
    assert!(w.sub_end(&SubEnd { next_cursor: 1, bootstrap_state: None }).is_err());
    assert!(w.unknown(&UnknownFrame { frame_type: 0x30, payload: vec![] }).is_err());
    let out = w.finish().unwrap();
    let v = render_message(&out).unwrap();
    let last = v["frames"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["category"], "internal");
    assert_eq!(last["recommendedAction"], "inspectServer");
}

#[test]
fn response_writer_checks_header_version_and_details() {
    let v2 = RespHeader { epoch: Some(RespEpoch { log_epoch: "e".into(), reset_required: true }), ..Default::default() };
    assert!(ResponseWriter::new(Vec::new(), 1, &v2).is_err());
    assert!(ResponseWriter::new(Vec::new(), 2, &RespHeader::default()).is_err());
    assert!(ResponseWriter::new(Vec::new(), 3, &RespHeader::default()).is_err());
    let mut w = ResponseWriter::new(Vec::new(), 2, &v2).unwrap();
    let rejected = PushResult {
        client_commit_id: "c".into(),
        status: PushStatus::Rejected,
        commit_seq: None,
        results: vec![OpResult::Error { op_index: 0, code: "x".into(), message: "m".into(), retryable: false }],
    };
    assert!(w.push_result(&PushResult { commit_seq: Some(1), ..rejected.clone() }).is_err());
    w.push_result(&rejected).unwrap();
    let bad = PushResultDetails { client_commit_id: "c".into(), entries: vec![PushResultDetail { op_index: 0, details_json: "{}".into() }] };
    assert!(w.push_result_details(&bad).is_err());
    let good = PushResultDetails { client_commit_id: "c".into(), entries: vec![PushResultDetail { op_index: 0, details_json: r#"{"reason":"r"}"#.into() }] };
    w.push_result_details(&good).unwrap();
    assert!(w.push_result_details(&good).is_err(), "at most one companion");
    let out = w.finish().unwrap();
    let Message::Response(r) = decode_message(&out).unwrap() else { panic!() };
    assert_eq!(r.wire_version, 2);
    assert_eq!(r.frames, vec![ResponseFrame::PushResult(rejected), ResponseFrame::PushResultDetails(good)]);
}

#[test]
fn request_encoder_refuses_illegal_requests() {
    let base = Request {
        wire_version: 1,
        header: ReqHeader { client_id: "c".into(), schema_version: 1, log_epoch: None },
        round_failure: None,
        commits: vec![],
        pull: Some(PullRequest { header: PullHeader { limit_commits: 0, limit_snapshot_rows: 0, max_snapshot_pages: 0, accept: 3 }, subscriptions: vec![] }),
        unknown: vec![],
    };
    let bytes = encode_request(&base).unwrap();
    assert_eq!(decode_request(&bytes).unwrap(), base);
    let refuse = |r: Request| {
        let e = encode_request(&r).expect_err("must refuse");
        assert!(e.message.starts_with("encoder:"), "{e}");
    };
    refuse(Request { pull: None, ..base.clone() });
    refuse(Request { header: ReqHeader { log_epoch: Some("e".into()), ..base.header.clone() }, ..base.clone() });
    refuse(Request { header: ReqHeader { client_id: String::new(), ..base.header.clone() }, ..base.clone() });
    refuse(Request { header: ReqHeader { schema_version: 0, ..base.header.clone() }, ..base.clone() });
    refuse(Request { wire_version: 7, ..base.clone() });
    refuse(Request { commits: vec![PushCommit { client_commit_id: "x".into(), operations: vec![] }], ..base.clone() });
    refuse(Request {
        commits: vec![PushCommit {
            client_commit_id: "x".into(),
            operations: vec![Operation { table: "t".into(), row_id: "r".into(), op: Op::Delete, base_version: None, payload: Some(vec![]) }],
        }],
        ..base.clone()
    });
    let mut p = base.clone();
    p.pull.as_mut().unwrap().header.accept = 0x10;
    refuse(p);
    let unk = |after: usize, ty: u8| PlacedUnknown { after_known_frames: after, frame: UnknownFrame { frame_type: ty, payload: vec![1] } };
    refuse(Request { unknown: vec![unk(0, 0x30)], ..base.clone() });
    refuse(Request { unknown: vec![unk(3, 0x30)], ..base.clone() });
    refuse(Request { unknown: vec![unk(2, 0x30), unk(1, 0x30)], ..base.clone() });
    refuse(Request { unknown: vec![unk(1, FRAME_SUB_START)], ..base.clone() });
    refuse(Request { unknown: vec![unk(1, FRAME_END)], ..base.clone() });
    let ok = Request { unknown: vec![unk(1, 0x30), unk(2, 0x17), unk(2, 0x18)], ..base.clone() };
    let bytes = encode_request(&ok).unwrap();
    assert_eq!(decode_request(&bytes).unwrap(), ok);
    let mut sub = base.clone();
    sub.pull.as_mut().unwrap().subscriptions.push(Subscription {
        id: "s".into(), table: "t".into(),
        scopes: vec![("b".into(), vec![]), ("a".into(), vec![])],
        params: None, cursor: -1, bootstrap_state: None,
    });
    refuse(sub);
}

#[test]
fn canonical_map_helpers_sort_by_utf16() {
    use syncular_protocol::frame_fields::{canonical_scope_map, canonical_stored_scopes};
    let m = canonical_scope_map(vec![("\u{FF61}".into(), vec![]), ("\u{10000}".into(), vec!["x".into()]), ("a".into(), vec![])]).unwrap();
    let keys: Vec<&str> = m.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, vec!["a", "\u{10000}", "\u{FF61}"]);
    assert!(canonical_stored_scopes(vec![("a".into(), "1".into()), ("a".into(), "2".into())]).is_err());
}

/// Every strict prefix of a valid message is truncated (an error, never a
/// panic), and every single-byte change either fails to decode or decodes
/// to a message that re-encodes to exactly the changed bytes.
#[test]
fn every_prefix_and_byte_change_is_handled() {
    let samples = [
        req(&[hdr(), upsert_commit(), unknown(0x30), pull_header(3), subscription()]),
        resp(&[
            resp_header_v1(),
            lease("l"),
            push_result_rejected("c"),
            details("c", &[(1, r#"{"reason":"x"}"#)]),
            sub_start(),
            commit(),
            sub_end(),
            sub_start_with(SUB_STATUS_ACTIVE, 1),
            segment_ref(),
            segment_inline(),
            sub_end(),
            error_frame(),
        ]),
    ];
    for bytes in samples {
        for cut in 0..bytes.len() {
            let e = decode_message(&bytes[..cut]).expect_err("prefix must not decode");
            assert_eq!(e.code, ErrorCode::InvalidRequest);
        }
        for i in 0..bytes.len() {
            for delta in [1u8, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= delta;
                if let Ok(m) = decode_message(&b) {
                    assert_eq!(encode_message(&m).unwrap(), b, "byte {i} ^ {delta:#x}");
                }
            }
        }
    }
}
