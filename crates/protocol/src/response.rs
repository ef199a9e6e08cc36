//! SSP2 response messages: the §1.6 grammar and its frames — `RESP_HEADER`
//! (§1.6, wire versions 1–3), `LEASE` (§7.3.2), `PUSH_RESULT` (§6.3),
//! `PUSH_RESULT_DETAILS` (§6.3.1), `SUB_START` / `SUB_END` (§4.4), `COMMIT`
//! (§4.5), `SEGMENT_REF` (§5.4), `SEGMENT_INLINE` (§5.7) and `ERROR` (§1.6).
//!
//! Producing: [`ResponseWriter`] streams a response frame by frame into any
//! `std::io::Write` (§1.4: no response-sized buffer), checks the §1.6
//! grammar *before* writing each frame (an illegal frame is an encoder error
//! and leaves the sink untouched) and reports [`ResponseWriter::bytes_written`]
//! for response byte budgets. [`encode_response`] encodes a whole
//! [`Response`] through it.
//!
//! Consuming: [`decode_response`] rejects exactly the §1.7 decode errors
//! (all `sync.invalid_request`) — including the COMMIT/segment no-mixing rule
//! and a `SEGMENT_INLINE` payload that is not a structurally valid rows
//! segment — and nothing else. Producer rules (request-order echo,
//! `reasonCode` emptiness, `results` cardinality, PUSH_RESULT_DETAILS
//! matching its PUSH_RESULT, `resetRequired` ending the response) are not
//! decode errors.
//!
//! Wire version 3 differs in three places, decoder and encoder alike: a
//! conflict record carries `conflictColumns` after `serverRow`; every
//! `detailsJson` is also bounded as raw text
//! ([`crate::rejection_details::validate_details_json_v3`]); and an unknown
//! frame counts as a frame for the "immediately after" rules, so neither
//! `LEASE` nor `PUSH_RESULT_DETAILS` may follow one (the `syncular-ssp2`
//! 0.49 decoder's reading; versions 1 and 2 keep unknown frames transparent).

use std::io::Write;

use crate::constants::{
    FRAME_COMMIT, FRAME_ERROR, FRAME_LEASE, FRAME_PUSH_RESULT, FRAME_PUSH_RESULT_DETAILS,
    FRAME_RESP_HEADER, FRAME_SEGMENT_INLINE, FRAME_SEGMENT_REF, FRAME_SUB_END, FRAME_SUB_START,
    MEDIA_TYPE_ROWS, MEDIA_TYPE_SQLITE, PUSH_STATUS_APPLIED, PUSH_STATUS_CACHED,
    PUSH_STATUS_REJECTED, RESULT_STATUS_APPLIED, RESULT_STATUS_CONFLICT, RESULT_STATUS_ERROR,
    SUB_STATUS_ACTIVE, SUB_STATUS_RESET, SUB_STATUS_REVOKED, WIRE_VERSION_2, WIRE_VERSION_3,
};
use crate::envelope::{
    check_wire_version, classify, finish_after_end, next_frame, parse_payload,
    read_envelope_header, write_end, write_envelope_header, write_frame, write_unknown_frame,
    FrameClass, MsgKind, UnknownFrame,
};
use crate::errors::{ErrorCode, ProtocolError, Result};
use crate::frame_fields::{
    as_encoder_error, encoder_check, read_opt_bytes, read_opt_i64, read_opt_json, read_opt_string,
    read_scope_map, read_stored_scopes, read_string, write_opt_bytes, write_opt_i32,
    write_opt_i64, write_opt_json, write_opt_str, write_scope_map, write_stored_scopes, Op,
    ScopeMap, StoredScopes,
};
use crate::primitives::{Reader, Writer};
use crate::rejection_details::validate_details_json_for;

// ---------------------------------------------------------------------------
// Frame types
// ---------------------------------------------------------------------------

/// The wire-version-2 (and 3) part of `RESP_HEADER` (§1.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RespEpoch {
    /// Current partition log identity (§2.1). "Non-empty" is a producer
    /// rule; the decoder accepts an empty string (not a §1.7 error).
    pub log_epoch: String,
    /// True when the request omitted or mismatched `logEpoch`; the response
    /// then ends after `RESP_HEADER` (producer rule).
    pub reset_required: bool,
}

/// `RESP_HEADER` (§1.6).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RespHeader {
    /// Present = the client's schema version is no longer served.
    pub required_schema_version: Option<i32>,
    /// Informational newest schema version.
    pub latest_schema_version: Option<i32>,
    /// `Some` iff the message is wire version 2 or 3 (encoder error
    /// otherwise).
    pub epoch: Option<RespEpoch>,
}

/// `LEASE` (§7.3.2): an auth lease issued to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Lease id (non-empty is a producer rule, not a decode error).
    pub lease_id: String,
    /// Expiry, Unix epoch ms.
    pub expires_at_ms: i64,
}

/// `PUSH_RESULT.status` (§6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PushStatus {
    /// `1`: every operation applied; carries `commitSeq`.
    Applied,
    /// `2`: idempotent replay of an applied commit; carries `commitSeq`.
    Cached,
    /// `3`: rejected; no `commitSeq`.
    Rejected,
}

impl PushStatus {
    /// The wire byte.
    pub fn byte(self) -> u8 {
        match self {
            PushStatus::Applied => PUSH_STATUS_APPLIED,
            PushStatus::Cached => PUSH_STATUS_CACHED,
            PushStatus::Rejected => PUSH_STATUS_REJECTED,
        }
    }
    /// The §11.1 rendering.
    pub fn name(self) -> &'static str {
        match self {
            PushStatus::Applied => "applied",
            PushStatus::Cached => "cached",
            PushStatus::Rejected => "rejected",
        }
    }
    /// True for `applied` / `cached`: `commitSeq` must be present (§6.3 tie).
    pub fn carries_commit_seq(self) -> bool {
        self != PushStatus::Rejected
    }
}

