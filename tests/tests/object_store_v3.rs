//! The object-store tier (docs/src/operate/object-store.md) with the wire-version-3 client
//! (`syncular-client = "=0.49.2"`, run by the fleet's v3 driver: it cannot link into this crate),
//! against a real S3 server (`s3s-fs`) and a gateway whose mover copies and verifies:
//! - bootstraps of `SYNCULAR_OBJECT_STORE_ROWS` rows (default 100,000) on the page lane, the
//!   SQLite image lane and the client's default `accept`, and of `SYNCULAR_OBJECT_STORE_BIG_ROWS`
//!   (default 1,000,000) on the image lane: once the mover copied
//!   the segments a first client built, a client with signed-URL fetches on takes every segment
//!   from the bucket's presigned URLs (the gateway's direct endpoint serves nothing) and holds
//!   exactly the server's rows; with them off it keeps the direct endpoint;
//! - blobs: a 0.49.2 client uploads by presigned PUT (no byte enters Postgres) and pushes the
//!   row referencing it; another 0.49.2 client of the same scope, and a 0.15.48 one, download it
//!   by presigned GET; a blob a 0.15.48 client uploaded the same way reaches a 0.49.2 client.
//!
//! Needs `SYNCULAR_TEST_DSN`, the gateway binary, both drivers (`SYNCULAR_CLIENT_V3_DRIVER`) and
//! `s3s-fs` (scripts/setup installs it).

use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{json, Map, Value};
use syncular_integration_tests::blob_fixture::{self, blob_id, Db};
use syncular_integration_tests::fixtures::{server_tasks, ServerTask};
use syncular_integration_tests::fleet::{as_server_tasks, FleetClient, Generation, Limits, Open};
use syncular_integration_tests::gateway::Gateway;
use syncular_integration_tests::object_store_fixture::{env_rows, eventually, segments_all_stored, serial, tier_gateway, tier_gateway_on, TierDb};
use syncular_integration_tests::s3_fixture::S3Server;

const PARTITION: &str = "objects_v3";
const WAIT: Duration = Duration::from_secs(120);
/// Rows per snapshot page (and per round's budget of the page lane).
const PAGE: i32 = 50_000;

fn rows() -> i64 {
    env_rows("SYNCULAR_OBJECT_STORE_ROWS", 100_000)
}

/// The database (seeded once per test binary) and the server's rows.
fn loaded() -> &'static (TierDb, Vec<ServerTask>) {
    static LOADED: OnceLock<(TierDb, Vec<ServerTask>)> = OnceLock::new();
    LOADED.get_or_init(|| {
        let db = TierDb::new("v3seg");
        db.seed_tasks(PARTITION, "alice", rows());
        let server = server_tasks(&mut db.connect(), PARTITION).unwrap();
        assert_eq!(server.len() as i64, rows());
        (db, server)
    })
}


fn direct_served(gw: &Gateway) -> f64 {
    gw.metric("syncular_gateway_http_requests_total{route=\"/segments/{id}\",status=\"200\"")
}

/// Requests of the direct endpoint with any status.
fn direct_requests(gw: &Gateway) -> f64 {
    gw.metric("syncular_gateway_http_requests_total{route=\"/segments/{id}\"")
}

/// A v3 client of alice subscribed to `p1`, with `accept` (`None`: the client's default) and
/// signed-URL fetches on or off.
fn v3_tasks_client(gw: &Gateway, label: &str, accept: Option<u8>, signed_urls: bool) -> FleetClient {
    let limits = Limits { accept, limit_snapshot_rows: Some(PAGE), ..Limits::default() };
    let mut c = FleetClient::spawn_opts(Generation::V3, &gw.base_url, PARTITION, "alice", label, Open { limits, signed_urls, schema: None });
    c.subscribe_projects("s", &["p1"]);
    c
}

