//! The per-column versions of a stored row (§2.2, §6.2, wire version 3's
//! column-level conflicts): the `_sync_column_versions` storage encoding of
//! the seed / `syncular-authority` 0.49, pure so it is property-tested here.
//!
//! Encoding: LEB128 varint pairs `(ordinal, version)` — ordinal = the
//! column's position in the table layout — in strictly ascending ordinal
//! order, listing only versions above 1; an empty list is stored as SQL
//! NULL ([`encode_column_versions`] returns `None`).
//!
//! Reading a column's version ([`column_version`]), the authority's rule:
//! with no stored blob (NULL) every column is at the row's version; with a
//! blob, a listed column is at its listed version and an unlisted one at 1.
//! (So an all-≤1 map written for a row whose version is above 1 reads back
//! at the row version — the reference's behaviour, kept as is.)
//!
//! [`decode_column_versions`] accepts exactly what [`encode_column_versions`]
//! produces — one byte string per map — and rejects, as `sync.internal_error`
//! (a corrupt storage value, not a client fault): a truncated varint or a
//! pair missing its version; an overlong varint (a final `0x00` byte after
//! a continuation byte) or one over 64 bits; a version ≤ 1 or above
//! `i64::MAX`; an ordinal above `usize::MAX`; ordinals not strictly
//! ascending (which covers duplicates). The `syncular-authority` decoder is
//! laxer (it takes overlong and out-of-order pairs, the last duplicate
//! winning); nothing it writes is rejected here.

use std::collections::BTreeMap;

use crate::errors::{ErrorCode, ProtocolError, Result};

fn corrupt(msg: impl std::fmt::Display) -> ProtocolError {
    ProtocolError::new(ErrorCode::InternalError, format!("_sync_column_versions: {msg}"))
}

fn write_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads one canonical LEB128 `u64` at `*pos`; `Ok(None)` at the end of
/// `bytes`.
fn read_varint(bytes: &[u8], pos: &mut usize) -> Result<Option<u64>> {
    if *pos >= bytes.len() {
        return Ok(None);
    }
    let start = *pos;
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let Some(&byte) = bytes.get(*pos) else {
            return Err(corrupt(format_args!("truncated varint at byte {start}")));
        };
        *pos += 1;
        let low = u64::from(byte & 0x7f);
        if shift == 63 && low > 1 {
            return Err(corrupt(format_args!("varint at byte {start} overflows 64 bits")));
        }
        value |= low << shift;
        if byte & 0x80 == 0 {
            if byte == 0 && shift > 0 {
                return Err(corrupt(format_args!("overlong varint at byte {start}")));
            }
            return Ok(Some(value));
        }
    }
    Err(corrupt(format_args!("varint at byte {start} overflows 64 bits")))
}

/// Encodes `versions` (ordinal → version): only versions above 1 are
/// written, in ascending ordinal order; `None` (SQL NULL) when none is.
pub fn encode_column_versions(versions: &BTreeMap<usize, i64>) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for (&ordinal, &version) in versions {
        if version > 1 {
            write_varint(&mut out, ordinal as u64);
            write_varint(&mut out, version as u64);
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Decodes a stored `_sync_column_versions` value (`None` = SQL NULL → an
/// empty map). Errors: `sync.internal_error` for any byte string
/// [`encode_column_versions`] cannot produce (module docs list them).
pub fn decode_column_versions(blob: Option<&[u8]>) -> Result<BTreeMap<usize, i64>> {
    let mut out = BTreeMap::new();
    let Some(bytes) = blob else { return Ok(out) };
    let mut pos = 0;
    let mut prev: Option<usize> = None;
    while let Some(ordinal) = read_varint(bytes, &mut pos)? {
        let ordinal = usize::try_from(ordinal).map_err(|_| corrupt(format_args!("ordinal {ordinal} too large")))?;
        if prev.is_some_and(|p| ordinal <= p) {
            return Err(corrupt(format_args!("ordinal {ordinal} duplicated or not ascending")));
        }
        prev = Some(ordinal);
        let version = read_varint(bytes, &mut pos)?
            .ok_or_else(|| corrupt(format_args!("ordinal {ordinal} has no version")))?;
        let version = i64::try_from(version).map_err(|_| corrupt(format_args!("version {version} above i64::MAX")))?;
        if version <= 1 {
            return Err(corrupt(format_args!("ordinal {ordinal} listed at version {version} (only versions above 1 are stored)")));
        }
        out.insert(ordinal, version);
    }
    Ok(out)
}

/// The version of column `ordinal` of a row at `row_version` whose decoded
/// column versions are `versions` — `None` when the stored value is SQL NULL
/// (every column then at `row_version`); with a map, a listed column is at
/// its listed version and an unlisted one at 1.
pub fn column_version(versions: Option<&BTreeMap<usize, i64>>, row_version: i64, ordinal: usize) -> i64 {
    match versions {
        None => row_version,
        Some(m) => m.get(&ordinal).copied().unwrap_or(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_drops_versions_up_to_one() {
        let m: BTreeMap<usize, i64> = [(0, 1), (2, 300), (9, 2), (200, i64::MAX)].into_iter().collect();
        let blob = encode_column_versions(&m).unwrap();
        assert_eq!(&blob[..4], &[2, 0xac, 0x02, 9]);
        let back = decode_column_versions(Some(&blob)).unwrap();
        assert_eq!(back, m.into_iter().filter(|(_, v)| *v > 1).collect());
        assert_eq!(encode_column_versions(&[(3, 1), (4, 0)].into_iter().collect()), None);
        assert_eq!(decode_column_versions(None).unwrap(), BTreeMap::new());
    }

    #[test]
    fn rejects_every_non_canonical_blob() {
        let bad: [&[u8]; 9] = [
            &[1],                   // ordinal without version
            &[1, 0x82],             // truncated version
            &[1, 1],                // version 1
            &[1, 0x82, 0x00],       // overlong version
            &[0x80, 0x00, 2],       // overlong ordinal
            &[3, 2, 1, 2],          // descending ordinals
            &[3, 2, 3, 2],          // duplicate ordinal
            &[1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], // > i64::MAX
            &[1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02], // > u64
        ];
        for b in bad {
            let e = decode_column_versions(Some(b)).unwrap_err();
            assert_eq!(e.code, ErrorCode::InternalError, "{b:02x?}");
        }
    }

    #[test]
    fn column_version_follows_the_authority_rule() {
        let m: BTreeMap<usize, i64> = [(1, 5)].into_iter().collect();
        assert_eq!(column_version(None, 7, 1), 7);
        assert_eq!(column_version(Some(&m), 7, 1), 5);
        assert_eq!(column_version(Some(&m), 7, 0), 1);
    }
}
