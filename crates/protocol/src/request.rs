//! SSP2 request messages: the §1.5 grammar and its frames — `REQ_HEADER`
//! (§1.5, wire versions 1–3), `ROUND_FAILURE` (§1.5, wire version 3 only),
//! `PUSH_COMMIT` (§6.1), `PULL_HEADER` (§4.2) and `SUBSCRIPTION` (§4.3).
//!
//! Wire version 3 grammar: `REQ_HEADER`, `ROUND_FAILURE` 0|1 *immediately*
//! after it (an unknown frame in between counts as a frame, as in the
//! `syncular-ssp2` 0.49 decoder), `PUSH_COMMIT` × N, `PULL_HEADER` 0|1,
//! `SUBSCRIPTION` × M, `END`. In versions 1 and 2 a `0x05` frame has no
//! layout: it is an unknown frame (§1.2 rule 2), kept in
//! [`Request::unknown`] exactly as before version 3 existed.
//!
//! [`decode_request`] rejects exactly the §1.7 decode errors for requests
//! (`sync.invalid_request`, or `sync.empty_commit` for a commit with zero
//! operations) and nothing else: duplicate subscription ids, unknown tables,
//! operation caps, `accept` without rows bits, row payload contents and the
//! `logEpoch`/push tie are request validation, left to the engine.
//! [`encode_request`] produces the one canonical encoding and refuses
//! (encoder error, code `sync.invalid_request`, message prefixed
//! `encoder:`) any value the decoder would reject.

use crate::constants::{
    ACCEPT_RESERVED_MASK, FRAME_PULL_HEADER, FRAME_PUSH_COMMIT, FRAME_REQ_HEADER,
    FRAME_ROUND_FAILURE, FRAME_SUBSCRIPTION, ROUND_FAILURE_CODE_MAX_BYTES, WIRE_VERSION_2,
    WIRE_VERSION_3,
};
use crate::envelope::{
    classify, finish_after_end, next_frame, parse_payload, read_envelope_header,
    write_end, write_envelope_header, write_frame, write_unknown_frame, FrameClass, MsgKind,
    UnknownFrame,
};
use crate::errors::{ErrorCode, ProtocolError, Result};
use crate::frame_fields::{
    as_encoder_error, encoder_check, read_opt_bytes, read_opt_i64, read_opt_json, read_scope_map,
    read_string, write_opt_bytes, write_opt_i64, write_opt_json, write_opt_str, write_scope_map,
    Op, ScopeMap,
};
use crate::primitives::{Reader, Writer};

/// `REQ_HEADER` (§1.5): who is asking, for which schema, on which log epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqHeader {
    /// Stable per-device id; non-empty (decode error otherwise, §1.7).
    pub client_id: String,
    /// The client's generated schema version; ≥ 1 (decode error otherwise).
    pub schema_version: i32,
    /// Wire versions 2 and 3: the partition log epoch last accepted by the
    /// client (`opt(str)`); `None` requests epoch acquisition. Always `None`
    /// in a version 1 message (encoding `Some` at version 1 is an encoder
    /// error). An empty string is legal on the wire (not a §1.7 error).
    pub log_epoch: Option<String>,
}

/// One operation of a `PUSH_COMMIT` (§6.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// Table name as sent (unknown tables are commit-level validation).
    pub table: String,
    /// Row id as sent.
    pub row_id: String,
    /// Upsert or delete.
    pub op: Op,
    /// Optimistic-concurrency token (§6.2); `None` = last-write-wins. May be
    /// present on a delete (accepted, preserved, ignored by the server).
    pub base_version: Option<i64>,
    /// Row-codec bytes (§2.4), opaque here; present iff `op` is upsert
    /// (decode error otherwise).
    pub payload: Option<Vec<u8>>,
}

/// `PUSH_COMMIT` (§6.1): one client commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushCommit {
    /// Idempotency key (§2.3); non-empty (decode error otherwise).
    pub client_commit_id: String,
    /// At least one operation (`sync.empty_commit` otherwise).
    pub operations: Vec<Operation>,
}

