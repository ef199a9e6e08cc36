//! Fuzz target: SSP2 message decoding (§1.2, §1.5–§1.7). The invariants live
//! in `syncular_protocol::fuzz_checks::request_decode` (shared with the
//! stable-toolchain smoke `tests/fuzz_smoke.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| syncular_protocol::fuzz_checks::request_decode(data));
