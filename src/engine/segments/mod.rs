//! Stored bootstrap segments (SPEC §5.1, §5.4, §5.5): content-addressed
//! bytes stored once per partition ([`bytes`]), the publications that make
//! them servable in one context each ([`publication`]), and the
//! re-authorized download ([`download`]). The pull decides delivery
//! (inline or `SEGMENT_REF`) in [`crate::engine::pull::bootstrap`]. Also: the
//! sqlite image lane ([`image`]), signed URLs ([`signed_url`]) and expiry /
//! garbage collection ([`sweep`]).
//!
//! **Per partition, per context.** Bytes are keyed `(partition,
//! segment_id)`; a publication binds them to `(partition, logEpoch, table,
//! schemaVersion, mediaType, scopeDigest, asOfCommitSeq, page window)` with
//! its own expiry (GUC `syncular.segment_ttl_s`, default 24 h). Reuse and
//! download select the one publication of the caller's context, never a
//! union of digests across contexts.

pub mod bytes;
pub mod download;
pub mod image;
pub mod publication;
pub mod signed_url;
pub mod sweep;

pub use bytes::{read_bytes, store_bytes};
pub use publication::{find_live, publish, publish_effective, LivePublication, Publication, PublicationKey};

/// Largest chunk row of `sync_segment_chunks` (1 MiB): bytes are stored in
/// pieces of at most this size and downloads stream one piece per call.
pub const CHUNK_BYTES: usize = 1024 * 1024;

/// `mediaType` of a rows segment (§5.2, §5.4).
pub const MEDIA_TYPE_ROWS: u8 = syncular_protocol::constants::MEDIA_TYPE_ROWS;
/// `mediaType` of a sqlite segment (§5.3, §5.4).
pub const MEDIA_TYPE_SQLITE: u8 = syncular_protocol::constants::MEDIA_TYPE_SQLITE;

/// The §5.1 content address of `bytes`: `"sha256:"` + lowercase hex.
pub fn segment_id_of(bytes: &[u8]) -> String {
    format!("sha256:{}", syncular_protocol::scope_digest::sha256_hex(bytes))
}

/// True for `"sha256:"` + 64 lowercase hex characters.
pub fn is_segment_id(id: &str) -> bool {
    syncular_protocol::blob::is_blob_id(id)
}
