//! Fuzz target: SSG2 rows-segment decoding (§5.2), the §2.4 row codec and the
//! JSON text checker. The invariants live in
//! `syncular_protocol::fuzz_checks::segment_decode` (shared with the
//! stable-toolchain smoke `tests/fuzz_smoke.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| syncular_protocol::fuzz_checks::segment_decode(data));
