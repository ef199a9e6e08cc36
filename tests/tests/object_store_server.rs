//! What the object-store tier may rely on from an S3-compatible server, probed against a real
//! one: s3s-fs 0.14.1 (tests/src/s3_fixture.rs; no Postgres needed). Every request goes through a
//! SigV4 presigned URL (rusty-s3), as the gateway's clients' would. Where s3s-fs departs from AWS
//! S3, the test name and comment say what s3s-fs does, so that nothing is assumed beyond it.

use std::time::Duration;

use base64::Engine;
use md5::{Digest as _, Md5};
use rusty_s3::actions::{DeleteObject, GetObject, HeadObject, PutObject};
use rusty_s3::S3Action;
use sha2::{Digest as _, Sha256};
use syncular_integration_tests::s3_fixture::{agent, S3Server};

const HOUR: Duration = Duration::from_secs(3600);

/// An HTTP answer (status, headers, body).
struct Resp {
    status: u16,
    headers: ureq::http::HeaderMap,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// The S3 error code (`<Code>…</Code>` of the XML error body), "" when none.
    fn code(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        text.split_once("<Code>").and_then(|(_, rest)| rest.split_once("</Code>")).map(|(c, _)| c.to_string()).unwrap_or_default()
    }
}

impl std::fmt::Debug for Resp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?} {}", self.status, self.headers, String::from_utf8_lossy(&self.body))
    }
}

/// Sends `method` to `url` with `headers` (and `body` for PUT); an error only when no HTTP answer.
fn try_send(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<Resp, ureq::Error> {
    let agent = agent();
    macro_rules! with_headers {
        ($req:expr) => {{
            let mut req = $req;
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            req
        }};
    }
    let mut resp = match method {
        "GET" => with_headers!(agent.get(url)).call()?,
        "HEAD" => with_headers!(agent.head(url)).call()?,
        "DELETE" => with_headers!(agent.delete(url)).call()?,
        "PUT" => with_headers!(agent.put(url)).send(body)?,
        _ => unreachable!("{method}"),
    };
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = if method == "HEAD" { Vec::new() } else { resp.body_mut().read_to_vec()? };
    Ok(Resp { status, headers, body })
}

fn send(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    try_send(method, url, headers, body).unwrap_or_else(|e| panic!("{method} {url}: {e}"))
}

/// `action` presigned for `expires`, signing `headers` (sorted, lowercase names: they must then
/// be sent as given) and `query`, dated `at` (now when None).
fn presign<'a>(
    mut action: impl S3Action<'a>,
    headers: &[(&'a str, &'a str)],
    query: &[(&'a str, &'a str)],
    at: Option<jiff::Timestamp>,
    expires: Duration,
) -> String {
    for (k, v) in headers {
        action.headers_mut().insert(*k, *v);
    }
    for (k, v) in query {
        action.query_mut().insert(*k, *v);
    }
    match at {
        Some(t) => action.sign_with_time(expires, &t),
        None => action.sign(expires),
    }
    .to_string()
}

fn put_url(s3: &S3Server, key: &str) -> String {
    presign(PutObject::new(&s3.s3_bucket(), Some(&s3.credentials()), key), &[], &[], None, HOUR)
}

fn get_url(s3: &S3Server, key: &str) -> String {
    presign(GetObject::new(&s3.s3_bucket(), Some(&s3.credentials()), key), &[], &[], None, HOUR)
}

fn head_url(s3: &S3Server, key: &str) -> String {
    presign(HeadObject::new(&s3.s3_bucket(), Some(&s3.credentials()), key), &[], &[], None, HOUR)
}

