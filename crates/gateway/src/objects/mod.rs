//! The object-store mover (issue 28; docs/src/operate/object-store.md): the one process that
//! talks to the S3-compatible bucket. The extension decides everything — which bytes to copy,
//! which uploads to verify, which objects to delete or re-check — and mints the presigned URLs
//! itself; the mover moves bytes and reports (`syncular.object_store_*`).
//!
//! - [`args`]: the `--object-store-*` flags (credentials from the environment only);
//! - [`s3`]: the bucket requests (signed with `rusty-s3`, sent with `reqwest`);
//! - [`mover`]: the loop — configuration, per-day signing keys, heartbeat, work items.
//!
//! It runs inside `syncular-gateway` when `--object-store-endpoint` is given, or on its own as
//! `syncular-object-mover` (beside a gateway written in another language).

pub mod args;
pub mod mover;
pub mod s3;

/// Lowercase hex of `bytes` (SHA-256 digests, signing keys).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
