//! `GET /segments/{id}` through a running gateway over real sockets (SPEC §5.4, §5.5, §5.8;
//! issue 12), segments written straight into the tables of a database of their own
//! ([`syncular_integration_tests::segment_fixture`]; alice holds `ws: w1`):
//! - the direct endpoint: 401 without host auth, 403 `sync.forbidden` without
//!   `X-Syncular-Scopes` or with tampered scopes, 404 `sync.not_found` / `sync.segment_expired`;
//!   the §5.5 headers; 304 for the ETag; gzip, identity, and zstd preferred (the Rust gateway
//!   only) — each decoding to the exact bytes of the content address;
//! - signed URLs (§5.4): fetched with no host auth at all, served verbatim (never compressed),
//!   cacheable for the URL's lifetime; a bad, tampered, misdirected or expired token is 403.
//!
//! NEEDS the issue12-refs branch for `syncular.segment_open` / `syncular.segment_chunk`; on
//! this branch a temporary SQL stand-in is installed when they are missing
//! ([`segment_fixture::install_shim`]). Needs `SYNCULAR_TEST_DSN` and the gateway binary; runs
//! against the Node gateway too (scripts/test NODE_SHARED_TESTS).

use std::io::Read;

use serde_json::Value;
use syncular_integration_tests::blob_fixture::{Db, PARTITION};
use syncular_integration_tests::gateway::{http_agent, Gateway};
use syncular_integration_tests::segment_fixture::{self as seg, digest, install_shim, live_epoch, now_ms, publish, store};

const W1: &str = r#"{"ws":["w1"]}"#;
const HOUR: i64 = 3_600_000;

/// `(status, headers, raw body)` of a GET with `headers` (no auth added).
fn get(gw: &Gateway, path_and_query: &str, headers: &[(&str, &str)]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut req = http_agent().get(format!("{}{path_and_query}", gw.base_url));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.call().expect("GET");
    let status = resp.status().as_u16();
    let hs = resp.headers().iter().map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())).collect();
    let mut body = Vec::new();
    if let Err(e) = resp.into_body().into_reader().read_to_end(&mut body) {
        panic!("reading {path_and_query}: {e}; gateway logs:\n{}", gw.logs.lock().unwrap().join("\n"));
    }
    (status, hs, body)
}

/// [`get`] over a bare HTTP/1.0 socket (close-delimited body, nothing decoded).
fn raw_get(gw: &Gateway, path: &str, headers: &[(&str, &str)]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    use std::io::Write;
    let addr = gw.base_url.strip_prefix("http://").unwrap();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let mut req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&all[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let hs = lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned())).collect();
    (status, hs, all[split + 4..].to_vec())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

fn code_of(body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(body)));
    v["code"].as_str().unwrap_or_default().to_owned()
}

/// 2.5 MiB (three chunks) that compress well but are not trivial.
fn segment_bytes() -> Vec<u8> {
    (0..(5 * seg::CHUNK / 2) as u32).map(|i| ((i / 7) % 29) as u8 ^ ((i % 3) as u8)).collect()
}

const ALICE: [(&str, &str); 2] = [("x-syncular-actor", "alice"), ("x-syncular-partition", PARTITION)];

/// Alice's host auth, her requested scopes, and `extra`.
fn with<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut h = ALICE.to_vec();
    h.push(("x-syncular-scopes", W1));
    h.extend_from_slice(extra);
    h
}

