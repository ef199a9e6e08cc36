//! Random valid SSP2 messages for the parity tests (`parity_messages.rs`
//! against `syncular-ssp2` 0.15.48 at wire versions 1–2, `parity_v3.rs`
//! against 0.49.2 at wire version 3). Every generated message is valid for
//! ours and for the reference of its version: documented known differences
//! are avoided (non-empty epochs and ids, details matching their rejected
//! result, no unknown frame inside an "immediately after" window at v3).
#![allow(dead_code)]

use std::ops::RangeInclusive;

use proptest::prelude::*;
use syncular_protocol::envelope::UnknownFrame;
use syncular_protocol::frame_fields::{canonical_scope_map, canonical_stored_scopes, Op};
use syncular_protocol::message::Message;
use syncular_protocol::request::*;
use syncular_protocol::response::*;
use syncular_protocol::row_codec::{ColumnLayout, ColumnType, RowValue, TableLayout};
use syncular_protocol::segment::{encode_rows_segment, RowsSegment, SegmentHeader, SegmentRow};

// ---------------------------------------------------------------------------
// Generators: valid for both codecs (known differences avoided)
// ---------------------------------------------------------------------------

pub const SAFE: i64 = (1 << 53) - 1;

pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z0-9_-]{0,12}",
        1 => "\\PC{0,6}",
        1 => Just("\u{10000}x\u{FF61}".to_string()),
    ]
}

pub fn nonempty() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9._-]{1,12}"
}

pub fn safe_i64() -> impl Strategy<Value = i64> {
    prop_oneof![-SAFE..=SAFE, Just(-1i64), Just(0i64), Just(SAFE), Just(-SAFE)]
}

pub fn json_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("{}".to_string()),
        Just(" { \"a\" : [1, 2.5, \"x\"] } ".to_string()),
        Just("7".to_string()),
        Just("null".to_string()),
        Just("\"s\\u00e9\"".to_string()),
        Just("[true,false,{\"k\":{\"n\":-1e3}}]".to_string()),
        (any::<i32>(), "[a-z]{0,5}").prop_map(|(n, s)| format!("{{\"n\":{n},\"s\":\"{s}\"}}")),
    ]
}

pub fn bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..24)
}

pub fn scope_map() -> impl Strategy<Value = Vec<(String, Vec<String>)>> {
    proptest::collection::vec((text(), proptest::collection::vec(text(), 0..3)), 0..3).prop_map(|v| {
        let mut seen = std::collections::HashSet::new();
        let v: Vec<_> = v.into_iter().filter(|(k, _)| seen.insert(k.clone())).collect();
        canonical_scope_map(v).unwrap()
    })
}

pub fn stored_scopes() -> impl Strategy<Value = Vec<(String, String)>> {
    proptest::collection::vec((text(), text()), 0..3).prop_map(|v| {
        let mut seen = std::collections::HashSet::new();
        let v: Vec<_> = v.into_iter().filter(|(k, _)| seen.insert(k.clone())).collect();
        canonical_stored_scopes(v).unwrap()
    })
}

/// An unknown frame of a `wire_version` message (`0x05` is `ROUND_FAILURE`,
/// a registered type, from version 3 on).
pub fn unknown_frame(wire_version: u16) -> impl Strategy<Value = UnknownFrame> {
    let low = if wire_version >= 3 { 0x06u8 } else { 0x05 };
    let ty = prop_oneof![Just(0x17u8), Just(0x18), Just(0x1a), Just(0x1c), Just(0x20), Just(0x2f), 0x30u8..=0xff, low..=0x0f];
    (ty, bytes()).prop_map(|(frame_type, payload)| UnknownFrame { frame_type, payload })
}

