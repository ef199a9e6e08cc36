//! `POST /sync` through a running gateway (issue 8): real clients push and pull over HTTP;
//! content type, auth, body limits (transferred and gunzipped), truncated and corrupt bodies
//! each answer a §10.1 JSON error and store nothing; responses are compressed per
//! Accept-Encoding; segments/blobs/unknown routes answer their §10.1 codes; /healthz and
//! /metrics work. `responses_are_zstd_compressed_per_accept_encoding` and
//! `segments_and_blobs_answer_their_codes_under_the_mount` are Rust-gateway only (scripts/test
//! NODE_RUST_ONLY); the rest also runs against the Node gateway. Needs `SYNCULAR_TEST_DSN` and the gateway binary (scripts/test builds it).

use std::io::Write;

use serde_json::{json, Value};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{fingerprint, partition_name, server_tasks, Coverage, TASKS};
use syncular_integration_tests::gateway::{grant, http_agent, post_sync, raw_request_status, setup, Gateway, Peer};
use syncular_integration_tests::wire::{pull_header, request, subscription};

const SSP2: &str = "application/vnd.syncular.sync.v2";

fn json_error(status: u16, body: &[u8]) -> Value {
    let v: Value = serde_json::from_slice(body).unwrap_or_else(|_| panic!("{status}: not JSON: {}", String::from_utf8_lossy(body)));
    for key in ["code", "message", "category", "retryable", "recommendedAction"] {
        assert!(v.get(key).is_some(), "§10.1 key {key} missing in {v}");
    }
    v
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

fn pull_request(client: &str) -> Vec<u8> {
    request(client, None, vec![pull_header(0, 0, 0, 1), subscription("s", TASKS, &[("project_id", &["p1"])], -1, None)])
}

#[test]
fn two_real_clients_push_and_pull_over_http() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-http");
    grant(&mut conn, &partition, "alice", &["p1"]);
    grant(&mut conn, &partition, "bob", &["p1"]);
    let gw = Gateway::start(&[]);

    let mut alice = Peer::new(&gw.base_url, &partition, "alice", "alice-1");
    alice.subscribe("mine", &["p1"]);
    alice.write_task("t1", "p1", "written by alice");
    let report = alice.sync_idle(6).expect("alice syncs over HTTP");
    assert_eq!(report.applied.len(), 1, "{report:?}");
    // Persisted before acknowledged: the row is in the app table once the round returned.
    let rows = server_tasks(&mut conn, &partition).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].0, "t1");

    let mut bob = Peer::new(&gw.base_url, &partition, "bob", "bob-1");
    bob.subscribe("mine", &["p1"]);
    bob.sync_idle(6).expect("bob syncs over HTTP");
    assert_eq!(bob.task_ids(), vec!["t1"]);

    // One round carrying a push AND a pull: the push result and the pulled commit arrive
    // together (spliced response).
    bob.write_task("t2", "p1", "from bob");
    alice.write_task("t3", "p1", "from alice");
    alice.sync_idle(6).unwrap();
    let report = bob.sync().expect("push+pull round");
    assert_eq!(report.applied.len(), 1, "{report:?}");
    assert!(bob.holds("t3"), "the pull half of the same round delivered t3: {:?}", bob.task_ids());
    alice.sync_idle(6).unwrap();
    assert_eq!(alice.task_ids(), vec!["t1", "t2", "t3"]);
    assert!(gw.metric("syncular_gateway_rounds_total") >= 6.0);
}

/// A table past the §5.7 inline threshold (256 KiB) bootstraps through `SEGMENT_REF`s that the
/// real client downloads from the gateway's `GET /segments/{id}` (§5.5) — on every gateway: a
/// gateway without the route leaves such clients failing with 404 for ever.
#[test]
fn a_bootstrap_past_the_inline_threshold_downloads_its_segments_from_the_gateway() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-segments");
    grant(&mut conn, &partition, "alice", &["p1"]);
    let title = "x".repeat(400);
    for batch in 0..6 {
        let ops: Vec<Value> = (0..250)
            .map(|i| json!({"table": TASKS, "op": "upsert", "row": {"id": format!("t{batch}-{i:03}"), "project_id": "p1", "title": title, "done": false, "priority": null}}))
            .collect();
        let out: Value = conn
            .query_one("SELECT syncular.commit($1, 'seeder', $2::jsonb, allowed_scopes => '{\"project_id\": [\"*\"]}')", &[&partition, &Value::from(ops)])
            .unwrap()
            .get(0);
        assert_eq!(out["status"], "applied", "{out}");
    }
    let gw = Gateway::start(&[]);
    let downloads = r#"syncular_gateway_http_requests_total{route="/segments/{id}",status="200""#;
    let mut alice = Peer::new(&gw.base_url, &partition, "alice", "alice-seg");
    alice.subscribe("mine", &["p1"]);
    alice.sync_idle(20).expect("alice bootstraps over HTTP");
    assert_eq!(alice.task_ids().len(), 1500);
    assert_eq!(alice.task_ids(), server_tasks(&mut conn, &partition).unwrap().into_iter().map(|r| r.0).collect::<Vec<_>>());
    assert!(gw.metric(downloads) >= 1.0, "no segment was downloaded from the gateway");
}

