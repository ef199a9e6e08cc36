//! The invariants of the cargo-fuzz targets (`fuzz/fuzz_targets/*.rs`), as
//! plain functions: each fuzz target is a one-line call of its function here,
//! and the stable-toolchain smoke (`tests/fuzz_smoke.rs`, run by `cargo test
//! -p syncular-protocol`) calls the same functions over the seed corpora and
//! deterministic mutations of them. Not part of the API: every function
//! panics (an `assert!`) when an invariant breaks, which is what the fuzzer
//! and the smoke look for.

use crate::column_versions::{decode_column_versions, encode_column_versions};
use crate::json_text::is_json_document;
use crate::message::{decode_message, encode_message};
use crate::primitives::validate_json;
use crate::render::render_decoded;
use crate::request::{carries_push_commit, decode_request, encode_request};
use crate::row_codec::{decode_row, encode_row, validate_row, ColumnLayout, ColumnType, TableLayout};
use crate::segment::{decode_rows_segment, encode_rows_segment, render_rows_segment, validate_rows_segment};
use crate::sparse_row::{decode_sparse_row, encode_sparse_row, render_sparse_row};
use crate::ErrorCode;

/// Fuzz target `request_decode`: SSP2 message decoding (§1.2, §1.5–§1.7).
///
/// Any input must decode or fail with a `ProtocolError` — never panic, never
/// allocate beyond the input size. Whatever decodes must re-encode to the
/// exact input bytes (canonical encoding) and render (§11.1). Seeds cover
/// wire versions 1–3 (`seed-v3-*`: the `tests/vectors_v3` request and
/// response vectors, `ROUND_FAILURE`, `conflictColumns` and details among
/// them). The frame-header scan `carries_push_commit` (which picks a gateway
/// round's durability) must say `true` whenever the decoder finds a
/// `PUSH_COMMIT`, and agree with it on every request that decodes.
pub fn request_decode(data: &[u8]) {
    let pushes = carries_push_commit(data);
    if let Ok(req) = decode_request(data) {
        let again = encode_request(&req).expect("a decoded request re-encodes");
        assert_eq!(again, data, "decode → encode must reproduce the input");
        assert_eq!(pushes, !req.commits.is_empty(), "carries_push_commit disagrees with the decoder");
    }
    if let Ok(msg) = decode_message(data) {
        let again = encode_message(&msg).expect("a decoded message re-encodes");
        assert_eq!(again, data, "decode → encode must reproduce the input");
        render_decoded(&msg).expect("a decoded message renders");
    }
}

/// The fixed all-types layout `segment_decode` feeds the row codec: one
/// column per [`ColumnType`], every other one nullable.
fn all_types_layout() -> TableLayout {
    TableLayout::new(
        ColumnType::ALL
            .iter()
            .enumerate()
            .map(|(i, t)| ColumnLayout::new(format!("c{i}"), *t, i % 2 == 0))
            .collect(),
    )
}

/// Fuzz target `segment_decode`: SSG2 rows-segment decoding (§5.2) and the
/// §2.4 row codec.
///
/// Any input must decode or fail with `sync.invalid_request` — never panic,
/// never allocate beyond the input size (every count and length is checked
/// against the remaining bytes first). The fast validator must accept exactly
/// what the full decoder accepts; whatever decodes must re-encode to the
/// exact input bytes (canonical encoding) and render (§11.1 rule 8). The
/// same bytes are also fed to the row codec under a fixed all-types layout,
/// and (when UTF-8) to the allocation-free JSON checker, which must agree
/// with serde_json (`primitives::validate_json`).
pub fn segment_decode(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        assert_eq!(is_json_document(text), validate_json(text, "fuzz").is_ok(), "{text:?}");
    }
    let valid = validate_rows_segment(data);
    match decode_rows_segment(data) {
        Ok(seg) => {
            assert!(valid.is_ok(), "validate rejected what decode accepted");
            let again = encode_rows_segment(&seg).expect("a decoded segment re-encodes");
            assert_eq!(again, data, "decode → encode must reproduce the input");
            let _ = render_rows_segment(&seg);
        }
        Err(e) => {
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{e}");
            assert!(valid.is_err(), "validate accepted what decode rejected");
        }
    }

    let layout = all_types_layout();
    match decode_row(&layout, data) {
        Ok(row) => {
            assert!(validate_row(&layout, data).is_ok());
            assert_eq!(encode_row(&layout, &row).expect("a decoded row re-encodes"), data);
        }
        Err(e) => {
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{e}");
            assert!(validate_row(&layout, data).is_err());
        }
    }
}

/// The two layouts `sparse_row_decode` tries, each with its key column: the
/// 9-column table of the reference's own sparse-row tests (every type but
/// `blob_ref`, padding in both bitmaps), key `id`, and a 16-column all-types
/// table keyed on its last column.
fn sparse_layouts() -> [(TableLayout, usize); 2] {
    use ColumnType::*;
    let reference = [
        ("id", String, false),
        ("title", String, true),
        ("body", String, false),
        ("count", Integer, true),
        ("score", Float, false),
        ("done", Boolean, false),
        ("meta", Json, true),
        ("blob", Bytes, true),
        ("doc", Crdt, true),
    ];
    let reference =
        TableLayout::new(reference.iter().map(|(n, t, null)| ColumnLayout::new(*n, *t, *null)).collect());
    let all = TableLayout::new(
        (0..16)
            .map(|i| ColumnLayout::new(format!("c{i}"), ColumnType::ALL[i % 8], i % 3 != 0))
            .collect(),
    );
    [(reference, 0), (all, 15)]
}

/// Fuzz target `sparse_row_decode`: the wire-version-3 sparse row codec
/// (§2.4) and the `_sync_column_versions` storage encoding.
///
/// Any input must decode or fail with `sync.invalid_request` — never panic,
/// never allocate beyond the input size. Whatever decodes must re-encode to
/// the exact input bytes (canonical encoding) and render (§11.1). The bytes
/// are tried under two layouts (see `sparse_layouts`). The same bytes are
/// also read as a stored column-versions blob: a decoded map must re-encode
/// to exactly the input (rejections are `sync.internal_error`).
pub fn sparse_row_decode(data: &[u8]) {
    for (layout, pk) in sparse_layouts() {
        match decode_sparse_row(&layout, pk, data) {
            Ok(row) => {
                let again = encode_sparse_row(&layout, pk, &row).expect("a decoded sparse row re-encodes");
                assert_eq!(again, data, "decode → encode must reproduce the input");
                let _ = render_sparse_row(&layout, &row);
            }
            Err(e) => assert_eq!(e.code, ErrorCode::InvalidRequest, "{e}"),
        }
    }
    match decode_column_versions(Some(data)) {
        Ok(map) => assert_eq!(encode_column_versions(&map).unwrap_or_default(), data),
        Err(e) => assert_eq!(e.code, ErrorCode::InternalError, "{e}"),
    }
}
