//! Presigned URLs: the request a URL is made for, its validation, and
//! [`presign`] itself.

use std::fmt;
use std::str::FromStr;

use crate::encode::uri_encode_into;
use crate::endpoint::Endpoint;
use crate::error::PresignError;
use crate::sigv4::{sign_url, Scope};
use crate::time::{amz_date, unix_second};

/// The largest `X-Amz-Expires` S3 accepts: 7 days, in seconds.
pub const MAX_EXPIRES_SECONDS: u64 = 604_800;

/// The HTTP method a presigned URL is valid for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`: download the object.
    Get,
    /// `PUT`: upload the object (sign `content-length` through the extra headers).
    Put,
    /// `HEAD`: the object's metadata.
    Head,
    /// `DELETE`: remove the object.
    Delete,
}

impl Method {
    /// The method's name, uppercase: `"GET"`, `"PUT"`, `"HEAD"` or `"DELETE"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Put => "PUT",
            Self::Head => "HEAD",
            Self::Delete => "DELETE",
        }
    }
}

impl FromStr for Method {
    type Err = PresignError;

    /// Parses `"GET"`, `"PUT"`, `"HEAD"` or `"DELETE"` (exact case);
    /// anything else is [`PresignError::UnsupportedMethod`].
    fn from_str(s: &str) -> Result<Self, PresignError> {
        match s {
            "GET" => Ok(Self::Get),
            "PUT" => Ok(Self::Put),
            "HEAD" => Ok(Self::Head),
            "DELETE" => Ok(Self::Delete),
            _ => Err(PresignError::UnsupportedMethod(s.to_owned())),
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything a path-style presigned URL `{endpoint}/{bucket}/{key}?X-Amz-…` is made of.
///
/// `Debug` leaves the signing key out.
#[derive(Clone, Copy)]
pub struct PresignRequest<'a> {
    /// The method the URL is valid for.
    pub method: Method,
    /// `http[s]://host[:port]`, optionally with a trailing `/`; no path, query,
    /// fragment or credentials. Scheme and host are lowercased and a default
    /// port dropped, as URL parsers do.
    pub endpoint: &'a str,
    /// The bucket: 1..=255 bytes of `[A-Za-z0-9._-]`, not `.` or `..`.
    pub bucket: &'a str,
    /// The object key: 1..=1024 bytes of UTF-8 with no `.` or `..` segment
    /// (URL clients would resolve them); percent-encoded per segment, `/` kept.
    pub key: &'a str,
    /// The region the signing key was derived for: 1..=64 bytes of `[A-Za-z0-9_-]`.
    pub region: &'a str,
    /// The access key id: 1..=256 bytes of visible ASCII other than `/`.
    pub access_key_id: &'a str,
    /// The key [`derive_signing_key`](crate::derive_signing_key) gives for `signing_day` and `region`.
    pub signing_key: [u8; 32],
    /// The UTC day `YYYYMMDD` the signing key was derived for: must be the day
    /// of `unix_ms`.
    pub signing_day: &'a str,
    /// The request time in unix milliseconds; `X-Amz-Date` is the second
    /// containing it. In `0..=`[`MAX_UNIX_MS`](crate::MAX_UNIX_MS).
    pub unix_ms: i64,
    /// `X-Amz-Expires`, seconds: 1..=604800.
    pub expires_seconds: u64,
    /// Headers the request must send with exactly these values, signed with
    /// `host` (always signed, so not allowed here): e.g. `("content-length", "1234")`
    /// for a `PUT`. Names are lowercase HTTP tokens, each at most once, in any
    /// order; values are visible ASCII and spaces, trimmed and with runs of
    /// spaces collapsed when signed.
    pub extra_signed_headers: &'a [(&'a str, &'a str)],
}

impl fmt::Debug for PresignRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PresignRequest")
            .field("method", &self.method)
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("key", &self.key)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("signing_key", &"<redacted>")
            .field("signing_day", &self.signing_day)
            .field("unix_ms", &self.unix_ms)
            .field("expires_seconds", &self.expires_seconds)
            .field("extra_signed_headers", &self.extra_signed_headers)
            .finish()
    }
}

