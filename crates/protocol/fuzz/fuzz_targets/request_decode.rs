//! Fuzz target: SSP2 message decoding (§1.2, §1.5–§1.7).
//!
//! Any input must decode or fail with a `ProtocolError` — never panic, never
//! allocate beyond the input size. Whatever decodes must re-encode to the
//! exact input bytes (canonical encoding) and render (§11.1). Seeds cover
//! wire versions 1–3 (`seed-v3-*`: the `tests/vectors_v3` request and
//! response vectors, `ROUND_FAILURE`, `conflictColumns` and details among
//! them).
#![no_main]

use libfuzzer_sys::fuzz_target;
use syncular_protocol::message::{decode_message, encode_message};
use syncular_protocol::render::render_decoded;
use syncular_protocol::request::{decode_request, encode_request};

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = decode_request(data) {
        let again = encode_request(&req).expect("a decoded request re-encodes");
        assert_eq!(again, data, "decode → encode must reproduce the input");
    }
    if let Ok(msg) = decode_message(data) {
        let again = encode_message(&msg).expect("a decoded message re-encodes");
        assert_eq!(again, data, "decode → encode must reproduce the input");
        render_decoded(&msg).expect("a decoded message renders");
    }
});