#[test]
fn wrong_content_type_missing_auth_and_bad_bodies_are_json_errors_and_store_nothing() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-bad-http");
    grant(&mut conn, &partition, "alice", &["p1"]);
    let gw = Gateway::start(&["--max-body-bytes", "65536"]);
    let auth = [("x-syncular-actor", "alice"), ("x-syncular-partition", partition.as_str())];
    let before = fingerprint(&mut conn, &partition, Coverage::Everything).unwrap();
    let good = pull_request("c1");

    // 415: wrong content type.
    let (status, hs, body) = post_sync(&gw.base_url, &[auth[0], auth[1], ("content-type", "application/octet-stream")], &good);
    assert_eq!(status, 415);
    assert!(header(&hs, "content-type").unwrap().starts_with("application/json"));
    assert_eq!(json_error(status, &body)["code"], "sync.invalid_request");

    // 401: no actor.
    let (status, _, body) = post_sync(&gw.base_url, &[("content-type", SSP2)], &good);
    assert_eq!(status, 401);
    assert_eq!(json_error(status, &body)["code"], "sync.auth_required");

    // 413: transferred body over the limit.
    let big = vec![0u8; 70_000];
    let (status, _, body) = post_sync(&gw.base_url, &[auth[0], auth[1], ("content-type", SSP2)], &big);
    assert_eq!(status, 413);
    assert_eq!(json_error(status, &body)["code"], "sync.invalid_request");

    // 413: a gzip bomb (a few KB that gunzip to 4 MiB) stops at the DECODED limit.
    let bomb = gzip(&vec![0u8; 4 << 20]);
    assert!(bomb.len() < 65536);
    let (status, _, body) = post_sync(
        &gw.base_url,
        &[auth[0], auth[1], ("content-type", SSP2), ("content-encoding", "gzip")],
        &bomb,
    );
    assert_eq!(status, 413, "{}", String::from_utf8_lossy(&body));
    json_error(status, &body);

    // 400: not valid gzip.
    let (status, _, body) =
        post_sync(&gw.base_url, &[auth[0], auth[1], ("content-type", SSP2), ("content-encoding", "gzip")], b"\x1f\x8bnot gzip");
    assert_eq!(status, 400);
    json_error(status, &body);

    // 415: an unsupported content encoding.
    let (status, _, body) =
        post_sync(&gw.base_url, &[auth[0], auth[1], ("content-type", SSP2), ("content-encoding", "br")], &good);
    assert_eq!(status, 415);
    json_error(status, &body);

    // 400: a truncated SSP2 request (the extension's decode error, §1.2 rule 1).
    let (status, _, body) = post_sync(&gw.base_url, &[auth[0], auth[1], ("content-type", SSP2)], &good[..good.len() - 1]);
    assert_eq!(status, 400);
    assert_eq!(json_error(status, &body)["code"], "sync.invalid_request");

    // 400: garbage.
    let (status, _, body) = post_sync(&gw.base_url, &[auth[0], auth[1], ("content-type", SSP2)], b"garbage garbage garbage");
    assert_eq!(status, 400);
    assert_eq!(json_error(status, &body)["category"], "invalid-request");

    assert_eq!(fingerprint(&mut conn, &partition, Coverage::Everything).unwrap(), before, "nothing stored");

    // A gzipped valid request is accepted (a compressed response: below, zstd).
    let (status, hs, body) =
        post_sync(&gw.base_url, &[auth[0], auth[1], ("content-type", SSP2), ("content-encoding", "gzip")], &gzip(&good));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(header(&hs, "content-type"), Some(SSP2));
    assert_eq!(&body[..4], b"SSP2");
    let (status, hs, body) = post_sync(&gw.base_url, &[auth[0], auth[1], ("content-type", SSP2)], &good);
    assert_eq!(status, 200);
    assert_eq!(header(&hs, "content-encoding"), None);
    assert_eq!(&body[..4], b"SSP2");
    assert!(gw.metric("syncular_gateway_errors_total") >= 8.0);
}