/// A `ROUND_FAILURE.code` (§1.5): dotted lowercase segments, ≤ 64 bytes.
pub fn round_failure_code() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("transport.timeout".to_string()),
        Just("sync.transport_failed".to_string()),
        Just("a.b".to_string()),
        "[a-z][a-z0-9_]{0,8}(\\.[a-z][a-z0-9_]{0,8}){1,3}",
        Just(format!("a.{}", "b".repeat(62))),
    ]
}

pub fn operation() -> impl Strategy<Value = Operation> {
    (text(), text(), any::<bool>(), proptest::option::of(safe_i64()), bytes()).prop_map(|(table, row_id, upsert, base_version, p)| Operation {
        table,
        row_id,
        op: if upsert { Op::Upsert } else { Op::Delete },
        base_version,
        payload: upsert.then_some(p),
    })
}

pub fn push_commit() -> impl Strategy<Value = PushCommit> {
    (nonempty(), proptest::collection::vec(operation(), 1..4))
        .prop_map(|(client_commit_id, operations)| PushCommit { client_commit_id, operations })
}

pub fn subscription() -> impl Strategy<Value = Subscription> {
    (text(), text(), scope_map(), proptest::option::of(json_text()), safe_i64(), proptest::option::of(json_text())).prop_map(
        |(id, table, scopes, params, cursor, bootstrap_state)| Subscription { id, table, scopes, params, cursor, bootstrap_state },
    )
}

pub fn request(versions: RangeInclusive<u16>) -> impl Strategy<Value = Request> {
    let pull = (any::<i32>(), any::<i32>(), any::<i32>(), 0u8..16, proptest::collection::vec(subscription(), 0..3)).prop_map(
        |(a, b, c, accept, subscriptions)| PullRequest {
            header: PullHeader { limit_commits: a, limit_snapshot_rows: b, max_snapshot_pages: c, accept },
            subscriptions,
        },
    );
    let parts = (
        nonempty(),
        1..=i32::MAX,
        proptest::option::of(nonempty()),
        proptest::option::of(round_failure_code()),
        proptest::collection::vec(push_commit(), 0..3),
        proptest::option::of(pull),
    );
    (versions, parts)
        .prop_flat_map(|(v, parts)| {
            (Just(v), Just(parts), proptest::collection::vec((any::<prop::sample::Index>(), unknown_frame(v)), 0..3))
        })
        .prop_map(|(wire_version, (client_id, schema_version, epoch, round_failure, commits, pull), unknowns)| {
            let round_failure = round_failure.filter(|_| wire_version >= 3);
            let pull = if commits.is_empty() && pull.is_none() {
                Some(PullRequest {
                    header: PullHeader { limit_commits: 0, limit_snapshot_rows: 0, max_snapshot_pages: 0, accept: 3 },
                    subscriptions: vec![],
                })
            } else {
                pull
            };
            // Unknown frames go after the header, and after ROUND_FAILURE
            // when there is one (it must directly follow the header).
            let lead = 1 + usize::from(round_failure.is_some());
            let known = lead + commits.len() + pull.as_ref().map_or(0, |p| 1 + p.subscriptions.len());
            let mut unknown: Vec<PlacedUnknown> = unknowns
                .into_iter()
                .map(|(i, frame)| PlacedUnknown { after_known_frames: lead + i.index(known - lead + 1), frame })
                .collect();
            unknown.sort_by_key(|u| u.after_known_frames);
            Request {
                wire_version,
                header: ReqHeader {
                    client_id,
                    schema_version,
                    log_epoch: if wire_version >= 2 { epoch } else { None },
                },
                round_failure,
                commits,
                pull,
                unknown,
            }
        })
}