/// One result record of a `PUSH_RESULT` (§6.3), a tagged union.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// `1`: the operation applied.
    Applied {
        /// Index into the commit's operations.
        op_index: i32,
    },
    /// `2`: optimistic-concurrency conflict.
    Conflict {
        /// Index into the commit's operations.
        op_index: i32,
        /// e.g. `sync.version_conflict`.
        code: String,
        /// Diagnostic text.
        message: String,
        /// Current server row version.
        server_version: i64,
        /// Current server row, row-codec bytes (opaque here).
        server_row: Vec<u8>,
        /// Wire version 3 only (after `serverRow`): a presence-bitmap-shaped
        /// byte string over the row's columns (LSB-first, byte `i / 8`)
        /// marking the present columns whose column version exceeded the
        /// operation's `baseVersion`; opaque here. Dropped by the version 1
        /// and 2 encoders (those records have no such field) and decoded as
        /// empty there.
        conflict_columns: Vec<u8>,
    },
    /// `3`: the operation failed.
    Error {
        /// Index into the commit's operations.
        op_index: i32,
        /// A §10 code.
        code: String,
        /// Diagnostic text.
        message: String,
        /// May the same commit succeed later?
        retryable: bool,
    },
}

impl OpResult {
    /// The record's `opIndex`.
    pub fn op_index(&self) -> i32 {
        match self {
            OpResult::Applied { op_index }
            | OpResult::Conflict { op_index, .. }
            | OpResult::Error { op_index, .. } => *op_index,
        }
    }
}

/// `PUSH_RESULT` (§6.3): the outcome of one `PUSH_COMMIT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushResult {
    /// Echo of the commit's id.
    pub client_commit_id: String,
    /// Outcome.
    pub status: PushStatus,
    /// Present iff `status` is applied or cached (decode error otherwise).
    pub commit_seq: Option<i64>,
    /// Result records.
    pub results: Vec<OpResult>,
}

/// One entry of `PUSH_RESULT_DETAILS` (§6.3.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushResultDetail {
    /// Non-negative, unique within the frame.
    pub op_index: i32,
    /// Raw `detailsJson` text (a `str` on the wire), kept byte-for-byte;
    /// must satisfy the §6.3.1 bounded shape
    /// ([`crate::rejection_details::validate_details_json`]; from wire
    /// version 3 on also ≤ 4,096 raw bytes,
    /// [`crate::rejection_details::validate_details_json_v3`]).
    pub details_json: String,
}

/// `PUSH_RESULT_DETAILS` (§6.3.1): recovery metadata for the immediately
/// preceding `PUSH_RESULT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushResultDetails {
    /// Should match the preceding rejected result (producer rule).
    pub client_commit_id: String,
    /// Non-empty.
    pub entries: Vec<PushResultDetail>,
}

/// `SUB_START.status` (§4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubStatus {
    /// `1`.
    Active,
    /// `2`: scopes revoked (§3.3).
    Revoked,
    /// `3`: cursor behind the horizon (§4.6).
    Reset,
}

impl SubStatus {
    /// The wire byte.
    pub fn byte(self) -> u8 {
        match self {
            SubStatus::Active => SUB_STATUS_ACTIVE,
            SubStatus::Revoked => SUB_STATUS_REVOKED,
            SubStatus::Reset => SUB_STATUS_RESET,
        }
    }
    /// The §11.1 rendering.
    pub fn name(self) -> &'static str {
        match self {
            SubStatus::Active => "active",
            SubStatus::Revoked => "revoked",
            SubStatus::Reset => "reset",
        }
    }
}

/// `SUB_START` (§4.4): opens one subscription's context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubStart {
    /// Echo of the request subscription id.
    pub id: String,
    /// Active, revoked or reset.
    pub status: SubStatus,
    /// Empty for active; a §10 code otherwise (producer rule).
    pub reason_code: String,
    /// Effective scopes, canonical key order.
    pub effective_scopes: ScopeMap,
    /// True iff this response delivers bootstrap segments for it.
    pub bootstrap: bool,
}

/// One change of a `COMMIT` frame (§4.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Index into the frame's `tables`; out of range is a decode error.
    pub table_index: u16,
    /// Row id.
    pub row_id: String,
    /// Upsert or delete.
    pub op: Op,
    /// Present iff upsert (decode error otherwise).
    pub row_version: Option<i64>,
    /// Stored scopes (§3.1), canonical key order.
    pub scopes: StoredScopes,
    /// Row-codec bytes, present iff upsert (decode error otherwise).
    pub row: Option<Vec<u8>>,
}

/// `COMMIT` (§4.5): one log commit, self-contained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The commit's `commitSeq`.
    pub commit_seq: i64,
    /// Server commit time, Unix epoch ms.
    pub created_at_ms: i64,
    /// Pushing actor.
    pub actor_id: String,
    /// Frame-local table dictionary.
    pub tables: Vec<String>,
    /// Changes, in commit order.
    pub changes: Vec<Change>,
}

/// `SEGMENT_REF.mediaType` (§5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MediaType {
    /// `1`: SSG2 rows segment.
    Rows,
    /// `2`: SQLite image.
    Sqlite,
}

impl MediaType {
    /// The wire byte.
    pub fn byte(self) -> u8 {
        match self {
            MediaType::Rows => MEDIA_TYPE_ROWS,
            MediaType::Sqlite => MEDIA_TYPE_SQLITE,
        }
    }
    /// The §11.1 rendering.
    pub fn name(self) -> &'static str {
        match self {
            MediaType::Rows => "rows",
            MediaType::Sqlite => "sqlite",
        }
    }
}

/// `SEGMENT_REF` (§5.4): a bootstrap segment descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentRef {
    /// Content address (§5.1).
    pub segment_id: String,
    /// Rows or sqlite.
    pub media_type: MediaType,
    /// Table name.
    pub table: String,
    /// Uncompressed size in bytes.
    pub byte_length: i64,
    /// Rows in the segment.
    pub row_count: i64,
    /// The bootstrap pin.
    pub as_of_commit_seq: i64,
    /// §3.5 digest (hex).
    pub scope_digest: String,
    /// Page start; `None` = first page.
    pub row_cursor: Option<String>,
    /// Page continuation; `None` = last page.
    pub next_row_cursor: Option<String>,
    /// Signed URL; present iff `url_expires_at_ms` is (decode error otherwise).
    pub url: Option<String>,
    /// URL expiry, Unix epoch ms.
    pub url_expires_at_ms: Option<i64>,
}

/// `SUB_END` (§4.4): closes the subscription context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubEnd {
    /// Cursor to persist (§4.5, §4.7).
    pub next_cursor: i64,
    /// Resume token (raw JSON text); present iff the bootstrap is incomplete.
    pub bootstrap_state: Option<String>,
}

/// `ERROR` (§1.6): an in-band failure; only `END` may follow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorFrame {
    /// A §10 code (carried as text; hosts may use their own codes).
    pub code: String,
    /// Diagnostic text.
    pub message: String,
    /// §10.1 category spelling.
    pub category: String,
    /// §10.1 retryable.
    pub retryable: bool,
    /// §10.1 recommended action spelling.
    pub recommended_action: String,
    /// Optional details, raw JSON text.
    pub details: Option<String>,
}

