//! Cross-implementation property tests against the published reference
//! codec `syncular-ssp2 = "=0.15.48"` (crate `ssp2`).
//!
//! 1. Random valid messages encoded by ours decode with theirs to the same
//!    value, and their encoder produces the same bytes.
//! 2. Random valid messages encoded by theirs decode with ours to the same
//!    value.
//! 3. Random byte mutations of valid messages are accepted or rejected alike
//!    (same error code; same decoded value and §11.1 rendering when both
//!    accept).
//!
//! Cases per property: `SSP2_PARITY_CASES` (default 10,000). The spec, not
//! that crate, is the arbiter: mutated messages that hit a documented
//! difference (`KNOWN_DIFFERENCES.md`, [`known_difference`]) are counted and
//! left out of the comparison — nothing else is.

use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use ssp2::model as r;
use ssp2::primitives::RawJson;
use syncular_protocol::envelope::UnknownFrame;
use syncular_protocol::frame_fields::Op;
use syncular_protocol::message::{decode_message, encode_message, Message};
use syncular_protocol::rejection_details::DETAILS_ERROR_PREFIX;
use syncular_protocol::render::render_decoded;
use syncular_protocol::request::*;
use syncular_protocol::response::*;
use syncular_protocol::ErrorCode;

fn cases() -> u32 {
    std::env::var("SSP2_PARITY_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
}

fn runner() -> TestRunner {
    TestRunner::new(Config { cases: cases(), failure_persistence: None, ..Config::default() })
}

// ---------------------------------------------------------------------------
// Conversions between our model and theirs
// ---------------------------------------------------------------------------

fn op_to(o: Op) -> r::Op {
    match o {
        Op::Upsert => r::Op::Upsert,
        Op::Delete => r::Op::Delete,
    }
}

fn op_from(o: r::Op) -> Op {
    match o {
        r::Op::Upsert => Op::Upsert,
        r::Op::Delete => Op::Delete,
    }
}

fn json_to(j: &Option<String>) -> Option<RawJson> {
    j.clone().map(RawJson)
}

fn json_from(j: Option<RawJson>) -> Option<String> {
    j.map(|j| j.0)
}

fn to_theirs(m: &Message) -> ssp2::Message {
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
                    RequestFrameRef::RoundFailure(_) => unreachable!("no ROUND_FAILURE below wire version 3"),
                    RequestFrameRef::Unknown(u) => r::Frame::Unknown {
                        frame_type: u.frame_type,
                        payload: u.payload.clone(),
                    },
                })
                .collect();
            ssp2::Message { wire_version: req.wire_version, msg_kind: ssp2::MsgKind::Request, frames }
        }
        Message::Response(resp) => {
            let mut frames = vec![r::Frame::RespHeader {
                required_schema_version: resp.header.required_schema_version,
                latest_schema_version: resp.header.latest_schema_version,
                log_epoch: resp.header.epoch.as_ref().map(|e| e.log_epoch.clone()),
                reset_required: resp.header.epoch.as_ref().map(|e| e.reset_required),
            }];
            frames.extend(resp.frames.iter().map(response_frame_to));
            ssp2::Message { wire_version: resp.wire_version, msg_kind: ssp2::MsgKind::Response, frames }
        }
    }
}