/// Rounds (a few per command, so one command stays well within the driver's reply bound) until
/// idle; asserts the client holds exactly the server's rows, every one applied from a snapshot
/// segment.
fn bootstrap(c: &mut FleetClient, gw: &Gateway) {
    let budget = 2 * (rows() as u32).div_ceil(PAGE as u32) + 20;
    let mut rounds = 0;
    let mut segment_rows = 0u64;
    loop {
        let done = c.sync_idle(4).unwrap_or_else(|f| panic!("{}: {f}\ngateway logs:\n{}", c.name(), gw.logs.lock().unwrap().join("\n")));
        segment_rows += u64::from(done.report.segment_rows_applied);
        if done.idle {
            break;
        }
        rounds += 4;
        assert!(rounds < budget, "{}: not idle after {rounds} rounds", c.name());
    }
    let (_, server) = loaded();
    let held = as_server_tasks(&c.tasks());
    assert_eq!(held.len(), server.len(), "{}: row count", c.name());
    assert!(held == *server, "{}: the client holds exactly the server's rows", c.name());
    assert_eq!(segment_rows, server.len() as u64, "{}: every row from the snapshot", c.name());
}

/// Per lane: a first client fills the segment cache (served by Postgres: the bucket is empty);
/// once the mover copied the segments, a client with signed-URL fetches takes them all from the
/// bucket; one without keeps the direct endpoint (§5.5).
#[test]
fn the_v3_client_bootstraps_through_presigned_segment_urls() {
    let _serial = serial();
    let (db, _) = loaded();
    let s3 = S3Server::start();
    let gw = tier_gateway(db, &s3, &[]);
    // `None`: 0.49.2's default accept (rows inline, external, SQLite) plus bit 3 from the
    // transport's signed-URL capability; it reuses the image lane's segments.
    for (lane, accept) in [("pages", Some(0b1010u8)), ("image", Some(0b1110)), ("default", None)] {
        let before = direct_served(&gw);
        let mut first = v3_tasks_client(&gw, &format!("first-{lane}"), accept, true);
        bootstrap(&mut first, &gw);
        first.close();
        if accept.is_some() {
            // New segments of this lane: the bucket does not hold them yet, Postgres serves.
            assert!(direct_served(&gw) > before, "{lane}: the first bootstrap is served by the direct endpoint");
        }
        eventually("the mover copied every published segment", WAIT, || segments_all_stored(&mut db.connect()));
        let (before, requests) = (direct_served(&gw), direct_requests(&gw));
        let mut second = v3_tasks_client(&gw, &format!("second-{lane}"), accept, true);
        bootstrap(&mut second, &gw);
        second.close();
        assert_eq!(direct_served(&gw), before, "{lane}: the gateway's direct endpoint served no segment");
        assert_eq!(direct_requests(&gw), requests, "{lane}: nor was it asked for one");
        let Some(accept) = accept else { continue };
        // Without bit 3 and without URL fetches: the direct endpoint, served from Postgres.
        let before = direct_served(&gw);
        let mut direct = v3_tasks_client(&gw, &format!("direct-{lane}"), Some(accept & !0b1000), false);
        bootstrap(&mut direct, &gw);
        direct.close();
        assert!(direct_served(&gw) > before, "{lane}: without bit 3 the direct endpoint serves");
    }
}

/// 1,000,000 rows (`SYNCULAR_OBJECT_STORE_BIG_ROWS`) on the image lane: a first 0.49.2 client's
/// bootstrap is served by Postgres; once the mover copied the image, a second one takes all of it
/// from the bucket through one presigned URL and holds exactly the server's rows.
#[test]
fn a_million_rows_reach_the_v3_client_through_a_presigned_image_url() {
    let big = env_rows("SYNCULAR_OBJECT_STORE_BIG_ROWS", 1_000_000);
    let _serial = serial();
    let (db, _) = loaded();
    let partition = "objects_v3_big";
    db.seed_tasks(partition, "alice", big);
    let server = server_tasks(&mut db.connect(), partition).unwrap();
    let s3 = S3Server::start();
    let gw = tier_gateway(db, &s3, &[]);
    let client = |label: &str| {
        let limits = Limits { accept: Some(0b1110), limit_snapshot_rows: Some(PAGE), ..Limits::default() };
        let open = Open { limits, signed_urls: true, schema: None };
        let mut c = FleetClient::spawn_opts(Generation::V3, &gw.base_url, partition, "alice", label, open);
        c.subscribe_projects("s", &["p1"]);
        let mut rounds = 0;
        while !c.sync_idle(4).unwrap_or_else(|f| panic!("{label}: {f}")).idle {
            rounds += 4;
            assert!(rounds < 100, "{label}: not idle after {rounds} rounds");
        }
        c
    };
    let before = direct_served(&gw);
    client("big-first").close();
    assert!(direct_served(&gw) > before, "the first bootstrap is served by Postgres");
    eventually("the mover copied the image", WAIT, || segments_all_stored(&mut db.connect()));
    let before = direct_requests(&gw);
    let mut second = client("big-second");
    assert_eq!(direct_requests(&gw), before, "the million-row image came from the bucket");
    let held = as_server_tasks(&second.tasks());
    assert_eq!(held.len() as i64, big, "row count");
    assert!(held == server, "the v3 client holds exactly the server's rows");
    second.close();
}

