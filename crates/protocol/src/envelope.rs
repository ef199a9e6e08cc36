//! The SSP2 envelope and framing (§1.2), shared by requests and responses.
//!
//! Owns: the 8-byte envelope header (magic, `wireVersion`, `msgKind`,
//! `flags`), the frame header (`frameType u8` + `frameLength u32`), the `END`
//! rules (zero length, nothing after it, a body without it is truncated), the
//! classification of a frame type as *own kind*, *other kind* (a decode
//! error) or *unknown* (skipped and preserved in place, §1.2 rule 2), and the
//! "no trailing bytes inside a known frame" rule (§1.2 rule 3). Every error
//! here is `sync.invalid_request` (§1.7, envelope and framing violations).

use crate::constants::{
    is_registered_frame_type, request_frame_types, ENVELOPE_FLAGS, FRAME_END, FRAME_HEADER_LEN,
    MAGIC, MSG_KIND_REQUEST, MSG_KIND_RESPONSE, RESPONSE_FRAME_TYPES, SUPPORTED_WIRE_VERSIONS,
};
use crate::errors::{ProtocolError, Result};
use crate::primitives::{Reader, Writer};

/// `msgKind` of the envelope (§1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MsgKind {
    /// `0x01`: a client → server request (§1.5).
    Request,
    /// `0x02`: a server → client response (§1.6).
    Response,
}

impl MsgKind {
    /// The envelope byte (`0x01` / `0x02`).
    pub fn byte(self) -> u8 {
        match self {
            MsgKind::Request => MSG_KIND_REQUEST,
            MsgKind::Response => MSG_KIND_RESPONSE,
        }
    }

    /// The §11.1 rendering (`"request"` / `"response"`).
    pub fn name(self) -> &'static str {
        match self {
            MsgKind::Request => "request",
            MsgKind::Response => "response",
        }
    }

    fn own_types(self, wire_version: u16) -> &'static [u8] {
        match self {
            MsgKind::Request => request_frame_types(wire_version),
            MsgKind::Response => &RESPONSE_FRAME_TYPES,
        }
    }

    fn other(self) -> MsgKind {
        match self {
            MsgKind::Request => MsgKind::Response,
            MsgKind::Response => MsgKind::Request,
        }
    }
}

/// A frame whose type has no layout in this wire version for either message
/// kind (§1.2 rule 2). Decoders keep it byte-for-byte so that re-encoding
/// reproduces the input; it renders as `{"type":"UNKNOWN",…}` (§11.1 rule 9).
///
/// Encoders refuse an `UnknownFrame` whose `frame_type` is registered in the
/// message's wire version ([`crate::constants::is_registered_frame_type`]):
/// preservation is the only source of unknown frames on the encode side.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UnknownFrame {
    /// The unregistered `frameType` byte.
    pub frame_type: u8,
    /// The raw payload, `frameLength` bytes, never interpreted.
    pub payload: Vec<u8>,
}

/// One frame as read off the wire: its type and borrowed payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawFrame<'a> {
    /// `frameType` byte.
    pub frame_type: u8,
    /// `frameLength` bytes of payload.
    pub payload: &'a [u8],
}

/// How a frame type relates to the message kind being decoded (§1.2 rule 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameClass {
    /// Registered for this message kind: decode it per its layout.
    Known,
    /// No layout for either kind in this wire version: skip and preserve.
    Unknown,
}

/// Checks that `wire_version` is in the §9 window (1, 2 or 3);
/// `sync.invalid_request` otherwise (decode) / encoder error (encode).
pub fn check_wire_version(wire_version: u16) -> Result<()> {
    if SUPPORTED_WIRE_VERSIONS.contains(&wire_version) {
        Ok(())
    } else {
        Err(ProtocolError::invalid(format!(
            "unsupported wireVersion {wire_version} (supported: 1, 2, 3)"
        )))
    }
}

/// Reads the 8-byte envelope header (§1.2) and returns
/// `(wireVersion, msgKind)`. Rejects bad magic, an unknown `wireVersion` or
/// `msgKind` (before any frame is read), and non-zero `flags`, all with
/// `sync.invalid_request`.
pub fn read_envelope_header(r: &mut Reader<'_>) -> Result<(u16, MsgKind)> {
    let magic = r.take(4, "envelope magic")?;
    if magic != MAGIC {
        return Err(ProtocolError::invalid(format!(
            "bad envelope magic {magic:02x?} (expected \"SSP2\")"
        )));
    }
    let wire_version = r.u16("envelope wireVersion")?;
    check_wire_version(wire_version)?;
    let kind = match r.u8("envelope msgKind")? {
        MSG_KIND_REQUEST => MsgKind::Request,
        MSG_KIND_RESPONSE => MsgKind::Response,
        other => {
            return Err(ProtocolError::invalid(format!(
                "unknown envelope msgKind {other:#04x}"
            )))
        }
    };
    let flags = r.u8("envelope flags")?;
    if flags != ENVELOPE_FLAGS {
        return Err(ProtocolError::invalid(format!(
            "envelope flags must be 0x00, got {flags:#04x}"
        )));
    }
    Ok((wire_version, kind))
}

