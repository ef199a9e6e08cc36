//! Blob statements (SPEC §5.9): the blob store in the database
//! ([`bytes`]: `sync_blobs` + `sync_blob_chunks`, per partition) and the
//! reference index ([`refs`]: `sync_blob_refs`, the seed table).
//!
//! Every statement names its partition (the single-shard rule of
//! [`crate::store`]), except the orphan sweep's candidate listing when it is
//! asked to sweep every partition (a maintenance read, not a sync round).

pub mod bytes;
pub mod refs;

/// The `blobId` of a BlobRef text expression (NULL for NULL), read as JSON
/// — the same value the row codec reads, escapes included (a regular
/// expression over the text would miss `"\u0073ha256:…"`, a valid spelling
/// of the same id, and lose its reference). Used where the ids are read
/// set-based from `blob_ref` projection columns (captured writes, adoption),
/// whose values the row codec already validated; the push reads them from
/// the decoded row instead.
pub fn blob_id_expr(expr: &str) -> String {
    format!("(({expr})::pg_catalog.jsonb OPERATOR(pg_catalog.->>) 'blobId')")
}
