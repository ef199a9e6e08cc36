//! `syncular-object-store`: the pure computation behind syncular's S3-compatible
//! object store tier. No I/O, no clock, no pgrx: every function maps its inputs
//! to a value or an error and never panics.
//!
//! - [`derive_signing_key`] and [`presign`]: AWS Signature Version 4
//!   query-string presigned URLs (path style, `UNSIGNED-PAYLOAD`) computed from
//!   the per-day derived signing key, so the secret access key never has to be
//!   held where URLs are made.
//! - [`amz_date`]: unix milliseconds to the SigV4 day and timestamp.
//! - [`segment_object_key`], [`blob_object_key`], [`partition_token`],
//!   [`validate_prefix`]: the deterministic, content-addressed key layout.
//! - [`checksum_sha256_base64`]: the `x-amz-checksum-sha256` header value.
//!
//! ```
//! use syncular_object_store::{amz_date, derive_signing_key, presign, segment_object_key};
//! use syncular_object_store::{Method, PresignRequest};
//!
//! // Where the secret lives: derive the key of the day once.
//! let now_ms = 1_700_000_000_000; // 2023-11-14T22:13:20Z
//! let (day, _) = amz_date(now_ms)?;
//! let signing_key = derive_signing_key("minioadmin", &day, "us-east-1");
//!
//! // Where URLs are made: only the derived key.
//! let id = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
//! let key = segment_object_key("prod/", id)?;
//! let signed = presign(&PresignRequest {
//!     method: Method::Put,
//!     endpoint: "http://127.0.0.1:9000",
//!     bucket: "syncular",
//!     key: &key,
//!     region: "us-east-1",
//!     access_key_id: "minioadmin",
//!     signing_key,
//!     signing_day: &day,
//!     unix_ms: now_ms,
//!     expires_seconds: 300,
//!     extra_signed_headers: &[("content-length", "0")],
//! })?;
//! assert!(signed.url.starts_with(
//!     "http://127.0.0.1:9000/syncular/prod/seg/sha256/e3b0c442"
//! ));
//! assert!(signed.url.contains("&X-Amz-SignedHeaders=content-length%3Bhost&"));
//! assert_eq!(signed.expires_at_ms, now_ms + 300_000);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod checksum;
mod encode;
mod endpoint;
mod error;
mod keys;
mod presign;
mod sigv4;
mod time;

pub use checksum::checksum_sha256_base64;
pub use error::{KeyError, PresignError};
pub use keys::{
    blob_object_key, partition_token, segment_object_key, staging_object_key, validate_prefix,
    MAX_PREFIX_LEN,
};
pub use presign::{
    presign, validate_bucket, validate_endpoint, validate_region, Method, PresignRequest, PresignedUrl,
    MAX_EXPIRES_SECONDS,
};
pub use sigv4::derive_signing_key;
pub use time::{amz_date, MAX_UNIX_MS};