// -- blobs ---------------------------------------------------------------------------------------

/// A client of `actor` on the blob schema, subscribed to its workspace (`w1` for alice and bob).
fn notes_client(generation: Generation, gw: &Gateway, actor: &str, client_id: &str) -> FleetClient {
    let open = Open { schema: Some(blob_fixture::ir()), signed_urls: true, ..Open::default() };
    let mut c = FleetClient::spawn_opts(generation, &gw.base_url, blob_fixture::PARTITION, actor, client_id, open);
    c.subscribe("notes", "notes", &[("ws", &["w1"][..])]);
    c.synced(4);
    c
}

/// One commit writing note `id` of `w1` with attachment `att` (a BlobRef's JSON text).
fn write_note(c: &mut FleetClient, id: &str, att: &Value) -> String {
    let values: Map<String, Value> =
        [("id", json!(id)), ("ws", json!("w1")), ("title", json!(id)), ("att", json!(att.to_string()))]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
    c.upsert_into("notes", values, None)
}

/// `(byte_length, chunk_count)` of the blob's record, and its object's `in_postgres`.
fn stored(db: &Db, id: &str) -> (Option<(i64, i32)>, Option<bool>) {
    let mut c = db.connect();
    let blob = c
        .query_opt("SELECT byte_length, chunk_count FROM syncular.sync_blobs WHERE partition = $1 AND blob_id = $2", &[&blob_fixture::PARTITION, &id])
        .unwrap()
        .map(|r| (r.get(0), r.get(1)));
    let object = c
        .query_opt("SELECT in_postgres FROM syncular.sync_blob_objects WHERE partition = $1 AND blob_id = $2", &[&blob_fixture::PARTITION, &id])
        .unwrap()
        .map(|r| r.get(0));
    (blob, object)
}

fn blob_requests(gw: &Gateway, route: &str) -> f64 {
    gw.metric(&format!("syncular_gateway_http_requests_total{{route=\"{route}\",status=\"200\""))
}