impl ErrorFrame {
    /// An `ERROR` frame for a catalog code, with category, retryable and
    /// recommended action taken from the §10.2 table.
    pub fn from_code(code: ErrorCode, message: impl Into<String>, details: Option<String>) -> Self {
        ErrorFrame {
            code: code.as_str().to_owned(),
            message: message.into(),
            category: code.category().as_str().to_owned(),
            retryable: code.retryable(),
            recommended_action: code.recommended_action().as_str().to_owned(),
            details,
        }
    }

    /// The `ERROR` frame for a [`ProtocolError`] (no details).
    pub fn from_error(e: &ProtocolError) -> Self {
        ErrorFrame::from_code(e.code, e.message.clone(), None)
    }
}

/// A response frame after `RESP_HEADER`, in wire order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseFrame {
    /// `LEASE`.
    Lease(Lease),
    /// `PUSH_RESULT`.
    PushResult(PushResult),
    /// `PUSH_RESULT_DETAILS`.
    PushResultDetails(PushResultDetails),
    /// `SUB_START`.
    SubStart(SubStart),
    /// `COMMIT`.
    Commit(Commit),
    /// `SEGMENT_REF`.
    SegmentRef(SegmentRef),
    /// `SEGMENT_INLINE`: one complete SSG2 rows segment, raw bytes.
    SegmentInline(Vec<u8>),
    /// `SUB_END`.
    SubEnd(SubEnd),
    /// `ERROR`.
    Error(ErrorFrame),
    /// A preserved unknown frame (§1.2 rule 2).
    Unknown(UnknownFrame),
}

impl ResponseFrame {
    /// The frame's `frameType` byte.
    pub fn frame_type(&self) -> u8 {
        match self {
            ResponseFrame::Lease(_) => FRAME_LEASE,
            ResponseFrame::PushResult(_) => FRAME_PUSH_RESULT,
            ResponseFrame::PushResultDetails(_) => FRAME_PUSH_RESULT_DETAILS,
            ResponseFrame::SubStart(_) => FRAME_SUB_START,
            ResponseFrame::Commit(_) => FRAME_COMMIT,
            ResponseFrame::SegmentRef(_) => FRAME_SEGMENT_REF,
            ResponseFrame::SegmentInline(_) => FRAME_SEGMENT_INLINE,
            ResponseFrame::SubEnd(_) => FRAME_SUB_END,
            ResponseFrame::Error(_) => FRAME_ERROR,
            ResponseFrame::Unknown(u) => u.frame_type,
        }
    }
}

/// A decoded SSP2 response (§1.6), owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Envelope `wireVersion`: 1, 2 or 3 (the request's).
    pub wire_version: u16,
    /// `RESP_HEADER` (always the first frame).
    pub header: RespHeader,
    /// Every later frame in wire order, unknown frames in place; `END`
    /// excluded.
    pub frames: Vec<ResponseFrame>,
}

// ---------------------------------------------------------------------------
// Grammar (§1.6), shared by decoder and writer
// ---------------------------------------------------------------------------

/// Frame-order state after `RESP_HEADER`. Unknown frames are illegal after
/// `ERROR`; in wire versions 1 and 2 they are transparent to the ordering
/// rules (§1.2 rule 2), in version 3 they end the "immediately after"
/// windows of `LEASE` and `PUSH_RESULT_DETAILS`.
#[derive(Debug, Clone)]
struct ResponseGrammar {
    wire_version: u16,
    lease_allowed: bool,
    details_allowed: bool,
    results_phase: bool,
    sub_open: bool,
    sub_commit: bool,
    sub_segment: bool,
    error_seen: bool,
}

impl ResponseGrammar {
    fn new(wire_version: u16) -> Self {
        ResponseGrammar {
            wire_version,
            lease_allowed: true,
            details_allowed: false,
            results_phase: true,
            sub_open: false,
            sub_commit: false,
            sub_segment: false,
            error_seen: false,
        }
    }

    fn check_not_after_error(&self, frame_type: u8) -> Result<()> {
        if self.error_seen {
            return Err(ProtocolError::invalid(format!(
                "frame {frame_type:#04x} after ERROR (only END may follow ERROR)"
            )));
        }
        Ok(())
    }

    fn accept_unknown(&mut self, frame_type: u8) -> Result<()> {
        self.check_not_after_error(frame_type)?;
        if self.wire_version >= WIRE_VERSION_3 {
            self.lease_allowed = false;
            self.details_allowed = false;
        }
        Ok(())
    }

    /// Accepts the next known frame after `RESP_HEADER`, or returns the
    /// grammar error; on error the state is unchanged.
    fn accept(&mut self, frame_type: u8) -> Result<()> {
        self.check_not_after_error(frame_type)?;
        let mut next = self.clone();
        next.lease_allowed = false;
        next.details_allowed = false;
        let bad = |msg: &str| Err(ProtocolError::invalid(msg.to_owned()));
        match frame_type {
            FRAME_RESP_HEADER => return bad("duplicate RESP_HEADER frame"),
            FRAME_LEASE => {
                if !self.lease_allowed {
                    return bad("LEASE must come at most once, immediately after RESP_HEADER");
                }
            }
            FRAME_PUSH_RESULT => {
                if !self.results_phase {
                    return bad("PUSH_RESULT after SUB_START (out of §1.6 order)");
                }
                next.details_allowed = true;
            }
            FRAME_PUSH_RESULT_DETAILS => {
                if !self.details_allowed {
                    return bad(
                        "PUSH_RESULT_DETAILS must immediately follow a PUSH_RESULT (at most one)",
                    );
                }
            }
            FRAME_SUB_START => {
                if self.sub_open {
                    return bad("SUB_START while a subscription context is open");
                }
                next.results_phase = false;
                next.sub_open = true;
                next.sub_commit = false;
                next.sub_segment = false;
            }
            FRAME_COMMIT => {
                if !self.sub_open {
                    return bad("COMMIT outside a subscription context");
                }
                if self.sub_segment {
                    return bad("COMMIT and segment frames in one subscription (no-mixing rule)");
                }
                next.sub_commit = true;
            }
            FRAME_SEGMENT_REF | FRAME_SEGMENT_INLINE => {
                if !self.sub_open {
                    return bad("segment frame outside a subscription context");
                }
                if self.sub_commit {
                    return bad("COMMIT and segment frames in one subscription (no-mixing rule)");
                }
                next.sub_segment = true;
            }
            FRAME_SUB_END => {
                if !self.sub_open {
                    return bad("SUB_END without an open subscription context");
                }
                next.sub_open = false;
            }
            FRAME_ERROR => next.error_seen = true,
            other => {
                return Err(ProtocolError::invalid(format!(
                    "frame {other:#04x} is not a response frame"
                )))
            }
        }
        *self = next;
        Ok(())
    }