/// A presigned URL and the instant it stops being accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresignedUrl {
    /// `{origin}/{bucket}/{key}?X-Amz-Algorithm=…&X-Amz-Signature=…`.
    pub url: String,
    /// `(X-Amz-Date second + expires_seconds) * 1000`: unix milliseconds at
    /// which S3 starts refusing the URL.
    pub expires_at_ms: i64,
}

/// Presigns `req` with SigV4 query parameters (payload `UNSIGNED-PAYLOAD`).
///
/// The URL is path-style, `{origin}/{bucket}/{key}`, and its query is
/// `X-Amz-Algorithm`, `X-Amz-Credential`, `X-Amz-Date`, `X-Amz-Expires`,
/// `X-Amz-SignedHeaders` in that (sorted) order, then `X-Amz-Signature`,
/// every value URI-encoded (RFC 3986 unreserved characters kept). Only the
/// derived key is used, never the secret.
///
/// # Errors
///
/// A [`PresignError`] naming the first invalid input: the expiry, the time
/// (range, or a day other than `signing_day`), the endpoint, bucket, key,
/// region, access key id or an extra header, as documented on the fields of
/// [`PresignRequest`].
pub fn presign(req: &PresignRequest<'_>) -> Result<PresignedUrl, PresignError> {
    let expires = match i64::try_from(req.expires_seconds) {
        Ok(s) if (1..=MAX_EXPIRES_SECONDS).contains(&req.expires_seconds) => s,
        _ => return Err(PresignError::ExpiresOutOfRange(req.expires_seconds)),
    };
    let (day, date) = amz_date(req.unix_ms)?;
    if day != req.signing_day {
        return Err(PresignError::SigningDayMismatch {
            key_day: req.signing_day.to_owned(),
            request_day: day,
        });
    }
    let endpoint = Endpoint::parse(req.endpoint)?;
    validate_bucket(req.bucket)?;
    check_key(req.key)?;
    validate_region(req.region)?;
    check_access_key_id(req.access_key_id)?;
    let mut headers = canonical_headers(req.extra_signed_headers)?;
    headers.push(("host".to_owned(), endpoint.host_header.clone()));
    headers.sort();

    let mut path = String::with_capacity(2 + req.bucket.len() + req.key.len() * 3);
    path.push('/');
    uri_encode_into(&mut path, req.bucket, false);
    path.push('/');
    uri_encode_into(&mut path, req.key, true);

    let scope = Scope {
        access_key_id: req.access_key_id,
        day: &day,
        region: req.region,
        service: "s3",
    };
    let url = sign_url(
        &req.signing_key,
        req.method.as_str(),
        &endpoint.origin,
        &path,
        &headers,
        &scope,
        &date,
        req.expires_seconds,
    );
    // In range: the second is at most 253 402 300 799 and `expires` at most 604 800.
    let expires_at_ms = (unix_second(req.unix_ms)? + expires) * 1000;
    Ok(PresignedUrl { url, expires_at_ms })
}

/// Checks a bucket name as [`presign`] does: 1..=255 bytes of `[A-Za-z0-9._-]`, not `.`/`..`.
///
/// # Errors
/// [`PresignError::InvalidBucket`] naming the fault.
pub fn validate_bucket(bucket: &str) -> Result<(), PresignError> {
    let why = if bucket.is_empty() {
        "it is empty"
    } else if bucket.len() > 255 {
        "it is longer than 255 bytes"
    } else if bucket == "." || bucket == ".." {
        "it is '.' or '..'"
    } else if !bucket
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        "it has a character outside [A-Za-z0-9._-]"
    } else {
        return Ok(());
    };
    Err(PresignError::InvalidBucket(why))
}

