//! SSP2 framing the gateway needs without decoding any payload (§1.2, §8.7).
//!
//! Owns: the 8-byte request envelope check, the streaming `END` scanner that reassembles a
//! socket round's request from `0x01` chunks cut at arbitrary boundaries, the request
//! *shape* (does it carry `PUSH_COMMIT`s / a `PULL_HEADER`? — decides the persist-before-ack
//! transaction plan of contract §1), the push+pull response splice, and the chunking of a
//! round's response into socket messages. Frame layout: `type u8, length u32 LE, payload`;
//! `END` = type `0x00`, length 0. Nothing here interprets a payload.

use syncular_protocol::constants::{
    ENVELOPE_HEADER_LEN, FRAME_END, FRAME_HEADER_LEN, FRAME_PULL_HEADER, FRAME_PUSH_COMMIT,
    FRAME_RESP_HEADER, FRAME_ROUND_FAILURE, MAGIC, MSG_KIND_REQUEST, MSG_KIND_RESPONSE,
    SUPPORTED_WIRE_VERSIONS, WIRE_VERSION_3,
};
use syncular_protocol::request::decode_round_failure;

/// §8.7 channel tag of a standalone delta (server → client).
pub const TAG_DELTA: u8 = 0x00;
/// §8.7 channel tag of a sync-round chunk (both directions).
pub const TAG_ROUND: u8 = 0x01;
/// Largest round-response message the gateway sends, bytes (payload after the tag).
pub const MAX_ROUND_CHUNK: usize = 64 * 1024;

/// Why a byte stream is not a usable SSP2 message (all connection-fatal on a socket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FramingError {
    /// The 8-byte envelope is not a request header (magic, wire version 1–3, msgKind 0x01,
    /// flags 0).
    BadHeader(String),
    /// An `END` frame with a non-zero length.
    BadEnd,
    /// Bytes after the request's `END` (pipelining, §8.7).
    PastEnd,
    /// The request would exceed the byte limit.
    TooLarge {
        /// The limit, bytes.
        limit: usize,
    },
}

impl std::fmt::Display for FramingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FramingError::BadHeader(why) => write!(f, "invalid SSP2 request header: {why}"),
            FramingError::BadEnd => f.write_str("END frame with a non-zero length"),
            FramingError::PastEnd => f.write_str("bytes past the request's END frame (§8.7)"),
            FramingError::TooLarge { limit } => write!(f, "request larger than {limit} bytes"),
        }
    }
}

/// Checks an envelope header (first 8 bytes) and returns its wire version.
///
/// Errors: [`FramingError::BadHeader`] naming the bad field.
pub fn check_header(header: &[u8], msg_kind: u8) -> Result<u16, FramingError> {
    if header.len() < ENVELOPE_HEADER_LEN {
        return Err(FramingError::BadHeader(format!("{} bytes, need 8", header.len())));
    }
    if header[0..4] != MAGIC {
        return Err(FramingError::BadHeader("bad magic (expected \"SSP2\")".into()));
    }
    let wire = u16::from_le_bytes([header[4], header[5]]);
    if !SUPPORTED_WIRE_VERSIONS.contains(&wire) {
        return Err(FramingError::BadHeader(format!("unsupported wireVersion {wire}")));
    }
    if header[6] != msg_kind {
        return Err(FramingError::BadHeader(format!("msgKind 0x{:02x}", header[6])));
    }
    if header[7] != 0 {
        return Err(FramingError::BadHeader(format!("flags 0x{:02x} (must be 0)", header[7])));
    }
    Ok(wire)
}

/// Streaming reassembly of one request (§8.7 rule 1): feed chunks, get the complete message
/// once its `END` frame is consumed. Holds at most `limit` bytes.
#[derive(Debug)]
pub struct RequestScanner {
    buf: Vec<u8>,
    /// Offset of the next frame header in `buf` (after the envelope).
    next_frame: usize,
    limit: usize,
}

