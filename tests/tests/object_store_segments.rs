//! Bootstrap segments through the object-store tier (issue 28; docs/src/operate/object-store.md),
//! against a real S3 server (`s3s-fs`, [`S3Server`]) and a gateway whose mover copies the bytes:
//! - the real client (`syncular-client = "=0.15.48"`) bootstraps `SYNCULAR_OBJECT_STORE_ROWS`
//!   rows (default 100,000) on the page lane and the SQLite image lane, and a partition of
//!   `SYNCULAR_OBJECT_STORE_BIG_ROWS` (default 1,000,000) on the image lane; once the mover
//!   copied the segments, every
//!   `SEGMENT_REF` of a client advertising `accept` bit 3 carries a presigned URL of the bucket
//!   (`/{bucket}/t/seg/sha256/{hex}`, SigV4, ≤ 15 min), fetched with no credentials, and the
//!   gateway's direct endpoint serves nothing — over HTTP through the gateway and through the
//!   SQL API alike; the client ends with exactly the server's rows;
//! - the bucket down: presigning stops (heartbeat) and Postgres serves the bytes; back up: URLs again;
//! - an object deleted behind the mover's back: found by its HEAD, copied again, URLs again;
//! - an object replaced behind its back: the client's hash check refuses it (the round fails),
//!   the mover finds the other ETag and copies the bytes again, and the next pull succeeds.
//!
//! Needs `SYNCULAR_TEST_DSN`, the gateway binary and `s3s-fs` (scripts/setup installs it).

use std::sync::OnceLock;
use std::time::Duration;

use ssp2::model::Frame;
use syncular_client::{ClientLimits, SyncClient, SyncOutcome};
use syncular_integration_tests::capture::held_tasks;
use syncular_integration_tests::clients::subscribe_projects;
use syncular_integration_tests::fixtures::{schema_ir, server_tasks, ServerTask};
use syncular_integration_tests::gateway::{Gateway, Peer};
use syncular_integration_tests::object_store_fixture::{env_rows, eventually, segments_all_stored, serial, tier_gateway, tier_healthy, TierDb};
use syncular_integration_tests::s3_fixture::S3Server;
use syncular_integration_tests::transport::PgTransport;
use syncular_integration_tests::wire::decode_response;

const PARTITION: &str = "objects";
const WAIT: Duration = Duration::from_secs(60);

fn rows() -> i64 {
    env_rows("SYNCULAR_OBJECT_STORE_ROWS", 100_000)
}

/// The database (seeded once per test binary) and the server's rows.
fn loaded() -> &'static (TierDb, Vec<ServerTask>) {
    static LOADED: OnceLock<(TierDb, Vec<ServerTask>)> = OnceLock::new();
    LOADED.get_or_init(|| {
        let db = TierDb::new("seg");
        db.seed_tasks(PARTITION, "alice", rows());
        let server = server_tasks(&mut db.connect(), PARTITION).unwrap();
        assert_eq!(server.len() as i64, rows());
        (db, server)
    })
}


fn client(client_id: &str, accept: u8) -> SyncClient {
    let limits = ClientLimits { accept: Some(accept), limit_snapshot_rows: Some(50_000), ..ClientLimits::default() };
    let mut c = SyncClient::new(client_id.to_owned(), &schema_ir(), limits).expect("client");
    subscribe_projects(&mut c, "s", &["p1"]).unwrap();
    c
}

fn direct_served(gw: &Gateway) -> f64 {
    gw.metric("syncular_gateway_http_requests_total{route=\"/segments/{id}\",status=\"200\"")
}

/// A bootstrap over HTTP through `gw` with URL fetches on; asserts the client's rows.
fn bootstrap_http(gw: &Gateway, label: &str, accept: u8) {
    let (_, server) = loaded();
    let mut peer = Peer::new(&gw.base_url, PARTITION, "alice", label);
    peer.client = client(label, accept);
    peer.transport.set_signed_urls(accept & 0b1000 != 0);
    peer.sync_idle(200).unwrap_or_else(|e| panic!("{label}: {e}\ngateway logs:\n{}", gw.logs.lock().unwrap().join("\n")));
    let held = held_tasks(&peer.client).unwrap();
    assert_eq!(held.len(), server.len(), "{label}: row count");
    assert!(held == *server, "{label}: the client holds exactly the server's rows");
}