    /// At END: an open subscription context is legal only after ERROR.
    fn finish(&self) -> Result<()> {
        if self.sub_open && !self.error_seen {
            return Err(ProtocolError::invalid(
                "message ends inside a subscription context (missing SUB_END)",
            ));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------

/// The §5.7 structural check of a `SEGMENT_INLINE` payload (the one call
/// into the segment codec).
fn validate_inline_segment(payload: &[u8]) -> Result<()> {
    crate::segment::validate_rows_segment(payload)
}

/// Decodes a complete response message (§1.2, §1.6, §1.7).
///
/// Errors: every §1.7 response decode error, all `sync.invalid_request`
/// (a request message too). Never panics; allocation is bounded by the
/// input length.
pub fn decode_response(bytes: &[u8]) -> Result<Response> {
    let mut r = Reader::new(bytes);
    let (wire_version, kind) = read_envelope_header(&mut r)?;
    if kind != MsgKind::Response {
        return Err(ProtocolError::invalid("expected a response message, got a request"));
    }
    decode_response_frames(&mut r, wire_version)
}

/// Decodes the frames of a response whose envelope header was already read.
pub(crate) fn decode_response_frames(r: &mut Reader<'_>, wire_version: u16) -> Result<Response> {
    let first = next_frame(r)?
        .ok_or_else(|| ProtocolError::invalid("response has no RESP_HEADER frame"))?;
    if classify(first.frame_type, MsgKind::Response, wire_version)? == FrameClass::Unknown {
        return Err(ProtocolError::invalid(format!(
            "unknown frame {:#04x} before RESP_HEADER",
            first.frame_type
        )));
    }
    if first.frame_type != FRAME_RESP_HEADER {
        return Err(ProtocolError::invalid(format!(
            "first frame of a response must be RESP_HEADER, got {:#04x}",
            first.frame_type
        )));
    }
    let header = decode_resp_header(first.payload, wire_version)?;
    let mut grammar = ResponseGrammar::new(wire_version);
    let mut frames = Vec::with_capacity(count_frames(r.clone()));
    while let Some(frame) = next_frame(r)? {
        let ty = frame.frame_type;
        if classify(ty, MsgKind::Response, wire_version)? == FrameClass::Unknown {
            grammar.accept_unknown(ty)?;
            frames.push(ResponseFrame::Unknown(UnknownFrame {
                frame_type: ty,
                payload: frame.payload.to_vec(),
            }));
            continue;
        }
        grammar.accept(ty)?;
        let p = frame.payload;
        frames.push(match ty {
            FRAME_LEASE => ResponseFrame::Lease(decode_lease(p)?),
            FRAME_PUSH_RESULT => ResponseFrame::PushResult(decode_push_result(p, wire_version)?),
            FRAME_PUSH_RESULT_DETAILS => {
                ResponseFrame::PushResultDetails(decode_push_result_details(p, wire_version)?)
            }
            FRAME_SUB_START => ResponseFrame::SubStart(decode_sub_start(p)?),
            FRAME_COMMIT => ResponseFrame::Commit(decode_commit(p)?),
            FRAME_SEGMENT_REF => ResponseFrame::SegmentRef(decode_segment_ref(p)?),
            FRAME_SEGMENT_INLINE => {
                validate_inline_segment(p)?;
                ResponseFrame::SegmentInline(p.to_vec())
            }
            FRAME_SUB_END => ResponseFrame::SubEnd(decode_sub_end(p)?),
            _ => ResponseFrame::Error(decode_error_frame(p)?),
        });
    }
    grammar.finish()?;
    finish_after_end(r)?;
    Ok(Response { wire_version, header, frames })
}

/// Number of frames before `END` (or before the first malformed frame
/// header), read from the frame headers alone — sizes the frame vector once
/// instead of growing it through a large response.
fn count_frames(mut r: Reader<'_>) -> usize {
    let mut n = 0;
    while let Ok(Some(_)) = next_frame(&mut r) {
        n += 1;
    }
    n
}

/// Decodes a `RESP_HEADER` payload for `wire_version` (§1.6).
pub fn decode_resp_header(payload: &[u8], wire_version: u16) -> Result<RespHeader> {
    parse_payload(payload, "RESP_HEADER", |r| {
        let required_schema_version =
            r.opt("RESP_HEADER.requiredSchemaVersion", |r| r.i32("RESP_HEADER.requiredSchemaVersion"))?;
        let latest_schema_version =
            r.opt("RESP_HEADER.latestSchemaVersion", |r| r.i32("RESP_HEADER.latestSchemaVersion"))?;
        let epoch = if wire_version >= WIRE_VERSION_2 {
            Some(RespEpoch {
                log_epoch: read_string(r, "RESP_HEADER.logEpoch")?,
                reset_required: r.bool("RESP_HEADER.resetRequired")?,
            })
        } else {
            None
        };
        Ok(RespHeader { required_schema_version, latest_schema_version, epoch })
    })
}

/// Decodes a `LEASE` payload (§7.3.2).
pub fn decode_lease(payload: &[u8]) -> Result<Lease> {
    parse_payload(payload, "LEASE", |r| {
        Ok(Lease {
            lease_id: read_string(r, "LEASE.leaseId")?,
            expires_at_ms: r.i64("LEASE.expiresAtMs")?,
        })
    })
}

/// Decodes a `PUSH_RESULT` payload (§6.3) of a `wire_version` message:
/// conflict records carry `conflictColumns` from version 3 on (empty below).
/// Errors: `sync.invalid_request`.
pub fn decode_push_result(payload: &[u8], wire_version: u16) -> Result<PushResult> {
    parse_payload(payload, "PUSH_RESULT", |r| {
        let client_commit_id = read_string(r, "PUSH_RESULT.clientCommitId")?;
        let status = match r.u8("PUSH_RESULT.status")? {
            PUSH_STATUS_APPLIED => PushStatus::Applied,
            PUSH_STATUS_CACHED => PushStatus::Cached,
            PUSH_STATUS_REJECTED => PushStatus::Rejected,
            b => return Err(ProtocolError::invalid(format!("PUSH_RESULT.status: unknown enum byte {b}"))),
        };
        let commit_seq = read_opt_i64(r, "PUSH_RESULT.commitSeq")?;
        if commit_seq.is_some() != status.carries_commit_seq() {
            return Err(ProtocolError::invalid(format!(
                "PUSH_RESULT.commitSeq must be present iff status is applied or cached (status = {})",
                status.name()
            )));
        }
        // Smallest record: opIndex + status = 5 bytes.
        let n = r.count("PUSH_RESULT.results", 5)?;
        let mut results = Vec::with_capacity(n);
        for _ in 0..n {
            let op_index = r.i32("result.opIndex")?;
            results.push(match r.u8("result.status")? {
                RESULT_STATUS_APPLIED => OpResult::Applied { op_index },
                RESULT_STATUS_CONFLICT => OpResult::Conflict {
                    op_index,
                    code: read_string(r, "conflict.code")?,
                    message: read_string(r, "conflict.message")?,
                    server_version: r.i64("conflict.serverVersion")?,
                    server_row: r.bytes("conflict.serverRow")?.to_vec(),
                    conflict_columns: if wire_version >= WIRE_VERSION_3 {
                        r.bytes("conflict.conflictColumns")?.to_vec()
                    } else {
                        Vec::new()
                    },
                },
                RESULT_STATUS_ERROR => OpResult::Error {
                    op_index,
                    code: read_string(r, "error.code")?,
                    message: read_string(r, "error.message")?,
                    retryable: r.bool("error.retryable")?,
                },
                b => return Err(ProtocolError::invalid(format!("result.status: unknown enum byte {b}"))),
            });
        }
        Ok(PushResult { client_commit_id, status, commit_seq, results })
    })
}

/// Decodes a `PUSH_RESULT_DETAILS` payload (§6.3.1) of a `wire_version`
/// message: entries non-empty, `opIndex` non-negative and unique, each
/// `detailsJson` of the bounded shape
/// ([`crate::rejection_details::validate_details_json_for`]). Matching
/// against the preceding `PUSH_RESULT` is cross-frame and not checked.
/// Errors: `sync.invalid_request`.
pub fn decode_push_result_details(payload: &[u8], wire_version: u16) -> Result<PushResultDetails> {
    parse_payload(payload, "PUSH_RESULT_DETAILS", |r| {
        let client_commit_id = read_string(r, "PUSH_RESULT_DETAILS.clientCommitId")?;
        let n = r.count("PUSH_RESULT_DETAILS.entries", 8)?;
        if n == 0 {
            return Err(ProtocolError::invalid("PUSH_RESULT_DETAILS.entries must be non-empty"));
        }
        let mut entries: Vec<PushResultDetail> = Vec::with_capacity(n);
        for _ in 0..n {
            let op_index = r.i32("PUSH_RESULT_DETAILS.opIndex")?;
            if op_index < 0 || entries.iter().any(|e| e.op_index == op_index) {
                return Err(ProtocolError::invalid(format!(
                    "PUSH_RESULT_DETAILS.opIndex {op_index} is negative or duplicated"
                )));
            }
            let details_json = read_string(r, "PUSH_RESULT_DETAILS.detailsJson")?;
            validate_details_json_for(&details_json, wire_version)?;
            entries.push(PushResultDetail { op_index, details_json });
        }
        Ok(PushResultDetails { client_commit_id, entries })
    })
}

/// Decodes a `SUB_START` payload (§4.4).
pub fn decode_sub_start(payload: &[u8]) -> Result<SubStart> {
    parse_payload(payload, "SUB_START", |r| {
        let id = read_string(r, "SUB_START.id")?;
        let status = match r.u8("SUB_START.status")? {
            SUB_STATUS_ACTIVE => SubStatus::Active,
            SUB_STATUS_REVOKED => SubStatus::Revoked,
            SUB_STATUS_RESET => SubStatus::Reset,
            b => return Err(ProtocolError::invalid(format!("SUB_START.status: unknown enum byte {b}"))),
        };
        Ok(SubStart {
            id,
            status,
            reason_code: read_string(r, "SUB_START.reasonCode")?,
            effective_scopes: read_scope_map(r, "SUB_START.effectiveScopes")?,
            bootstrap: r.bool("SUB_START.bootstrap")?,
        })
    })
}

/// Decodes a `COMMIT` payload (§4.5).
pub fn decode_commit(payload: &[u8]) -> Result<Commit> {
    parse_payload(payload, "COMMIT", |r| {
        let commit_seq = r.i64("COMMIT.commitSeq")?;
        let created_at_ms = r.i64("COMMIT.createdAtMs")?;
        let actor_id = read_string(r, "COMMIT.actorId")?;
        let nt = r.count("COMMIT.tables", 4)?;
        let mut tables = Vec::with_capacity(nt);
        for _ in 0..nt {
            tables.push(read_string(r, "COMMIT.tables")?);
        }
        // Smallest change: u16 + str + op + opt + map count + opt = 13 bytes.
        let nc = r.count("COMMIT.changes", 13)?;
        let mut changes = Vec::with_capacity(nc);
        for _ in 0..nc {
            let table_index = r.u16("change.tableIndex")?;
            if usize::from(table_index) >= tables.len() {
                return Err(ProtocolError::invalid(format!(
                    "change.tableIndex {table_index} out of range ({} table(s))",
                    tables.len()
                )));
            }
            let row_id = read_string(r, "change.rowId")?;
            let op = Op::read(r)?;
            let row_version = read_opt_i64(r, "change.rowVersion")?;
            let scopes = read_stored_scopes(r, "change.scopes")?;
            let row = read_opt_bytes(r, "change.row")?;
            let upsert = op == Op::Upsert;
            if row_version.is_some() != upsert || row.is_some() != upsert {
                return Err(ProtocolError::invalid(format!(
                    "change.rowVersion and change.row must be present iff op is upsert (op = {})",
                    op.name()
                )));
            }
            changes.push(Change { table_index, row_id, op, row_version, scopes, row });
        }
        Ok(Commit { commit_seq, created_at_ms, actor_id, tables, changes })
    })
}

/// Decodes a `SEGMENT_REF` payload (§5.4).
pub fn decode_segment_ref(payload: &[u8]) -> Result<SegmentRef> {
    parse_payload(payload, "SEGMENT_REF", |r| {
        let segment_id = read_string(r, "SEGMENT_REF.segmentId")?;
        let media_type = match r.u8("SEGMENT_REF.mediaType")? {
            MEDIA_TYPE_ROWS => MediaType::Rows,
            MEDIA_TYPE_SQLITE => MediaType::Sqlite,
            b => return Err(ProtocolError::invalid(format!("SEGMENT_REF.mediaType: unknown enum byte {b}"))),
        };
        let s = SegmentRef {
            segment_id,
            media_type,
            table: read_string(r, "SEGMENT_REF.table")?,
            byte_length: r.i64("SEGMENT_REF.byteLength")?,
            row_count: r.i64("SEGMENT_REF.rowCount")?,
            as_of_commit_seq: r.i64("SEGMENT_REF.asOfCommitSeq")?,
            scope_digest: read_string(r, "SEGMENT_REF.scopeDigest")?,
            row_cursor: read_opt_string(r, "SEGMENT_REF.rowCursor")?,
            next_row_cursor: read_opt_string(r, "SEGMENT_REF.nextRowCursor")?,
            url: read_opt_string(r, "SEGMENT_REF.url")?,
            url_expires_at_ms: read_opt_i64(r, "SEGMENT_REF.urlExpiresAtMs")?,
        };
        if s.url.is_some() != s.url_expires_at_ms.is_some() {
            return Err(ProtocolError::invalid(
                "SEGMENT_REF.urlExpiresAtMs must be present iff url is",
            ));
        }
        Ok(s)
    })
}

/// Decodes a `SUB_END` payload (§4.4).
pub fn decode_sub_end(payload: &[u8]) -> Result<SubEnd> {
    parse_payload(payload, "SUB_END", |r| {
        Ok(SubEnd {
            next_cursor: r.i64("SUB_END.nextCursor")?,
            bootstrap_state: read_opt_json(r, "SUB_END.bootstrapState")?,
        })
    })
}

/// Decodes an `ERROR` payload (§1.6).
pub fn decode_error_frame(payload: &[u8]) -> Result<ErrorFrame> {
    parse_payload(payload, "ERROR", |r| {
        Ok(ErrorFrame {
            code: read_string(r, "ERROR.code")?,
            message: read_string(r, "ERROR.message")?,
            category: read_string(r, "ERROR.category")?,
            retryable: r.bool("ERROR.retryable")?,
            recommended_action: read_string(r, "ERROR.recommendedAction")?,
            details: read_opt_json(r, "ERROR.details")?,
        })
    })
}

// ---------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------

/// Streaming response encoder (§1.4, §1.6).
///
/// Shape: `new` writes the envelope header and `RESP_HEADER`; each method
/// appends one frame; [`ResponseWriter::finish`] writes `END` and returns
/// the sink. Each frame is encoded into a reused scratch buffer and
/// grammar-checked first, so a refused frame (encoder error, code
/// `sync.invalid_request`, message `encoder: …`) leaves the sink and the
/// grammar state untouched and the writer usable. A failed sink write
/// (reported with the same code, message `encoder: sink write failed`)
/// poisons the writer: every later call fails.
#[derive(Debug)]
pub struct ResponseWriter<W: Write> {
    sink: W,
    wire_version: u16,
    grammar: ResponseGrammar,
    scratch: Writer,
    bytes_written: u64,
    poisoned: bool,
}

impl<W: Write> ResponseWriter<W> {
    /// Starts a response of `wire_version` (1, 2 or 3; the request's) with
    /// `header`. `header.epoch` must be `Some` iff `wire_version` is 2 or 3.
    pub fn new(sink: W, wire_version: u16, header: &RespHeader) -> Result<Self> {
        check_wire_version(wire_version).map_err(as_encoder_error)?;
        let mut w = ResponseWriter {
            sink,
            wire_version,
            grammar: ResponseGrammar::new(wire_version),
            scratch: Writer::with_capacity(1024),
            bytes_written: 0,
            poisoned: false,
        };
        write_envelope_header(&mut w.scratch, wire_version, MsgKind::Response)
            .map_err(as_encoder_error)?;
        write_frame(&mut w.scratch, FRAME_RESP_HEADER, |s| {
            encode_resp_header(s, header, wire_version)
        })
        .map_err(as_encoder_error)?;
        w.flush_scratch()?;
        Ok(w)
    }

    /// Bytes handed to the sink so far (envelope header included), for
    /// response byte budgets (DESIGN §4).
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// The sink, for a producer that drains what was written so far between
    /// frames (a streamed response, §1.4). [`ResponseWriter::bytes_written`]
    /// keeps counting every byte ever written, drained or not.
    pub fn sink_mut(&mut self) -> &mut W {
        &mut self.sink
    }

    /// The message's wire version.
    pub fn wire_version(&self) -> u16 {
        self.wire_version
    }

    /// True between a `SUB_START` and its `SUB_END`.
    pub fn subscription_open(&self) -> bool {
        self.grammar.sub_open
    }

    /// True once an `ERROR` frame was written (only `finish` may follow).
    pub fn error_written(&self) -> bool {
        self.grammar.error_seen
    }

    /// Refuses every write after a sink failure (encoder error).
    fn check_not_poisoned(&self) -> Result<()> {
        if self.poisoned {
            return Err(ProtocolError::invalid("encoder: writer poisoned by an earlier sink failure"));
        }
        Ok(())
    }

    fn flush_scratch(&mut self) -> Result<()> {
        let len = self.scratch.len() as u64;
        let r = self.sink.write_all(self.scratch.as_slice());
        self.scratch.clear();
        match r {
            Ok(()) => {
                self.bytes_written += len;
                Ok(())
            }
            Err(e) => {
                self.poisoned = true;
                Err(ProtocolError::invalid(format!("encoder: sink write failed: {e}")))
            }
        }
    }

    fn emit(
        &mut self,
        frame_type: u8,
        body: impl FnOnce(&mut Writer) -> Result<()>,
    ) -> Result<()> {
        self.check_not_poisoned()?;
        let mut next = self.grammar.clone();
        next.accept(frame_type).map_err(as_encoder_error)?;
        self.scratch.clear();
        if let Err(e) = write_frame(&mut self.scratch, frame_type, body) {
            self.scratch.clear();
            return Err(as_encoder_error(e));
        }
        self.flush_scratch()?;
        self.grammar = next;
        Ok(())
    }

    /// Appends `LEASE` (only directly after `RESP_HEADER`, at most once).
    pub fn lease(&mut self, lease: &Lease) -> Result<()> {
        self.emit(FRAME_LEASE, |w| encode_lease(w, lease))
    }

    /// Appends `PUSH_RESULT` (before the first `SUB_START`). Below wire
    /// version 3 a conflict record's `conflict_columns` is not written.
    pub fn push_result(&mut self, result: &PushResult) -> Result<()> {
        let v = self.wire_version;
        self.emit(FRAME_PUSH_RESULT, |w| encode_push_result(w, result, v))
    }

    /// Appends `PUSH_RESULT_DETAILS` (directly after a `PUSH_RESULT`; in
    /// wire version 3 not even an unknown frame may come between).
    pub fn push_result_details(&mut self, details: &PushResultDetails) -> Result<()> {
        let v = self.wire_version;
        self.emit(FRAME_PUSH_RESULT_DETAILS, |w| encode_push_result_details(w, details, v))
    }

    /// Opens a subscription context.
    pub fn sub_start(&mut self, start: &SubStart) -> Result<()> {
        self.emit(FRAME_SUB_START, |w| encode_sub_start(w, start))
    }

    /// Appends a `COMMIT` inside an open context without segment frames.
    pub fn commit(&mut self, commit: &Commit) -> Result<()> {
        self.emit(FRAME_COMMIT, |w| encode_commit(w, commit))
    }

    /// Appends a `SEGMENT_REF` inside an open context without commits.
    pub fn segment_ref(&mut self, segment: &SegmentRef) -> Result<()> {
        self.emit(FRAME_SEGMENT_REF, |w| encode_segment_ref(w, segment))
    }

    /// Appends a `SEGMENT_INLINE` carrying one complete SSG2 rows segment
    /// (structurally validated first, §5.7).
    pub fn segment_inline(&mut self, segment_bytes: &[u8]) -> Result<()> {
        self.emit(FRAME_SEGMENT_INLINE, |w| {
            validate_inline_segment(segment_bytes)?;
            w.raw(segment_bytes);
            Ok(())
        })
    }

    /// Closes the open subscription context.
    pub fn sub_end(&mut self, end: &SubEnd) -> Result<()> {
        self.emit(FRAME_SUB_END, |w| encode_sub_end(w, end))
    }

    /// Appends `ERROR`; afterwards only [`ResponseWriter::finish`] is legal.
    pub fn error(&mut self, error: &ErrorFrame) -> Result<()> {
        self.emit(FRAME_ERROR, |w| encode_error_frame(w, error))
    }

    /// Re-emits a preserved unknown frame (refused under a registered type
    /// or after `ERROR`).
    pub fn unknown(&mut self, frame: &UnknownFrame) -> Result<()> {
        self.check_not_poisoned()?;
        let mut next = self.grammar.clone();
        next.accept_unknown(frame.frame_type).map_err(as_encoder_error)?;
        self.scratch.clear();
        if let Err(e) = write_unknown_frame(&mut self.scratch, frame, self.wire_version) {
            self.scratch.clear();
            return Err(as_encoder_error(e));
        }
        self.flush_scratch()?;
        self.grammar = next;
        Ok(())
    }

    /// Appends any [`ResponseFrame`].
    pub fn frame(&mut self, frame: &ResponseFrame) -> Result<()> {
        match frame {
            ResponseFrame::Lease(f) => self.lease(f),
            ResponseFrame::PushResult(f) => self.push_result(f),
            ResponseFrame::PushResultDetails(f) => self.push_result_details(f),
            ResponseFrame::SubStart(f) => self.sub_start(f),
            ResponseFrame::Commit(f) => self.commit(f),
            ResponseFrame::SegmentRef(f) => self.segment_ref(f),
            ResponseFrame::SegmentInline(b) => self.segment_inline(b),
            ResponseFrame::SubEnd(f) => self.sub_end(f),
            ResponseFrame::Error(f) => self.error(f),
            ResponseFrame::Unknown(u) => self.unknown(u),
        }
    }

    /// Writes `END` and returns the sink. Refused (encoder error) while a
    /// subscription context is open, unless an `ERROR` was written.
    pub fn finish(mut self) -> Result<W> {
        self.check_not_poisoned()?;
        self.grammar.finish().map_err(as_encoder_error)?;
        self.scratch.clear();
        write_end(&mut self.scratch);
        self.sink
            .write_all(self.scratch.as_slice())
            .and_then(|()| self.sink.flush())
            .map_err(|e| ProtocolError::invalid(format!("encoder: sink write failed: {e}")))?;
        self.bytes_written += self.scratch.len() as u64;
        Ok(self.sink)
    }
}

/// Encodes a whole response canonically through [`ResponseWriter`].
/// Encoder errors as documented there.
pub fn encode_response(resp: &Response) -> Result<Vec<u8>> {
    let mut w = ResponseWriter::new(Vec::with_capacity(256), resp.wire_version, &resp.header)?;
    for f in &resp.frames {
        w.frame(f)?;
    }
    w.finish()
}

/// Writes a `RESP_HEADER` payload for `wire_version`.
pub fn encode_resp_header(w: &mut Writer, h: &RespHeader, wire_version: u16) -> Result<()> {
    write_opt_i32(w, h.required_schema_version);
    write_opt_i32(w, h.latest_schema_version);
    match (&h.epoch, wire_version >= WIRE_VERSION_2) {
        (Some(e), true) => {
            w.str(&e.log_epoch, "RESP_HEADER.logEpoch")?;
            w.bool(e.reset_required);
            Ok(())
        }
        (None, false) => Ok(()),
        (Some(_), false) => encoder_check(false, || "RESP_HEADER.logEpoch requires wire version 2 or 3".into()),
        (None, true) => encoder_check(false, || {
            format!("RESP_HEADER at wire version {wire_version} needs logEpoch and resetRequired")
        }),
    }
}

/// Writes a `LEASE` payload.
pub fn encode_lease(w: &mut Writer, l: &Lease) -> Result<()> {
    w.str(&l.lease_id, "LEASE.leaseId")?;
    w.i64(l.expires_at_ms, "LEASE.expiresAtMs")
}

/// Writes a `PUSH_RESULT` payload for a `wire_version` message: a conflict
/// record's `conflictColumns` is written from version 3 on and dropped below
/// (the field does not exist there). Encoder error: `commitSeq` presence not
/// matching the status.
pub fn encode_push_result(w: &mut Writer, p: &PushResult, wire_version: u16) -> Result<()> {
    encoder_check(p.commit_seq.is_some() == p.status.carries_commit_seq(), || {
        format!("PUSH_RESULT.commitSeq must be present iff status is applied or cached (status = {})", p.status.name())
    })?;
    w.str(&p.client_commit_id, "PUSH_RESULT.clientCommitId")?;
    w.u8(p.status.byte());
    write_opt_i64(w, p.commit_seq, "PUSH_RESULT.commitSeq")?;
    w.len_prefix(p.results.len(), "PUSH_RESULT.results")?;
    for res in &p.results {
        w.i32(res.op_index());
        match res {
            OpResult::Applied { .. } => w.u8(RESULT_STATUS_APPLIED),
            OpResult::Conflict { code, message, server_version, server_row, conflict_columns, .. } => {
                w.u8(RESULT_STATUS_CONFLICT);
                w.str(code, "conflict.code")?;
                w.str(message, "conflict.message")?;
                w.i64(*server_version, "conflict.serverVersion")?;
                w.bytes(server_row, "conflict.serverRow")?;
                if wire_version >= WIRE_VERSION_3 {
                    w.bytes(conflict_columns, "conflict.conflictColumns")?;
                }
            }
            OpResult::Error { code, message, retryable, .. } => {
                w.u8(RESULT_STATUS_ERROR);
                w.str(code, "error.code")?;
                w.str(message, "error.message")?;
                w.bool(*retryable);
            }
        }
    }
    Ok(())
}

/// Writes a `PUSH_RESULT_DETAILS` payload for a `wire_version` message (same
/// checks as the decoder, so a version-3 `detailsJson` the `syncular-ssp2`
/// 0.49 decoder would reject is an encoder error).
pub fn encode_push_result_details(w: &mut Writer, d: &PushResultDetails, wire_version: u16) -> Result<()> {
    encoder_check(!d.entries.is_empty(), || "PUSH_RESULT_DETAILS.entries must be non-empty".into())?;
    for (i, e) in d.entries.iter().enumerate() {
        encoder_check(
            e.op_index >= 0 && !d.entries[..i].iter().any(|p| p.op_index == e.op_index),
            || format!("PUSH_RESULT_DETAILS.opIndex {} is negative or duplicated", e.op_index),
        )?;
        validate_details_json_for(&e.details_json, wire_version).map_err(as_encoder_error)?;
    }
    w.str(&d.client_commit_id, "PUSH_RESULT_DETAILS.clientCommitId")?;
    w.len_prefix(d.entries.len(), "PUSH_RESULT_DETAILS.entries")?;
    for e in &d.entries {
        w.i32(e.op_index);
        w.str(&e.details_json, "PUSH_RESULT_DETAILS.detailsJson")?;
    }
    Ok(())
}

/// Writes a `SUB_START` payload.
pub fn encode_sub_start(w: &mut Writer, s: &SubStart) -> Result<()> {
    w.str(&s.id, "SUB_START.id")?;
    w.u8(s.status.byte());
    w.str(&s.reason_code, "SUB_START.reasonCode")?;
    write_scope_map(w, &s.effective_scopes, "SUB_START.effectiveScopes")?;
    w.bool(s.bootstrap);
    Ok(())
}

/// Writes a `COMMIT` payload.
pub fn encode_commit(w: &mut Writer, c: &Commit) -> Result<()> {
    w.i64(c.commit_seq, "COMMIT.commitSeq")?;
    w.i64(c.created_at_ms, "COMMIT.createdAtMs")?;
    w.str(&c.actor_id, "COMMIT.actorId")?;
    w.len_prefix(c.tables.len(), "COMMIT.tables")?;
    for t in &c.tables {
        w.str(t, "COMMIT.tables")?;
    }
    w.len_prefix(c.changes.len(), "COMMIT.changes")?;
    for ch in &c.changes {
        let upsert = ch.op == Op::Upsert;
        encoder_check(usize::from(ch.table_index) < c.tables.len(), || {
            format!("change.tableIndex {} out of range ({} table(s))", ch.table_index, c.tables.len())
        })?;
        encoder_check(ch.row_version.is_some() == upsert && ch.row.is_some() == upsert, || {
            format!("change.rowVersion and change.row must be present iff op is upsert (op = {})", ch.op.name())
        })?;
        w.u16(ch.table_index);
        w.str(&ch.row_id, "change.rowId")?;
        w.u8(ch.op.byte());
        write_opt_i64(w, ch.row_version, "change.rowVersion")?;
        write_stored_scopes(w, &ch.scopes, "change.scopes")?;
        write_opt_bytes(w, ch.row.as_deref(), "change.row")?;
    }
    Ok(())
}

/// Writes a `SEGMENT_REF` payload.
pub fn encode_segment_ref(w: &mut Writer, s: &SegmentRef) -> Result<()> {
    encoder_check(s.url.is_some() == s.url_expires_at_ms.is_some(), || {
        "SEGMENT_REF.urlExpiresAtMs must be present iff url is".into()
    })?;
    w.str(&s.segment_id, "SEGMENT_REF.segmentId")?;
    w.u8(s.media_type.byte());
    w.str(&s.table, "SEGMENT_REF.table")?;
    w.i64(s.byte_length, "SEGMENT_REF.byteLength")?;
    w.i64(s.row_count, "SEGMENT_REF.rowCount")?;
    w.i64(s.as_of_commit_seq, "SEGMENT_REF.asOfCommitSeq")?;
    w.str(&s.scope_digest, "SEGMENT_REF.scopeDigest")?;
    write_opt_str(w, s.row_cursor.as_deref(), "SEGMENT_REF.rowCursor")?;
    write_opt_str(w, s.next_row_cursor.as_deref(), "SEGMENT_REF.nextRowCursor")?;
    write_opt_str(w, s.url.as_deref(), "SEGMENT_REF.url")?;
    write_opt_i64(w, s.url_expires_at_ms, "SEGMENT_REF.urlExpiresAtMs")
}

/// Writes a `SUB_END` payload.
pub fn encode_sub_end(w: &mut Writer, s: &SubEnd) -> Result<()> {
    w.i64(s.next_cursor, "SUB_END.nextCursor")?;
    write_opt_json(w, s.bootstrap_state.as_deref(), "SUB_END.bootstrapState")
}

/// Writes an `ERROR` payload.
pub fn encode_error_frame(w: &mut Writer, e: &ErrorFrame) -> Result<()> {
    w.str(&e.code, "ERROR.code")?;
    w.str(&e.message, "ERROR.message")?;
    w.str(&e.category, "ERROR.category")?;
    w.bool(e.retryable);
    w.str(&e.recommended_action, "ERROR.recommendedAction")?;
    write_opt_json(w, e.details.as_deref(), "ERROR.details")
}
