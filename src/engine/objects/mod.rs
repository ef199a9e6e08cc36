//! The object-store tier (issue 28; docs/src/operate/object-store.md): segment and blob bytes in
//! an S3-compatible bucket, handed to clients as presigned URLs.
//!
//! **Who does what.** Postgres stays the source of truth for what exists and who may read it;
//! a backend never does network I/O. Presigning is pure computation and happens here, inside the
//! pull (`SEGMENT_REF.url`, §5.4 delegated presign), the blob download (§5.9.5 always-issue) and
//! the upload grant (§5.9.3), with the per-day SigV4 signing key the mover hands over — the
//! secret access key never enters the database. The mover (`syncular-gateway --object-store-…`)
//! does every request to the bucket: it copies bytes Postgres holds, verifies presigned uploads
//! (length and SHA-256) before they count as blobs, deletes objects whose bytes are gone, HEADs
//! stored objects to find ones changed or deleted behind our back, and keeps a heartbeat; the
//! [`mover`] and [`report`] functions are its whole interface.
//!
//! **Fail-open to Postgres.** A URL is minted only when the bucket holds the object
//! (`sync_segment_objects` / `sync_blob_objects`) and the mover's heartbeat is live
//! (`healthy_until_ms`) with a signing key for today: otherwise the descriptor goes out as
//! before (native signed URL or the direct endpoint) and Postgres serves the bytes.

pub mod mover;
pub mod report;
pub mod urls;

/// How long after its expiry a presigned upload may still land (a PUT started just before the
/// URL expired) and is checked, ms.
pub const GRANT_GRACE_MS: i64 = 60_000;
