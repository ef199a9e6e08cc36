//! Protocol numbers of the SSP2 message codec, named as in the spec tables.
//!
//! Envelope (§1.2), frame type registry (§1.2, per wire version), enum bytes of the frame
//! field tables (§4.4, §4.5, §5.4, §6.1, §6.3), the `accept` bitmask (§4.2),
//! the `PULL_HEADER` clamps (§4.2) and the `PUSH_RESULT_DETAILS` limits
//! (§6.3.1). Nothing here is behaviour; decoders and encoders use these names
//! so every number appears once.

/// Envelope magic, bytes 0–3 of every SSP2 message: `"SSP2"` (§1.2).
pub const MAGIC: [u8; 4] = *b"SSP2";
/// Length of the fixed envelope header in bytes (magic, version, kind, flags).
pub const ENVELOPE_HEADER_LEN: usize = 8;
/// Length of a frame header in bytes: `frameType u8` + `frameLength u32`.
pub const FRAME_HEADER_LEN: usize = 5;

/// Wire version 1 (§1.2): headers without `logEpoch`.
pub const WIRE_VERSION_1: u16 = 1;
/// Wire version 2 (§1.5, §1.6): headers carry `logEpoch` (and `resetRequired`).
pub const WIRE_VERSION_2: u16 = 2;
/// Wire version 3 (the `syncular-ssp2` 0.49 generation): headers as in
/// version 2, plus the `ROUND_FAILURE` request frame (§1.5), a
/// `conflictColumns` field in `PUSH_RESULT` conflict records (§6.3), a
/// strictly validated `PUSH_RESULT_DETAILS.detailsJson` (§6.3.1), and unknown
/// frames counting as frames for every "immediately after" rule.
pub const WIRE_VERSION_3: u16 = 3;
/// The §9 compatibility window this codec decodes and encodes, oldest first.
pub const SUPPORTED_WIRE_VERSIONS: [u16; 3] = [WIRE_VERSION_1, WIRE_VERSION_2, WIRE_VERSION_3];

/// `msgKind` byte of a request (§1.2).
pub const MSG_KIND_REQUEST: u8 = 0x01;
/// `msgKind` byte of a response (§1.2).
pub const MSG_KIND_RESPONSE: u8 = 0x02;
/// The only legal envelope `flags` byte (§1.2).
pub const ENVELOPE_FLAGS: u8 = 0x00;

// ---- Frame type registry (§1.2) -------------------------------------------

/// `END` (both kinds): `frameLength` 0, last frame.
pub const FRAME_END: u8 = 0x00;
/// `REQ_HEADER` (request, §1.5).
pub const FRAME_REQ_HEADER: u8 = 0x01;
/// `PUSH_COMMIT` (request, §6.1).
pub const FRAME_PUSH_COMMIT: u8 = 0x02;
/// `PULL_HEADER` (request, §4.2).
pub const FRAME_PULL_HEADER: u8 = 0x03;
/// `SUBSCRIPTION` (request, §4.3).
pub const FRAME_SUBSCRIPTION: u8 = 0x04;
/// `ROUND_FAILURE` (request, §1.5), wire version 3 only: the code of the
/// client's last round that failed where the server could not see it. In
/// wire versions 1 and 2 the byte `0x05` has no layout: a frame of that type
/// is an *unknown* frame there (§1.2 rule 2), skipped and preserved.
pub const FRAME_ROUND_FAILURE: u8 = 0x05;
/// `RESP_HEADER` (response, §1.6).
pub const FRAME_RESP_HEADER: u8 = 0x10;
/// `PUSH_RESULT` (response, §6.3).
pub const FRAME_PUSH_RESULT: u8 = 0x11;
/// `SUB_START` (response, §4.4).
pub const FRAME_SUB_START: u8 = 0x12;
/// `COMMIT` (response, §4.5).
pub const FRAME_COMMIT: u8 = 0x13;
/// `SEGMENT_REF` (response, §5.4).
pub const FRAME_SEGMENT_REF: u8 = 0x14;
/// `SEGMENT_INLINE` (response, §5.7).
pub const FRAME_SEGMENT_INLINE: u8 = 0x15;
/// `SUB_END` (response, §4.4).
pub const FRAME_SUB_END: u8 = 0x16;
/// `LEASE` (response, §7.3.2).
pub const FRAME_LEASE: u8 = 0x19;
/// `PUSH_RESULT_DETAILS` (response, §6.3.1).
pub const FRAME_PUSH_RESULT_DETAILS: u8 = 0x1B;
/// `ERROR` (response, §1.6).
pub const FRAME_ERROR: u8 = 0x1F;