/// Rust gateway only (scripts/test NODE_RUST_ONLY): Node 18/20 has no zstd.
#[test]
fn responses_are_zstd_compressed_per_accept_encoding() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-zstd");
    grant(&mut conn, &partition, "alice", &["p1"]);
    let gw = Gateway::start(&[]);
    let auth = [("x-syncular-actor", "alice"), ("x-syncular-partition", partition.as_str())];
    let (status, hs, body) = post_sync(
        &gw.base_url,
        &[auth[0], auth[1], ("content-type", SSP2), ("content-encoding", "gzip"), ("accept-encoding", "zstd")],
        &gzip(&pull_request("c1")),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(header(&hs, "content-type"), Some(SSP2));
    assert_eq!(header(&hs, "content-encoding"), Some("zstd"));
    assert_ne!(&body[..4], b"SSP2", "zstd-compressed on the wire");
}

/// Rust gateway only (scripts/test NODE_RUST_ONLY): the Node gateway serves no segment or blob route.
#[test]
fn segments_and_blobs_answer_their_codes_under_the_mount() {
    let gw = Gateway::start(&["--mount", "/api/v1"]);
    let agent = http_agent();
    let get = |path: &str, actor: bool| {
        let mut req = agent.get(format!("{}{path}", gw.base_url));
        if actor {
            req = req.header("x-syncular-actor", "alice");
        }
        let mut resp = req.call().unwrap();
        (resp.status().as_u16(), resp.body_mut().read_to_vec().unwrap())
    };
    // Authenticated but without X-Syncular-Scopes (§5.5): forbidden.
    let (status, body) = get("/api/v1/segments/sha256:abc", true);
    assert_eq!((status, json_error(status, &body)["code"].as_str()), (403, Some("sync.forbidden")));
    let (status, body) = get("/api/v1/segments/sha256:abc", false);
    assert_eq!((status, json_error(status, &body)["code"].as_str()), (401, Some("sync.auth_required")));
    let (status, body) = get("/api/v1/blobs/sha256:abc", true);
    assert_eq!((status, json_error(status, &body)["code"].as_str()), (404, Some("blob.not_found")));
    let mut resp = agent.put(format!("{}/api/v1/blobs/sha256:abc", gw.base_url)).header("x-syncular-actor", "a").send(&b"x"[..]).unwrap();
    let status = resp.status().as_u16();
    assert_eq!((status, json_error(status, &resp.body_mut().read_to_vec().unwrap())["code"].as_str()), (400, Some("sync.invalid_request")));
}