/// A bootstrap through the SQL API (URL fetches on); the `SEGMENT_REF` URLs it was sent and
/// the outcome.
fn bootstrap_sql(db: &TierDb, label: &str, accept: u8) -> (Vec<String>, Result<(), String>) {
    let mut c = client(label, accept);
    let mut t = PgTransport::new(db.connect(), PARTITION, "alice", None).with_url_fetch();
    let outcome = match c.sync_until_idle(&mut t, Some(200)) {
        SyncOutcome::Ok(_) => {
            let (_, server) = loaded();
            let held = held_tasks(&c).unwrap();
            assert!(held == *server, "{label}: the client holds exactly the server's rows");
            Ok(())
        }
        SyncOutcome::Failed { error_code, message } => Err(format!("{error_code}: {message}")),
    };
    let mut urls = Vec::new();
    for bytes in &t.responses {
        for frame in decode_response(bytes).unwrap().frames {
            if let Frame::SegmentRef { url: Some(url), url_expires_at_ms, .. } = frame {
                let expires = url_expires_at_ms.expect("urlExpiresAtMs goes with url (§5.4)");
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
                assert!(expires > now && expires <= now + 900_000 + 1_000, "{label}: URL lifetime ≤ 15 min: {}", expires - now);
                urls.push(url);
            }
        }
    }
    assert_eq!(urls, t.fetched_urls, "{label}: every URL sent was fetched, nothing else");
    (urls, outcome)
}

fn is_bucket_url(s3: &S3Server, url: &str) -> bool {
    url.starts_with(&format!("{}/{}/t/seg/sha256/", s3.endpoint(), s3.bucket())) && url.contains("X-Amz-Signature=")
}

/// A first client fills the segment cache (served by Postgres: nothing is in the bucket yet);
/// once the mover copied the segments, later clients get the bucket's presigned URLs.
#[test]
fn real_clients_bootstrap_through_presigned_segment_urls() {
    let _serial = serial();
    let (db, _) = loaded();
    let s3 = S3Server::start();
    let gw = tier_gateway(db, &s3, &[]);
    for (lane, accept) in [("pages", 0b1010u8), ("image", 0b1110)] {
        bootstrap_http(&gw, &format!("first-{lane}"), accept);
        eventually("the mover copied every published segment", WAIT, || segments_all_stored(&mut db.connect()));
        let before = direct_served(&gw);
        bootstrap_http(&gw, &format!("second-{lane}"), accept);
        assert_eq!(direct_served(&gw), before, "{lane}: the gateway's direct endpoint served no segment");
        let (urls, outcome) = bootstrap_sql(db, &format!("sql-{lane}"), accept);
        outcome.unwrap_or_else(|e| panic!("{lane}: {e}"));
        assert!(!urls.is_empty(), "{lane}: segments by reference");
        assert!(urls.iter().all(|u| is_bucket_url(&s3, u)), "{lane}: every URL is the bucket's: {urls:?}");
        // A client without bit 3 keeps the direct endpoint (§5.5), served from Postgres.
        let before = direct_served(&gw);
        bootstrap_http(&gw, &format!("direct-{lane}"), accept & !0b1000);
        assert!(direct_served(&gw) > before, "{lane}: without bit 3 the direct endpoint serves");
    }
}

/// The bucket down: the heartbeat lapses and Postgres serves every byte; back up: URLs again.
#[test]
fn the_bucket_down_falls_back_to_postgres_and_back() {
    let _serial = serial();
    let (db, _) = loaded();
    let mut s3 = S3Server::start();
    let gw = tier_gateway(db, &s3, &[]);
    bootstrap_http(&gw, "down-fill", 0b1110);
    eventually("segments copied", WAIT, || segments_all_stored(&mut db.connect()));
    s3.stop();
    eventually("the heartbeat lapsed", WAIT, || !tier_healthy(&mut db.connect()));
    let (urls, outcome) = bootstrap_sql(db, "down-sql", 0b1110);
    outcome.expect("a bootstrap while the bucket is down");
    assert!(urls.is_empty(), "no presigned URL while the bucket is down: {urls:?}");
    let before = direct_served(&gw);
    bootstrap_http(&gw, "down-http", 0b1110);
    assert!(direct_served(&gw) > before, "Postgres served the segments");
    s3.restart();
    eventually("the heartbeat is back", WAIT, || tier_healthy(&mut db.connect()));
    let (urls, outcome) = bootstrap_sql(db, "up-sql", 0b1110);
    outcome.expect("a bootstrap once the bucket is back");
    assert!(!urls.is_empty() && urls.iter().all(|u| is_bucket_url(&s3, u)), "URLs again: {urls:?}");
}

