//! The §11.1 canonical JSON debug rendering of SSP2 messages — the form the
//! golden vectors pin. Developer tooling only: no production path parses it.
//!
//! Rules applied: one document `{"magic","wireVersion","msgKind","frames"}`
//! with `END` omitted (1); keys in field-table order (2; `serde_json` is
//! built with `preserve_order`); absent `opt()` fields omitted (3); binaries
//! (`payload`, `row`, `serverRow`, the whole `SEGMENT_INLINE` payload) as
//! standard padded base64 (4); enums by spec name, `accept` numeric (5);
//! `i64` as numbers (6); `json` fields embedded parsed (7); unknown frames as
//! `{"type":"UNKNOWN","frameType":n,"payload":b64}` (9). Messages carry no
//! `f64` field, so rule 10 (NaN → null) only arises inside rows segments,
//! which this renderer never expands (rule 4). `PUSH_RESULT_DETAILS` entries
//! render as `{"opIndex","details"}` with `details` parsed — the spelling
//! both reference renderers use (no golden vector pins it). Wire version 3
//! adds `{"type":"ROUND_FAILURE","code"}` and a conflict record's
//! `conflictColumns` (base64, after `serverRow`), as `syncular-ssp2` 0.49
//! renders them; version 1 and 2 renderings are unchanged.

use serde_json::{Map, Value};

use crate::envelope::UnknownFrame;
use crate::errors::Result;
use crate::message::{decode_message, Message};
use crate::request::{Request, RequestFrameRef};
use crate::response::{OpResult, Response, ResponseFrame};

/// Decodes `bytes` (either kind) and renders it per §11.1. Errors: any
/// decode error of [`decode_message`].
pub fn render_message(bytes: &[u8]) -> Result<Value> {
    render_decoded(&decode_message(bytes)?)
}

/// Renders an already decoded message per §11.1. Errors only for a
/// [`Request`] whose unknown-frame positions are invalid.
pub fn render_decoded(message: &Message) -> Result<Value> {
    match message {
        Message::Request(r) => render_request(r),
        Message::Response(r) => render_response(r),
    }
}

/// Renders a request per §11.1.
pub fn render_request(req: &Request) -> Result<Value> {
    let mut frames = Vec::new();
    for f in req.frames()? {
        frames.push(match f {
            RequestFrameRef::ReqHeader(h) => {
                let mut o = typed("REQ_HEADER");
                o.insert("clientId".into(), h.client_id.clone().into());
                o.insert("schemaVersion".into(), h.schema_version.into());
                if let Some(e) = &h.log_epoch {
                    o.insert("logEpoch".into(), e.clone().into());
                }
                Value::Object(o)
            }
            RequestFrameRef::RoundFailure(code) => {
                let mut o = typed("ROUND_FAILURE");
                o.insert("code".into(), code.into());
                Value::Object(o)
            }
            RequestFrameRef::PushCommit(c) => {
                let mut o = typed("PUSH_COMMIT");
                o.insert("clientCommitId".into(), c.client_commit_id.clone().into());
                let ops = c
                    .operations
                    .iter()
                    .map(|op| {
                        let mut e = Map::new();
                        e.insert("table".into(), op.table.clone().into());
                        e.insert("rowId".into(), op.row_id.clone().into());
                        e.insert("op".into(), op.op.name().into());
                        if let Some(v) = op.base_version {
                            e.insert("baseVersion".into(), v.into());
                        }
                        if let Some(p) = &op.payload {
                            e.insert("payload".into(), b64(p));
                        }
                        Value::Object(e)
                    })
                    .collect();
                o.insert("operations".into(), Value::Array(ops));
                Value::Object(o)
            }
            RequestFrameRef::PullHeader(p) => {
                let mut o = typed("PULL_HEADER");
                o.insert("limitCommits".into(), p.limit_commits.into());
                o.insert("limitSnapshotRows".into(), p.limit_snapshot_rows.into());
                o.insert("maxSnapshotPages".into(), p.max_snapshot_pages.into());
                o.insert("accept".into(), p.accept.into());
                Value::Object(o)
            }
            RequestFrameRef::Subscription(s) => {
                let mut o = typed("SUBSCRIPTION");
                o.insert("id".into(), s.id.clone().into());
                o.insert("table".into(), s.table.clone().into());
                o.insert("scopes".into(), scope_map(&s.scopes));
                if let Some(p) = &s.params {
                    o.insert("params".into(), json(p)?);
                }
                o.insert("cursor".into(), s.cursor.into());
                if let Some(b) = &s.bootstrap_state {
                    o.insert("bootstrapState".into(), json(b)?);
                }
                Value::Object(o)
            }
            RequestFrameRef::Unknown(u) => unknown(u),
        });
    }
    Ok(envelope(req.wire_version, "request", frames))
}

