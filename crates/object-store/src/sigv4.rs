//! AWS Signature Version 4 for S3: the per-day derived signing key and the
//! query-string signature of a request (the SigV4 core [`presign`](crate::presign) builds on).

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::encode::{hex_lower, uri_encode};

const ALGORITHM: &str = "AWS4-HMAC-SHA256";
const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

/// HMAC-SHA256 of `message` under `key`.
pub(crate) fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    #[allow(clippy::expect_used)] // HMAC hashes long keys and pads short ones: it never fails.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// The SigV4 signing key for `service` (internal: S3 always signs with `"s3"`).
pub(crate) fn derive_signing_key_for_service(
    secret_access_key: &str,
    day: &str,
    region: &str,
    service: &str,
) -> [u8; 32] {
    let k_date = hmac_sha256(
        format!("AWS4{secret_access_key}").as_bytes(),
        day.as_bytes(),
    );
    let k_region = hmac_sha256(&k_date, region.as_bytes());
    let k_service = hmac_sha256(&k_region, service.as_bytes());
    hmac_sha256(&k_service, b"aws4_request")
}

/// The SigV4 signing key for S3 in `region` on `day`.
///
/// `day` is the UTC date `YYYYMMDD` (the first element of [`amz_date`](crate::amz_date));
/// the key is `HMAC(HMAC(HMAC(HMAC("AWS4" + secret, day), region), "s3"), "aws4_request")`,
/// 32 bytes. It signs any S3 request of that day and region, and only those,
/// so a process that holds it (not the secret) can presign URLs for one day.
/// Never fails: inputs are not validated here ([`presign`](crate::presign) checks the day and region).
pub fn derive_signing_key(secret_access_key: &str, day: &str, region: &str) -> [u8; 32] {
    derive_signing_key_for_service(secret_access_key, day, region, "s3")
}

/// The credential scope `{day}/{region}/{service}/aws4_request` and its key id.
pub(crate) struct Scope<'a> {
    pub(crate) access_key_id: &'a str,
    pub(crate) day: &'a str,
    pub(crate) region: &'a str,
    pub(crate) service: &'a str,
}

/// The SigV4 presigned URL `{origin}{path}?{query}&X-Amz-Signature=…` for
/// already validated parts: `method` is uppercase, `path` is encoded, `headers`
/// are canonical (lowercase names, trimmed values) and sorted, `host` included.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sign_url(
    signing_key: &[u8; 32],
    method: &str,
    origin: &str,
    path: &str,
    headers: &[(String, String)],
    scope: &Scope<'_>,
    amz_date: &str,
    expires_seconds: u64,
) -> String {
    let scope_text = format!(
        "{}/{}/{}/aws4_request",
        scope.day, scope.region, scope.service
    );
    let credential = format!("{}/{scope_text}", scope.access_key_id);
    let signed_headers = headers
        .iter()
        .map(|(name, _)| name.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let query = format!(
        "X-Amz-Algorithm={ALGORITHM}&X-Amz-Credential={}&X-Amz-Date={}&X-Amz-Expires={expires_seconds}&X-Amz-SignedHeaders={}",
        uri_encode(&credential),
        uri_encode(amz_date),
        uri_encode(&signed_headers),
    );

    let mut canonical_request = format!("{method}\n{path}\n{query}\n");
    for (name, value) in headers {
        canonical_request.push_str(name);
        canonical_request.push(':');
        canonical_request.push_str(value);
        canonical_request.push('\n');
    }
    canonical_request.push('\n');
    canonical_request.push_str(&signed_headers);
    canonical_request.push('\n');
    canonical_request.push_str(UNSIGNED_PAYLOAD);

    let string_to_sign = format!(
        "{ALGORITHM}\n{amz_date}\n{scope_text}\n{}",
        hex_lower(&Sha256::digest(canonical_request.as_bytes()))
    );
    let signature = hex_lower(&hmac_sha256(signing_key, string_to_sign.as_bytes()));
    format!("{origin}{path}?{query}&X-Amz-Signature={signature}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const AWS_EXAMPLE_SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

    #[test]
    fn derived_key_matches_the_aws_iam_example() {
        // AWS General Reference, "Examples of how to derive a signing key for
        // Signature Version 4" (service iam).
        let key = derive_signing_key_for_service(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "20120215",
            "us-east-1",
            "iam",
        );
        assert_eq!(
            hex_lower(&key),
            "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"
        );
    }

    #[test]
    fn derive_signing_key_is_the_s3_service_key() {
        assert_eq!(
            derive_signing_key(AWS_EXAMPLE_SECRET, "20130524", "us-east-1"),
            derive_signing_key_for_service(AWS_EXAMPLE_SECRET, "20130524", "us-east-1", "s3")
        );
    }

    #[test]
    fn signature_matches_the_aws_presigned_url_example() {
        // AWS S3 API Reference, "Authenticating Requests: Using Query
        // Parameters (AWS Signature Version 4)": GET /test.txt of the
        // virtual-hosted bucket examplebucket, 86400 s from 20130524T000000Z.
        let key = derive_signing_key(AWS_EXAMPLE_SECRET, "20130524", "us-east-1");
        let headers = [(
            "host".to_owned(),
            "examplebucket.s3.amazonaws.com".to_owned(),
        )];
        let scope = Scope {
            access_key_id: "AKIAIOSFODNN7EXAMPLE",
            day: "20130524",
            region: "us-east-1",
            service: "s3",
        };
        let url = sign_url(
            &key,
            "GET",
            "https://examplebucket.s3.amazonaws.com",
            "/test.txt",
            &headers,
            &scope,
            "20130524T000000Z",
            86_400,
        );
        assert_eq!(
            url,
            "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
             &X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\
             &X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        );
    }
}