/// An object deleted, then one replaced behind the mover's back.
#[test]
fn objects_deleted_or_replaced_behind_our_back_are_copied_again() {
    let _serial = serial();
    let (db, _) = loaded();
    let s3 = S3Server::start();
    let gw = tier_gateway(db, &s3, &["--object-store-check-after-ms", "3000"]);
    bootstrap_http(&gw, "gone-fill", 0b1110);
    eventually("segments copied", WAIT, || segments_all_stored(&mut db.connect()));
    let (urls, outcome) = bootstrap_sql(db, "gone-before", 0b1110);
    outcome.expect("bootstrap");
    let key = |url: &str| url.split('?').next().unwrap().split(&format!("/{}/", s3.bucket())).nth(1).unwrap().to_owned();
    let image_key = key(&urls[0]);
    let etag = |c: &mut postgres::Client| -> Option<String> {
        let id = format!("sha256:{}", image_key.rsplit('/').next().unwrap());
        c.query_opt("SELECT etag FROM syncular.sync_segment_objects WHERE segment_id = $1", &[&id]).unwrap().map(|r| r.get(0))
    };
    let stored_etag = etag(&mut db.connect()).expect("recorded");

    // Deleted: the HEAD finds it absent; the row goes (no URL), the mover copies it again.
    std::fs::remove_file(s3.object_path(&image_key)).unwrap();
    eventually("the object was copied again", WAIT, || s3.object_path(&image_key).exists() && etag(&mut db.connect()).is_some());
    let (_, outcome) = bootstrap_sql(db, "gone-after", 0b1110);
    outcome.expect("bootstrap after the copy");

    // Replaced through the bucket's own API (another ETag): fetched before the mover's next
    // HEAD, the client's §5.1 hash check refuses it; then the mover copies the bytes again.
    // Right after one of the mover's HEADs of it (the next one is ≥ 3 s away).
    let checked_at = |c: &mut postgres::Client| -> i64 {
        let id = format!("sha256:{}", image_key.rsplit('/').next().unwrap());
        c.query_opt("SELECT checked_at_ms FROM syncular.sync_segment_objects WHERE segment_id = $1", &[&id]).unwrap().map_or(0, |r| r.get(0))
    };
    let seen = checked_at(&mut db.connect());
    eventually("a fresh HEAD of the object", WAIT, || checked_at(&mut db.connect()) > seen);
    assert_eq!(etag(&mut db.connect()).as_deref(), Some(stored_etag.as_str()), "the same bytes were copied again");
    let url = {
        use rusty_s3::S3Action;
        s3.s3_bucket().put_object(Some(&s3.credentials()), &image_key).sign(Duration::from_secs(60))
    };
    let original = std::fs::read(s3.object_path(&image_key)).unwrap();
    let mut tampered = original.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 0xff;
    let status = syncular_integration_tests::s3_fixture::agent().put(url.as_str()).send(&tampered[..]).unwrap().status().as_u16();
    assert_eq!(status, 200, "tampered through the S3 API");
    let (_, outcome) = bootstrap_sql(db, "tampered", 0b1110);
    let err = outcome.expect_err("a replaced object must fail the client's hash check");
    assert!(!err.is_empty());
    eventually("the mover copied the right bytes again", WAIT, || std::fs::read(s3.object_path(&image_key)).unwrap() == original);
    eventually("recorded again", WAIT, || etag(&mut db.connect()).is_some());
    let (urls, outcome) = bootstrap_sql(db, "repaired", 0b1110);
    outcome.expect("the next pull recovers");
    assert!(urls.iter().all(|u| is_bucket_url(&s3, u)) && !urls.is_empty());
}

/// 1,000,000 rows (`SYNCULAR_OBJECT_STORE_BIG_ROWS`) through one presigned image URL: the first
/// bootstrap is served by Postgres, the second entirely by the bucket.
#[test]
fn a_million_rows_bootstrap_through_a_presigned_image_url() {
    let big = env_rows("SYNCULAR_OBJECT_STORE_BIG_ROWS", 1_000_000);
    let _serial = serial();
    let (db, _) = loaded();
    let partition = "objects-big";
    db.seed_tasks(partition, "alice", big);
    let server = server_tasks(&mut db.connect(), partition).unwrap();
    assert_eq!(server.len() as i64, big);
    let s3 = S3Server::start();
    let gw = tier_gateway(db, &s3, &[]);
    let boot = |label: &str| {
        let mut peer = Peer::new(&gw.base_url, partition, "alice", label);
        peer.client = client(label, 0b1110);
        peer.transport.set_signed_urls(true);
        peer.sync_idle(50).unwrap_or_else(|e| panic!("{label}: {e}"));
        let held = held_tasks(&peer.client).unwrap();
        assert_eq!(held.len(), server.len(), "{label}: row count");
        assert!(held == server, "{label}: the client holds exactly the server's rows");
    };
    boot("big-first");
    eventually("the mover copied the image", WAIT, || segments_all_stored(&mut db.connect()));
    let before = direct_served(&gw);
    boot("big-second");
    assert_eq!(direct_served(&gw), before, "the million-row image came from the bucket");
    let image: i64 = db
        .connect()
        .query_one("SELECT max(byte_length) FROM syncular.sync_segment_objects", &[])
        .unwrap()
        .get(0);
    assert!(image > 10 << 20, "a multi-megabyte image went through the bucket: {image} bytes");
}
