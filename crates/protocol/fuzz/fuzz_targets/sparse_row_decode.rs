//! Fuzz target: the wire-version-3 sparse row codec (§2.4) and the
//! `_sync_column_versions` storage encoding.
//!
//! Any input must decode or fail with `sync.invalid_request` — never panic,
//! never allocate beyond the input size. Whatever decodes must re-encode to
//! the exact input bytes (canonical encoding) and render (§11.1). The bytes
//! are tried under two layouts: the 9-column table of the reference's own
//! sparse-row tests (every type but `blob_ref`, padding in both bitmaps) and
//! a 16-column all-types table keyed on its last column. The same bytes are
//! also read as a stored column-versions blob: a decoded map must re-encode
//! to exactly the input (rejections are `sync.internal_error`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use syncular_protocol::column_versions::{decode_column_versions, encode_column_versions};
use syncular_protocol::row_codec::{ColumnLayout, ColumnType, TableLayout};
use syncular_protocol::sparse_row::{decode_sparse_row, encode_sparse_row, render_sparse_row};
use syncular_protocol::ErrorCode;

fn layouts() -> [(TableLayout, usize); 2] {
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
    let reference = TableLayout::new(reference.iter().map(|(n, t, null)| ColumnLayout::new(*n, *t, *null)).collect());
    let all = TableLayout::new(
        (0..16)
            .map(|i| ColumnLayout::new(format!("c{i}"), ColumnType::ALL[i % 8], i % 3 != 0))
            .collect(),
    );
    [(reference, 0), (all, 15)]
}

fuzz_target!(|data: &[u8]| {
    for (layout, pk) in layouts() {
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
});