/// Renders a response per §11.1.
pub fn render_response(resp: &Response) -> Result<Value> {
    let mut frames = Vec::with_capacity(resp.frames.len() + 1);
    let mut o = typed("RESP_HEADER");
    if let Some(v) = resp.header.required_schema_version {
        o.insert("requiredSchemaVersion".into(), v.into());
    }
    if let Some(v) = resp.header.latest_schema_version {
        o.insert("latestSchemaVersion".into(), v.into());
    }
    if let Some(e) = &resp.header.epoch {
        o.insert("logEpoch".into(), e.log_epoch.clone().into());
        o.insert("resetRequired".into(), e.reset_required.into());
    }
    frames.push(Value::Object(o));
    for f in &resp.frames {
        frames.push(render_response_frame(f, resp.wire_version)?);
    }
    Ok(envelope(resp.wire_version, "response", frames))
}

fn render_response_frame(f: &ResponseFrame, wire_version: u16) -> Result<Value> {
    let o = match f {
        ResponseFrame::Lease(l) => {
            let mut o = typed("LEASE");
            o.insert("leaseId".into(), l.lease_id.clone().into());
            o.insert("expiresAtMs".into(), l.expires_at_ms.into());
            o
        }
        ResponseFrame::PushResult(p) => {
            let mut o = typed("PUSH_RESULT");
            o.insert("clientCommitId".into(), p.client_commit_id.clone().into());
            o.insert("status".into(), p.status.name().into());
            if let Some(s) = p.commit_seq {
                o.insert("commitSeq".into(), s.into());
            }
            let results = p.results.iter().map(|r| render_result(r, wire_version)).collect();
            o.insert("results".into(), Value::Array(results));
            o
        }
        ResponseFrame::PushResultDetails(d) => {
            let mut o = typed("PUSH_RESULT_DETAILS");
            o.insert("clientCommitId".into(), d.client_commit_id.clone().into());
            let mut entries = Vec::with_capacity(d.entries.len());
            for e in &d.entries {
                let mut m = Map::new();
                m.insert("opIndex".into(), e.op_index.into());
                m.insert("details".into(), json(&e.details_json)?);
                entries.push(Value::Object(m));
            }
            o.insert("entries".into(), Value::Array(entries));
            o
        }
        ResponseFrame::SubStart(s) => {
            let mut o = typed("SUB_START");
            o.insert("id".into(), s.id.clone().into());
            o.insert("status".into(), s.status.name().into());
            o.insert("reasonCode".into(), s.reason_code.clone().into());
            o.insert("effectiveScopes".into(), scope_map(&s.effective_scopes));
            o.insert("bootstrap".into(), s.bootstrap.into());
            o
        }
        ResponseFrame::Commit(c) => {
            let mut o = typed("COMMIT");
            o.insert("commitSeq".into(), c.commit_seq.into());
            o.insert("createdAtMs".into(), c.created_at_ms.into());
            o.insert("actorId".into(), c.actor_id.clone().into());
            o.insert(
                "tables".into(),
                Value::Array(c.tables.iter().map(|t| t.clone().into()).collect()),
            );
            let changes = c
                .changes
                .iter()
                .map(|ch| {
                    let mut m = Map::new();
                    m.insert("tableIndex".into(), ch.table_index.into());
                    m.insert("rowId".into(), ch.row_id.clone().into());
                    m.insert("op".into(), ch.op.name().into());
                    if let Some(v) = ch.row_version {
                        m.insert("rowVersion".into(), v.into());
                    }
                    let scopes: Map<String, Value> =
                        ch.scopes.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect();
                    m.insert("scopes".into(), Value::Object(scopes));
                    if let Some(r) = &ch.row {
                        m.insert("row".into(), b64(r));
                    }
                    Value::Object(m)
                })
                .collect();
            o.insert("changes".into(), Value::Array(changes));
            o
        }
        ResponseFrame::SegmentRef(s) => {
            let mut o = typed("SEGMENT_REF");
            o.insert("segmentId".into(), s.segment_id.clone().into());
            o.insert("mediaType".into(), s.media_type.name().into());
            o.insert("table".into(), s.table.clone().into());
            o.insert("byteLength".into(), s.byte_length.into());
            o.insert("rowCount".into(), s.row_count.into());
            o.insert("asOfCommitSeq".into(), s.as_of_commit_seq.into());
            o.insert("scopeDigest".into(), s.scope_digest.clone().into());
            let opts = [
                ("rowCursor", &s.row_cursor),
                ("nextRowCursor", &s.next_row_cursor),
                ("url", &s.url),
            ];
            for (k, v) in opts {
                if let Some(v) = v {
                    o.insert(k.into(), v.clone().into());
                }
            }
            if let Some(v) = s.url_expires_at_ms {
                o.insert("urlExpiresAtMs".into(), v.into());
            }
            o
        }
        ResponseFrame::SegmentInline(bytes) => {
            let mut o = typed("SEGMENT_INLINE");
            o.insert("payload".into(), b64(bytes));
            o
        }
        ResponseFrame::SubEnd(s) => {
            let mut o = typed("SUB_END");
            o.insert("nextCursor".into(), s.next_cursor.into());
            if let Some(b) = &s.bootstrap_state {
                o.insert("bootstrapState".into(), json(b)?);
            }
            o
        }
        ResponseFrame::Error(e) => {
            let mut o = typed("ERROR");
            o.insert("code".into(), e.code.clone().into());
            o.insert("message".into(), e.message.clone().into());
            o.insert("category".into(), e.category.clone().into());
            o.insert("retryable".into(), e.retryable.into());
            o.insert("recommendedAction".into(), e.recommended_action.clone().into());
            if let Some(d) = &e.details {
                o.insert("details".into(), json(d)?);
            }
            o
        }
        ResponseFrame::Unknown(u) => return Ok(unknown(u)),
    };
    Ok(Value::Object(o))
}