fn check_key(key: &str) -> Result<(), PresignError> {
    let why = if key.is_empty() {
        "it is empty"
    } else if key.len() > 1024 {
        "it is longer than 1024 bytes"
    } else if key.split('/').any(|s| s == "." || s == "..") {
        "it has a '.' or '..' segment, which URL clients resolve away"
    } else {
        return Ok(());
    };
    Err(PresignError::InvalidObjectKey(why))
}

/// Checks a region as [`presign`] does: 1..=64 bytes of `[A-Za-z0-9_-]`.
///
/// # Errors
/// [`PresignError::InvalidRegion`].
pub fn validate_region(region: &str) -> Result<(), PresignError> {
    let ok = (1..=64).contains(&region.len())
        && region
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(PresignError::InvalidRegion)
    }
}

fn check_access_key_id(id: &str) -> Result<(), PresignError> {
    let ok = (1..=256).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic() && b != b'/');
    if ok {
        Ok(())
    } else {
        Err(PresignError::InvalidAccessKeyId)
    }
}

/// The extra headers as canonical `(name, value)` pairs (unsorted, `host` not added).
fn canonical_headers(extra: &[(&str, &str)]) -> Result<Vec<(String, String)>, PresignError> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(extra.len() + 1);
    for &(name, value) in extra {
        let fail = |reason| PresignError::InvalidHeader {
            name: name.to_owned(),
            reason,
        };
        let is_token_char =
            |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || name.len() > 256 || !name.bytes().all(is_token_char) {
            return Err(fail(
                "the name must be 1 to 256 lowercase HTTP token characters",
            ));
        }
        if name == "host" {
            return Err(fail("host is always signed, from the endpoint"));
        }
        if out.iter().any(|(n, _)| n == name) {
            return Err(fail("the header is given twice"));
        }
        if !value.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
            return Err(fail(
                "the value must be visible ASCII characters and spaces",
            ));
        }
        let value = value
            .split(' ')
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        out.push((name.to_owned(), value));
    }
    Ok(out)
}

/// Checks an endpoint as [`presign`] does: `http[s]://host[:port]`, optionally one trailing `/`;
/// no path, query, fragment or credentials.
///
/// # Errors
/// [`PresignError::InvalidEndpoint`] naming the fault.
pub fn validate_endpoint(endpoint: &str) -> Result<(), PresignError> {
    crate::endpoint::Endpoint::parse(endpoint).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_round_trip() {
        for m in [Method::Get, Method::Put, Method::Head, Method::Delete] {
            assert_eq!(m.as_str().parse::<Method>(), Ok(m));
            assert_eq!(m.to_string(), m.as_str());
        }
        for bad in ["get", "POST", "", "GET "] {
            assert_eq!(
                bad.parse::<Method>(),
                Err(PresignError::UnsupportedMethod(bad.to_owned()))
            );
        }
    }

    #[test]
    fn header_values_are_trimmed_and_collapsed() {
        let got = canonical_headers(&[
            ("content-type", "  text/plain;   charset=utf-8 "),
            ("x-e", "   "),
        ])
        .unwrap();
        assert_eq!(
            got,
            vec![
                (
                    "content-type".to_owned(),
                    "text/plain; charset=utf-8".to_owned()
                ),
                ("x-e".to_owned(), String::new()),
            ]
        );
    }

    #[test]
    fn debug_redacts_the_signing_key() {
        let req = PresignRequest {
            method: Method::Get,
            endpoint: "http://127.0.0.1:9000",
            bucket: "b",
            key: "k",
            region: "us-east-1",
            access_key_id: "AK",
            signing_key: [0xab; 32],
            signing_day: "19700101",
            unix_ms: 0,
            expires_seconds: 60,
            extra_signed_headers: &[],
        };
        let text = format!("{req:?}");
        assert!(text.contains("<redacted>"), "{text}");
        assert!(!text.contains("171"), "{text}");
    }
}
