//! Blobs through the object-store tier (issue 28; docs/src/operate/object-store.md), against a
//! real S3 server (`s3s-fs`) and a gateway whose mover verifies and copies, in a database of
//! their own (schema `notes(id, ws, title, att blob_ref)`, alice and bob see `w1`, carol `w2`):
//! - the real client uploads by presigned PUT (grant → PUT to the bucket, no host auth) and
//!   pushes the referencing row right away (the push waits for the mover's verification:
//!   `syncular.blob_pending`, retried by the gateway); the bytes never enter Postgres; bob
//!   downloads by presigned GET (`{"url", "urlExpiresAtMs"}`), carol is refused;
//! - an upload with another hash never becomes a blob (the mover deletes it; a push referencing
//!   it is `blob.not_found`), one larger than granted is refused by the bucket;
//! - a blob uploaded through the gateway is copied into the bucket and then served by URL;
//! - the bucket down: no grant URL, a blob Postgres holds is streamed, one only the bucket
//!   holds is `syncular.object_store_unavailable` (503); the orphan sweep deletes objects too.
//!
//! Needs `SYNCULAR_TEST_DSN`, the gateway binary and `s3s-fs` (scripts/setup installs it).

use std::io::Read;
use std::time::Duration;

use serde_json::{json, Value};
use syncular_client::SyncOutcome;
use syncular_integration_tests::blob_fixture::{blob_id, Db, NotesPeer, PARTITION};
use syncular_integration_tests::gateway::{http_agent, Gateway};
use syncular_integration_tests::object_store_fixture::{eventually, tier_gateway_on, tier_healthy};
use syncular_integration_tests::s3_fixture::S3Server;

const WAIT: Duration = Duration::from_secs(60);

/// A real 0.15.48 client ([`NotesPeer`]) whose failed sync fails the test with the gateway's logs.
fn sync(peer: &mut NotesPeer, gw: &Gateway) {
    if let Err(e) = peer.sync() {
        panic!("{e}\ngateway logs:\n{}", gw.logs.lock().unwrap().join("\n"));
    }
}

/// `(status, content-type, body)` of a request as `actor` (dev auth).
fn request(gw: &Gateway, method: &str, path: &str, actor: &str, body: Option<&[u8]>) -> (u16, String, Vec<u8>) {
    let url = format!("{}{path}", gw.base_url);
    let agent = http_agent();
    let resp = match (method, body) {
        ("GET", None) => agent.get(&url).header("x-syncular-actor", actor).header("x-syncular-partition", PARTITION).call(),
        ("POST", Some(b)) => agent
            .post(&url)
            .header("x-syncular-actor", actor)
            .header("x-syncular-partition", PARTITION)
            .header("content-type", "application/json")
            .send(b),
        ("PUT", Some(b)) => agent.put(&url).header("x-syncular-actor", actor).header("x-syncular-partition", PARTITION).send(b),
        other => panic!("{other:?}"),
    }
    .expect("HTTP request");
    let status = resp.status().as_u16();
    let ctype = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let mut out = Vec::new();
    resp.into_body().into_reader().read_to_end(&mut out).unwrap();
    (status, ctype, out)
}

fn json_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(body)))
}

/// A plain request to a presigned URL (no credentials): `(status, body)`.
fn presigned(method: &str, url: &str, body: Option<&[u8]>) -> (u16, Vec<u8>) {
    let agent = http_agent();
    let resp = match (method, body) {
        ("GET", None) => agent.get(url).call(),
        ("PUT", Some(b)) => agent.put(url).header("content-type", "application/octet-stream").send(b),
        other => panic!("{other:?}"),
    };
    match resp {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let mut out = Vec::new();
            let _ = resp.into_body().into_reader().read_to_end(&mut out);
            (status, out)
        }
        Err(e) => panic!("{method} presigned: {e}"),
    }
}