/// Frame types with a request layout in wire versions 1 and 2 (§1.2
/// registry, `END` excluded).
pub const REQUEST_FRAME_TYPES: [u8; 4] = [
    FRAME_REQ_HEADER,
    FRAME_PUSH_COMMIT,
    FRAME_PULL_HEADER,
    FRAME_SUBSCRIPTION,
];
/// Frame types with a request layout in wire version 3: those of versions 1
/// and 2 plus `ROUND_FAILURE`.
pub const REQUEST_FRAME_TYPES_V3: [u8; 5] = [
    FRAME_REQ_HEADER,
    FRAME_PUSH_COMMIT,
    FRAME_PULL_HEADER,
    FRAME_SUBSCRIPTION,
    FRAME_ROUND_FAILURE,
];
/// Frame types with a response layout (§1.2 registry, `END` excluded), the
/// same in wire versions 1, 2 and 3.
pub const RESPONSE_FRAME_TYPES: [u8; 10] = [
    FRAME_RESP_HEADER,
    FRAME_PUSH_RESULT,
    FRAME_SUB_START,
    FRAME_COMMIT,
    FRAME_SEGMENT_REF,
    FRAME_SEGMENT_INLINE,
    FRAME_SUB_END,
    FRAME_LEASE,
    FRAME_PUSH_RESULT_DETAILS,
    FRAME_ERROR,
];

/// The request frame types with a layout in `wire_version`
/// ([`REQUEST_FRAME_TYPES_V3`] from version 3 on, [`REQUEST_FRAME_TYPES`]
/// before).
pub fn request_frame_types(wire_version: u16) -> &'static [u8] {
    if wire_version >= WIRE_VERSION_3 {
        &REQUEST_FRAME_TYPES_V3
    } else {
        &REQUEST_FRAME_TYPES
    }
}

/// True for every frame type that has a layout in `wire_version` for either
/// message kind, `END` included. Every other byte is an *unknown* frame type
/// (§1.2 rule 2; the reserved `0x17`, `0x18`, `0x1A`, `0x1C`–`0x1E`,
/// `0x20`–`0x2F` included, and `0x05` below wire version 3) and the encoder
/// refuses to emit an unknown frame under a registered type.
pub fn is_registered_frame_type(frame_type: u8, wire_version: u16) -> bool {
    frame_type == FRAME_END
        || request_frame_types(wire_version).contains(&frame_type)
        || RESPONSE_FRAME_TYPES.contains(&frame_type)
}

/// The registry name of a frame type registered in some wire version
/// (`"SUB_START"`; `"ROUND_FAILURE"` for `0x05`, a version-3 type), or `None`.
pub fn frame_type_name(frame_type: u8) -> Option<&'static str> {
    Some(match frame_type {
        FRAME_END => "END",
        FRAME_REQ_HEADER => "REQ_HEADER",
        FRAME_PUSH_COMMIT => "PUSH_COMMIT",
        FRAME_PULL_HEADER => "PULL_HEADER",
        FRAME_SUBSCRIPTION => "SUBSCRIPTION",
        FRAME_ROUND_FAILURE => "ROUND_FAILURE",
        FRAME_RESP_HEADER => "RESP_HEADER",
        FRAME_PUSH_RESULT => "PUSH_RESULT",
        FRAME_SUB_START => "SUB_START",
        FRAME_COMMIT => "COMMIT",
        FRAME_SEGMENT_REF => "SEGMENT_REF",
        FRAME_SEGMENT_INLINE => "SEGMENT_INLINE",
        FRAME_SUB_END => "SUB_END",
        FRAME_LEASE => "LEASE",
        FRAME_PUSH_RESULT_DETAILS => "PUSH_RESULT_DETAILS",
        FRAME_ERROR => "ERROR",
        _ => return None,
    })
}

// ---- Enum bytes ------------------------------------------------------------

/// Operation / change `op`: upsert (§6.1, §4.5).
pub const OP_UPSERT: u8 = 1;
/// Operation / change `op`: delete (§6.1, §4.5).
pub const OP_DELETE: u8 = 2;

/// `SUB_START.status`: active (§4.4).
pub const SUB_STATUS_ACTIVE: u8 = 1;
/// `SUB_START.status`: revoked (§4.4, §3.3).
pub const SUB_STATUS_REVOKED: u8 = 2;
/// `SUB_START.status`: reset (§4.4, §4.6).
pub const SUB_STATUS_RESET: u8 = 3;

