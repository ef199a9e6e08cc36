//! Fuzz target: SSG2 rows-segment decoding (§5.2) and the §2.4 row codec.
//!
//! Any input must decode or fail with `sync.invalid_request` — never panic,
//! never allocate beyond the input size (every count and length is checked
//! against the remaining bytes first). The fast validator must accept exactly
//! what the full decoder accepts; whatever decodes must re-encode to the
//! exact input bytes (canonical encoding) and render (§11.1 rule 8). The
//! same bytes are also fed to the row codec under a fixed all-types layout,
//! and (when UTF-8) to the allocation-free JSON checker, which must agree
//! with serde_json (`primitives::validate_json`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use syncular_protocol::row_codec::{
    decode_row, encode_row, validate_row, ColumnLayout, ColumnType, TableLayout,
};
use syncular_protocol::segment::{
    decode_rows_segment, encode_rows_segment, render_rows_segment, validate_rows_segment,
};
use syncular_protocol::json_text::is_json_document;
use syncular_protocol::primitives::validate_json;
use syncular_protocol::ErrorCode;

fuzz_target!(|data: &[u8]| {
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

    let layout = TableLayout::new(
        ColumnType::ALL
            .iter()
            .enumerate()
            .map(|(i, t)| ColumnLayout::new(format!("c{i}"), *t, i % 2 == 0))
            .collect(),
    );
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
});