fn response_frame_to(f: &ResponseFrame) -> r::Frame {
    match f {
        ResponseFrame::Lease(l) => {
            r::Frame::Lease { lease_id: l.lease_id.clone(), expires_at_ms: l.expires_at_ms }
        }
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
                    // Wire versions 1 and 2 have no conflictColumns.
                    OpResult::Conflict { op_index, code, message, server_version, server_row, .. } => {
                        r::OpResult::Conflict { op_index, code, message, server_version, server_row }
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
                .map(|e| r::PushResultDetail {
                    op_index: e.op_index,
                    details: RawJson(e.details_json.clone()),
                })
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
        ResponseFrame::SubEnd(s) => r::Frame::SubEnd {
            next_cursor: s.next_cursor,
            bootstrap_state: json_to(&s.bootstrap_state),
        },
        ResponseFrame::Error(e) => r::Frame::Error {
            code: e.code.clone(),
            message: e.message.clone(),
            category: e.category.clone(),
            retryable: e.retryable,
            recommended_action: e.recommended_action.clone(),
            details: json_to(&e.details),
        },
        ResponseFrame::Unknown(u) => {
            r::Frame::Unknown { frame_type: u.frame_type, payload: u.payload.clone() }
        }
    }
}

fn from_theirs(m: ssp2::Message) -> Message {
    match m.msg_kind {
        ssp2::MsgKind::Request => {
            let mut header = None;
            let mut commits = Vec::new();
            let mut pull: Option<PullRequest> = None;
            let mut unknown = Vec::new();
            let mut known = 0;
            for f in m.frames {
                match f {
                    r::Frame::Unknown { frame_type, payload } => {
                        unknown.push(PlacedUnknown {
                            after_known_frames: known,
                            frame: UnknownFrame { frame_type, payload },
                        });
                        continue;
                    }
                    r::Frame::ReqHeader { client_id, schema_version, log_epoch } => {
                        header = Some(ReqHeader { client_id, schema_version, log_epoch })
                    }
                    r::Frame::PushCommit { client_commit_id, operations } => commits.push(PushCommit {
                        client_commit_id,
                        operations: operations
                            .into_iter()
                            .map(|o| Operation {
                                table: o.table,
                                row_id: o.row_id,
                                op: op_from(o.op),
                                base_version: o.base_version,
                                payload: o.payload,
                            })
                            .collect(),
                    }),
                    r::Frame::PullHeader { limit_commits, limit_snapshot_rows, max_snapshot_pages, accept } => {
                        pull = Some(PullRequest {
                            header: PullHeader { limit_commits, limit_snapshot_rows, max_snapshot_pages, accept },
                            subscriptions: Vec::new(),
                        })
                    }
                    r::Frame::Subscription { id, table, scopes, params, cursor, bootstrap_state } => {
                        pull.as_mut().expect("pull header first").subscriptions.push(Subscription {
                            id,
                            table,
                            scopes,
                            params: json_from(params),
                            cursor,
                            bootstrap_state: json_from(bootstrap_state),
                        })
                    }
                    other => panic!("response frame in a request: {other:?}"),
                }
                known += 1;
            }
            Message::Request(Request {
                wire_version: m.wire_version,
                header: header.expect("header"),
                round_failure: None,
                commits,
                pull,
                unknown,
            })
        }
        ssp2::MsgKind::Response => {
            let mut frames = m.frames.into_iter();
            let Some(r::Frame::RespHeader { required_schema_version, latest_schema_version, log_epoch, reset_required }) =
                frames.next()
            else {
                panic!("response without header")
            };
            let header = RespHeader {
                required_schema_version,
                latest_schema_version,
                epoch: log_epoch.map(|log_epoch| RespEpoch {
                    log_epoch,
                    reset_required: reset_required.expect("v2 pair"),
                }),
            };
            let frames = frames.map(response_frame_from).collect();
            Message::Response(Response { wire_version: m.wire_version, header, frames })
        }
    }
}

fn response_frame_from(f: r::Frame) -> ResponseFrame {
    match f {
        r::Frame::Lease { lease_id, expires_at_ms } => ResponseFrame::Lease(Lease { lease_id, expires_at_ms }),
        r::Frame::PushResult { client_commit_id, status, commit_seq, results } => {
            ResponseFrame::PushResult(PushResult {
                client_commit_id,
                status: match status {
                    r::PushStatus::Applied => PushStatus::Applied,
                    r::PushStatus::Cached => PushStatus::Cached,
                    r::PushStatus::Rejected => PushStatus::Rejected,
                },
                commit_seq,
                results: results
                    .into_iter()
                    .map(|x| match x {
                        r::OpResult::Applied { op_index } => OpResult::Applied { op_index },
                        r::OpResult::Conflict { op_index, code, message, server_version, server_row } => {
                            OpResult::Conflict { op_index, code, message, server_version, server_row, conflict_columns: Vec::new() }
                        }
                        r::OpResult::Error { op_index, code, message, retryable } => {
                            OpResult::Error { op_index, code, message, retryable }
                        }
                    })
                    .collect(),
            })
        }
        r::Frame::PushResultDetails { client_commit_id, entries } => {
            ResponseFrame::PushResultDetails(PushResultDetails {
                client_commit_id,
                entries: entries
                    .into_iter()
                    .map(|e| PushResultDetail { op_index: e.op_index, details_json: e.details.0 })
                    .collect(),
            })
        }
        r::Frame::SubStart { id, status, reason_code, effective_scopes, bootstrap } => {
            ResponseFrame::SubStart(SubStart {
                id,
                status: match status {
                    r::SubStatus::Active => SubStatus::Active,
                    r::SubStatus::Revoked => SubStatus::Revoked,
                    r::SubStatus::Reset => SubStatus::Reset,
                },
                reason_code,
                effective_scopes,
                bootstrap,
            })
        }
        r::Frame::Commit { commit_seq, created_at_ms, actor_id, tables, changes } => ResponseFrame::Commit(Commit {
            commit_seq,
            created_at_ms,
            actor_id,
            tables,
            changes: changes
                .into_iter()
                .map(|c| Change {
                    table_index: c.table_index,
                    row_id: c.row_id,
                    op: op_from(c.op),
                    row_version: c.row_version,
                    scopes: c.scopes,
                    row: c.row,
                })
                .collect(),
        }),
        r::Frame::SegmentRef {
            segment_id,
            media_type,
            table,
            byte_length,
            row_count,
            as_of_commit_seq,
            scope_digest,
            row_cursor,
            next_row_cursor,
            url,
            url_expires_at_ms,
        } => ResponseFrame::SegmentRef(SegmentRef {
            segment_id,
            media_type: match media_type {
                r::MediaType::Rows => MediaType::Rows,
                r::MediaType::Sqlite => MediaType::Sqlite,
            },
            table,
            byte_length,
            row_count,
            as_of_commit_seq,
            scope_digest,
            row_cursor,
            next_row_cursor,
            url,
            url_expires_at_ms,
        }),
        r::Frame::SegmentInline { payload } => ResponseFrame::SegmentInline(payload),
        r::Frame::SubEnd { next_cursor, bootstrap_state } => {
            ResponseFrame::SubEnd(SubEnd { next_cursor, bootstrap_state: json_from(bootstrap_state) })
        }
        r::Frame::Error { code, message, category, retryable, recommended_action, details } => {
            ResponseFrame::Error(ErrorFrame {
                code,
                message,
                category,
                retryable,
                recommended_action,
                details: json_from(details),
            })
        }
        r::Frame::Unknown { frame_type, payload } => ResponseFrame::Unknown(UnknownFrame { frame_type, payload }),
        other => panic!("request frame in a response: {other:?}"),
    }
}

#[path = "common/message_gen.rs"]
mod message_gen;
use message_gen::*;

// ---------------------------------------------------------------------------
// Known differences (KNOWN_DIFFERENCES.md)
// ---------------------------------------------------------------------------

/// Every `json`-typed (and `detailsJson`) text of a message.
fn json_fields(m: &Message) -> Vec<&str> {
    let mut out = Vec::new();
    match m {
        Message::Request(r) => {
            for s in r.pull.iter().flat_map(|p| p.subscriptions.iter()) {
                out.extend(s.params.as_deref());
                out.extend(s.bootstrap_state.as_deref());
            }
        }
        Message::Response(r) => {
            for f in &r.frames {
                match f {
                    ResponseFrame::SubEnd(e) => out.extend(e.bootstrap_state.as_deref()),
                    ResponseFrame::Error(e) => out.extend(e.details.as_deref()),
                    ResponseFrame::PushResultDetails(d) => out.extend(d.entries.iter().map(|e| e.details_json.as_str())),
                    _ => {}
                }
            }
        }
    }
    out
}

/// Names the documented difference that explains why ours accepted a
/// message theirs rejected (`ours_ok`) or vice versa; `None` = a real bug.
fn known_difference(bytes: &[u8], ours: &Result<Message, syncular_protocol::ProtocolError>) -> Option<&'static str> {
    if let Ok(m) = ours {
        if m.wire_version() >= 3 {
            // A mutated version field: outside the 0.15.48 window (wire
            // version 3 parity is `parity_v3.rs`, against 0.49.2).
            return Some("wire version 3 (not a 0.15.48 version)");
        }
        let unparseable = json_fields(m).iter().any(|t| serde_json::from_str::<serde_json::Value>(t).is_err());
        if unparseable {
            return Some("KD8 JSON number beyond the f64 range");
        }
    }
    match ours {
        Ok(Message::Request(req)) => {
            (req.header.log_epoch.as_deref() == Some("")).then_some("KD1 empty REQ_HEADER.logEpoch")
        }
        Ok(Message::Response(resp)) => {
            if resp.header.epoch.as_ref().is_some_and(|e| e.log_epoch.is_empty()) {
                return Some("KD4 empty RESP_HEADER.logEpoch");
            }
            let mut seen_other = false;
            let mut last_result: Option<&PushResult> = None;
            for f in &resp.frames {
                match f {
                    ResponseFrame::Lease(l) if l.lease_id.is_empty() => return Some("KD5 empty LEASE.leaseId"),
                    ResponseFrame::Lease(_) if seen_other => return Some("KD6 unknown frame before LEASE"),
                    ResponseFrame::Unknown(_) => {
                        seen_other = true;
                        continue;
                    }
                    ResponseFrame::PushResult(p) => last_result = Some(p),
                    ResponseFrame::PushResultDetails(d) => {
                        if d.client_commit_id.is_empty() {
                            return Some("KD7 empty PUSH_RESULT_DETAILS.clientCommitId");
                        }
                        let p = last_result.expect("grammar guarantees a result");
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
                seen_other = true;
            }
            None
        }
        Err(e) => {
            if e.message.starts_with(DETAILS_ERROR_PREFIX) {
                return Some("KD3 detailsJson shape (§6.3.1) not validated by the reference");
            }
            let _ = bytes;
            None
        }
    }
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

#[test]
fn ours_encodes_theirs_decodes_same_value_and_bytes() {
    runner()
        .run(&message(1..=2), |m| {
            let ours = encode_message(&m).expect("ours encodes a valid message");
            let theirs_msg = ssp2::decode_message(&ours).map_err(|e| TestCaseError::fail(format!("theirs rejects ours: {e}")))?;
            prop_assert_eq!(from_theirs(theirs_msg), m.clone());
            prop_assert_eq!(ssp2::encode_message(&to_theirs(&m)), ours, "encoders differ");
            Ok(())
        })
        .unwrap();
}

#[test]
fn theirs_encodes_ours_decodes_same_value_and_rendering() {
    runner()
        .run(&message(1..=2), |m| {
            let theirs_msg = to_theirs(&m);
            let bytes = ssp2::encode_message(&theirs_msg);
            let decoded = decode_message(&bytes).map_err(|e| TestCaseError::fail(format!("ours rejects theirs: {e}")))?;
            prop_assert_eq!(&decoded, &m);
            prop_assert_eq!(render_decoded(&decoded).unwrap(), ssp2::render_message(&theirs_msg));
            Ok(())
        })
        .unwrap();
}

/// The bytes a `Set` mutation favours.
const SET_BYTES: &[u8] = &[0, 1, 2, 3, 0xff];

#[test]
fn mutations_are_accepted_or_rejected_alike() {
    let excluded = AtomicUsize::new(0);
    let accepted = AtomicUsize::new(0);
    let tally = std::sync::Mutex::new(std::collections::BTreeMap::<&'static str, usize>::new());
    runner()
        .run(&(message(1..=2), proptest::collection::vec(mutation(SET_BYTES), 1..4)), |(m, muts)| {
            let mut bytes = encode_message(&m).unwrap();
            for mu in &muts {
                apply(&mut bytes, mu);
            }
            let ours = decode_message(&bytes);
            let theirs = ssp2::decode_message(&bytes);
            match (&ours, theirs) {
                (Ok(o), Ok(t)) => {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    prop_assert_eq!(render_decoded(o).unwrap(), ssp2::render_message(&t));
                    prop_assert_eq!(o, &from_theirs(t));
                    prop_assert_eq!(&encode_message(o).unwrap(), &bytes, "accepted bytes re-encode exactly");
                }
                (Err(o), Err(t)) => {
                    let their_code = match t.code {
                        ssp2::ErrorCode::InvalidRequest => ErrorCode::InvalidRequest,
                        ssp2::ErrorCode::EmptyCommit => ErrorCode::EmptyCommit,
                    };
                    prop_assert_eq!(o.code, their_code, "ours: {} / theirs: {}", o, t);
                }
                (_, theirs) => match known_difference(&bytes, &ours) {
                    Some(kd) => {
                        excluded.fetch_add(1, Ordering::Relaxed);
                        *tally.lock().unwrap().entry(kd).or_default() += 1;
                    }
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
        "mutation parity: {} cases, {} accepted by both, {} excluded as known differences {:?}",
        cases(),
        accepted.load(Ordering::Relaxed),
        excluded.load(Ordering::Relaxed),
        tally.lock().unwrap()
    );
}

/// Each known difference really exists (so the exclusion list cannot rot):
/// a message that exhibits it is decided differently by the two codecs.
#[test]
fn every_known_difference_is_real() {
    use syncular_protocol::primitives::Writer;
    let frame = |ty: u8, p: Vec<u8>| {
        let mut v = vec![ty];
        v.extend_from_slice(&(p.len() as u32).to_le_bytes());
        v.extend(p);
        v
    };
    let msg = |ver: u16, kind: u8, frames: Vec<Vec<u8>>| {
        let mut v = b"SSP2".to_vec();
        v.extend_from_slice(&ver.to_le_bytes());
        v.extend([kind, 0]);
        frames.into_iter().for_each(|f| v.extend(f));
        v.extend([0, 0, 0, 0, 0]);
        v
    };
    let mut w = Writer::new();
    w.str("c", "").unwrap();
    w.i32(1);
    w.u8(1);
    w.str("", "").unwrap();
    let mut pull = Writer::new();
    pull.raw(&[0; 12]);
    pull.u8(3);
    let kd1 = msg(2, 1, vec![frame(0x01, w.into_vec()), frame(0x03, pull.into_vec())]);

    let mut h2 = Writer::new();
    h2.raw(&[0, 0]);
    h2.str("", "").unwrap();
    h2.u8(0);
    let kd4 = msg(2, 2, vec![frame(0x10, h2.into_vec())]);

    let v1_header = frame(0x10, vec![0, 0]);
    let mut lease = Writer::new();
    lease.str("", "").unwrap();
    lease.raw(&5i64.to_le_bytes());
    let kd5 = msg(1, 2, vec![v1_header.clone(), frame(0x19, lease.into_vec())]);
    let mut lease = Writer::new();
    lease.str("l", "").unwrap();
    lease.raw(&5i64.to_le_bytes());
    let kd6 = msg(1, 2, vec![v1_header.clone(), frame(0x30, vec![]), frame(0x19, lease.into_vec())]);

    let applied = {
        let mut p = Writer::new();
        p.str("c", "").unwrap();
        p.u8(1);
        p.u8(1);
        p.raw(&1i64.to_le_bytes());
        p.u32(0);
        frame(0x11, p.into_vec())
    };
    let details = |id: &str, json: &str| {
        let mut d = Writer::new();
        d.str(id, "").unwrap();
        d.u32(1);
        d.i32(0);
        d.str(json, "").unwrap();
        frame(0x1b, d.into_vec())
    };
    let rejected = |id: &str| {
        let mut p = Writer::new();
        p.str(id, "").unwrap();
        p.u8(3);
        p.u8(0);
        p.u32(1);
        p.i32(0);
        p.u8(3);
        p.str("x", "").unwrap();
        p.str("m", "").unwrap();
        p.u8(0);
        frame(0x11, p.into_vec())
    };
    let kd2 = msg(1, 2, vec![v1_header.clone(), applied, details("c", r#"{"reason":"r"}"#)]);
    let kd3 = msg(1, 2, vec![v1_header.clone(), rejected("c"), details("c", r#"{"mystery":1}"#)]);
    let kd7 = msg(1, 2, vec![v1_header.clone(), rejected(""), details("", r#"{"reason":"r"}"#)]);

    let mut sub = Writer::new();
    sub.str("s", "").unwrap();
    sub.str("t", "").unwrap();
    sub.u32(0);
    sub.u8(1);
    sub.str("[1e400]", "").unwrap();
    sub.raw(&0i64.to_le_bytes());
    sub.u8(0);
    let mut pull = Writer::new();
    pull.raw(&[0; 12]);
    pull.u8(3);
    let mut h1 = Writer::new();
    h1.str("c", "").unwrap();
    h1.i32(1);
    let kd8 = msg(1, 1, vec![frame(0x01, h1.into_vec()), frame(0x03, pull.into_vec()), frame(0x04, sub.into_vec())]);
    for (name, bytes, ours_accepts) in [
        ("KD8", kd8, true),
        ("KD1", kd1, true),
        ("KD2", kd2, true),
        ("KD3", kd3, false),
        ("KD4", kd4, true),
        ("KD5", kd5, true),
        ("KD6", kd6, true),
        ("KD7", kd7, true),
    ] {
        let ours = decode_message(&bytes);
        let theirs = ssp2::decode_message(&bytes);
        assert_eq!(ours.is_ok(), ours_accepts, "{name}: ours {ours:?}");
        assert_eq!(theirs.is_ok(), !ours_accepts, "{name}: theirs decides the same as ours");
        let kd = known_difference(&bytes, &ours).unwrap_or_else(|| panic!("{name} not classified"));
        assert!(kd.starts_with(name), "{name} classified as {kd}");
    }
}