pub fn segments() -> Vec<Vec<u8>> {
    let layout = TableLayout::new(vec![
        ColumnLayout::new("id", ColumnType::String, false),
        ColumnLayout::new("n", ColumnType::Integer, true),
        ColumnLayout::new("f", ColumnType::Float, true),
        ColumnLayout::new("j", ColumnType::Json, true),
        ColumnLayout::new("b", ColumnType::Bytes, true),
    ]);
    let row = |i: i64| SegmentRow {
        server_version: i + 1,
        values: vec![
            Some(RowValue::String(format!("r{i}"))),
            if i % 2 == 0 { Some(RowValue::Integer(i)) } else { None },
            Some(RowValue::Float(i as f64 / 3.0)),
            Some(RowValue::Json(r#"{"k":[1]}"#.into())),
            Some(RowValue::Bytes(vec![i as u8; 3])),
        ],
    };
    let seg = |rows: usize, blocks: usize| {
        encode_rows_segment(&RowsSegment {
            header: SegmentHeader { table: "notes".into(), schema_version: 2, layout: layout.clone() },
            blocks: (0..blocks).map(|b| (0..rows).map(|i| row((b * rows + i) as i64)).collect()).collect(),
        })
        .unwrap()
    };
    vec![seg(0, 0), seg(1, 1), seg(3, 2)]
}

pub fn details_json() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(r#"{"reason":"outside_schedule"}"#.to_string()),
        Just(r#"{"fieldPaths":["title","meta.due_at"],"requiredAction":"edit-fields"}"#.to_string()),
        Just(r#"{ "references" : { "ticket" : "T-1", "a.b" : "x y" } }"#.to_string()),
        "[a-z]{1,10}".prop_map(|t| format!(r#"{{"reason":"{t}"}}"#)),
    ]
}

/// One PUSH_RESULT of a `wire_version` message (conflict records carry
/// `conflictColumns` only at version 3), plus (for rejected results with
/// error records) sometimes a matching PUSH_RESULT_DETAILS.
pub fn push_result_group(wire_version: u16) -> impl Strategy<Value = Vec<ResponseFrame>> {
    let v3 = wire_version >= 3;
    let record = prop_oneof![
        any::<i32>().prop_map(|op_index| OpResult::Applied { op_index }),
        (any::<i32>(), text(), text(), safe_i64(), bytes(), bytes()).prop_map(
            move |(op_index, code, message, server_version, server_row, cc)| OpResult::Conflict {
                op_index,
                code,
                message,
                server_version,
                server_row,
                conflict_columns: if v3 { cc } else { Vec::new() },
            }
        ),
        (0..8i32, text(), text(), any::<bool>()).prop_map(|(op_index, code, message, retryable)| OpResult::Error {
            op_index,
            code,
            message,
            retryable
        }),
    ];
    (nonempty(), 0u8..3, safe_i64(), proptest::collection::vec(record, 0..4), any::<bool>(), details_json()).prop_map(
        |(id, status, seq, results, with_details, dj)| {
            let status = [PushStatus::Applied, PushStatus::Cached, PushStatus::Rejected][status as usize];
            let result = PushResult {
                client_commit_id: id.clone(),
                status,
                commit_seq: status.carries_commit_seq().then_some(seq),
                results,
            };
            let mut error_indexes: Vec<i32> = result
                .results
                .iter()
                .filter(|r| matches!(r, OpResult::Error { .. }))
                .map(OpResult::op_index)
                .collect();
            error_indexes.sort();
            error_indexes.dedup();
            let mut out = vec![];
            let details = (with_details && status == PushStatus::Rejected && !error_indexes.is_empty()).then(|| PushResultDetails {
                client_commit_id: id,
                entries: error_indexes
                    .iter()
                    .map(|&op_index| PushResultDetail { op_index, details_json: dj.clone() })
                    .collect(),
            });
            out.push(ResponseFrame::PushResult(result));
            if let Some(d) = details {
                out.push(ResponseFrame::PushResultDetails(d));
            }
            out
        },
    )
}

pub fn commit() -> impl Strategy<Value = Commit> {
    (safe_i64(), safe_i64(), text(), proptest::collection::vec(text(), 1..3), proptest::collection::vec((any::<prop::sample::Index>(), text(), any::<bool>(), safe_i64(), stored_scopes(), bytes()), 0..4))
        .prop_map(|(commit_seq, created_at_ms, actor_id, tables, changes)| {
            let n = tables.len();
            Commit {
                commit_seq,
                created_at_ms,
                actor_id,
                tables,
                changes: changes
                    .into_iter()
                    .map(|(i, row_id, upsert, v, scopes, row)| Change {
                        table_index: i.index(n) as u16,
                        row_id,
                        op: if upsert { Op::Upsert } else { Op::Delete },
                        row_version: upsert.then_some(v),
                        scopes,
                        row: upsert.then_some(row),
                    })
                    .collect(),
            }
        })
}

pub fn segment_ref() -> impl Strategy<Value = SegmentRef> {
    (
        (text(), any::<bool>(), text(), safe_i64(), safe_i64(), safe_i64(), text()),
        (proptest::option::of(text()), proptest::option::of(text()), proptest::option::of((text(), safe_i64()))),
    )
        .prop_map(|((segment_id, rows, table, byte_length, row_count, as_of_commit_seq, scope_digest), (row_cursor, next_row_cursor, url))| SegmentRef {
            segment_id,
            media_type: if rows { MediaType::Rows } else { MediaType::Sqlite },
            table,
            byte_length,
            row_count,
            as_of_commit_seq,
            scope_digest,
            row_cursor,
            next_row_cursor,
            url_expires_at_ms: url.as_ref().map(|u| u.1),
            url: url.map(|u| u.0),
        })
}

/// One subscription section: SUB_START, commits or segments, SUB_END.
pub fn subscription_section(segs: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<ResponseFrame>> {
    let start = (text(), 0u8..3, text(), scope_map(), any::<bool>()).prop_map(|(id, st, reason_code, effective_scopes, bootstrap)| SubStart {
        id,
        status: [SubStatus::Active, SubStatus::Revoked, SubStatus::Reset][st as usize],
        reason_code,
        effective_scopes,
        bootstrap,
    });
    let seg_frame = prop_oneof![
        segment_ref().prop_map(ResponseFrame::SegmentRef),
        prop::sample::select(segs).prop_map(ResponseFrame::SegmentInline),
    ];
    let body = prop_oneof![
        proptest::collection::vec(commit().prop_map(ResponseFrame::Commit), 0..3),
        proptest::collection::vec(seg_frame, 0..3),
    ];
    (start, body, safe_i64(), proptest::option::of(json_text())).prop_map(|(s, body, next_cursor, bootstrap_state)| {
        let mut v = vec![ResponseFrame::SubStart(s)];
        v.extend(body);
        v.push(ResponseFrame::SubEnd(SubEnd { next_cursor, bootstrap_state }));
        v
    })
}

pub fn response(versions: RangeInclusive<u16>) -> impl Strategy<Value = Response> {
    let segs = segments();
    versions
        .prop_flat_map(move |v| {
            (
                Just(v),
                (proptest::option::of(any::<i32>()), proptest::option::of(any::<i32>()), nonempty(), any::<bool>()),
                proptest::option::of((nonempty(), safe_i64())),
                proptest::collection::vec(push_result_group(v), 0..3),
                proptest::collection::vec(subscription_section(segs.clone()), 0..3),
                proptest::option::of((text(), text(), text(), any::<bool>(), text(), proptest::option::of(json_text()), any::<bool>())),
                proptest::collection::vec((any::<prop::sample::Index>(), unknown_frame(v)), 0..3),
            )
        })
        .prop_map(|(wire_version, (req_v, latest_v, epoch, reset), lease, results, subs, error, unknowns)| {
            let mut frames = Vec::new();
            if let Some((lease_id, expires_at_ms)) = lease {
                frames.push(ResponseFrame::Lease(Lease { lease_id, expires_at_ms }));
            }
            let body_start = frames.len();
            frames.extend(results.into_iter().flatten());
            frames.extend(subs.into_iter().flatten());
            if let Some((code, message, category, retryable, recommended_action, details, cut)) = error {
                // ERROR may interrupt a subscription context: cut the tail.
                if cut && frames.len() > body_start {
                    let keep = body_start + (frames.len() - body_start) / 2;
                    frames.truncate(keep);
                    // A cut between a result and its details is fine; a cut
                    // inside a context leaves it open, which ERROR allows.
                }
                frames.push(ResponseFrame::Error(ErrorFrame { code, message, category, retryable, recommended_action, details }));
            }
            // Unknown frames: after the lease (their decoder rejects LEASE
            // after an unknown frame — a known difference) and before ERROR.
            let error_at = frames.iter().position(|f| matches!(f, ResponseFrame::Error(_))).unwrap_or(frames.len());
            for (i, u) in unknowns {
                let lo = body_start;
                let mut at = (lo + i.index(error_at - lo + 1)).min(frames.len());
                // Version 3: never between a PUSH_RESULT and its details.
                if wire_version >= 3 && matches!(frames.get(at), Some(ResponseFrame::PushResultDetails(_))) {
                    at += 1;
                }
                frames.insert(at, ResponseFrame::Unknown(u));
            }
            Response {
                wire_version,
                header: RespHeader {
                    required_schema_version: req_v,
                    latest_schema_version: latest_v,
                    epoch: (wire_version >= 2).then_some(RespEpoch { log_epoch: epoch, reset_required: reset }),
                },
                frames,
            }
        })
}

pub fn message(versions: RangeInclusive<u16>) -> impl Strategy<Value = Message> {
    prop_oneof![
        request(versions.clone()).prop_map(Message::Request),
        response(versions).prop_map(Message::Response)
    ]
}


// ---------------------------------------------------------------------------
// Byte mutations of encoded messages (accepted or rejected alike by both codecs)
// ---------------------------------------------------------------------------

/// One random edit of an encoded message.
#[derive(Debug, Clone)]
pub enum Mutation {
    Flip(prop::sample::Index, u8),
    Set(prop::sample::Index, u8),
    Insert(prop::sample::Index, u8),
    Delete(prop::sample::Index),
    Truncate(prop::sample::Index),
    SetU32(prop::sample::Index, u32),
}

/// A random [`Mutation`]; a `Set` writes one of `set_bytes` (frame types,
/// flags, …) or any byte.
pub fn mutation(set_bytes: &'static [u8]) -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<prop::sample::Index>(), 1u8..=255).prop_map(|(i, b)| Mutation::Flip(i, b)),
        4 => (any::<prop::sample::Index>(), prop_oneof![prop::sample::select(set_bytes), any::<u8>()]).prop_map(|(i, b)| Mutation::Set(i, b)),
        1 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => any::<prop::sample::Index>().prop_map(Mutation::Delete),
        1 => any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        1 => (any::<prop::sample::Index>(), prop_oneof![Just(0u32), Just(1), any::<u32>()]).prop_map(|(i, v)| Mutation::SetU32(i, v)),
    ]
}

/// Applies `m` to `bytes` (nothing on an empty message).
pub fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    let n = bytes.len();
    match m {
        Mutation::Flip(i, b) => bytes[i.index(n)] ^= b,
        Mutation::Set(i, b) => bytes[i.index(n)] = *b,
        Mutation::Insert(i, b) => bytes.insert(i.index(n + 1), *b),
        Mutation::Delete(i) => {
            bytes.remove(i.index(n));
        }
        Mutation::Truncate(i) => bytes.truncate(i.index(n)),
        Mutation::SetU32(i, v) => {
            let at = i.index(n);
            for (k, b) in v.to_le_bytes().iter().enumerate() {
                if let Some(slot) = bytes.get_mut(at + k) {
                    *slot = *b;
                }
            }
        }
    }
}
