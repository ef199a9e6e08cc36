//! `syncular-protocol`: the SSP2 wire protocol (SPEC.md, release 0.15.48,
//! wire versions 1 and 2; wire version 3 as the `syncular-ssp2` 0.49.2
//! reference codec defines it) with no Postgres dependency.
//!
//! Layers, bottom up: [`primitives`] (canonical fixed-width encodings),
//! [`errors`] (the §10 catalog), then the message codec, row codec, SSG2
//! segments, canonical JSON and scope digest built on them. Every decoder
//! returns `Result<_, ProtocolError>` and never panics on any input.

pub mod blob;
pub mod errors;
pub mod error_json;
pub mod notification;
pub mod primitives;

pub use errors::{Category, ErrorCode, ProtocolError, RecommendedAction, Result};
pub mod bitmap;
pub mod row_codec;
pub mod sparse_row;
pub mod column_versions;
pub mod segment;
pub mod schema_ir;
pub mod constants;
pub mod envelope;
pub mod frame_fields;
pub mod rejection_details;
pub mod render;
pub mod request;
pub mod response;
pub mod message;
pub mod resume_token;
pub mod realtime;
pub mod realtime_open;
pub mod realtime_session;
pub mod canonical_json;
pub mod scope_digest;
pub mod scopes;
pub mod json_text;
pub mod json_compact;

/// The fuzz targets' invariants (`fuzz/fuzz_targets/`), shared with the
/// stable-toolchain smoke `tests/fuzz_smoke.rs`; not part of the API.
#[doc(hidden)]
pub mod fuzz_checks;
