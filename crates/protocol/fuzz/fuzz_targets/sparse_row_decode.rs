//! Fuzz target: the wire-version-3 sparse row codec (§2.4) and the
//! `_sync_column_versions` storage encoding. The invariants live in
//! `syncular_protocol::fuzz_checks::sparse_row_decode` (shared with the
//! stable-toolchain smoke `tests/fuzz_smoke.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| syncular_protocol::fuzz_checks::sparse_row_decode(data));