impl RequestScanner {
    /// A scanner accepting requests of at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        RequestScanner { buf: Vec::new(), next_frame: ENVELOPE_HEADER_LEN, limit }
    }

    /// Bytes buffered so far.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Appends a chunk. `Ok(Some(request))` when the `END` frame completed the message
    /// (the scanner is then reset), `Ok(None)` while more bytes are needed.
    ///
    /// Errors (the stream has no findable end or breaks a rule — close the socket): a bad
    /// envelope header, an `END` with a length, bytes past `END` in the same chunk, more than
    /// `limit` bytes.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Option<Vec<u8>>, FramingError> {
        // A message ≤ limit never needs more: past the limit it is too large or pipelined.
        if self.buf.len() + chunk.len() > self.limit {
            return Err(FramingError::TooLarge { limit: self.limit });
        }
        self.buf.extend_from_slice(chunk);
        if self.buf.len() >= ENVELOPE_HEADER_LEN {
            check_header(&self.buf[..ENVELOPE_HEADER_LEN], MSG_KIND_REQUEST)?;
        }
        while self.buf.len() >= self.next_frame + FRAME_HEADER_LEN {
            let h = self.next_frame;
            let frame_type = self.buf[h];
            let len = u32::from_le_bytes([self.buf[h + 1], self.buf[h + 2], self.buf[h + 3], self.buf[h + 4]])
                as usize;
            if frame_type == FRAME_END {
                if len != 0 {
                    return Err(FramingError::BadEnd);
                }
                let end = h + FRAME_HEADER_LEN;
                if self.buf.len() > end {
                    return Err(FramingError::PastEnd);
                }
                self.next_frame = ENVELOPE_HEADER_LEN;
                return Ok(Some(std::mem::take(&mut self.buf)));
            }
            let next = h.saturating_add(FRAME_HEADER_LEN).saturating_add(len);
            if next.saturating_add(FRAME_HEADER_LEN) > self.limit {
                return Err(FramingError::TooLarge { limit: self.limit });
            }
            self.next_frame = next;
        }
        Ok(None)
    }
}

/// What a request carries, read from its frame types only (contract §1 transaction plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestShape {
    /// Envelope wire version.
    pub wire_version: u16,
    /// At least one `PUSH_COMMIT` frame.
    pub has_push: bool,
    /// A `PULL_HEADER` frame.
    pub has_pull: bool,
}

/// Reads the frame types of a request. `None` when the bytes are not a well-framed request
/// (the extension then reports the precise decode error).
pub fn request_shape(bytes: &[u8]) -> Option<RequestShape> {
    let wire_version = check_header(bytes, MSG_KIND_REQUEST).ok()?;
    let mut shape = RequestShape { wire_version, has_push: false, has_pull: false };
    let mut saw_end = false;
    for frame in frames(bytes) {
        let (frame_type, range) = frame.ok()?;
        match frame_type {
            FRAME_PUSH_COMMIT => shape.has_push = true,
            FRAME_PULL_HEADER => shape.has_pull = true,
            FRAME_END => saw_end = range.end == bytes.len(),
            _ => {}
        }
    }
    saw_end.then_some(shape)
}

/// The code of a request's `ROUND_FAILURE` report (wire version 3: a frame `0x05` right after
/// `REQ_HEADER`, decoded by the protocol crate), for the gateway's metrics. `None` for a request
/// without one, of wire version 1 or 2 (where `0x05` is an unknown frame), or not well framed —
/// the extension reports the precise decode error; this never fails a round.
pub fn round_failure_code(bytes: &[u8]) -> Option<String> {
    if check_header(bytes, MSG_KIND_REQUEST).ok()? < WIRE_VERSION_3 {
        return None;
    }
    // Only the second frame may be one (§1.5 of the v3 generation).
    let (frame_type, range) = frames(bytes).nth(1)?.ok()?;
    if frame_type != FRAME_ROUND_FAILURE {
        return None;
    }
    decode_round_failure(&bytes[range.start + FRAME_HEADER_LEN..range.end]).ok()
}

/// Iterates the frames after the 8-byte envelope: `(frameType, whole-frame byte range)`.
/// Stops after `END`; yields one `Err(())` on a truncated frame.
pub fn frames(bytes: &[u8]) -> impl Iterator<Item = Result<(u8, std::ops::Range<usize>), ()>> + '_ {
    let mut pos = ENVELOPE_HEADER_LEN;
    let mut done = bytes.len() < ENVELOPE_HEADER_LEN;
    std::iter::from_fn(move || {
        if done || pos >= bytes.len() {
            return None;
        }
        if pos + FRAME_HEADER_LEN > bytes.len() {
            done = true;
            return Some(Err(()));
        }
        let frame_type = bytes[pos];
        let len = u32::from_le_bytes([bytes[pos + 1], bytes[pos + 2], bytes[pos + 3], bytes[pos + 4]]) as usize;
        let end = match (pos + FRAME_HEADER_LEN).checked_add(len) {
            Some(end) if end <= bytes.len() => end,
            _ => {
                done = true;
                return Some(Err(()));
            }
        };
        let range = pos..end;
        pos = end;
        if frame_type == FRAME_END {
            done = true;
        }
        Some(Ok((frame_type, range)))
    })
}