/// `PUSH_RESULT.status`: applied (§6.3).
pub const PUSH_STATUS_APPLIED: u8 = 1;
/// `PUSH_RESULT.status`: cached (§6.3).
pub const PUSH_STATUS_CACHED: u8 = 2;
/// `PUSH_RESULT.status`: rejected (§6.3).
pub const PUSH_STATUS_REJECTED: u8 = 3;

/// Result record `status`: applied, no further fields (§6.3).
pub const RESULT_STATUS_APPLIED: u8 = 1;
/// Result record `status`: conflict (§6.3).
pub const RESULT_STATUS_CONFLICT: u8 = 2;
/// Result record `status`: error (§6.3).
pub const RESULT_STATUS_ERROR: u8 = 3;

/// `SEGMENT_REF.mediaType`: SSG2 rows segment (§5.4, §5.2).
pub const MEDIA_TYPE_ROWS: u8 = 1;
/// `SEGMENT_REF.mediaType`: SQLite image (§5.4, §5.3).
pub const MEDIA_TYPE_SQLITE: u8 = 2;

// ---- PULL_HEADER (§4.2) ----------------------------------------------------

/// `accept` bit 0: inline rows segments.
pub const ACCEPT_INLINE_ROWS: u8 = 0b0001;
/// `accept` bit 1: external (referenced) rows segments.
pub const ACCEPT_EXTERNAL_ROWS: u8 = 0b0010;
/// `accept` bit 2: sqlite segments.
pub const ACCEPT_SQLITE: u8 = 0b0100;
/// `accept` bit 3: signed URLs.
pub const ACCEPT_SIGNED_URLS: u8 = 0b1000;
/// `accept` bits 4–7: MUST be zero; a set bit is a decode error (§1.7).
pub const ACCEPT_RESERVED_MASK: u8 = 0xF0;

/// `limitCommits` clamp range and default (`0` = default), in changes.
pub const LIMIT_COMMITS_MIN: i32 = 1;
/// Upper clamp of `limitCommits`, in changes.
pub const LIMIT_COMMITS_MAX: i32 = 1000;
/// Server default for `limitCommits = 0`, in changes.
pub const LIMIT_COMMITS_DEFAULT: i32 = 1000;
/// Lower clamp of `limitSnapshotRows`, in rows.
pub const LIMIT_SNAPSHOT_ROWS_MIN: i32 = 1;
/// Upper clamp of `limitSnapshotRows`, in rows.
pub const LIMIT_SNAPSHOT_ROWS_MAX: i32 = 50_000;
/// Server default for `limitSnapshotRows = 0`, in rows.
pub const LIMIT_SNAPSHOT_ROWS_DEFAULT: i32 = 1000;
/// Lower clamp of `maxSnapshotPages`, in pages.
pub const MAX_SNAPSHOT_PAGES_MIN: i32 = 1;
/// Upper clamp of `maxSnapshotPages`, in pages.
pub const MAX_SNAPSHOT_PAGES_MAX: i32 = 50;
/// Server default for `maxSnapshotPages = 0`, in pages.
pub const MAX_SNAPSHOT_PAGES_DEFAULT: i32 = 4;

/// `SUBSCRIPTION.cursor` value meaning "never synced" (§4.3).
pub const CURSOR_NEVER_SYNCED: i64 = -1;

// ---- ROUND_FAILURE (§1.5, wire version 3) ----------------------------------

/// Max UTF-8 bytes of `ROUND_FAILURE.code`.
pub const ROUND_FAILURE_CODE_MAX_BYTES: usize = 64;

// ---- PUSH_RESULT_DETAILS detailsJson bounds (§6.3.1) -----------------------

/// Max encoded bytes of the normalized `detailsJson` object (every wire
/// version) and, from wire version 3 on, of the raw `detailsJson` text too.
pub const DETAILS_MAX_ENCODED_BYTES: usize = 4096;
/// `fieldPaths` holds 1..=this many unique paths.
pub const DETAILS_MAX_FIELD_PATHS: usize = 32;
/// Max characters of one field path.
pub const DETAILS_MAX_FIELD_PATH_LEN: usize = 160;
/// Max characters of `reason` / `requiredAction`.
pub const DETAILS_MAX_TOKEN_LEN: usize = 96;
/// `references` holds 1..=this many entries.
pub const DETAILS_MAX_REFERENCES: usize = 16;
/// Max characters of a reference key.
pub const DETAILS_MAX_REFERENCE_KEY_LEN: usize = 64;
/// Max UTF-8 bytes of a reference value.
pub const DETAILS_MAX_REFERENCE_VALUE_BYTES: usize = 256;
