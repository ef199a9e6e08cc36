//! Bootstrap at scale (issue 12): the real client (`syncular-client = "=0.15.48"`) bootstraps a
//! 100,000-row partition on every delivery lane and ends holding exactly the server's rows:
//! every page by reference (`accept = 0b0010`), mixed inline/reference (`0b0011`), and the
//! SQLite image lane (the client's default `0b0111`) — once through the SQL API (segments
//! downloaded with `syncular.segment`) and once through the gateway (`GET /segments/{id}`).
//! Needs `SYNCULAR_TEST_DSN` and, for the gateway cases, the gateway binary.

use std::sync::OnceLock;

use ssp2::model::{Frame, MediaType};
use syncular_client::{ClientLimits, SyncClient, SyncOutcome};
use syncular_integration_tests::capture::{held_tasks, sql_writer};
use syncular_integration_tests::clients::subscribe_projects;
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{partition_name, schema_ir, server_tasks, ServerTask};
use syncular_integration_tests::gateway::{grant, setup, Gateway, Peer};
use syncular_integration_tests::transport::PgTransport;
use syncular_integration_tests::wire::decode_response;

const ROWS: i64 = 100_000;

/// One partition of `ROWS` tasks in project `p1` (written once per test binary with plain SQL,
/// so the log holds them as captured commits) and the server's rows.
fn loaded() -> &'static (String, Vec<ServerTask>) {
    static LOADED: OnceLock<(String, Vec<ServerTask>)> = OnceLock::new();
    LOADED.get_or_init(|| {
        let mut conn = connect();
        setup(&mut conn);
        let partition = partition_name("scale");
        grant(&mut conn, &partition, "alice", &["p1"]);
        let mut writer = sql_writer(&partition, Some("loader"));
        writer.batch_execute("SET statement_timeout = 0").unwrap();
        for from in (0..ROWS).step_by(25_000) {
            writer
                .batch_execute(&format!(
                    "INSERT INTO public.tasks (id, project_id, title, done, priority) \
                     SELECT 't' || lpad(g::text, 7, '0'), 'p1', 'task ' || g, g % 3 = 0, \
                            CASE WHEN g % 5 = 0 THEN NULL ELSE g END \
                       FROM generate_series({from}, {}) g",
                    from + 24_999
                ))
                .unwrap();
        }
        let rows = server_tasks(&mut conn, &partition).unwrap();
        assert_eq!(rows.len() as i64, ROWS);
        (partition, rows)
    })
}

fn client(client_id: &str, accept: Option<u8>) -> SyncClient {
    let limits = ClientLimits { accept, limit_snapshot_rows: Some(10_000), ..ClientLimits::default() };
    let mut c = SyncClient::new(client_id.to_owned(), &schema_ir(), limits).expect("client");
    subscribe_projects(&mut c, "s", &["p1"]).unwrap();
    c
}

/// What the responses delivered: (inline segments, rows segments by reference, sqlite images).
fn lanes(responses: &[Vec<u8>]) -> (usize, usize, usize) {
    let (mut inline, mut rows, mut images) = (0, 0, 0);
    for bytes in responses {
        for frame in decode_response(bytes).unwrap().frames {
            match frame {
                Frame::SegmentInline { .. } => inline += 1,
                Frame::SegmentRef { media_type: MediaType::Rows, .. } => rows += 1,
                Frame::SegmentRef { media_type: MediaType::Sqlite, .. } => images += 1,
                _ => {}
            }
        }
    }
    (inline, rows, images)
}

fn through_sql(accept: Option<u8>, label: &str) -> (usize, usize, usize) {
    let (partition, server) = loaded();
    let mut c = client(&format!("sql-{label}"), accept);
    let mut transport = PgTransport::new(connect(), partition.as_str(), "alice", None);
    match c.sync_until_idle(&mut transport, Some(200)) {
        SyncOutcome::Ok(_) => {}
        SyncOutcome::Failed { error_code, message } => panic!("{label}: {error_code}: {message}"),
    }
    let held = held_tasks(&c).unwrap();
    assert_eq!(held.len(), server.len(), "{label}: row count");
    assert!(held == *server, "{label}: the client holds exactly the server's rows");
    lanes(&transport.responses)
}

fn through_gateway(accept: Option<u8>, label: &str) {
    let (partition, server) = loaded();
    let gw = Gateway::start(&[]);
    let mut peer = Peer::new(&gw.base_url, partition, "alice", &format!("gw-{label}"));
    peer.client = client(&format!("gw-{label}"), accept);
    peer.sync_idle(200).unwrap_or_else(|e| panic!("{label}: {e}"));
    let held = held_tasks(&peer.client).unwrap();
    assert_eq!(held.len(), server.len(), "{label}: row count");
    assert!(held == *server, "{label}: the client holds exactly the server's rows");
    assert!(gw.metric("syncular_gateway_http_requests_total{route=\"/segments/{id}\",status=\"200\"") >= 1.0, "{label}: segments went through the gateway");
}

/// §5.4 signed URLs: gateway A (the sync endpoint) mints `url`s pointing at gateway B's
/// `/segments/`; the client (advertising bit 3) fetches every segment from B with no host
/// authentication, and A serves no segment at all.
#[test]
fn signed_urls_are_fetched_without_host_auth() {
    let (partition, server) = loaded();
    let cdn = Gateway::start(&[]);
    let dsn = format!(
        "{} options='-c syncular.segment_url_base={}/segments/'",
        syncular_integration_tests::dsn(),
        cdn.base_url
    );
    let gw = Gateway::start_with_dsn(&dsn, &["--auth", "dev"]);
    for (label, accept) in [("signed-ref", 0b0010u8), ("signed-image", 0b0110)] {
        let mut peer = Peer::new(&gw.base_url, partition, "alice", &format!("gw-{label}"));
        peer.client = client(&format!("gw-{label}"), Some(accept | 0b1000));
        peer.transport.set_signed_urls(true);
        peer.sync_idle(200).unwrap_or_else(|e| panic!("{label}: {e}"));
        let held = held_tasks(&peer.client).unwrap();
        assert!(held == *server, "{label}: the client holds exactly the server's rows");
    }
    let served = |g: &Gateway| g.metric("syncular_gateway_http_requests_total{route=\"/segments/{id}\",status=\"200\"");
    assert!(served(&cdn) >= 2.0, "the segments came from the signed-URL host");
    assert_eq!(served(&gw), 0.0, "nothing went through the sync gateway's direct endpoint");
}

#[test]
fn every_page_by_reference_through_sql() {
    let (inline, rows, images) = through_sql(Some(0b0010), "ref");
    assert_eq!((inline, images), (0, 0), "bit 1 only: nothing inline, no image");
    assert!(rows >= 10, "100,000 rows in pages of 10,000: {rows} references");
}

#[test]
fn mixed_inline_and_reference_through_sql() {
    let (_, rows, images) = through_sql(Some(0b0011), "mixed");
    assert_eq!(images, 0, "no image without bit 2");
    assert!(rows >= 1, "pages of 10,000 rows exceed the inline size: by reference");
}

#[test]
fn sqlite_image_through_sql() {
    let (inline, rows, images) = through_sql(None, "image");
    assert_eq!((inline, rows, images), (0, 0, 1), "one whole-table image, nothing else");
}

#[test]
fn every_page_by_reference_through_the_gateway() {
    through_gateway(Some(0b0010), "ref");
}

#[test]
fn sqlite_image_through_the_gateway() {
    through_gateway(None, "image");
}