/// Why two responses cannot be spliced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpliceError(pub String);

/// Contract §1 step 3: the push response without its `END`, followed by the pull response
/// without its envelope and `RESP_HEADER` — one response carrying both halves. When the two
/// `RESP_HEADER` frames differ (schema floor / reset answer) the pull response is returned
/// alone (the persisted push results replay as `cached` on the next round).
///
/// Errors: either response is not a well-framed response starting with `RESP_HEADER` and
/// ending with `END`.
pub fn splice(push: &[u8], pull: &[u8]) -> Result<Vec<u8>, SpliceError> {
    let push_frames = response_frames(push, "push")?;
    let pull_frames = response_frames(pull, "pull")?;
    let push_header = &push[push_frames[0].clone()];
    let pull_header = &pull[pull_frames[0].clone()];
    if push_header != pull_header || push[..ENVELOPE_HEADER_LEN] != pull[..ENVELOPE_HEADER_LEN] {
        return Ok(pull.to_vec());
    }
    let push_end = push_frames[push_frames.len() - 1].start;
    let pull_body = pull_frames[0].end;
    let mut out = Vec::with_capacity(push_end + pull.len() - pull_body);
    out.extend_from_slice(&push[..push_end]);
    out.extend_from_slice(&pull[pull_body..]);
    Ok(out)
}

/// [`splice`] for a streamed pull half: `pull_head` is the pull response's first chunk (its
/// envelope and whole `RESP_HEADER` frame at least, possibly more). Returns the bytes that
/// open the spliced response — the push response without its `END`, then `pull_head` after
/// its `RESP_HEADER` — or `pull_head` alone when the two `RESP_HEADER`s differ (the pull
/// response then stands alone, as in [`splice`]). The rest of the pull stream follows as is.
///
/// Errors: the push response is not well framed, or `pull_head` does not hold a whole
/// envelope + `RESP_HEADER`.
pub fn splice_head(push: &[u8], pull_head: &[u8]) -> Result<Vec<u8>, SpliceError> {
    let push_frames = response_frames(push, "push")?;
    check_header(pull_head, MSG_KIND_RESPONSE).map_err(|e| SpliceError(format!("pull response: {e}")))?;
    let pull_header = match frames(pull_head).next() {
        Some(Ok((FRAME_RESP_HEADER, range))) => range,
        _ => return Err(SpliceError("pull stream's first chunk does not hold a whole RESP_HEADER".into())),
    };
    if push[push_frames[0].clone()] != pull_head[pull_header.clone()] || push[..ENVELOPE_HEADER_LEN] != pull_head[..ENVELOPE_HEADER_LEN] {
        return Ok(pull_head.to_vec());
    }
    let push_end = push_frames[push_frames.len() - 1].start;
    let mut out = Vec::with_capacity(push_end + pull_head.len() - pull_header.end);
    out.extend_from_slice(&push[..push_end]);
    out.extend_from_slice(&pull_head[pull_header.end..]);
    Ok(out)
}

/// True when `bytes` is a whole, well-framed response (its last frame is `END`, nothing after).
pub fn is_whole_response(bytes: &[u8]) -> bool {
    response_frames(bytes, "response").is_ok()
}

/// The in-band failure that ends a response whose first bytes were already sent (§1.6, §1.4
/// rule 5): an `ERROR` frame carrying the §10.1 object `error` (code, message, category,
/// retryable, recommendedAction, details), then `END`. An object that does not parse as
/// §10.1 becomes `syncular.internal`.
pub fn error_tail(error: &serde_json::Value) -> Vec<u8> {
    use syncular_protocol::envelope::{write_end, write_frame};
    use syncular_protocol::primitives::Writer;
    use syncular_protocol::response::{encode_error_frame, ErrorFrame};
    let frame = syncular_protocol::error_json::parse_error_object(error).unwrap_or_else(|_| ErrorFrame {
        code: "syncular.internal".into(),
        message: "the response failed mid-stream".into(),
        category: "internal".into(),
        retryable: true,
        recommended_action: "retryLater".into(),
        details: None,
    });
    let mut w = Writer::with_capacity(256);
    if write_frame(&mut w, syncular_protocol::constants::FRAME_ERROR, |w| encode_error_frame(w, &frame)).is_err() {
        w = Writer::with_capacity(64);
    }
    write_end(&mut w);
    w.into_vec()
}