fn delete_url(s3: &S3Server, key: &str) -> String {
    presign(DeleteObject::new(&s3.s3_bucket(), Some(&s3.credentials()), key), &[], &[], None, HOUR)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `"<md5 hex>"`: the ETag form AWS gives a single-part PUT.
fn md5_etag(body: &[u8]) -> String {
    format!("\"{}\"", hex(&Md5::digest(body)))
}

/// base64 of the SHA-256 of `body` (the `x-amz-checksum-sha256` form).
fn sha256_b64(body: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(Sha256::digest(body))
}

fn put(s3: &S3Server, key: &str, body: &[u8]) -> Resp {
    let r = send("PUT", &put_url(s3, key), &[], body);
    assert_eq!(r.status, 200, "PUT {key}: {r:?}");
    r
}

fn get(s3: &S3Server, key: &str) -> Resp {
    send("GET", &get_url(s3, key), &[], b"")
}

#[test]
fn presigned_put_then_get_round_trips_and_head_reports_length_and_md5_etag() {
    let s3 = S3Server::start();
    let body: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let put = put(&s3, "segments/p1/0001.bin", &body);
    // A single PUT's ETag is the quoted MD5 hex of the body (as on AWS without SSE-KMS).
    assert_eq!(put.header("etag"), Some(md5_etag(&body).as_str()), "{put:?}");

    let got = get(&s3, "segments/p1/0001.bin");
    assert_eq!(got.status, 200, "{got:?}");
    assert_eq!(got.body, body);
    assert_eq!(got.header("etag"), Some(md5_etag(&body).as_str()));

    let head = send("HEAD", &head_url(&s3, "segments/p1/0001.bin"), &[], b"");
    assert_eq!(head.status, 200, "{head:?}");
    assert_eq!(head.header("content-length"), Some(body.len().to_string().as_str()));
    assert_eq!(head.header("etag"), Some(md5_etag(&body).as_str()));

    // The key's bytes are the plain file <root>/<bucket>/<key>.
    assert_eq!(std::fs::read(s3.object_path("segments/p1/0001.bin")).unwrap(), body);
    assert!(s3.internal_info_path("segments/p1/0001.bin").is_file());
}

#[test]
fn tampered_file_is_served_with_the_etag_recorded_at_put() {
    // s3s-fs serves the file's current bytes but the ETag it recorded at PUT: neither HEAD nor
    // GET detects bytes changed behind its back; only hashing the body does.
    let s3 = S3Server::start();
    put(&s3, "k", b"original bytes");
    std::fs::write(s3.object_path("k"), b"tampered!").unwrap();
    let got = get(&s3, "k");
    assert_eq!(got.status, 200, "{got:?}");
    assert_eq!(got.body, b"tampered!");
    assert_eq!(got.header("etag"), Some(md5_etag(b"original bytes").as_str()));
    let head = send("HEAD", &head_url(&s3, "k"), &[], b"");
    assert_eq!(head.header("content-length"), Some("9"));
    assert_eq!(head.header("etag"), Some(md5_etag(b"original bytes").as_str()));

    // Deleting the file behind its back: the key is gone (404 NoSuchKey).
    std::fs::remove_file(s3.object_path("k")).unwrap();
    let got = get(&s3, "k");
    assert_eq!((got.status, got.code().as_str()), (404, "NoSuchKey"), "{got:?}");
}

#[test]
fn expired_presigned_url_is_refused_without_grace() {
    let s3 = S3Server::start();
    put(&s3, "k", b"bytes");
    let now = jiff::Timestamp::now();
    let at = |secs: i64| Some(now - jiff::SignedDuration::from_secs(secs));
    let b = s3.s3_bucket();
    let c = s3.credentials();
    let expires = Duration::from_secs(60);
    // Signed 120 s ago for 60 s: expired a minute ago.
    let r = send("GET", &presign(GetObject::new(&b, Some(&c), "k"), &[], &[], at(120), expires), &[], b"");
    assert_eq!((r.status, r.code().as_str()), (403, "AccessDenied"), "{r:?}");
    // Expired by 5 s only: refused too (the 15 min skew allowance covers future dates, not expiry).
    let r = send("GET", &presign(GetObject::new(&b, Some(&c), "k"), &[], &[], at(65), expires), &[], b"");
    assert_eq!((r.status, r.code().as_str()), (403, "AccessDenied"), "{r:?}");
    // A PUT too, and it writes nothing.
    let r = send("PUT", &presign(PutObject::new(&b, Some(&c), "k"), &[], &[], at(120), expires), &[], b"other");
    assert_eq!((r.status, r.code().as_str()), (403, "AccessDenied"), "{r:?}");
    assert_eq!(get(&s3, "k").body, b"bytes");
    // Still valid 55 s into its 60: served.
    let r = send("GET", &presign(GetObject::new(&b, Some(&c), "k"), &[], &[], at(55), expires), &[], b"");
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn future_dated_presign_is_accepted_within_15_minutes_of_skew_only() {
    let s3 = S3Server::start();
    put(&s3, "k", b"bytes");
    let now = jiff::Timestamp::now();
    let at = |secs: i64| Some(now + jiff::SignedDuration::from_secs(secs));
    let b = s3.s3_bucket();
    let c = s3.credentials();
    let r = send("GET", &presign(GetObject::new(&b, Some(&c), "k"), &[], &[], at(600), HOUR), &[], b"");
    assert_eq!(r.status, 200, "10 min ahead: {r:?}");
    let r = send("GET", &presign(GetObject::new(&b, Some(&c), "k"), &[], &[], at(1200), HOUR), &[], b"");
    assert_eq!((r.status, r.code().as_str()), (403, "RequestTimeTooSkewed"), "20 min ahead: {r:?}");
}

#[test]
fn tampered_signature_key_or_credentials_are_refused() {
    let s3 = S3Server::start();
    put(&s3, "a", b"object a");
    put(&s3, "b", b"object b");
    let url = get_url(&s3, "a");
    assert_eq!(send("GET", &url, &[], b"").status, 200);

    // One hex digit of the signature changed.
    let (head, sig) = url.rsplit_once("X-Amz-Signature=").unwrap();
    let flipped = format!("{}{}", if sig.starts_with('0') { '1' } else { '0' }, &sig[1..]);
    let r = send("GET", &format!("{head}X-Amz-Signature={flipped}"), &[], b"");
    assert_eq!((r.status, r.code().as_str()), (403, "SignatureDoesNotMatch"), "{r:?}");

    // The same signature on another key.
    let other = url.replacen(&format!("/{}/a?", s3.bucket()), &format!("/{}/b?", s3.bucket()), 1);
    assert_ne!(other, url);
    let r = send("GET", &other, &[], b"");
    assert_eq!((r.status, r.code().as_str()), (403, "SignatureDoesNotMatch"), "{r:?}");

    // A GET URL used for a PUT (the method is signed): refused, nothing written.
    let r = send("PUT", &url, &[], b"overwrite");
    assert_eq!((r.status, r.code().as_str()), (403, "SignatureDoesNotMatch"), "{r:?}");
    assert_eq!(get(&s3, "a").body, b"object a");

    // A longer expiry than signed.
    let r = send("GET", &url.replacen("X-Amz-Expires=3600", "X-Amz-Expires=7200", 1), &[], b"");
    assert_eq!((r.status, r.code().as_str()), (403, "SignatureDoesNotMatch"), "{r:?}");

    // Signed with a wrong secret, and with an unknown access key.
    let b = s3.s3_bucket();
    let wrong = rusty_s3::Credentials::new(s3.access_key_id(), "not-the-secret");
    let r = send("GET", &presign(GetObject::new(&b, Some(&wrong), "a"), &[], &[], None, HOUR), &[], b"");
    assert_eq!((r.status, r.code().as_str()), (403, "SignatureDoesNotMatch"), "{r:?}");
    let unknown = rusty_s3::Credentials::new("someone-else", s3.secret_access_key());
    let r = send("GET", &presign(GetObject::new(&b, Some(&unknown), "a"), &[], &[], None, HOUR), &[], b"");
    assert_eq!((r.status, r.code().as_str()), (403, "NotSignedUp"), "{r:?}");

    // No signature at all.
    let r = send("GET", &format!("{}/{}/a", s3.endpoint(), s3.bucket()), &[], b"");
    assert_eq!((r.status, r.code().as_str()), (403, "AccessDenied"), "{r:?}");
}

#[test]
fn presigned_put_signing_content_length_refuses_another_length() {
    let s3 = S3Server::start();
    let b = s3.s3_bucket();
    let c = s3.credentials();
    let url = presign(PutObject::new(&b, Some(&c), "sized"), &[("content-length", "5")], &[], None, HOUR);
    assert!(url.contains("X-Amz-SignedHeaders=content-length%3Bhost"), "{url}");
    // The client sets Content-Length from the body: 6 bytes do not match the signed 5.
    let r = send("PUT", &url, &[], b"123456");
    assert_eq!((r.status, r.code().as_str()), (403, "SignatureDoesNotMatch"), "{r:?}");
    let r = send("PUT", &url, &[], b"1234");
    assert_eq!((r.status, r.code().as_str()), (403, "SignatureDoesNotMatch"), "{r:?}");
    assert_eq!(get(&s3, "sized").status, 404);
    assert!(!s3.object_path("sized").exists());
    // The signed length: accepted.
    let r = send("PUT", &url, &[], b"12345");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(get(&s3, "sized").body, b"12345");
}

#[test]
fn presigned_delete_then_get_and_head_are_404() {
    let s3 = S3Server::start();
    put(&s3, "gone", b"soon deleted");
    let r = send("DELETE", &delete_url(&s3, "gone"), &[], b"");
    assert_eq!(r.status, 204, "{r:?}");
    assert!(!s3.object_path("gone").exists());
    let r = get(&s3, "gone");
    assert_eq!((r.status, r.code().as_str()), (404, "NoSuchKey"), "{r:?}");
    let r = send("HEAD", &head_url(&s3, "gone"), &[], b"");
    assert_eq!(r.status, 404, "{r:?}");
    // Deleting a missing key succeeds (204), as on AWS.
    let r = send("DELETE", &delete_url(&s3, "gone"), &[], b"");
    assert_eq!(r.status, 204, "{r:?}");
    let r = get(&s3, "never-written");
    assert_eq!((r.status, r.code().as_str()), (404, "NoSuchKey"), "{r:?}");
}

#[test]
fn put_honours_if_none_match_star_and_if_match_etag() {
    let s3 = S3Server::start();
    let url = put_url(&s3, "cas");
    // If-None-Match: * creates a missing key…
    let r = send("PUT", &url, &[("if-none-match", "*")], b"v1");
    assert_eq!(r.status, 200, "{r:?}");
    // …and refuses an existing one (412 PreconditionFailed), keeping its bytes.
    let r = send("PUT", &url, &[("if-none-match", "*")], b"v2");
    assert_eq!((r.status, r.code().as_str()), (412, "PreconditionFailed"), "{r:?}");
    assert_eq!(get(&s3, "cas").body, b"v1");

    // If-Match with another ETag: 412, bytes kept; with the current ETag: written.
    let r = send("PUT", &url, &[("if-match", &md5_etag(b"not v1"))], b"v2");
    assert_eq!((r.status, r.code().as_str()), (412, "PreconditionFailed"), "{r:?}");
    assert_eq!(get(&s3, "cas").body, b"v1");
    let r = send("PUT", &url, &[("if-match", &md5_etag(b"v1"))], b"v2");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(get(&s3, "cas").body, b"v2");
    // If-Match on a missing key: s3s-fs answers 412 PreconditionFailed (AWS: 404 NoSuchKey).
    let r = send("PUT", &put_url(&s3, "missing"), &[("if-match", &md5_etag(b"v1"))], b"v1");
    assert_eq!((r.status, r.code().as_str()), (412, "PreconditionFailed"), "{r:?}");
    assert!(!s3.object_path("missing").exists());
}

#[test]
fn presign_signing_if_none_match_cannot_be_used_without_it() {
    // The precondition is unsigned by default (any client may drop it); signed, it must be sent.
    let s3 = S3Server::start();
    let b = s3.s3_bucket();
    let c = s3.credentials();
    let url = presign(PutObject::new(&b, Some(&c), "once"), &[("if-none-match", "*")], &[], None, HOUR);
    let r = send("PUT", &url, &[], b"v1");
    assert_eq!((r.status, r.code().as_str()), (403, "SignatureDoesNotMatch"), "{r:?}");
    let r = send("PUT", &url, &[("if-none-match", "*")], b"v1");
    assert_eq!(r.status, 200, "{r:?}");
    let r = send("PUT", &url, &[("if-none-match", "*")], b"v2");
    assert_eq!(r.status, 412, "{r:?}");
    assert_eq!(get(&s3, "once").body, b"v1");
}

#[test]
fn checksum_sha256_header_is_validated_but_a_mismatched_body_is_stored_anyway() {
    let s3 = S3Server::start();
    let url = put_url(&s3, "sum");
    let good = sha256_b64(b"v1");
    let r = send("PUT", &url, &[("x-amz-checksum-sha256", &good)], b"v1");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-amz-checksum-sha256"), Some(good.as_str()));
    // HEAD reports the checksum given at PUT (without x-amz-checksum-mode: ENABLED, unlike AWS).
    let head = send("HEAD", &head_url(&s3, "sum"), &[], b"");
    assert_eq!(head.header("x-amz-checksum-sha256"), Some(good.as_str()), "{head:?}");

    // A body whose SHA-256 is not the header's: 400 BadDigest…
    let r = send("PUT", &url, &[("x-amz-checksum-sha256", &good)], b"v2, not v1");
    assert_eq!((r.status, r.code().as_str()), (400, "BadDigest"), "{r:?}");
    // …yet s3s-fs 0.14.1 moved the bytes into place before comparing: the object now holds the
    // refused body, served with v1's ETag and checksum (its sidecar was not rewritten). A client
    // must not take BadDigest to mean "nothing was written" on this server.
    let got = get(&s3, "sum");
    assert_eq!(got.body, b"v2, not v1");
    assert_eq!(got.header("etag"), Some(md5_etag(b"v1").as_str()));
}

#[test]
fn checksum_sha256_as_presigned_query_parameter_is_not_validated() {
    // Signed into the URL's query (where some SDKs put it), the checksum binds the URL but
    // s3s-fs reads checksums from headers only: a body with another hash is stored, 200.
    let s3 = S3Server::start();
    let b = s3.s3_bucket();
    let c = s3.credentials();
    let sum = sha256_b64(b"expected");
    let url = presign(PutObject::new(&b, Some(&c), "q"), &[], &[("x-amz-checksum-sha256", &sum)], None, HOUR);
    let r = send("PUT", &url, &[], b"something else");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(get(&s3, "q").body, b"something else");
    // The parameter is signed: changing it breaks the signature.
    let other = url.replacen(&urlencode(&sum), &urlencode(&sha256_b64(b"something else")), 1);
    assert_ne!(other, url);
    let r = send("PUT", &other, &[], b"something else");
    assert_eq!((r.status, r.code().as_str()), (403, "SignatureDoesNotMatch"), "{r:?}");
}

#[test]
fn presign_signing_checksum_sha256_header_forces_it_and_refuses_other_bodies() {
    // Signed as a header, the checksum must be sent as signed, and the server compares it with
    // the body: the client cannot upload other bytes through this URL (though s3s-fs still
    // stores them before answering BadDigest, as above).
    let s3 = S3Server::start();
    let b = s3.s3_bucket();
    let c = s3.credentials();
    let sum = sha256_b64(b"expected");
    let url = presign(PutObject::new(&b, Some(&c), "h"), &[("x-amz-checksum-sha256", &sum)], &[], None, HOUR);
    let r = send("PUT", &url, &[], b"expected");
    assert_eq!((r.status, r.code().as_str()), (403, "SignatureDoesNotMatch"), "header left out: {r:?}");
    let r = send("PUT", &url, &[("x-amz-checksum-sha256", &sha256_b64(b"other"))], b"other");
    assert_eq!((r.status, r.code().as_str()), (403, "SignatureDoesNotMatch"), "header changed: {r:?}");
    let r = send("PUT", &url, &[("x-amz-checksum-sha256", &sum)], b"other");
    assert_eq!((r.status, r.code().as_str()), (400, "BadDigest"), "{r:?}");
    let r = send("PUT", &url, &[("x-amz-checksum-sha256", &sum)], b"expected");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(get(&s3, "h").body, b"expected");
}

#[test]
fn presigned_put_with_mismatched_x_amz_content_sha256_is_a_500_that_writes_nothing() {
    // x-amz-content-sha256 (hex) on a presigned PUT: s3s hashes the body as it streams and fails
    // the upload before the file is moved into place, so nothing is stored or replaced. The
    // answer is 500 InternalError (AWS: 400 XAmzContentSHA256Mismatch): a client must treat a
    // 5xx on such a PUT as "not written", not as "retry the same bytes later".
    let s3 = S3Server::start();
    let url = put_url(&s3, "c");
    let hex_sum = hex(&Sha256::digest(b"expected"));
    let r = send("PUT", &url, &[("x-amz-content-sha256", &hex_sum)], b"tampered");
    assert_eq!((r.status, r.code().as_str()), (500, "InternalError"), "{r:?}");
    assert!(!s3.object_path("c").exists());
    assert_eq!(get(&s3, "c").status, 404);
    let r = send("PUT", &url, &[("x-amz-content-sha256", &hex_sum)], b"expected");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(get(&s3, "c").body, b"expected");
    // Over an existing object: refused the same way, the object keeps its bytes.
    let r = send("PUT", &url, &[("x-amz-content-sha256", &hex_sum)], b"tampered");
    assert_eq!(r.status, 500, "{r:?}");
    assert_eq!(get(&s3, "c").body, b"expected");
}

#[test]
fn stop_refuses_connections_and_restart_serves_the_same_objects() {
    let mut s3 = S3Server::start();
    let endpoint = s3.endpoint();
    put(&s3, "durable/one", b"first");
    put(&s3, "durable/two", b"second");
    let url = get_url(&s3, "durable/one");

    s3.stop();
    assert!(!s3.is_running());
    match try_send("GET", &url, &[], b"") {
        Err(ureq::Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}"),
        other => panic!("expected connection refused with the store stopped, got {other:?}"),
    }

    s3.restart();
    assert_eq!(s3.endpoint(), endpoint);
    // The URL signed before the stop is still valid.
    let r = send("GET", &url, &[], b"");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"first"[..]), "{r:?}");
    assert_eq!(get(&s3, "durable/two").body, b"second");
    put(&s3, "durable/three", b"third");
    assert_eq!(get(&s3, "durable/three").body, b"third");
}

/// Percent-encoding as in a query value (base64's `+`, `/`, `=`).
fn urlencode(s: &str) -> String {
    s.replace('+', "%2B").replace('/', "%2F").replace('=', "%3D")
}