/// Reads the next frame. Returns `Ok(None)` on a well-formed `END`
/// (`frameLength` 0). Errors (`sync.invalid_request`): input exhausted before
/// `END` (truncated body), a short frame header, a `frameLength` past the end
/// of the input (checked before anything is allocated), or an `END` with a
/// non-zero length.
pub fn next_frame<'a>(r: &mut Reader<'a>) -> Result<Option<RawFrame<'a>>> {
    if r.is_empty() {
        return Err(ProtocolError::invalid(
            "truncated message: body ends without an END frame",
        ));
    }
    if r.remaining() < FRAME_HEADER_LEN {
        return Err(ProtocolError::invalid(format!(
            "truncated frame header: {} byte(s) left, 5 needed",
            r.remaining()
        )));
    }
    let frame_type = r.u8("frameType")?;
    let len = r.u32("frameLength")? as usize;
    if len > r.remaining() {
        return Err(ProtocolError::invalid(format!(
            "frame {frame_type:#04x}: frameLength {len} exceeds the {} remaining byte(s)",
            r.remaining()
        )));
    }
    let payload = r.take(len, "frame payload")?;
    if frame_type == FRAME_END {
        if len != 0 {
            return Err(ProtocolError::invalid(format!(
                "END frame must have frameLength 0, got {len}"
            )));
        }
        return Ok(None);
    }
    Ok(Some(RawFrame { frame_type, payload }))
}

/// After `END`: any byte left is a decode error (§1.2 rule 1).
pub fn finish_after_end(r: &Reader<'_>) -> Result<()> {
    if r.is_empty() {
        Ok(())
    } else {
        Err(ProtocolError::invalid(format!(
            "{} byte(s) after the END frame",
            r.remaining()
        )))
    }
}

/// Classifies `frame_type` for a message of `kind` in `wire_version` (§1.2
/// rule 2): a type registered for the *other* kind is a decode error
/// (`sync.invalid_request`), not unknown. `0x05` (`ROUND_FAILURE`) is known
/// in a version-3 request, a decode error in a version-3 response and
/// unknown in versions 1 and 2.
pub fn classify(frame_type: u8, kind: MsgKind, wire_version: u16) -> Result<FrameClass> {
    if kind.own_types(wire_version).contains(&frame_type) {
        Ok(FrameClass::Known)
    } else if kind.other().own_types(wire_version).contains(&frame_type) {
        Err(ProtocolError::invalid(format!(
            "frame type {frame_type:#04x} is registered for {} messages, not {}",
            kind.other().name(),
            kind.name()
        )))
    } else {
        Ok(FrameClass::Unknown)
    }
}

/// Decodes one known frame payload with `parse`, then requires that every
/// byte was consumed (§1.2 rule 3: trailing bytes inside a known frame are a
/// decode error, `sync.invalid_request`).
pub fn parse_payload<'a, T>(
    payload: &'a [u8],
    frame_name: &str,
    parse: impl FnOnce(&mut Reader<'a>) -> Result<T>,
) -> Result<T> {
    let mut r = Reader::new(payload);
    let value = parse(&mut r)?;
    r.finish(frame_name)?;
    Ok(value)
}

/// Writes the 8-byte envelope header.
pub fn write_envelope_header(w: &mut Writer, wire_version: u16, kind: MsgKind) -> Result<()> {
    check_wire_version(wire_version)?;
    w.raw(&MAGIC);
    w.u16(wire_version);
    w.u8(kind.byte());
    w.u8(ENVELOPE_FLAGS);
    Ok(())
}

/// Writes one frame: header, then the payload produced by `body`, then
/// back-patches `frameLength`. A payload over `u32::MAX` bytes or a failing
/// `body` is an encoder error; the writer's contents are then unspecified
/// (callers discard them).
pub fn write_frame(
    w: &mut Writer,
    frame_type: u8,
    body: impl FnOnce(&mut Writer) -> Result<()>,
) -> Result<()> {
    w.u8(frame_type);
    let len_at = w.len();
    w.u32(0);
    body(w)?;
    let len = w.len() - len_at - 4;
    let len = u32::try_from(len).map_err(|_| {
        ProtocolError::invalid(format!(
            "encoder: frame {frame_type:#04x} payload of {len} bytes exceeds u32"
        ))
    })?;
    w.patch_u32(len_at, len)
}

/// Writes a preserved unknown frame of a `wire_version` message; refuses a
/// `frame_type` registered in that version (encoder error, §1.2 rule 2).
pub fn write_unknown_frame(w: &mut Writer, frame: &UnknownFrame, wire_version: u16) -> Result<()> {
    if is_registered_frame_type(frame.frame_type, wire_version) {
        return Err(ProtocolError::invalid(format!(
            "encoder: refusing an unknown frame under frameType {:#04x}, registered in wire version {wire_version}",
            frame.frame_type
        )));
    }
    write_frame(w, frame.frame_type, |w| {
        w.raw(&frame.payload);
        Ok(())
    })
}

/// Writes the terminating `END` frame.
pub fn write_end(w: &mut Writer) {
    w.u8(FRAME_END);
    w.u32(0);
}

/// Peeks at an envelope header without consuming frames: `(wireVersion,
/// msgKind)` of `bytes`, with the same checks as [`read_envelope_header`].
pub fn peek_envelope(bytes: &[u8]) -> Result<(u16, MsgKind)> {
    read_envelope_header(&mut Reader::new(bytes))
}
