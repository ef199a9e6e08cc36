//! A segment's bytes in the database (SPEC §5.1): written once per
//! `(partition, segment_id)` in chunks of at most [`super::CHUNK_BYTES`],
//! read back whole for an inline delivery or `syncular.segment`.

use std::io::Read;

use sha2::{Digest, Sha256};

use crate::engine::error::{EngineError, EngineResult};
use crate::engine::segments::{is_segment_id, CHUNK_BYTES};
use crate::store::segments::bytes::{self, SegmentRecord};

/// Stores `byte_length` bytes read from `reader` as segment `segment_id` of
/// `partition` with `media_type` (1 rows, 2 sqlite), reading at most
/// [`CHUNK_BYTES`] at a time (one chunk row each). Idempotent: when the
/// partition already stores the segment (or a concurrent transaction
/// stores it and commits first), nothing is read or written, and the
/// stored row is locked against the sweep until the transaction ends. The bytes are
/// verified as they are stored: their SHA-256 must be `segment_id` and their
/// length `byte_length`.
///
/// Errors (all `syncular.internal`, XX000 — callers hand this function bytes
/// they built): a malformed id, a negative or oversized length, a read
/// failure, a length or content-address mismatch, store failures. The
/// caller's transaction aborts on error, so nothing half-stored survives.
pub fn store_bytes(
    partition: &str,
    segment_id: &str,
    media_type: u8,
    byte_length: i64,
    reader: &mut dyn Read,
) -> EngineResult<()> {
    let internal = |what: String| EngineError::internal(format!("storing segment {segment_id}: {what}"));
    if !is_segment_id(segment_id) {
        return Err(internal("not a segment id (\"sha256:\" + 64 lowercase hex)".into()));
    }
    let chunk_count = chunk_count(byte_length).ok_or_else(|| internal(format!("byte length {byte_length} out of range")))?;
    let record = SegmentRecord {
        media_type: i16::from(media_type),
        byte_length,
        chunk_count,
        created_at_ms: crate::engine::clock::now_ms()?,
    };
    // Stored already: lock the row `FOR KEY SHARE` to the end of the
    // transaction so a concurrent `syncular.segment_sweep` cannot delete the
    // bytes the caller is about to publish (docs/src/sql/segments.md "Expiry and garbage
    // collection"); when the sweep got there first (the lock waited, then
    // found the row gone), store them again.
    let mut inserted = bytes::insert_segment(partition, segment_id, record)?;
    if !inserted {
        if crate::store::segments::sweep::lock_segment_bytes(partition, segment_id)? {
            return Ok(());
        }
        inserted = bytes::insert_segment(partition, segment_id, record)?;
        if !inserted && crate::store::segments::sweep::lock_segment_bytes(partition, segment_id)? {
            return Ok(());
        }
        if !inserted {
            return Err(internal("the stored bytes vanished twice while publishing".into()));
        }
    }
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; CHUNK_BYTES];
    let mut total: i64 = 0;
    for idx in 0..chunk_count {
        let filled = fill(reader, &mut buffer).map_err(|e| internal(format!("read failed: {e}")))?;
        if filled == 0 {
            break;
        }
        hasher.update(&buffer[..filled]);
        total += filled as i64;
        bytes::insert_segment_chunk(partition, segment_id, idx, &buffer[..filled])?;
    }
    let extra = fill(reader, &mut buffer[..1]).map_err(|e| internal(format!("read failed: {e}")))?;
    if total != byte_length || extra != 0 {
        return Err(internal(format!("read {} bytes, declared {byte_length}", total + extra as i64)));
    }
    let actual = format!("sha256:{}", hex_of(&hasher.finalize()));
    if actual != segment_id {
        return Err(internal(format!("the bytes hash to {actual}")));
    }
    Ok(())
}

/// Every byte of a stored segment, `None` when the partition does not store
/// it. Errors: store failures; a missing chunk (`syncular.internal`).
pub fn read_bytes(partition: &str, segment_id: &str) -> EngineResult<Option<Vec<u8>>> {
    let Some(record) = bytes::select_segment(partition, segment_id)? else { return Ok(None) };
    let mut out = Vec::with_capacity(usize::try_from(record.byte_length).unwrap_or(0));
    for idx in 0..record.chunk_count {
        let chunk = bytes::select_segment_chunk(partition, segment_id, idx)?.ok_or_else(|| {
            EngineError::internal(format!("segment {segment_id} is recorded with {} chunks but chunk {idx} is missing", record.chunk_count))
        })?;
        out.extend_from_slice(&chunk);
    }
    Ok(Some(out))
}

/// Chunks needed for `byte_length` bytes; `None` when negative or beyond `i32` chunks.
fn chunk_count(byte_length: i64) -> Option<i32> {
    if byte_length < 0 {
        return None;
    }
    let chunk = CHUNK_BYTES as i64;
    i32::try_from((byte_length + chunk - 1) / chunk).ok()
}

/// Reads until `buf` is full or the reader ends; returns the bytes read.
fn fill(reader: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

pub(crate) fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_counts() {
        assert_eq!(chunk_count(0), Some(0));
        assert_eq!(chunk_count(1), Some(1));
        assert_eq!(chunk_count(CHUNK_BYTES as i64), Some(1));
        assert_eq!(chunk_count(CHUNK_BYTES as i64 + 1), Some(2));
        assert_eq!(chunk_count(-1), None);
        assert_eq!(chunk_count(i64::MAX - CHUNK_BYTES as i64), None);
    }
}