fn blob_row(db: &Db, id: &str) -> Option<(i64, i32)> {
    db.connect()
        .query_opt("SELECT byte_length, chunk_count FROM syncular.sync_blobs WHERE partition = $1 AND blob_id = $2", &[&PARTITION, &id])
        .unwrap()
        .map(|r| (r.get(0), r.get(1)))
}

fn object_row(db: &Db, id: &str) -> Option<bool> {
    db.connect()
        .query_opt("SELECT in_postgres FROM syncular.sync_blob_objects WHERE partition = $1 AND blob_id = $2", &[&PARTITION, &id])
        .unwrap()
        .map(|r| r.get(0))
}

fn start(db: &Db, s3: &S3Server) -> Gateway {
    tier_gateway_on(&db.dsn, s3, &["--object-store-check-after-ms", "2000", "--object-store-scan-after-ms", "1000"])
}

fn bytes_of(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn real_clients_upload_by_presigned_put_and_download_by_presigned_get() {
    let db = Db::new("objrt");
    let s3 = S3Server::start();
    let gw = start(&db, &s3);
    let bytes = bytes_of(7, 300_000);
    let id = blob_id(&bytes);
    let mut alice = NotesPeer::new(&gw.base_url, "alice");
    let att = alice.client.upload_blob(&bytes, Some("application/x-test".into()), Some("a.bin".into())).unwrap();
    let att = serde_json::to_string(&att).unwrap();
    alice.write("n1", "w1", Some(att.clone()));
    sync(&mut alice, &gw);
    assert!(alice.client.pending_commit_ids().is_empty(), "the row referencing the blob was applied");
    assert_eq!(blob_row(&db, &id), Some((bytes.len() as i64, 0)), "a blob without chunks in Postgres");
    assert_eq!(object_row(&db, &id), Some(false), "the bucket holds the only copy");
    let chunks: i64 = db.connect().query_one("SELECT count(*) FROM syncular.sync_blob_chunks", &[]).unwrap().get(0);
    assert_eq!(chunks, 0, "no blob byte went into Postgres");
    assert_eq!(gw.metric("syncular_gateway_http_requests_total{route=\"/blobs/{id}\",status=\"200\""), 0.0, "no PUT through the gateway");

    // The grant's URL cannot rewrite the blob: it names an upload key of its own, and only the
    // mover writes content keys (after verifying the bytes).
    let grant = json_of(&request(&gw, "POST", &format!("/blobs/{}/upload-grant", blob_id(b"x")), "alice", Some(br#"{"byteLength": 1}"#)).2);
    assert!(grant["url"].as_str().unwrap().contains("/t/up/"), "{grant}");

    // bob (same scope): the download is a presigned GET, the bytes identical.
    let mut bob = NotesPeer::new(&gw.base_url, "bob");
    sync(&mut bob, &gw);
    let got = bob.client.fetch_blob(&mut bob.transport, &att).unwrap_or_else(|e| panic!("bob's download: {e:?}"));
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(got["bytes"]["$bytes"], json!(hex));
    let (status, ctype, body) = request(&gw, "GET", &format!("/blobs/{id}"), "bob", None);
    assert_eq!((status, ctype.as_str()), (200, "application/json"));
    let answer = json_of(&body);
    let url = answer["url"].as_str().expect("url");
    assert!(url.starts_with(&format!("{}/{}/t/blob/", s3.endpoint(), s3.bucket())), "{url}");
    assert!(!url.contains(PARTITION), "the object key names no partition: {url}");
    assert!(answer["urlExpiresAtMs"].as_i64().is_some());
    assert_eq!(presigned("GET", url, None), (200, bytes.clone()));
    // The URL is a grant to exactly this object: another partition's token or another blob id
    // in its key is refused by the bucket.
    let path = url.split('?').next().unwrap();
    let token = path.split("/t/blob/").nth(1).unwrap().split('/').next().unwrap();
    let other_token: String = token.chars().rev().collect();
    assert_eq!(presigned("GET", &url.replacen(token, &other_token, 1), None).0, 403, "another partition's key");
    let other_blob = blob_id(b"another blob");
    assert_eq!(presigned("GET", &url.replacen(&id[7..], &other_blob[7..], 1), None).0, 403, "another blob's key");
    // carol (another scope) gets no URL.
    let (status, _, body) = request(&gw, "GET", &format!("/blobs/{id}"), "carol", None);
    assert_eq!((status, json_of(&body)["code"].as_str()), (403, Some("blob.forbidden")));
}

#[test]
fn a_verified_upload_cannot_be_rewritten_through_its_grant() {
    let db = Db::new("objrewrite");
    let s3 = S3Server::start();
    let gw = start(&db, &s3);
    let bytes = bytes_of(6, 4_000);
    let id = blob_id(&bytes);
    let (_, _, body) = request(&gw, "POST", &format!("/blobs/{id}/upload-grant"), "alice", Some(br#"{"byteLength": 4000}"#));
    let url = json_of(&body)["url"].as_str().expect("a presigned PUT").to_owned();
    assert_eq!(presigned("PUT", &url, Some(&bytes)).0, 200);
    eventually("verified", WAIT, || object_row(&db, &id) == Some(false));
    // The same grant, other bytes of the granted size, after the verification.
    assert_eq!(presigned("PUT", &url, Some(&bytes_of(66, 4_000))).0, 200);
    let mut conn = db.connect();
    conn.execute("SELECT pg_catalog.set_config('syncular.partition', $1, false)", &[&PARTITION]).unwrap();
    conn.execute("INSERT INTO public.notes (id, ws, title, att) VALUES ('n1', 'w1', 'n1', $1)", &[&format!(r#"{{"blobId":"{id}","byteLength":4000}}"#)])
        .unwrap();
    let (_, _, body) = request(&gw, "GET", &format!("/blobs/{id}"), "bob", None);
    assert_eq!(presigned("GET", json_of(&body)["url"].as_str().unwrap(), None), (200, bytes), "the verified bytes, whatever the grant wrote later");
}

#[test]
fn an_upload_with_another_hash_or_size_never_becomes_a_blob() {
    let db = Db::new("objbad");
    let s3 = S3Server::start();
    let gw = start(&db, &s3);
    let bytes = bytes_of(1, 5_000);
    let id = blob_id(&bytes);
    let (status, _, body) = request(&gw, "POST", &format!("/blobs/{id}/upload-grant"), "alice", Some(br#"{"byteLength": 5000}"#));
    assert_eq!(status, 200);
    let url = json_of(&body)["url"].as_str().expect("a presigned PUT").to_owned();
    // Larger than granted: the signed content-length refuses it.
    assert_eq!(presigned("PUT", &url, Some(&bytes_of(1, 5_001))).0, 403);
    // The granted size, other bytes: the bucket takes them, the mover refuses them.
    assert_eq!(presigned("PUT", &url, Some(&bytes_of(2, 5_000))).0, 200);
    eventually("the mover dropped the grant", WAIT, || {
        db.connect().query_opt("SELECT 1 FROM syncular.sync_blob_grants WHERE blob_id = $1", &[&id]).unwrap().is_none()
    });
    assert_eq!(blob_row(&db, &id), None, "never a blob");
    let key = url.split('?').next().unwrap().split(&format!("/{}/", s3.bucket())).nth(1).unwrap().to_owned();
    assert!(!s3.object_path(&key).exists(), "the wrong object was deleted");
    // A push referencing it: blob.not_found (the grant is gone), nothing applied.
    let mut alice = NotesPeer::new(&gw.base_url, "alice");
    let att = format!(r#"{{"blobId":"{id}","byteLength":5000}}"#);
    alice.write("n-bad", "w1", Some(att.clone()));
    let outcome = alice.client.sync_until_idle(&mut alice.transport, Some(4));
    assert!(matches!(outcome, SyncOutcome::Ok(_)), "the round itself succeeds");
    let notes: i64 = db.connect().query_one("SELECT count(*) FROM public.notes WHERE id = 'n-bad'", &[]).unwrap().get(0);
    assert_eq!(notes, 0, "the commit was rejected");
}

#[test]
fn blobs_uploaded_through_the_gateway_are_copied_and_served_by_url() {
    let db = Db::new("objcopy");
    let s3 = S3Server::start();
    let gw = start(&db, &s3);
    let bytes = bytes_of(3, 70_000);
    let id = blob_id(&bytes);
    let (status, _, _) = request(&gw, "PUT", &format!("/blobs/{id}"), "alice", Some(&bytes));
    assert_eq!(status, 200);
    let mut conn = db.connect();
    conn.execute("SELECT pg_catalog.set_config('syncular.partition', $1, false)", &[&PARTITION]).unwrap();
    conn.execute(
        "INSERT INTO public.notes (id, ws, title, att) VALUES ('n1', 'w1', 'n1', $1)",
        &[&format!(r#"{{"blobId":"{id}","byteLength":{}}}"#, bytes.len())],
    )
    .unwrap();
    eventually("the mover copied the blob", WAIT, || object_row(&db, &id) == Some(true));
    let (status, ctype, body) = request(&gw, "GET", &format!("/blobs/{id}"), "bob", None);
    assert_eq!((status, ctype.as_str()), (200, "application/json"));
    assert_eq!(presigned("GET", json_of(&body)["url"].as_str().unwrap(), None), (200, bytes));
}

#[test]
fn the_bucket_down_and_the_orphan_sweep() {
    let db = Db::new("objdown");
    let mut s3 = S3Server::start();
    let gw = start(&db, &s3);
    // One blob only the bucket holds (presigned upload), one Postgres holds too.
    let only = bytes_of(4, 20_000);
    let only_id = blob_id(&only);
    let mut alice = NotesPeer::new(&gw.base_url, "alice");
    let att = serde_json::to_string(&alice.client.upload_blob(&only, None, None).unwrap()).unwrap();
    alice.write("n1", "w1", Some(att.clone()));
    sync(&mut alice, &gw);
    let both = bytes_of(5, 20_000);
    let both_id = blob_id(&both);
    assert_eq!(request(&gw, "PUT", &format!("/blobs/{both_id}"), "alice", Some(&both)).0, 200);
    let mut conn = db.connect();
    conn.execute("SELECT pg_catalog.set_config('syncular.partition', $1, false)", &[&PARTITION]).unwrap();
    conn.execute("INSERT INTO public.notes (id, ws, title, att) VALUES ('n2', 'w1', 'n2', $1)", &[&format!(r#"{{"blobId":"{both_id}","byteLength":20000}}"#)])
        .unwrap();
    eventually("copied", WAIT, || object_row(&db, &both_id) == Some(true));

    s3.stop();
    eventually("the heartbeat lapsed", WAIT, || !tier_healthy(&mut db.connect()));
    let (status, _, body) = request(&gw, "GET", &format!("/blobs/{only_id}"), "bob", None);
    assert_eq!((status, json_of(&body)["code"].as_str()), (503, Some("syncular.object_store_unavailable")), "{}", String::from_utf8_lossy(&body));
    let (status, ctype, body) = request(&gw, "GET", &format!("/blobs/{both_id}"), "bob", None);
    assert_eq!((status, ctype.as_str(), body), (200, "application/octet-stream", both.clone()), "Postgres streams its copy");
    let other = blob_id(b"new");
    let (status, _, body) = request(&gw, "POST", &format!("/blobs/{other}/upload-grant"), "alice", Some(br#"{"byteLength": 3}"#));
    assert_eq!((status, json_of(&body)), (200, json!({"present": false})), "no presigned PUT while the bucket is down");

    s3.restart();
    eventually("the heartbeat is back", WAIT, || tier_healthy(&mut db.connect()));
    let (status, ctype, _) = request(&gw, "GET", &format!("/blobs/{only_id}"), "bob", None);
    assert_eq!((status, ctype.as_str()), (200, "application/json"));

    // Unreferenced blobs swept: their objects go too.
    conn.batch_execute("DELETE FROM public.notes").unwrap();
    let swept: i64 = conn.query_one("SELECT syncular.blob_sweep_orphans(0)", &[]).unwrap().get(0);
    assert_eq!(swept, 2);
    eventually("the objects were deleted", WAIT, || object_row(&db, &only_id).is_none() && object_row(&db, &both_id).is_none());
    // Credentials and signatures never reach a log line (the bucket went down and came back).
    let logs = gw.logs.lock().unwrap().join("\n");
    assert!(logs.contains("object store unreachable"), "the outage was logged");
    assert!(!logs.contains(s3.secret_access_key()) && !logs.contains("X-Amz-Signature") && !logs.contains("X-Amz-Credential"), "{logs}");
    let files = std::fs::read_dir(s3.object_path("t/blob")).map(|d| d.flat_map(|e| std::fs::read_dir(e.unwrap().path().join("sha256")).unwrap()).count()).unwrap_or(0);
    assert_eq!(files, 0, "no blob object left in the bucket");
}

/// `syncular-object-mover` on its own (beside a gateway without `--object-store-*`, as beside a
/// gateway in another language): the gateway's grants and downloads carry its bucket's URLs.
#[test]
fn the_standalone_mover_serves_a_gateway_without_one() {
    let db = Db::new("objalone");
    let s3 = S3Server::start();
    let gw = Gateway::start_with_dsn(&db.dsn, &["--auth", "dev"]);
    let bin = syncular_integration_tests::gateway::gateway_bin().with_file_name("syncular-object-mover");
    let endpoint = s3.endpoint();
    let mut mover = std::process::Command::new(&bin)
        .args(["--database-url", &db.dsn, "--object-store-endpoint", &endpoint, "--object-store-bucket", s3.bucket()])
        .args(["--object-store-prefix", "alone/", "--object-store-interval-ms", "100"])
        .env("SYNCULAR_OBJECT_STORE_ACCESS_KEY_ID", s3.access_key_id())
        .env("SYNCULAR_OBJECT_STORE_SECRET_ACCESS_KEY", s3.secret_access_key())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e} (cargo build -p syncular-gateway)", bin.display()));
    eventually("the standalone mover's heartbeat", WAIT, || tier_healthy(&mut db.connect()));
    let bytes = bytes_of(9, 10_000);
    let id = blob_id(&bytes);
    let (status, _, body) = request(&gw, "POST", &format!("/blobs/{id}/upload-grant"), "alice", Some(br#"{"byteLength": 10000}"#));
    assert_eq!(status, 200);
    let url = json_of(&body)["url"].as_str().expect("a presigned PUT from the standalone mover's bucket").to_owned();
    assert!(url.starts_with(&format!("{endpoint}/{}/alone/up/", s3.bucket())), "{url}");
    assert_eq!(presigned("PUT", &url, Some(&bytes)).0, 200);
    eventually("verified", WAIT, || blob_row(&db, &id).is_some());
    let mut conn = db.connect();
    conn.execute("SELECT pg_catalog.set_config('syncular.partition', $1, false)", &[&PARTITION]).unwrap();
    conn.execute("INSERT INTO public.notes (id, ws, title, att) VALUES ('n1', 'w1', 'n1', $1)", &[&format!(r#"{{"blobId":"{id}","byteLength":10000}}"#)])
        .unwrap();
    let (status, _, body) = request(&gw, "GET", &format!("/blobs/{id}"), "bob", None);
    assert_eq!(status, 200);
    assert_eq!(presigned("GET", json_of(&body)["url"].as_str().unwrap(), None), (200, bytes));
    // Stopped: SIGTERM → its last heartbeat is 0, presigning stops at once.
    unsafe { libc::kill(mover.id() as i32, libc::SIGTERM) };
    assert!(mover.wait().unwrap().success(), "a graceful stop");
    assert!(!tier_healthy(&mut db.connect()), "no presigning without a mover");
}