#[test]
fn segment_direct_download_headers_not_modified_compression_and_refusals() {
    let db = Db::new("segdl");
    let mut c = db.connect();
    install_shim(&mut c);
    let epoch = live_epoch(&mut c, PARTITION);
    let bytes = segment_bytes();
    let id = store(&mut c, PARTITION, &bytes, now_ms());
    publish(&mut c, PARTITION, &epoch, &digest(W1), 100, &id, now_ms() + HOUR);
    let gw = Gateway::start_with_dsn(&db.dsn, &["--auth", "dev"]);
    let path = format!("/segments/{id}");

    // Host auth first, then the scopes header.
    let (status, _, body) = get(&gw, &path, &[("x-syncular-scopes", W1)]);
    assert_eq!((status, code_of(&body).as_str()), (401, "sync.auth_required"));
    let (status, _, body) = get(&gw, &path, &ALICE);
    assert_eq!((status, code_of(&body).as_str()), (403, "sync.forbidden"));

    // Identity: the §5.5 headers and the exact bytes.
    let (status, hs, body) = get(&gw, &path, &with(&[("accept-encoding", "identity")]));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body[..body.len().min(300)]));
    assert!(body == bytes, "identity body: {} bytes", body.len());
    assert_eq!(header(&hs, "content-type"), Some("application/octet-stream"));
    assert_eq!(header(&hs, "etag"), Some(format!("\"{id}\"").as_str()));
    assert_eq!(header(&hs, "cache-control"), Some("private, max-age=0"));
    assert_eq!(header(&hs, "vary"), Some("Authorization, X-Syncular-Scopes, Accept-Encoding"));
    assert_eq!(header(&hs, "content-encoding"), None);
    assert_eq!(header(&hs, "content-length"), Some(bytes.len().to_string().as_str()));

    // If-None-Match after authorization: 304, no body; a tampered grant still 403 first.
    let etag = format!("\"{id}\"");
    let etag_hdr = etag.as_str();
    let (status, hs, body) = get(&gw, &path, &with(&[("if-none-match", etag_hdr)]));
    assert_eq!((status, body.len()), (304, 0));
    assert_eq!(header(&hs, "etag"), Some(etag.as_str()));
    let mut tampered = ALICE.to_vec();
    tampered.extend_from_slice(&[("x-syncular-scopes", r#"{"ws":["w2"]}"#), ("if-none-match", etag_hdr)]);
    let (status, _, body) = get(&gw, &path, &tampered);
    assert_eq!((status, code_of(&body).as_str()), (403, "sync.forbidden"));

    // gzip when offered, read raw (the HTTP client would decode it and drop the header); it
    // decodes to the content address.
    let (status, hs, body) = raw_get(&gw, &path, &with(&[("accept-encoding", "gzip")]));
    assert_eq!((status, header(&hs, "content-encoding")), (200, Some("gzip")));
    assert!(body.len() < bytes.len() / 2, "compressed on the wire: {} bytes", body.len());
    let mut decoded = Vec::new();
    flate2::read::GzDecoder::new(&body[..]).read_to_end(&mut decoded).expect("gzip body");
    assert_eq!(seg::segment_id(&decoded), id);

    // Unknown, expired.
    let (status, _, body) = get(&gw, &format!("/segments/{}", seg::segment_id(b"nothing")), &with(&[]));
    assert_eq!((status, code_of(&body).as_str()), (404, "sync.not_found"));
    c.execute("UPDATE syncular.sync_segment_publications SET expires_at_ms = 1 WHERE segment_id = $1", &[&id]).unwrap();
    let (status, _, body) = get(&gw, &path, &with(&[]));
    assert_eq!((status, code_of(&body).as_str()), (404, "sync.segment_expired"));
}

/// zstd is preferred when both are offered (the Rust gateway only: scripts/test NODE_RUST_ONLY —
/// Node 18/20 has no zstd, the Node gateway answers gzip).
#[test]
fn segments_are_zstd_compressed_when_offered() {
    let db = Db::new("segzstd");
    let mut c = db.connect();
    install_shim(&mut c);
    let epoch = live_epoch(&mut c, PARTITION);
    let bytes = segment_bytes();
    let id = store(&mut c, PARTITION, &bytes, now_ms());
    publish(&mut c, PARTITION, &epoch, &digest(W1), 100, &id, now_ms() + HOUR);
    let gw = Gateway::start_with_dsn(&db.dsn, &["--auth", "dev"]);
    let (status, hs, body) = get(&gw, &format!("/segments/{id}"), &with(&[("accept-encoding", "gzip, zstd")]));
    assert_eq!((status, header(&hs, "content-encoding")), (200, Some("zstd")));
    assert!(body.len() < bytes.len() / 2, "compressed on the wire: {} bytes", body.len());
    let decoded = zstd::stream::decode_all(&body[..]).expect("zstd body");
    assert_eq!(seg::segment_id(&decoded), id);
}

#[test]
fn segment_signed_urls_are_the_whole_grant() {
    let db = Db::new("segurl");
    let mut c = db.connect();
    install_shim(&mut c);
    let epoch = live_epoch(&mut c, PARTITION);
    let bytes = segment_bytes();
    let id = store(&mut c, PARTITION, &bytes, now_ms());
    publish(&mut c, PARTITION, &epoch, &digest(W1), 100, &id, now_ms() + HOUR);
    let other = store(&mut c, PARTITION, b"other bytes", now_ms());
    publish(&mut c, PARTITION, &epoch, &digest(W1), 200, &other, now_ms() + HOUR);
    let gw = Gateway::start_with_dsn(&db.dsn, &["--auth", "dev"]);
    c.batch_execute(&format!("SET syncular.segment_url_base = '{}/segments/'", gw.base_url)).unwrap();
    let mint = |c: &mut postgres::Client, segment: &str| -> (String, i64) {
        let v: Value = c
            .query_one("SELECT syncular.segment_signed_url($1, $2, $3)", &[&PARTITION, &segment, &digest(W1)])
            .unwrap()
            .get(0);
        (v["url"].as_str().unwrap().to_owned(), v["urlExpiresAtMs"].as_i64().unwrap())
    };
    let (url, expires) = mint(&mut c, &id);
    assert!(expires > now_ms() && expires <= now_ms() + 600_000);
    let path = url.strip_prefix(&gw.base_url).expect("the configured base").to_owned();
    assert!(path.starts_with(&format!("/segments/{id}?st=")), "{path}");

    // No host auth, no scopes: the bytes, verbatim even when compression is offered.
    let (status, hs, body) = get(&gw, &path, &[("accept-encoding", "zstd, gzip")]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body[..body.len().min(300)]));
    assert_eq!(header(&hs, "content-encoding"), None);
    assert!(body == bytes);
    assert_eq!(header(&hs, "content-type"), Some("application/octet-stream"));
    assert_eq!(header(&hs, "etag"), Some(format!("\"{id}\"").as_str()));
    let cache = header(&hs, "cache-control").unwrap();
    let max_age: i64 = cache.strip_prefix("public, max-age=").and_then(|r| r.strip_suffix(", immutable")).unwrap().parse().unwrap();
    assert!((0..=600).contains(&max_age), "{cache}");
    // Host credentials of someone else change nothing (they are not read).
    let (status, _, body) = get(&gw, &path, &[("x-syncular-actor", "mallory"), ("x-syncular-partition", "elsewhere")]);
    assert_eq!(status, 200);
    assert!(body == bytes);
    let etag = format!("\"{id}\"");
    let (status, _, _) = get(&gw, &path, &[("if-none-match", etag.as_str())]);
    assert_eq!(status, 304);

    // Refusals: 403 sync.forbidden, no bytes.
    let token = path.split_once("?st=").unwrap().1.to_owned();
    let (payload, mac) = token.split_once('.').unwrap();
    let flipped = format!("{payload}.{}{}", if mac.starts_with('A') { "B" } else { "A" }, &mac[1..]);
    for bad in [
        format!("/segments/{id}?st=garbage"),
        format!("/segments/{id}?st={flipped}"),
        format!("/segments/{other}?st={token}"),
        format!("/segments/{id}?st="),
    ] {
        let (status, _, body) = get(&gw, &bad, &[]);
        assert_eq!((status, code_of(&body).as_str()), (403, "sync.forbidden"), "{bad}");
    }
    // Minted on a clock 20 minutes behind: expired beyond the skew.
    c.batch_execute(&format!("SET syncular.now_ms = '{}'", now_ms() - 1_200_000)).unwrap();
    let (stale, _) = mint(&mut c, &id);
    c.batch_execute("RESET syncular.now_ms").unwrap();
    let (status, _, body) = get(&gw, stale.strip_prefix(&gw.base_url).unwrap(), &[]);
    assert_eq!((status, code_of(&body).as_str()), (403, "sync.forbidden"));
    // A valid token whose publication expired: 404 segment_expired.
    c.execute("UPDATE syncular.sync_segment_publications SET expires_at_ms = 1 WHERE segment_id = $1", &[&id]).unwrap();
    let (status, _, body) = get(&gw, &path, &[]);
    assert_eq!((status, code_of(&body).as_str()), (404, "sync.segment_expired"));
    // The token never reaches a log.
    let logs = gw.logs.lock().unwrap().join("\n");
    assert!(!logs.contains(payload), "a token leaked into the logs");
}
