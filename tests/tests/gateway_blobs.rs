//! Blobs through a running gateway over real sockets (SPEC §5.9, issue 13), in a database of
//! their own (schema `notes(id, ws, title, att blob_ref)` scoped by `ws:{ws}`, a resolver
//! granting alice and bob `w1`, carol `w2`, blob cap 64 KiB):
//! - the real `syncular-client` uploads a blob (grant → `{"present": false}` → `PUT`), pushes a
//!   row referencing it; bob (same scope) downloads the identical bytes; carol (another scope)
//!   is refused (403 `blob.forbidden` on the wire); a push naming a never-uploaded blob is
//!   `rejected` with `blob.not_found` and leaves nothing; hash mismatch 400, too large 413
//!   (declared and streamed), unknown 404, `If-None-Match` 304;
//! - the sweep racing a push that references the blob it sweeps: neither order lets a
//!   reference to a deleted blob commit; identical concurrent uploads both succeed, stored once.
//!
//! Needs `SYNCULAR_TEST_DSN` and the gateway binary (scripts/test builds it).

use std::io::{Read, Write};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use postgres::{Client, GenericClient};
use serde_json::{json, Value};
use syncular_client::SyncReport;
use syncular_integration_tests::gateway::{http_agent, wait_until, Gateway};
use syncular_integration_tests::blob_fixture::{blob_id, Db, NotesPeer, PARTITION};

/// Largest blob the gateway's sessions accept (`syncular.blob_max_bytes`).
const CAP: usize = 64 * 1024;
/// The blob tests' client ([`NotesPeer`]), failing the test on a failed sync.
struct Peer(NotesPeer);

impl Peer {
    fn new(gw: &Gateway, actor: &str) -> Peer {
        Peer(NotesPeer::new(&gw.base_url, actor))
    }

    fn write(&mut self, id: &str, ws: &str, att: Option<String>) -> String {
        self.0.write(id, ws, att)
    }

    fn sync(&mut self) -> SyncReport {
        self.0.sync().unwrap_or_else(|e| panic!("{e}"))
    }
}

impl std::ops::Deref for Peer {
    type Target = NotesPeer;
    fn deref(&self) -> &NotesPeer {
        &self.0
    }
}

impl std::ops::DerefMut for Peer {
    fn deref_mut(&mut self) -> &mut NotesPeer {
        &mut self.0
    }
}

/// `(status, headers, body)` of a raw request as actor `actor`.
fn raw(gw: &Gateway, method: &str, path: &str, actor: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let agent = http_agent();
    let url = format!("{}{path}", gw.base_url);
    let hdrs = |mut req: ureq::RequestBuilder<ureq::typestate::WithBody>| {
        req = req.header("x-syncular-actor", actor).header("x-syncular-partition", PARTITION);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req
    };
    let resp = match (method, body) {
        ("PUT", Some(b)) => hdrs(agent.put(&url)).send(b),
        ("POST", Some(b)) => hdrs(agent.post(&url)).send(b),
        ("GET", None) => {
            let mut req = agent.get(&url).header("x-syncular-actor", actor).header("x-syncular-partition", PARTITION);
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            req.call()
        }
        other => panic!("{other:?}"),
    }
    .expect("HTTP request");
    let status = resp.status().as_u16();
    let headers = resp.headers().iter().map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())).collect();
    let mut out = Vec::new();
    resp.into_body().into_reader().read_to_end(&mut out).unwrap();
    (status, headers, out)
}

fn code_of(body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(body)));
    v["code"].as_str().unwrap_or_default().to_owned()
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

fn gateway(db: &Db) -> Gateway {
    Gateway::start_with_dsn(&format!("{} options='-c syncular.blob_max_bytes={CAP}'", db.dsn), &["--auth", "dev"])
}