fn bytes_of(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// The uploader stages a blob, writes a note referencing it and syncs: one grant, the bytes by
/// presigned PUT straight into the bucket (none through the gateway, none in Postgres), the
/// commit applied. Returns the BlobRef.
fn upload_and_push(up: &mut FleetClient, gw: &Gateway, db: &Db, bytes: &[u8], media_type: Option<&str>, note: &str) -> Value {
    let grants = blob_requests(gw, "/blobs/{id}/upload-grant");
    let att = up.upload_blob(bytes, media_type, Some("a.bin"));
    let id = blob_id(bytes);
    assert_eq!(att["blobId"], json!(id), "{}: the content address", up.name());
    assert_eq!(att["byteLength"], json!(bytes.len()));
    let commit = write_note(up, note, &att);
    up.synced(8);
    assert!(up.pending().is_empty(), "{}: the note referencing the blob was pushed", up.name());
    assert_eq!(up.outcome(&commit)["status"], "applied", "{}: {}", up.name(), up.outcome(&commit));
    assert_eq!(blob_requests(gw, "/blobs/{id}/upload-grant"), grants + 1.0, "{}: one upload grant", up.name());
    assert_eq!(stored(db, &id), (Some((bytes.len() as i64, 0)), Some(false)), "{}: verified, the bucket holds the only copy", up.name());
    let chunks: i64 = db
        .connect()
        .query_one("SELECT count(*) FROM syncular.sync_blob_chunks WHERE blob_id = $1", &[&id])
        .unwrap()
        .get(0);
    assert_eq!(chunks, 0, "no byte of the blob went into Postgres");
    att
}

/// A client that never held the blob downloads it (the gateway answers a presigned GET: the
/// bytes are only in the bucket) and gets identical bytes.
fn download(down: &mut FleetClient, gw: &Gateway, note: &str, att: &Value, bytes: &[u8]) {
    let held = down.rows("notes").into_iter().find(|r| r.row_id == note).unwrap_or_else(|| panic!("{}: holds {note}", down.name()));
    let held_ref: Value = serde_json::from_str(held.values["att"].as_str().expect("att is the BlobRef's JSON text")).unwrap();
    assert_eq!(held_ref["blobId"], att["blobId"], "{}: the row references the blob", down.name());
    let served = blob_requests(gw, "/blobs/{id}");
    let got = down.fetch_blob(&held_ref).unwrap_or_else(|e| panic!("{}: download: {e}\ngateway logs:\n{}", down.name(), gw.logs.lock().unwrap().join("\n")));
    assert!(got == bytes, "{}: identical bytes ({} of {})", down.name(), got.len(), bytes.len());
    assert_eq!(blob_requests(gw, "/blobs/{id}"), served + 1.0, "{}: one authorized GET /blobs/{{id}}", down.name());
}

#[test]
fn v3_clients_upload_by_presigned_put_and_download_by_presigned_get() {
    let db = Db::new("objv3");
    let s3 = S3Server::start();
    let gw = tier_gateway_on(&db.dsn, &s3, &["--object-store-check-after-ms", "2000"]);
    let mut alice = notes_client(Generation::V3, &gw, "alice", "alice-v3");
    let bytes = bytes_of(9, 300_000);
    let att = upload_and_push(&mut alice, &gw, &db, &bytes, Some("application/x-test"), "n1");
    assert_eq!(att["mediaType"], "application/x-test");
    assert_eq!(blob_requests(&gw, "/blobs/{id}"), 0.0, "no PUT /blobs/{{id}} through the gateway");

    let mut bob = notes_client(Generation::V3, &gw, "bob", "bob-v3");
    download(&mut bob, &gw, "n1", &att, &bytes);
    // A second read is the client's cache: no request.
    let served = blob_requests(&gw, "/blobs/{id}");
    assert!(bob.fetch_blob(&att).unwrap() == bytes);
    assert_eq!(blob_requests(&gw, "/blobs/{id}"), served, "a cached blob is not fetched again");
    // The 0.15.48 client reads the same blob the same way.
    let mut bob_v2 = notes_client(Generation::V2, &gw, "bob", "bob-v2");
    download(&mut bob_v2, &gw, "n1", &att, &bytes);
    for c in [alice, bob, bob_v2] {
        c.close();
    }
}

#[test]
fn a_blob_a_v2_client_uploaded_by_presigned_put_reaches_a_v3_client() {
    let db = Db::new("objv2v3");
    let s3 = S3Server::start();
    let gw = tier_gateway_on(&db.dsn, &s3, &["--object-store-check-after-ms", "2000"]);
    let mut alice = notes_client(Generation::V2, &gw, "alice", "alice-v2");
    let bytes = bytes_of(11, 70_000);
    // No mediaType: the grant request carries none (0.49.2 would send `"mediaType": null`).
    let att = upload_and_push(&mut alice, &gw, &db, &bytes, None, "n2");
    assert!(att.get("mediaType").is_none());
    let mut bob = notes_client(Generation::V3, &gw, "bob", "bob-v3");
    download(&mut bob, &gw, "n2", &att, &bytes);
    for c in [alice, bob] {
        c.close();
    }
}
