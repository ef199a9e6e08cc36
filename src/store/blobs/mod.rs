//! Blob statements (SPEC §5.9): the blob store in the database
//! ([`bytes`]: `sync_blobs` + `sync_blob_chunks`, per partition) and the
//! reference index ([`refs`]: `sync_blob_refs`, the seed table).
//!
//! Every statement names its partition (the single-shard rule of
//! [`crate::store`]), except the orphan sweep's candidate listing when it is
//! asked to sweep every partition (a maintenance read, not a sync round).

pub mod bytes;
pub mod refs;

/// The POSIX regular expression whose first group is the `blobId` of a
/// canonical BlobRef text (§5.9.1: `blobId` is required and always the
/// first key, so it is anchored at the start). Used where the ids are read
/// set-based from `blob_ref` projection columns (captured writes, adoption);
/// the push reads them from the decoded row instead.
pub const BLOB_ID_REGEX: &str = r#"^\s*\{\s*"blobId"\s*:\s*"(sha256:[0-9a-f]{64})""#;

/// `substring(<expr>, '<BLOB_ID_REGEX>')` (the POSIX-regex form): the blob id of a BlobRef text
/// expression (NULL for NULL).
pub fn blob_id_expr(expr: &str) -> String {
    format!("pg_catalog.substring({expr}, {})", pgrx::spi::quote_literal(BLOB_ID_REGEX))
}