/// `PULL_HEADER` (§4.2): pull limits and segment capabilities. Values are
/// carried raw; clamping (§4.2) and the rows-bits check are the server's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullHeader {
    /// Max changes per subscription; `0` = server default.
    pub limit_commits: i32,
    /// Bootstrap page size in rows; `0` = server default.
    pub limit_snapshot_rows: i32,
    /// Max bootstrap pages per pull; `0` = server default.
    pub max_snapshot_pages: i32,
    /// Capability bitmask (`ACCEPT_*` in [`crate::constants`]); bits 4–7 must
    /// be zero (decode error otherwise).
    pub accept: u8,
}

/// `SUBSCRIPTION` (§4.3): one requested subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// Subscription id (§4.1); uniqueness is request validation.
    pub id: String,
    /// Table name (unknown table is request-level validation).
    pub table: String,
    /// Requested scopes (§3.2), canonical key order.
    pub scopes: ScopeMap,
    /// Host-opaque snapshot parameters: raw JSON text, kept byte-for-byte.
    pub params: Option<String>,
    /// Last fully applied `commitSeq`; `-1` = never synced.
    pub cursor: i64,
    /// Resume token from a previous `SUB_END` (§4.7): raw JSON text,
    /// round-tripped unchanged and uninspected.
    pub bootstrap_state: Option<String>,
}

/// The pull half of a request: `PULL_HEADER` and its subscriptions in
/// request order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    /// The `PULL_HEADER` frame.
    pub header: PullHeader,
    /// `SUBSCRIPTION` frames, in request order (responses echo this order).
    pub subscriptions: Vec<Subscription>,
}

/// An unknown frame preserved at its wire position (§1.2 rule 2).
///
/// `after_known_frames` counts the known frames before it (`REQ_HEADER` is
/// known frame 1, then `ROUND_FAILURE` when present, then each
/// `PUSH_COMMIT`, `PULL_HEADER`, `SUBSCRIPTION` in wire order), so it is
/// always ≥ 1; several unknown frames at the same position keep their list
/// order. Lists must be sorted by this field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedUnknown {
    /// Number of known frames preceding this one on the wire (≥ 1).
    pub after_known_frames: usize,
    /// The preserved frame.
    pub frame: UnknownFrame,
}

/// A decoded SSP2 request (§1.5), owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Envelope `wireVersion`: 1, 2 or 3. A response answers in the same one.
    pub wire_version: u16,
    /// `REQ_HEADER`.
    pub header: ReqHeader,
    /// `ROUND_FAILURE.code` (wire version 3 only, at most one frame, directly
    /// after `REQ_HEADER`): the code of the client's last round that failed
    /// where the server could not see it, e.g. `"transport.timeout"`;
    /// syntax [`is_round_failure_code`]. Always `None` below version 3
    /// (encoding `Some` there is an encoder error).
    pub round_failure: Option<String>,
    /// `PUSH_COMMIT` frames in client commit order (may be empty).
    pub commits: Vec<PushCommit>,
    /// The pull half, if `PULL_HEADER` was sent.
    pub pull: Option<PullRequest>,
    /// Unknown frames with their positions (empty for almost every request).
    pub unknown: Vec<PlacedUnknown>,
}

