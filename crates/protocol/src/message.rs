//! Either kind of SSP2 message behind one entry point (§1.2): dispatch on
//! the envelope's `msgKind` to [`crate::request`] or [`crate::response`].

use crate::envelope::{read_envelope_header, MsgKind};
use crate::errors::Result;
use crate::primitives::Reader;
use crate::request::{decode_request_frames, encode_request, Request};
use crate::response::{decode_response_frames, encode_response, Response};

/// A decoded SSP2 message of either kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// `msgKind` 0x01 (§1.5).
    Request(Request),
    /// `msgKind` 0x02 (§1.6).
    Response(Response),
}

impl Message {
    /// The envelope `wireVersion`.
    pub fn wire_version(&self) -> u16 {
        match self {
            Message::Request(r) => r.wire_version,
            Message::Response(r) => r.wire_version,
        }
    }

    /// The envelope `msgKind`.
    pub fn kind(&self) -> MsgKind {
        match self {
            Message::Request(_) => MsgKind::Request,
            Message::Response(_) => MsgKind::Response,
        }
    }
}

/// Decodes a message of either kind. Errors: the §1.7 decode errors
/// (`sync.invalid_request`; `sync.empty_commit` for a zero-operation
/// `PUSH_COMMIT`). Never panics.
pub fn decode_message(bytes: &[u8]) -> Result<Message> {
    let mut r = Reader::new(bytes);
    let (wire_version, kind) = read_envelope_header(&mut r)?;
    Ok(match kind {
        MsgKind::Request => Message::Request(decode_request_frames(&mut r, wire_version)?),
        MsgKind::Response => Message::Response(decode_response_frames(&mut r, wire_version)?),
    })
}

/// Encodes a message of either kind canonically; encoder errors as for
/// [`encode_request`] / [`encode_response`].
pub fn encode_message(message: &Message) -> Result<Vec<u8>> {
    match message {
        Message::Request(r) => encode_request(r),
        Message::Response(r) => encode_response(r),
    }
}