fn render_result(r: &OpResult, wire_version: u16) -> Value {
    let mut m = Map::new();
    m.insert("opIndex".into(), r.op_index().into());
    match r {
        OpResult::Applied { .. } => {
            m.insert("status".into(), "applied".into());
        }
        OpResult::Conflict { code, message, server_version, server_row, conflict_columns, .. } => {
            m.insert("status".into(), "conflict".into());
            m.insert("code".into(), code.clone().into());
            m.insert("message".into(), message.clone().into());
            m.insert("serverVersion".into(), (*server_version).into());
            m.insert("serverRow".into(), b64(server_row));
            if wire_version >= crate::constants::WIRE_VERSION_3 {
                m.insert("conflictColumns".into(), b64(conflict_columns));
            }
        }
        OpResult::Error { code, message, retryable, .. } => {
            m.insert("status".into(), "error".into());
            m.insert("code".into(), code.clone().into());
            m.insert("message".into(), message.clone().into());
            m.insert("retryable".into(), (*retryable).into());
        }
    }
    Value::Object(m)
}

fn envelope(wire_version: u16, kind: &str, frames: Vec<Value>) -> Value {
    let mut o = Map::new();
    o.insert("magic".into(), "SSP2".into());
    o.insert("wireVersion".into(), wire_version.into());
    o.insert("msgKind".into(), kind.into());
    o.insert("frames".into(), Value::Array(frames));
    Value::Object(o)
}

fn typed(name: &str) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("type".into(), name.into());
    o
}

fn unknown(u: &UnknownFrame) -> Value {
    let mut o = typed("UNKNOWN");
    o.insert("frameType".into(), u.frame_type.into());
    o.insert("payload".into(), b64(&u.payload));
    Value::Object(o)
}

fn scope_map(m: &[(String, Vec<String>)]) -> Value {
    Value::Object(
        m.iter()
            .map(|(k, vs)| (k.clone(), Value::Array(vs.iter().map(|v| v.clone().into()).collect())))
            .collect(),
    )
}

/// Rule 4: standard (padded) base64.
fn b64(bytes: &[u8]) -> Value {
    Value::String(crate::row_codec::base64_encode(bytes))
}

/// Rule 7: a `json` field embedded parsed. RFC 8259 numbers beyond the f64
/// range (`1e400`) are valid JSON that `serde_json::Value` cannot hold; they
/// render as `null`, what JavaScript's `JSON.parse` → `JSON.stringify` gives
/// for ±Infinity (the rule-10 treatment). Any other valid text `Value`
/// cannot hold (a lone-surrogate escape, nesting deeper than 128) renders as
/// its raw string — rendering is non-contractual for the wire.
fn json(text: &str) -> Result<Value> {
    Ok(serde_json::from_str(text)
        .or_else(|_| serde_json::from_str(&null_out_of_range_numbers(text)))
        .unwrap_or_else(|_: serde_json::Error| Value::String(text.to_owned())))
}

/// Replaces every number token outside the f64 range with `null`; strings
/// are copied untouched.
fn null_out_of_range_numbers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '"' {
            out.push(c);
            let mut escaped = false;
            for (_, c) in chars.by_ref() {
                out.push(c);
                match (escaped, c) {
                    (false, '\\') => escaped = true,
                    (false, '"') => break,
                    _ => escaped = false,
                }
            }
        } else if c == '-' || c.is_ascii_digit() {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if d.is_ascii_digit() || matches!(d, '.' | 'e' | 'E' | '+' | '-') {
                    end = j + 1;
                    chars.next();
                } else {
                    break;
                }
            }
            let token = &text[i..end];
            match token.parse::<f64>() {
                Ok(v) if v.is_infinite() => out.push_str("null"),
                _ => out.push_str(token),
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_numbers_render_as_null() {
        let v = json(r#"{"a":-1e400,"b":"1e400","c":[2.5e308, 1.5]}"#).unwrap();
        assert_eq!(v, serde_json::json!({"a":null,"b":"1e400","c":[null,1.5]}));
        let v = json(r#"["x\"1e999", 1e999]"#).unwrap();
        assert_eq!(v, serde_json::json!(["x\"1e999", null]));
    }
}