fn response_frames(bytes: &[u8], what: &str) -> Result<Vec<std::ops::Range<usize>>, SpliceError> {
    check_header(bytes, MSG_KIND_RESPONSE).map_err(|e| SpliceError(format!("{what} response: {e}")))?;
    let mut out = Vec::new();
    for frame in frames(bytes) {
        let (frame_type, range) = frame.map_err(|()| SpliceError(format!("{what} response is truncated")))?;
        if out.is_empty() && frame_type != FRAME_RESP_HEADER {
            return Err(SpliceError(format!("{what} response does not start with RESP_HEADER")));
        }
        let last = frame_type == FRAME_END;
        out.push(range);
        if last {
            if out.last().is_some_and(|r| r.end != bytes.len()) {
                return Err(SpliceError(format!("{what} response has bytes past END")));
            }
            return Ok(out);
        }
    }
    Err(SpliceError(format!("{what} response has no END frame")))
}

/// Cuts a response into round-message payloads (§8.7 rule 2): whole frames packed up to
/// `max_chunk` bytes; a frame larger than `max_chunk` is split into `max_chunk` pieces. The
/// last range ends exactly at the end of `bytes` (the `END` frame). The envelope travels with
/// the first frame.
pub fn round_chunks(bytes: &[u8], max_chunk: usize) -> Vec<std::ops::Range<usize>> {
    let max_chunk = max_chunk.max(FRAME_HEADER_LEN);
    let mut out = Vec::new();
    let mut start = 0;
    let mut cut = 0;
    let mut boundaries: Vec<usize> = frames(bytes).filter_map(|f| f.ok().map(|(_, r)| r.end)).collect();
    if boundaries.last() != Some(&bytes.len()) {
        boundaries.push(bytes.len());
    }
    for end in boundaries {
        if end - start > max_chunk && cut > start {
            out.push(start..cut);
            start = cut;
        }
        while end - start > max_chunk {
            out.push(start..start + max_chunk);
            start += max_chunk;
        }
        cut = end;
    }
    if cut > start {
        out.push(start..cut);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(t: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![t];
        v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        v.extend_from_slice(payload);
        v
    }

    fn message(kind: u8, frames: &[Vec<u8>]) -> Vec<u8> {
        let mut v = b"SSP2".to_vec();
        v.extend_from_slice(&2u16.to_le_bytes());
        v.push(kind);
        v.push(0);
        for f in frames {
            v.extend_from_slice(f);
        }
        v.extend_from_slice(&frame(0, &[]));
        v
    }

    fn sample_request() -> Vec<u8> {
        message(
            MSG_KIND_REQUEST,
            &[frame(1, b"header"), frame(2, &[7; 300]), frame(3, b"pull"), frame(4, &[])],
        )
    }

    #[test]
    fn scanner_reassembles_on_every_chunk_boundary() {
        let req = sample_request();
        for size in 1..=req.len() {
            let mut s = RequestScanner::new(1 << 20);
            let mut out = None;
            let chunks: Vec<&[u8]> = req.chunks(size).collect();
            for (i, c) in chunks.iter().enumerate() {
                let r = s.push(c).unwrap();
                if i + 1 < chunks.len() {
                    assert!(r.is_none(), "completed early at chunk {i} of size {size}");
                } else {
                    out = r;
                }
            }
            assert_eq!(out.as_deref(), Some(&req[..]), "chunk size {size}");
        }
        // Two-cut splits at every pair of positions.
        for a in 0..req.len() {
            for b in a..req.len() {
                let mut s = RequestScanner::new(1 << 20);
                assert!(s.push(&req[..a]).unwrap().is_none());
                assert!(s.push(&req[a..b]).unwrap().is_none());
                assert_eq!(s.push(&req[b..]).unwrap().as_deref(), Some(&req[..]));
            }
        }
    }

    #[test]
    fn scanner_is_reusable_after_a_message() {
        let req = sample_request();
        let mut s = RequestScanner::new(1 << 20);
        assert!(s.push(&req).unwrap().is_some());
        assert_eq!(s.buffered(), 0);
        assert!(s.push(&req).unwrap().is_some());
    }

    #[test]
    fn scanner_rejects_bad_headers_as_soon_as_8_bytes_are_in() {
        let mut req = sample_request();
        req[6] = MSG_KIND_RESPONSE;
        let mut s = RequestScanner::new(1 << 20);
        assert!(s.push(&req[..7]).unwrap().is_none());
        assert!(matches!(s.push(&req[7..8]), Err(FramingError::BadHeader(_))));
        for (i, v) in [(0usize, b'X'), (4, 9), (7, 1)] {
            let mut bad = sample_request();
            bad[i] = v;
            assert!(matches!(RequestScanner::new(1 << 20).push(&bad), Err(FramingError::BadHeader(_))), "byte {i}");
        }
        assert!(matches!(RequestScanner::new(1 << 20).push(b"garbage!garbage"), Err(FramingError::BadHeader(_))));
    }

    #[test]
    fn scanner_rejects_past_end_bad_end_and_oversize() {
        let mut req = sample_request();
        req.push(0x01);
        assert_eq!(RequestScanner::new(1 << 20).push(&req), Err(FramingError::PastEnd));
        let mut bad_end = sample_request();
        let n = bad_end.len();
        bad_end[n - 4] = 1;
        bad_end.extend_from_slice(&[0]);
        assert_eq!(RequestScanner::new(1 << 20).push(&bad_end), Err(FramingError::BadEnd));
        let req = sample_request();
        assert!(matches!(RequestScanner::new(100).push(&req), Err(FramingError::TooLarge { limit: 100 })));
        // A frame header announcing a huge payload fails before the payload arrives.
        let mut huge = message(MSG_KIND_REQUEST, &[]);
        huge.truncate(8);
        huge.extend_from_slice(&[2, 0xff, 0xff, 0xff, 0x7f]);
        assert!(matches!(RequestScanner::new(1 << 20).push(&huge), Err(FramingError::TooLarge { .. })));
        // Exactly at the limit is fine.
        assert!(RequestScanner::new(req.len()).push(&req).unwrap().is_some());
    }

    #[test]
    fn shape_reads_frame_types_only() {
        let s = request_shape(&sample_request()).unwrap();
        assert_eq!(s, RequestShape { wire_version: 2, has_push: true, has_pull: true });
        let pull_only = message(MSG_KIND_REQUEST, &[frame(1, b"h"), frame(3, b"p")]);
        assert!(!request_shape(&pull_only).unwrap().has_push);
        let mut truncated = sample_request();
        truncated.pop();
        assert_eq!(request_shape(&truncated), None);
        assert_eq!(request_shape(b"SSP2"), None);
    }

    #[test]
    fn round_failure_code_reads_only_a_v3_second_frame() {
        let code = |s: &str| {
            let mut p = (s.len() as u32).to_le_bytes().to_vec();
            p.extend_from_slice(s.as_bytes());
            p
        };
        let v3 = |frames: &[Vec<u8>]| {
            let mut m = message(MSG_KIND_REQUEST, frames);
            m[4] = 3;
            m
        };
        let reported = v3(&[frame(1, b"h"), frame(FRAME_ROUND_FAILURE, &code("transport.timeout")), frame(3, b"p")]);
        assert_eq!(round_failure_code(&reported).as_deref(), Some("transport.timeout"));
        // Not the second frame, a v2 request (0x05 is unknown there), a bad code, no report.
        let late = v3(&[frame(1, b"h"), frame(3, b"p"), frame(FRAME_ROUND_FAILURE, &code("transport.timeout"))]);
        let mut v2 = reported.clone();
        v2[4] = 2;
        let bad = v3(&[frame(1, b"h"), frame(FRAME_ROUND_FAILURE, &code("Not.Valid")), frame(3, b"p")]);
        for bytes in [late, v2, bad, v3(&[frame(1, b"h"), frame(3, b"p")]), b"SSP2".to_vec()] {
            assert_eq!(round_failure_code(&bytes), None);
        }
        // Wire version 3 envelopes are requests the gateway frames.
        assert_eq!(request_shape(&reported).map(|s| s.wire_version), Some(3));
    }

    #[test]
    fn splice_joins_push_and_pull_halves() {
        let push = message(MSG_KIND_RESPONSE, &[frame(0x10, b"H"), frame(0x11, b"result")]);
        let pull = message(MSG_KIND_RESPONSE, &[frame(0x10, b"H"), frame(0x12, b"start"), frame(0x16, b"end")]);
        let joined = splice(&push, &pull).unwrap();
        let expected = message(
            MSG_KIND_RESPONSE,
            &[frame(0x10, b"H"), frame(0x11, b"result"), frame(0x12, b"start"), frame(0x16, b"end")],
        );
        assert_eq!(joined, expected);
        // Different headers: the pull response alone.
        let floor = message(MSG_KIND_RESPONSE, &[frame(0x10, b"FLOOR")]);
        assert_eq!(splice(&push, &floor).unwrap(), floor);
        // Malformed inputs are errors, never panics.
        assert!(splice(&push[..push.len() - 1], &pull).is_err());
        assert!(splice(&push, b"SSP2").is_err());
        let no_header = message(MSG_KIND_RESPONSE, &[frame(0x11, b"x")]);
        assert!(splice(&no_header, &pull).is_err());
    }

    #[test]
    fn splice_head_then_the_rest_equals_splice() {
        let push = message(MSG_KIND_RESPONSE, &[frame(0x10, b"H"), frame(0x11, b"result")]);
        let pull = message(MSG_KIND_RESPONSE, &[frame(0x10, b"H"), frame(0x12, b"start"), frame(0x16, b"end")]);
        let whole = splice(&push, &pull).unwrap();
        // Cut the pull stream after its RESP_HEADER, and further on.
        for cut in [8 + 6, 8 + 6 + 10, pull.len()] {
            let mut joined = splice_head(&push, &pull[..cut]).unwrap();
            joined.extend_from_slice(&pull[cut..]);
            assert_eq!(joined, whole, "cut at {cut}");
        }
        let floor = message(MSG_KIND_RESPONSE, &[frame(0x10, b"FLOOR")]);
        assert_eq!(splice_head(&push, &floor).unwrap(), floor, "different headers: the pull alone");
        assert!(splice_head(&push, &pull[..8 + 3]).is_err(), "a partial RESP_HEADER");
        assert!(splice_head(&push, b"SSP2").is_err());
    }

    #[test]
    fn error_tail_is_an_error_frame_and_end() {
        let body = serde_json::json!({"code": "syncular.unavailable", "message": "gone", "category": "internal",
            "retryable": true, "recommendedAction": "retryLater"});
        let head = message(MSG_KIND_RESPONSE, &[frame(0x10, &[0, 0, 0, 0, 0, 0, 0])]);
        let mut msg = head[..head.len() - 5].to_vec();
        msg.extend_from_slice(&error_tail(&body));
        let decoded = syncular_protocol::response::decode_response(&msg).expect("decodes");
        match decoded.frames.as_slice() {
            [syncular_protocol::response::ResponseFrame::Error(e)] => {
                assert_eq!((e.code.as_str(), e.retryable, e.recommended_action.as_str()), ("syncular.unavailable", true, "retryLater"));
            }
            other => panic!("{other:?}"),
        }
        // Not a §10.1 object: syncular.internal.
        let tail = error_tail(&serde_json::json!("nope"));
        assert!(tail.ends_with(&[0, 0, 0, 0, 0]) && tail[0] == 0x1F);
    }

    #[test]
    fn round_chunks_cover_the_response_and_end_at_end() {
        let big = vec![9u8; 150_000];
        let resp = message(
            MSG_KIND_RESPONSE,
            &[frame(0x10, b"H"), frame(0x12, &[1; 10]), frame(0x13, &big), frame(0x16, b"e")],
        );
        for max in [5, 6, 64, 1000, MAX_ROUND_CHUNK, 1 << 20] {
            let chunks = round_chunks(&resp, max);
            let mut pos = 0;
            for c in &chunks {
                assert_eq!(c.start, pos);
                assert!(c.len() <= max.max(5) && !c.is_empty());
                pos = c.end;
            }
            assert_eq!(pos, resp.len(), "max {max}");
        }
        assert_eq!(round_chunks(&resp, 1 << 20), vec![0..resp.len()]);
    }
}