/// A borrowed view of one request frame, in wire order (see
/// [`Request::frames`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFrameRef<'a> {
    /// `REQ_HEADER`.
    ReqHeader(&'a ReqHeader),
    /// `ROUND_FAILURE` (its `code`).
    RoundFailure(&'a str),
    /// `PUSH_COMMIT`.
    PushCommit(&'a PushCommit),
    /// `PULL_HEADER`.
    PullHeader(&'a PullHeader),
    /// `SUBSCRIPTION`.
    Subscription(&'a Subscription),
    /// A preserved unknown frame.
    Unknown(&'a UnknownFrame),
}

impl Request {
    /// All frames in wire order (END excluded), unknown frames interleaved
    /// at their recorded positions. Errors (encoder error) when an unknown
    /// position is 0, out of order, or past the last known frame.
    pub fn frames(&self) -> Result<Vec<RequestFrameRef<'_>>> {
        let mut known: Vec<RequestFrameRef<'_>> = Vec::with_capacity(
            2 + self.commits.len() + self.pull.as_ref().map_or(0, |p| 1 + p.subscriptions.len()),
        );
        known.push(RequestFrameRef::ReqHeader(&self.header));
        if let Some(code) = &self.round_failure {
            known.push(RequestFrameRef::RoundFailure(code));
        }
        known.extend(self.commits.iter().map(RequestFrameRef::PushCommit));
        if let Some(pull) = &self.pull {
            known.push(RequestFrameRef::PullHeader(&pull.header));
            known.extend(pull.subscriptions.iter().map(RequestFrameRef::Subscription));
        }
        let mut prev = 1;
        for u in &self.unknown {
            if u.after_known_frames < prev || u.after_known_frames > known.len() {
                return Err(ProtocolError::invalid(format!(
                    "encoder: unknown frame position {} is 0, out of order, or past the {} known frame(s)",
                    u.after_known_frames,
                    known.len()
                )));
            }
            prev = u.after_known_frames;
        }
        let mut out = Vec::with_capacity(known.len() + self.unknown.len());
        let mut next_unknown = 0;
        for (i, k) in known.iter().enumerate() {
            out.push(*k);
            while let Some(u) = self.unknown.get(next_unknown) {
                if u.after_known_frames != i + 1 {
                    break;
                }
                out.push(RequestFrameRef::Unknown(&u.frame));
                next_unknown += 1;
            }
        }
        Ok(out)
    }
}

/// Frame-order state of the §1.5 grammar, shared by decoder and encoder.
#[derive(Debug)]
struct RequestGrammar {
    wire_version: u16,
    seen_header: bool,
    /// Any frame after `REQ_HEADER`, unknown ones included.
    seen_body: bool,
    seen_failure: bool,
    seen_push: bool,
    seen_pull: bool,
}

impl RequestGrammar {
    fn new(wire_version: u16) -> Self {
        RequestGrammar {
            wire_version,
            seen_header: false,
            seen_body: false,
            seen_failure: false,
            seen_push: false,
            seen_pull: false,
        }
    }

    /// Accepts the next *known* frame type or returns the grammar error.
    fn accept(&mut self, frame_type: u8) -> Result<()> {
        if !self.seen_header {
            if frame_type != FRAME_REQ_HEADER {
                return Err(ProtocolError::invalid(format!(
                    "first frame of a request must be REQ_HEADER, got {frame_type:#04x}"
                )));
            }
            self.seen_header = true;
            return Ok(());
        }
        let was_body = std::mem::replace(&mut self.seen_body, true);
        match frame_type {
            FRAME_REQ_HEADER => Err(ProtocolError::invalid("duplicate REQ_HEADER frame")),
            FRAME_ROUND_FAILURE if self.wire_version < WIRE_VERSION_3 => Err(ProtocolError::invalid(
                "ROUND_FAILURE requires wire version 3",
            )),
            FRAME_ROUND_FAILURE if self.seen_failure => {
                Err(ProtocolError::invalid("duplicate ROUND_FAILURE frame"))
            }
            FRAME_ROUND_FAILURE if was_body => Err(ProtocolError::invalid(
                "ROUND_FAILURE must immediately follow REQ_HEADER",
            )),
            FRAME_ROUND_FAILURE => {
                self.seen_failure = true;
                Ok(())
            }
            FRAME_PUSH_COMMIT if self.seen_pull => Err(ProtocolError::invalid(
                "PUSH_COMMIT after PULL_HEADER (out of §1.5 order)",
            )),
            FRAME_PUSH_COMMIT => {
                self.seen_push = true;
                Ok(())
            }
            FRAME_PULL_HEADER if self.seen_pull => {
                Err(ProtocolError::invalid("duplicate PULL_HEADER frame"))
            }
            FRAME_PULL_HEADER => {
                self.seen_pull = true;
                Ok(())
            }
            FRAME_SUBSCRIPTION if !self.seen_pull => Err(ProtocolError::invalid(
                "SUBSCRIPTION without a preceding PULL_HEADER",
            )),
            FRAME_SUBSCRIPTION => Ok(()),
            other => Err(ProtocolError::invalid(format!(
                "frame {other:#04x} is not a request frame"
            ))),
        }
    }

    /// Unknown frames are legal only strictly after the header frame; one
    /// counts as a body frame (a later `ROUND_FAILURE` is out of place).
    fn accept_unknown(&mut self, frame_type: u8) -> Result<()> {
        if self.seen_header {
            self.seen_body = true;
            Ok(())
        } else {
            Err(ProtocolError::invalid(format!(
                "unknown frame {frame_type:#04x} before REQ_HEADER"
            )))
        }
    }

    /// At END: a header and at least one push or pull frame (§1.5).
    fn finish(&self) -> Result<()> {
        if !self.seen_header {
            return Err(ProtocolError::invalid("request has no REQ_HEADER frame"));
        }
        if !self.seen_push && !self.seen_pull {
            return Err(ProtocolError::invalid(
                "request has neither PUSH_COMMIT nor PULL_HEADER frames (no-content request)",
            ));
        }
        Ok(())
    }
}

/// Decodes a complete request message (§1.2, §1.5, §1.7).
///
/// Errors: every §1.7 request decode error, as `sync.invalid_request`
/// except a `PUSH_COMMIT` with zero operations (`sync.empty_commit`); a
/// response message (`msgKind` 0x02) is `sync.invalid_request` too. Never
/// panics; allocation is bounded by the input length.
pub fn decode_request(bytes: &[u8]) -> Result<Request> {
    let mut r = Reader::new(bytes);
    let (wire_version, kind) = read_envelope_header(&mut r)?;
    if kind != MsgKind::Request {
        return Err(ProtocolError::invalid("expected a request message, got a response"));
    }
    decode_request_frames(&mut r, wire_version)
}

/// Decodes the frames of a request whose envelope header was already read.
pub(crate) fn decode_request_frames(r: &mut Reader<'_>, wire_version: u16) -> Result<Request> {
    let mut grammar = RequestGrammar::new(wire_version);
    let mut header: Option<ReqHeader> = None;
    let mut round_failure: Option<String> = None;
    let mut commits = Vec::new();
    let mut pull: Option<PullRequest> = None;
    let mut unknown = Vec::new();
    let mut known_count = 0usize;

    while let Some(frame) = next_frame(r)? {
        match classify(frame.frame_type, MsgKind::Request, wire_version)? {
            FrameClass::Unknown => {
                grammar.accept_unknown(frame.frame_type)?;
                unknown.push(PlacedUnknown {
                    after_known_frames: known_count,
                    frame: UnknownFrame {
                        frame_type: frame.frame_type,
                        payload: frame.payload.to_vec(),
                    },
                });
                continue;
            }
            FrameClass::Known => grammar.accept(frame.frame_type)?,
        }
        known_count += 1;
        match frame.frame_type {
            FRAME_REQ_HEADER => header = Some(decode_req_header(frame.payload, wire_version)?),
            FRAME_ROUND_FAILURE => round_failure = Some(decode_round_failure(frame.payload)?),
            FRAME_PUSH_COMMIT => commits.push(decode_push_commit(frame.payload)?),
            FRAME_PULL_HEADER => {
                pull = Some(PullRequest {
                    header: decode_pull_header(frame.payload)?,
                    subscriptions: Vec::new(),
                })
            }
            _ => {
                let sub = decode_subscription(frame.payload)?;
                if let Some(p) = pull.as_mut() {
                    p.subscriptions.push(sub);
                }
            }
        }
    }
    grammar.finish()?;
    finish_after_end(r)?;
    let header = header.ok_or_else(|| ProtocolError::invalid("request has no REQ_HEADER frame"))?;
    Ok(Request { wire_version, header, round_failure, commits, pull, unknown })
}

/// Whether a request carries a `PUSH_COMMIT` frame (§1.5), read from the
/// frame headers alone (no payload is decoded): what a caller needs to know
/// before the round to pick its durability (`syncular.gateway_round`).
/// `true` for bytes that are not a well-framed request — [`decode_request`]
/// reports why; assuming pushes is the durable side. Never panics.
pub fn carries_push_commit(bytes: &[u8]) -> bool {
    let mut r = Reader::new(bytes);
    if !matches!(read_envelope_header(&mut r), Ok((_, MsgKind::Request))) {
        return true;
    }
    loop {
        match next_frame(&mut r) {
            Ok(Some(frame)) if frame.frame_type != FRAME_PUSH_COMMIT => {}
            Ok(None) => return false,
            Ok(Some(_)) | Err(_) => return true,
        }
    }
}

/// `ROUND_FAILURE.code` syntax (§1.5, wire version 3): at most 64 UTF-8
/// bytes of `[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+` — two or more dotted
/// segments, each a lowercase ASCII letter then lowercase letters, digits or
/// `_` (`"transport.timeout"`, `"a1.b_2.c3"`).
pub fn is_round_failure_code(code: &str) -> bool {
    let segment_ok = |seg: &str| {
        let b = seg.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_lowercase()
            && b[1..].iter().all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
    };
    code.len() <= ROUND_FAILURE_CODE_MAX_BYTES
        && code.contains('.')
        && code.split('.').all(segment_ok)
}

fn not_a_round_failure_code(code: &str) -> String {
    format!("ROUND_FAILURE.code {code:?} is not a lowercase dotted code of at most {ROUND_FAILURE_CODE_MAX_BYTES} bytes")
}

/// Decodes a `ROUND_FAILURE` payload (§1.5, wire version 3): one `str`
/// `code` satisfying [`is_round_failure_code`], nothing after it.
/// Errors: `sync.invalid_request`.
pub fn decode_round_failure(payload: &[u8]) -> Result<String> {
    parse_payload(payload, "ROUND_FAILURE", |r| {
        let code = read_string(r, "ROUND_FAILURE.code")?;
        if !is_round_failure_code(&code) {
            return Err(ProtocolError::invalid(not_a_round_failure_code(&code)));
        }
        Ok(code)
    })
}

/// Writes a `ROUND_FAILURE` payload; a code outside
/// [`is_round_failure_code`] is an encoder error.
pub fn encode_round_failure(w: &mut Writer, code: &str) -> Result<()> {
    encoder_check(is_round_failure_code(code), || not_a_round_failure_code(code))?;
    w.str(code, "ROUND_FAILURE.code")
}

/// Decodes a `REQ_HEADER` payload for `wire_version` (§1.5).
pub fn decode_req_header(payload: &[u8], wire_version: u16) -> Result<ReqHeader> {
    parse_payload(payload, "REQ_HEADER", |r| {
        let client_id = read_string(r, "REQ_HEADER.clientId")?;
        if client_id.is_empty() {
            return Err(ProtocolError::invalid("REQ_HEADER.clientId must be non-empty"));
        }
        let schema_version = r.i32("REQ_HEADER.schemaVersion")?;
        if schema_version < 1 {
            return Err(ProtocolError::invalid(format!(
                "REQ_HEADER.schemaVersion must be ≥ 1, got {schema_version}"
            )));
        }
        let log_epoch = if wire_version >= WIRE_VERSION_2 {
            r.opt("REQ_HEADER.logEpoch", |r| read_string(r, "REQ_HEADER.logEpoch"))?
        } else {
            None
        };
        Ok(ReqHeader { client_id, schema_version, log_epoch })
    })
}

/// Decodes a `PUSH_COMMIT` payload (§6.1).
pub fn decode_push_commit(payload: &[u8]) -> Result<PushCommit> {
    parse_payload(payload, "PUSH_COMMIT", |r| {
        let client_commit_id = read_string(r, "PUSH_COMMIT.clientCommitId")?;
        if client_commit_id.is_empty() {
            return Err(ProtocolError::invalid("PUSH_COMMIT.clientCommitId must be non-empty"));
        }
        // Smallest operation: two empty strs, op, two absent opts = 11 bytes.
        let n = r.count("PUSH_COMMIT.operations", 11)?;
        if n == 0 {
            return Err(ProtocolError::new(
                ErrorCode::EmptyCommit,
                format!("PUSH_COMMIT {client_commit_id:?} has zero operations"),
            ));
        }
        let mut operations = Vec::with_capacity(n);
        for _ in 0..n {
            let table = read_string(r, "operation.table")?;
            let row_id = read_string(r, "operation.rowId")?;
            let op = Op::read(r)?;
            let base_version = read_opt_i64(r, "operation.baseVersion")?;
            let payload = read_opt_bytes(r, "operation.payload")?;
            if payload.is_some() != (op == Op::Upsert) {
                return Err(ProtocolError::invalid(format!(
                    "operation.payload must be present iff op is upsert (op = {}, payload {})",
                    op.name(),
                    if payload.is_some() { "present" } else { "absent" }
                )));
            }
            operations.push(Operation { table, row_id, op, base_version, payload });
        }
        Ok(PushCommit { client_commit_id, operations })
    })
}

/// Decodes a `PULL_HEADER` payload (§4.2).
pub fn decode_pull_header(payload: &[u8]) -> Result<PullHeader> {
    parse_payload(payload, "PULL_HEADER", |r| {
        let limit_commits = r.i32("PULL_HEADER.limitCommits")?;
        let limit_snapshot_rows = r.i32("PULL_HEADER.limitSnapshotRows")?;
        let max_snapshot_pages = r.i32("PULL_HEADER.maxSnapshotPages")?;
        let accept = r.u8("PULL_HEADER.accept")?;
        if accept & ACCEPT_RESERVED_MASK != 0 {
            return Err(ProtocolError::invalid(format!(
                "PULL_HEADER.accept bits 4–7 must be zero, got {accept:#010b}"
            )));
        }
        Ok(PullHeader { limit_commits, limit_snapshot_rows, max_snapshot_pages, accept })
    })
}

/// Decodes a `SUBSCRIPTION` payload (§4.3).
pub fn decode_subscription(payload: &[u8]) -> Result<Subscription> {
    parse_payload(payload, "SUBSCRIPTION", |r| {
        let id = read_string(r, "SUBSCRIPTION.id")?;
        let table = read_string(r, "SUBSCRIPTION.table")?;
        let scopes = read_scope_map(r, "SUBSCRIPTION.scopes")?;
        let params = read_opt_json(r, "SUBSCRIPTION.params")?;
        let cursor = r.i64("SUBSCRIPTION.cursor")?;
        let bootstrap_state = read_opt_json(r, "SUBSCRIPTION.bootstrapState")?;
        Ok(Subscription { id, table, scopes, params, cursor, bootstrap_state })
    })
}

/// Encodes a request canonically (§1.2, §1.5).
///
/// Encoder errors (`sync.invalid_request`, message `encoder: …`): a wire
/// version other than 1/2/3, `log_epoch` at version 1, `round_failure` below
/// version 3 or outside [`is_round_failure_code`], an unknown frame placed
/// between `REQ_HEADER` and `ROUND_FAILURE`, a no-content request,
/// any field the decoder would reject (empty ids, `schemaVersion < 1`, zero
/// operations, payload/op mismatch, `accept` bits 4–7, non-canonical maps,
/// invalid JSON text, `i64` outside ±(2^53−1)), or an unknown frame under a
/// registered type / at an impossible position.
pub fn encode_request(req: &Request) -> Result<Vec<u8>> {
    encode_request_unchecked(req).map_err(as_encoder_error)
}

fn encode_request_unchecked(req: &Request) -> Result<Vec<u8>> {
    let mut w = Writer::with_capacity(256);
    write_envelope_header(&mut w, req.wire_version, MsgKind::Request)?;
    let mut grammar = RequestGrammar::new(req.wire_version);
    for frame in req.frames()? {
        match frame {
            RequestFrameRef::ReqHeader(h) => {
                grammar.accept(FRAME_REQ_HEADER)?;
                write_frame(&mut w, FRAME_REQ_HEADER, |w| encode_req_header(w, h, req.wire_version))?;
            }
            RequestFrameRef::RoundFailure(code) => {
                grammar.accept(FRAME_ROUND_FAILURE)?;
                write_frame(&mut w, FRAME_ROUND_FAILURE, |w| encode_round_failure(w, code))?;
            }
            RequestFrameRef::PushCommit(c) => {
                grammar.accept(FRAME_PUSH_COMMIT)?;
                write_frame(&mut w, FRAME_PUSH_COMMIT, |w| encode_push_commit(w, c))?;
            }
            RequestFrameRef::PullHeader(p) => {
                grammar.accept(FRAME_PULL_HEADER)?;
                write_frame(&mut w, FRAME_PULL_HEADER, |w| encode_pull_header(w, p))?;
            }
            RequestFrameRef::Subscription(s) => {
                grammar.accept(FRAME_SUBSCRIPTION)?;
                write_frame(&mut w, FRAME_SUBSCRIPTION, |w| encode_subscription(w, s))?;
            }
            RequestFrameRef::Unknown(u) => {
                grammar.accept_unknown(u.frame_type)?;
                write_unknown_frame(&mut w, u, req.wire_version)?;
            }
        }
    }
    grammar.finish()?;
    write_end(&mut w);
    Ok(w.into_vec())
}

/// Writes a `REQ_HEADER` payload for `wire_version`.
pub fn encode_req_header(w: &mut Writer, h: &ReqHeader, wire_version: u16) -> Result<()> {
    encoder_check(!h.client_id.is_empty(), || "REQ_HEADER.clientId must be non-empty".into())?;
    encoder_check(h.schema_version >= 1, || {
        format!("REQ_HEADER.schemaVersion must be ≥ 1, got {}", h.schema_version)
    })?;
    w.str(&h.client_id, "REQ_HEADER.clientId")?;
    w.i32(h.schema_version);
    if wire_version >= WIRE_VERSION_2 {
        write_opt_str(w, h.log_epoch.as_deref(), "REQ_HEADER.logEpoch")?;
    } else {
        encoder_check(h.log_epoch.is_none(), || {
            "REQ_HEADER.logEpoch requires wire version 2 or 3".into()
        })?;
    }
    Ok(())
}

/// Writes a `PUSH_COMMIT` payload.
pub fn encode_push_commit(w: &mut Writer, c: &PushCommit) -> Result<()> {
    encoder_check(!c.client_commit_id.is_empty(), || {
        "PUSH_COMMIT.clientCommitId must be non-empty".into()
    })?;
    encoder_check(!c.operations.is_empty(), || "PUSH_COMMIT has zero operations".into())?;
    w.str(&c.client_commit_id, "PUSH_COMMIT.clientCommitId")?;
    w.len_prefix(c.operations.len(), "PUSH_COMMIT.operations")?;
    for o in &c.operations {
        encoder_check(o.payload.is_some() == (o.op == Op::Upsert), || {
            format!("operation.payload must be present iff op is upsert (op = {})", o.op.name())
        })?;
        w.str(&o.table, "operation.table")?;
        w.str(&o.row_id, "operation.rowId")?;
        w.u8(o.op.byte());
        write_opt_i64(w, o.base_version, "operation.baseVersion")?;
        write_opt_bytes(w, o.payload.as_deref(), "operation.payload")?;
    }
    Ok(())
}

/// Writes a `PULL_HEADER` payload.
pub fn encode_pull_header(w: &mut Writer, p: &PullHeader) -> Result<()> {
    encoder_check(p.accept & ACCEPT_RESERVED_MASK == 0, || {
        format!("PULL_HEADER.accept bits 4–7 must be zero, got {:#010b}", p.accept)
    })?;
    w.i32(p.limit_commits);
    w.i32(p.limit_snapshot_rows);
    w.i32(p.max_snapshot_pages);
    w.u8(p.accept);
    Ok(())
}

/// Writes a `SUBSCRIPTION` payload.
pub fn encode_subscription(w: &mut Writer, s: &Subscription) -> Result<()> {
    w.str(&s.id, "SUBSCRIPTION.id")?;
    w.str(&s.table, "SUBSCRIPTION.table")?;
    write_scope_map(w, &s.scopes, "SUBSCRIPTION.scopes")?;
    write_opt_json(w, s.params.as_deref(), "SUBSCRIPTION.params")?;
    w.i64(s.cursor, "SUBSCRIPTION.cursor")?;
    write_opt_json(w, s.bootstrap_state.as_deref(), "SUBSCRIPTION.bootstrapState")
}