#[test]
fn real_clients_upload_reference_and_download_a_blob_scopes_decide_who_reads() {
    let db = Db::new("rt");
    let mut conn = db.connect();
    let gw = gateway(&db);
    // 40 KiB of bytes: several appends are not needed, one is; the client stores it locally.
    let bytes: Vec<u8> = (0..40 * 1024u32).map(|i| (i * 7 % 251) as u8).collect();
    let id = blob_id(&bytes);

    let mut alice = Peer::new(&gw, "alice");
    let att = alice.client.upload_blob(&bytes, Some("application/x-test".into()), Some("a.bin".into())).unwrap();
    let att = serde_json::to_string(&att).unwrap();
    let commit = alice.write("n1", "w1", Some(att.clone()));
    let report = alice.sync();
    assert!(report.applied.contains(&commit), "{report:?}");
    // Stored once, in 1 chunk, and referenced by the row.
    let row = conn.query_one("SELECT byte_length, chunk_count FROM syncular.sync_blobs WHERE partition = $1 AND blob_id = $2", &[&PARTITION, &id]).unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i32>(1)), (bytes.len() as i64, 1));
    let refs: i64 = conn.query_one("SELECT count(*) FROM syncular.sync_blob_refs WHERE partition = $1 AND blob_id = $2 AND row_id = 'n1'", &[&PARTITION, &id]).unwrap().get(0);
    assert_eq!(refs, 1);

    // bob holds w1: he pulls the row and downloads the identical bytes.
    let mut bob = Peer::new(&gw, "bob");
    bob.sync();
    let got = bob.0.client.fetch_blob(&mut bob.0.transport, &att).unwrap_or_else(|e| panic!("bob's download: {e:?}"));
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(got["bytes"]["$bytes"], json!(hex));
    // Raw: the headers of §5.9.5, and 304 for the ETag.
    let (status, headers, body) = raw(&gw, "GET", &format!("/blobs/{id}"), "bob", &[], None);
    assert_eq!(status, 200);
    assert!(body == bytes);
    assert_eq!(header(&headers, "etag"), Some(format!("\"{id}\"").as_str()));
    assert_eq!(header(&headers, "content-type"), Some("application/octet-stream"));
    assert_eq!(header(&headers, "cache-control"), Some("private, max-age=0"));
    let etag = format!("\"{id}\"");
    let (status, _, _) = raw(&gw, "GET", &format!("/blobs/{id}"), "bob", &[("if-none-match", &etag)], None);
    assert_eq!(status, 304);

    // carol holds w2 only: the blob id is not a capability.
    let mut carol = Peer::new(&gw, "carol");
    assert!(carol.0.client.fetch_blob(&mut carol.0.transport, &att).is_err(), "carol must not get the bytes");
    let (status, _, body) = raw(&gw, "GET", &format!("/blobs/{id}"), "carol", &[], None);
    assert_eq!((status, code_of(&body).as_str()), (403, "blob.forbidden"));
    let (status, _, body) = raw(&gw, "GET", &format!("/blobs/{}", blob_id(b"nobody")), "bob", &[], None);
    assert_eq!((status, code_of(&body).as_str()), (404, "blob.not_found"));

    // A push naming a blob never uploaded: rejected with blob.not_found, nothing stored.
    let ghost = format!(r#"{{"blobId":"{}","byteLength":5}}"#, blob_id(b"ghost"));
    let doomed = alice.write("n2", "w1", Some(ghost));
    let report = alice.sync();
    assert!(report.rejected.contains(&doomed), "{report:?}");
    let rejection = alice.client.rejections().iter().find(|r| r.client_commit_id == doomed).expect("rejection record").clone();
    assert_eq!(rejection.code, "blob.not_found");
    let n2: i64 = conn.query_one("SELECT count(*) FROM public.notes WHERE _sync_partition = $1 AND id = 'n2'", &[&PARTITION]).unwrap().get(0);
    assert_eq!(n2, 0);

    // The grant of a server that stores the bytes: present, or no URL.
    let (status, _, body) = raw(&gw, "POST", &format!("/blobs/{id}/upload-grant"), "dave", &[("content-type", "application/json")], Some(br#"{"byteLength": 40960}"#));
    assert_eq!((status, serde_json::from_slice::<Value>(&body).unwrap()), (200, json!({"present": true})));
    let (status, _, body) = raw(&gw, "POST", &format!("/blobs/{}/upload-grant", blob_id(b"new")), "dave", &[], Some(br#"{"byteLength": 3}"#));
    assert_eq!((status, serde_json::from_slice::<Value>(&body).unwrap()), (200, json!({"present": false})));
    let (status, _, body) = raw(&gw, "POST", &format!("/blobs/{}/upload-grant", blob_id(b"new")), "dave", &[], Some(format!(r#"{{"byteLength": {}}}"#, CAP + 1).as_bytes()));
    assert_eq!((status, code_of(&body).as_str()), (413, "blob.too_large"));
}

#[test]
fn uploads_verify_the_content_address_and_the_size_cap() {
    let db = Db::new("put");
    let mut conn = db.connect();
    let gw = gateway(&db);
    let stored = |conn: &mut Client| -> i64 { conn.query_one("SELECT count(*) FROM syncular.sync_blobs", &[]).unwrap().get(0) };
    // Hash mismatch: 400, nothing stored.
    let (status, _, body) = raw(&gw, "PUT", &format!("/blobs/{}", blob_id(b"x")), "a", &[], Some(b"y"));
    assert_eq!((status, code_of(&body).as_str()), (400, "blob.hash_mismatch"));
    assert_eq!(stored(&mut conn), 0);
    // Right bytes: 200, empty body; again: 200 (idempotent), stored once.
    for _ in 0..2 {
        let (status, _, body) = raw(&gw, "PUT", &format!("/blobs/{}", blob_id(b"x")), "a", &[], Some(b"x"));
        assert_eq!((status, body.len()), (200, 0));
    }
    assert_eq!(stored(&mut conn), 1);
    // Over the cap by Content-Length: 413 before the body is stored.
    let big = vec![7u8; CAP + 1];
    let (status, _, body) = raw(&gw, "PUT", &format!("/blobs/{}", blob_id(&big)), "a", &[], Some(&big));
    assert_eq!((status, code_of(&body).as_str()), (413, "blob.too_large"));
    // Over the cap only once decoded (gzip: no declared size of the bytes): 413 on the count.
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(&big).unwrap();
    let gz = enc.finish().unwrap();
    let (status, _, body) = raw(&gw, "PUT", &format!("/blobs/{}", blob_id(&big)), "a", &[("content-encoding", "gzip")], Some(&gz));
    assert_eq!((status, code_of(&body).as_str()), (413, "blob.too_large"));
    // Exactly the cap, gzip-encoded: stored (the hash is over the decoded bytes).
    let fits = vec![9u8; CAP];
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(&fits).unwrap();
    let gz = enc.finish().unwrap();
    let (status, _, _) = raw(&gw, "PUT", &format!("/blobs/{}", blob_id(&fits)), "a", &[("content-encoding", "gzip")], Some(&gz));
    assert_eq!(status, 200);
    assert_eq!(stored(&mut conn), 2);
    // A transaction that would commit an unfinished upload fails: no chunk without its blob.
    let id = blob_id(b"unfinished");
    let mut tx = conn.transaction().unwrap();
    tx.query_one("SELECT syncular.blob_upload_begin('blobs', $1)", &[&id]).unwrap();
    tx.query_one("SELECT syncular.blob_upload_append('blobs', $1, 'unfin'::bytea)", &[&id]).unwrap();
    let err = tx.commit().unwrap_err();
    assert!(err.to_string().contains("syncular.invalid_argument") || format!("{err:?}").contains("not finished"), "{err:?}");
    let chunks: i64 = conn.query_one("SELECT count(*) FROM syncular.sync_blob_chunks WHERE blob_id = $1", &[&id]).unwrap().get(0);
    assert_eq!(chunks, 0);
    let (status, _, body) = raw(&gw, "PUT", "/blobs/not-an-id", "a", &[], Some(b"x"));
    assert_eq!((status, code_of(&body).as_str()), (400, "sync.invalid_request"));
    let (status, _, body) = raw(&gw, "PUT", &format!("/blobs/{}", blob_id(b"x")), "", &[], Some(b"x"));
    assert_eq!((status, code_of(&body).as_str()), (401, "sync.auth_required"));
}

/// `syncular.commit` of note `id` referencing the blob of `bytes`; the result JSON.
fn commit_note(c: &mut impl GenericClient, id: &str, bytes: &[u8]) -> Value {
    let ops = json!([{"table": "notes", "row": {"id": id, "ws": "w1", "att": {"blobId": blob_id(bytes), "byteLength": bytes.len()}}}]);
    c.query_one("SELECT syncular.commit($1, 'svc', $2::text::jsonb, allowed_scopes => '{\"ws\": [\"*\"]}')", &[&PARTITION, &ops.to_string()])
        .unwrap()
        .get(0)
}

fn put(c: &mut Client, bytes: &[u8]) {
    c.execute("SELECT syncular.blob_put($1, $2, $3)", &[&PARTITION, &blob_id(bytes), &bytes]).unwrap();
}

fn present(c: &mut Client, bytes: &[u8]) -> bool {
    c.query_one("SELECT count(*) FROM syncular.sync_blobs WHERE partition = $1 AND blob_id = $2", &[&PARTITION, &blob_id(bytes)]).unwrap().get::<_, i64>(0) == 1
}

#[test]
fn the_sweep_and_a_push_referencing_the_swept_blob_never_both_win() {
    let db = Db::new("race");
    let mut a = db.connect();
    let mut b = db.connect();
    // The sweeper's clock is far ahead: every blob is past any grace period for it.
    b.batch_execute("SET syncular.now_ms = '4102444800000'").unwrap();
    // Push first: it holds the blob (checked, not yet committed); the sweep skips it.
    put(&mut a, b"orphan one");
    let mut tx = a.transaction().unwrap();
    let out = commit_note(&mut tx, "n1", b"orphan one");
    assert_eq!(out["status"], "applied", "{out}");
    let swept: i64 = b.query_one("SELECT syncular.blob_sweep_orphans(0)", &[]).unwrap().get(0);
    assert_eq!(swept, 0, "a blob a pending push references is skipped, not waited for");
    tx.commit().unwrap();
    let swept: i64 = b.query_one("SELECT syncular.blob_sweep_orphans(0)", &[]).unwrap().get(0);
    assert_eq!(swept, 0, "a referenced blob is never swept");
    assert!(present(&mut b, b"orphan one"));

    // Sweep first: it deleted the blob (not yet committed); the push waits for it, then finds
    // the blob gone and is rejected with blob.not_found — no reference to missing bytes.
    put(&mut a, b"orphan two");
    let mut sweep = b.transaction().unwrap();
    let swept: i64 = sweep.query_one("SELECT syncular.blob_sweep_orphans(0)", &[]).unwrap().get(0);
    assert_eq!(swept, 1);
    let pid: i32 = a.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let (done_tx, done) = mpsc::channel();
    let pusher = thread::spawn(move || {
        let out = commit_note(&mut a, "n2", b"orphan two");
        done_tx.send(()).unwrap();
        (a, out)
    });
    let mut watcher = db.connect();
    wait_until("the push waits for the sweep's lock", || {
        watcher
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", &[&pid])
            .unwrap()
            .get::<_, i64>(0)
            == 1
    });
    assert!(done.recv_timeout(Duration::from_millis(0)).is_err(), "the push must wait");
    sweep.commit().unwrap();
    let (mut a, out) = pusher.join().unwrap();
    assert_eq!(out["status"], "rejected", "{out}");
    assert_eq!(out["results"][0]["code"], "blob.not_found", "{out}");
    let refs: i64 = a.query_one("SELECT count(*) FROM syncular.sync_blob_refs WHERE row_id = 'n2'", &[]).unwrap().get(0);
    assert_eq!(refs, 0);
    assert!(!present(&mut a, b"orphan two"));
}

#[test]
fn identical_concurrent_uploads_both_succeed_and_store_once() {
    let db = Db::new("twice");
    let mut a = db.connect();
    let mut b = db.connect();
    let bytes = b"the same bytes, twice".to_vec();
    let id = blob_id(&bytes);
    // A is half-way through its upload when B uploads the same blob: B waits for A's transaction.
    let mut tx = a.transaction().unwrap();
    let present: bool = tx.query_one("SELECT syncular.blob_upload_begin('blobs', $1)", &[&id]).unwrap().get(0);
    assert!(!present);
    tx.query_one("SELECT syncular.blob_upload_append('blobs', $1, $2)", &[&id, &&bytes[..]]).unwrap();
    let pid: i32 = b.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let (id2, bytes2) = (id.clone(), bytes.clone());
    let second = thread::spawn(move || {
        let out: Value = b.query_one("SELECT syncular.blob_put('blobs', $1, $2)", &[&id2, &bytes2]).unwrap().get(0);
        out
    });
    let mut watcher = db.connect();
    wait_until("the second upload waits for the first", || {
        watcher
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", &[&pid])
            .unwrap()
            .get::<_, i64>(0)
            == 1
    });
    let first: Value = tx.query_one("SELECT syncular.blob_upload_finish('blobs', $1)", &[&id]).unwrap().get(0);
    tx.commit().unwrap();
    let second = second.join().unwrap();
    assert_eq!(first["stored"], true, "{first}");
    assert_eq!(second["stored"], false, "{second}");
    let (blobs, chunks): (i64, i64) = {
        let r = watcher
            .query_one(
                "SELECT (SELECT count(*) FROM syncular.sync_blobs WHERE blob_id = $1), (SELECT count(*) FROM syncular.sync_blob_chunks WHERE blob_id = $1)",
                &[&id],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((blobs, chunks), (1, 1), "stored once");
}
