//! The two error types: [`PresignError`] (presigned URLs and request times) and
//! [`KeyError`] (object key layout and checksums).

use std::fmt;

/// Why [`presign`](crate::presign) or [`amz_date`](crate::amz_date) refused its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PresignError {
    /// The method is not one of `GET`, `PUT`, `HEAD`, `DELETE` (exact, uppercase).
    UnsupportedMethod(String),
    /// The endpoint is not `http[s]://host[:port]` with an optional single trailing `/`.
    InvalidEndpoint(&'static str),
    /// The bucket name is empty, longer than 255 bytes, `.` or `..`, or has a
    /// character outside `[A-Za-z0-9._-]`.
    InvalidBucket(&'static str),
    /// The object key is empty, longer than 1024 bytes, or has a `.` or `..` path segment.
    InvalidObjectKey(&'static str),
    /// The region is empty, longer than 64 bytes, or has a character outside `[A-Za-z0-9_-]`.
    InvalidRegion,
    /// The access key id is empty, longer than 256 bytes, or has a character that
    /// is not visible ASCII or is `/`.
    InvalidAccessKeyId,
    /// An extra signed header is malformed, duplicated or is `host`.
    InvalidHeader {
        /// The header name as given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `X-Amz-Expires` must be within 1..=604800 seconds (7 days).
    ExpiresOutOfRange(u64),
    /// The request time (unix milliseconds) is before 1970-01-01 or after 9999-12-31.
    TimeOutOfRange(i64),
    /// The signing key was derived for another UTC day than the request time's.
    SigningDayMismatch {
        /// The day the signing key was derived for, as given.
        key_day: String,
        /// The UTC day (`YYYYMMDD`) of the request time.
        request_day: String,
    },
}

impl fmt::Display for PresignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnsupportedMethod(m) => write!(
                f,
                "unsupported method {m:?}: expected GET, PUT, HEAD or DELETE"
            ),
            Self::InvalidEndpoint(why) => write!(
                f,
                "invalid endpoint: {why} (expected http[s]://host[:port], no path, query, fragment or credentials)"
            ),
            Self::InvalidBucket(why) => write!(f, "invalid bucket name: {why}"),
            Self::InvalidObjectKey(why) => write!(f, "invalid object key: {why}"),
            Self::InvalidRegion => f.write_str(
                "invalid region: expected 1 to 64 characters of [A-Za-z0-9_-]",
            ),
            Self::InvalidAccessKeyId => f.write_str(
                "invalid access key id: expected 1 to 256 visible ASCII characters other than '/'",
            ),
            Self::InvalidHeader { name, reason } => {
                write!(f, "invalid signed header {name:?}: {reason}")
            }
            Self::ExpiresOutOfRange(s) => write!(
                f,
                "expires_seconds {s} is out of range: S3 accepts 1 to 604800 (7 days)"
            ),
            Self::TimeOutOfRange(ms) => write!(
                f,
                "request time {ms} ms is out of range: expected unix milliseconds from 1970-01-01 to 9999-12-31"
            ),
            Self::SigningDayMismatch {
                key_day,
                request_day,
            } => write!(
                f,
                "the signing key is for day {key_day:?} but the request time falls on {request_day} (UTC): derive the key for that day"
            ),
        }
    }
}

impl std::error::Error for PresignError {}

/// Why a key layout function or [`checksum_sha256_base64`](crate::checksum_sha256_base64)
/// refused its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// The prefix breaks one of the rules of [`validate_prefix`](crate::validate_prefix).
    InvalidPrefix(&'static str),
    /// A segment or blob id is not `"sha256:"` followed by 64 lowercase hex digits.
    InvalidContentId,
    /// A partition token is not 32 lowercase hex digits.
    InvalidPartitionToken,
    /// A SHA-256 digest is not 64 lowercase hex digits.
    InvalidSha256Hex,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidPrefix(why) => write!(f, "invalid object key prefix: {why}"),
            Self::InvalidContentId => {
                f.write_str("invalid content id: expected \"sha256:\" + 64 lowercase hex digits")
            }
            Self::InvalidPartitionToken => {
                f.write_str("invalid partition token: expected 32 lowercase hex digits")
            }
            Self::InvalidSha256Hex => {
                f.write_str("invalid SHA-256 digest: expected 64 lowercase hex digits")
            }
        }
    }
}

impl std::error::Error for KeyError {}