#[test]
fn unknown_routes_mount_health_and_metrics() {
    let gw = Gateway::start(&["--mount", "/api/v1"]);
    // The mount is honoured: /sync at the root is not a route.
    let (status, hs, body) = post_sync(&gw.base_url, &[("content-type", SSP2), ("x-syncular-actor", "a")], b"x");
    assert_eq!(status, 404, "{hs:?}");
    json_error(status, &body);
    for path in ["/api/v1/nope", "/nope"] {
        let (status, body) = gw.get(path);
        assert_eq!((status, json_error(status, body.as_bytes())["code"].as_str()), (404, Some("sync.not_found")), "{path}");
    }
    gw.wait_health(200);
    let (_, health) = gw.get("/healthz");
    let health: Value = serde_json::from_str(&health).unwrap();
    assert_eq!(health["status"], "ok");
    assert!(health["auth"].as_str().unwrap().contains("UNSAFE"));
    // HEAD where GET is a route (the Node gateway answered 405), with no body.
    let head = http_agent().head(format!("{}/healthz", gw.base_url)).call().map(|r| r.status().as_u16());
    assert_eq!(head.ok(), Some(200));
    assert_eq!(raw_request_status(&gw, b"HEAD /api/v1/sync HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"), 405);
    // A 405 names the methods the route takes (RFC 9110 §15.5.6).
    let head = raw_answer(&gw, b"DELETE /api/v1/sync HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    let allow = head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("allow:").map(|v| v.trim().to_owned()));
    assert!(head.starts_with("HTTP/1.1 405") && allow.as_deref().is_some_and(|a| a.contains("post")), "{head}");
    assert!(gw.metric("syncular_gateway_http_requests_total") >= 5.0);
    let (status, text) = gw.get("/metrics");
    assert_eq!(status, 200);
    assert!(text.contains("syncular_gateway_sessions_open"));
    assert!(text.contains("syncular_gateway_delta_call_seconds_bucket"));
    assert!(text.contains("syncular_gateway_listen_reconnects_total 0"));
    let logs = gw.logs.lock().unwrap().join("\n");
    assert!(logs.contains("UNSAFE"), "dev mode warns loudly at startup");
}

/// `request` (raw bytes, a whole HTTP request) on a socket of its own: everything the gateway
/// answered until it closed the connection (or 10 s passed).
fn raw_answer(gw: &Gateway, request: &[u8]) -> String {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(gw.base_url.trim_start_matches("http://")).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// `GET target HTTP/1.1` on a socket of its own: the status code (0 when the connection closed
/// without a status line).
fn raw_status(gw: &Gateway, target: &str, extra: &str) -> u16 {
    let request = format!("GET {target} HTTP/1.1\r\nhost: x\r\nx-syncular-actor: a\r\n{extra}connection: close\r\n\r\n");
    raw_answer(gw, request.as_bytes()).split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// Request targets no URL parser takes, on plain requests and on upgrades, and undecodable
/// segment ids: each is refused (4xx or a closed socket) and the gateway keeps serving.
#[test]
fn malformed_request_targets_are_refused_and_the_gateway_stays_up() {
    let gw = Gateway::start(&[]);
    let upgrade = "upgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    for (target, extra) in [("http://[bad/x", ""), ("http://[bad/realtime", upgrade), ("/segments/%ZZ", ""), ("/segments/%ZZ?st=x", "")] {
        let status = raw_status(&gw, target, extra);
        assert!(status == 0 || (400..500).contains(&status), "{target}: {status}");
        let (health, _) = gw.get("/healthz");
        assert_eq!(health, 200, "the gateway answers after {target}");
    }
    let scopes = "x-syncular-scopes: {}\r\n";
    assert_eq!(raw_status(&gw, "/segments/%ZZ", scopes), 404, "an undecodable segment id names no segment");
    // A NUL (%00) decodes into nothing Postgres text can hold: refused before any SQL (was a 500).
    let zeros = "0".repeat(64);
    for (target, extra) in [
        ("/realtime?clientId=a%00b", upgrade),
        ("/segments/a%00b", scopes),
        (&format!("/segments/sha256:{zeros}?st=a%00b"), ""),
        ("/blobs/a%00b", ""),
        ("/sync?x=%00", ""),
    ] {
        assert_eq!(raw_status(&gw, target, extra), 400, "{target}");
    }
    let (health, _) = gw.get("/healthz");
    assert_eq!(health, 200);
}

/// `GET target` with the header lines `headers` written as raw bytes: the status code.
fn raw_bytes_status(gw: &Gateway, target: &str, headers: &[u8]) -> u16 {
    raw_request_status(gw, &[format!("GET {target} HTTP/1.1\r\nhost: x\r\n").as_bytes(), headers, b"\r\n"].concat())
}

/// Identities and ids are UTF-8 or refused — never read as Latin-1 or with U+FFFD in place of
/// the bytes (different bytes would collide into one id): dev headers, the segment scopes
/// header, a WebSocket clientId. Valid UTF-8 names the same actor on both gateways.
#[test]
fn identities_that_are_not_utf8_are_refused() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-utf8");
    let gw = Gateway::start(&[]);
    let dev = |actor: &[u8], partition: &[u8]| [b"x-syncular-actor: ", actor, b"\r\nx-syncular-partition: ", partition, b"\r\n"].concat();
    let p = partition.as_bytes();
    assert_eq!(raw_bytes_status(&gw, "/healthz", b""), 200);
    let upgrade: &[u8] = b"upgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let realtime = |actor: &[u8], partition: &[u8], client: &str| raw_bytes_status(&gw, &format!("/realtime?clientId={client}"), &[dev(actor, partition).as_slice(), upgrade].concat());
    assert_eq!(realtime(b"\xff\xfe", p, "c1"), 401, "an actor that is not UTF-8");
    assert_eq!(realtime(b"alice", b"\xff\xfe", "c1"), 401, "a partition that is not UTF-8");
    assert_eq!(realtime(b"alice", p, "%ff"), 400, "a clientId that is not UTF-8");
    assert_eq!(realtime(b"alice", p, "%C3%A9t%C3%A9"), 101, "a UTF-8 clientId opens");
    let scopes: &[u8] = b"x-syncular-scopes: {\"project_id\":[\"\xff\"]}\r\n";
    let segment = format!("/segments/sha256:{}", "0".repeat(64));
    assert_eq!(raw_bytes_status(&gw, &segment, &[dev(b"alice", p).as_slice(), scopes].concat()), 403, "scopes that are not UTF-8");
    // The same UTF-8 actor through a real round: bound to "jörg", not to its Latin-1 reading.
    grant(&mut conn, &partition, "jörg", &["p1"]);
    let mut peer = Peer::new(&gw.base_url, &partition, "jörg", "utf8-peer");
    peer.subscribe("s", &["p1"]);
    peer.sync_idle(6).unwrap();
    let actor: String = conn
        .query_one("SELECT actor_id FROM syncular.sync_clients WHERE partition = $1 AND client_id = 'utf8-peer'", &[&partition])
        .unwrap()
        .get(0);
    assert_eq!(actor, "jörg");
}

/// What arrives too slowly is cut by the HTTP timeouts the flags set, on both gateways: a head
/// that stops half-way is dropped after `--http-header-read-timeout-secs` (the Node gateway answers
/// it 503 first), and a body announced and never sent is answered after `--request-timeout-secs`
/// like every other error: 503 with the §10.1 object (the Node gateway ignored these flags and
/// held both for minutes).
#[test]
fn slow_heads_and_silent_bodies_are_cut_by_the_http_timeouts() {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let gw = Gateway::start(&["--http-header-read-timeout-secs", "1", "--request-timeout-secs", "2"]);
    let answer = |request: &[u8]| -> (String, Duration) {
        let mut s = std::net::TcpStream::connect(gw.base_url.trim_start_matches("http://")).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(request).unwrap();
        let (started, mut out) = (Instant::now(), Vec::new());
        let read = s.read_to_end(&mut out);
        assert!(read.is_ok() || !out.is_empty(), "the connection was still open after 20 s: {read:?}");
        (String::from_utf8_lossy(&out).into_owned(), started.elapsed())
    };
    let (text, took) = answer(b"GET /heal");
    assert!(took < Duration::from_secs(8), "half a request head held the connection for {took:?}");
    assert!(text.is_empty() || text.starts_with("HTTP/1.1 503"), "{text}");
    let (text, took) = answer(
        format!("POST /sync HTTP/1.1\r\nhost: x\r\nx-syncular-actor: a\r\ncontent-type: {SSP2}\r\ncontent-length: 100\r\nconnection: close\r\n\r\n").as_bytes(),
    );
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(took < Duration::from_secs(10), "cut by the 2 s request timeout, not after {took:?}");
    let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap_or_default()).unwrap_or_else(|_| panic!("JSON: {text}"));
    // syncular.unavailable, answered as the catalog code clients retry on their own.
    assert_eq!((body["code"].as_str(), body["retryable"].as_bool()), (Some("sync.internal_error"), Some(true)), "{body}");
    assert_eq!(body["details"]["hostCode"], "syncular.unavailable");
    let (health, _) = gw.get("/healthz");
    assert_eq!(health, 200);
}

/// A zero HTTP header-read or idle timeout would switch the slow-client protection off: both
/// gateways refuse it on the command line (exit 2; the Node gateway took it).
#[test]
fn zero_http_timeouts_are_refused_on_the_command_line() {
    for flag in ["--http-header-read-timeout-secs", "--http-idle-timeout-secs"] {
        let mut child = std::process::Command::new(syncular_integration_tests::gateway::gateway_bin())
            .args(["--database-url", "host=/nonexistent", "--auth", "dev", "--listen", "127.0.0.1:0", flag, "0"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run the gateway");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let status = loop {
            match child.try_wait().expect("wait for the gateway") {
                Some(status) => break Some(status),
                None if std::time::Instant::now() > deadline => break None,
                None => std::thread::sleep(std::time::Duration::from_millis(50)),
            }
        };
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert_eq!(status.and_then(|s| s.code()), Some(2), "{flag} 0 was taken (the gateway went on starting)");
    }
}
