//! Breaker attacks on issue 12 through the gateway (regression tests): a client that goes away
//! in the middle of a streamed `POST /sync` leaves nothing of the pull behind — the backend
//! stops, no client record is committed — and the gateway keeps serving on a pool of one
//! connection. Needs `SYNCULAR_TEST_DSN` and the gateway binary.

use std::io::Read;

use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{partition_name, TASKS};
use syncular_integration_tests::gateway::{grant, http_agent, setup, sql_commit_task, wait_until, Gateway};
use syncular_integration_tests::wire::{decode_response, delivered, pull_header, request, subscription};

const SSP2: &str = "application/vnd.syncular.sync.v2";
const SUBS: usize = 10;
const ROWS: usize = 20;
const ROW_BYTES: usize = 250_000;

fn commit_big_rows(conn: &mut postgres::Client, partition: &str) {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for i in 0..ROWS {
        let title: String = (0..ROW_BYTES)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[(x % 36) as usize])
            })
            .collect();
        sql_commit_task(conn, partition, "alice", &format!("big-{i:02}"), "p1", &title);
    }
}

fn big_pull(conn: &mut postgres::Client, partition: &str, client: &str) -> Vec<u8> {
    let epoch: String = conn
        .query_one("SELECT log_epoch FROM syncular.sync_partition_registry WHERE partition = $1", &[&partition])
        .unwrap()
        .get(0);
    let mut frames = vec![pull_header(0, 50_000, 50, 1)];
    for i in 0..SUBS {
        frames.push(subscription(&format!("s{i}"), TASKS, &[("project_id", &["p1"])], -1, None));
    }
    request(client, Some(&epoch), frames)
}

fn open_body(gw: &Gateway, partition: &str, body: &[u8]) -> (Box<dyn Read + Send>, [u8; 8]) {
    let resp = http_agent()
        .post(format!("{}/sync", gw.base_url))
        .header("x-syncular-actor", "alice")
        .header("x-syncular-partition", partition)
        .header("content-type", SSP2)
        .header("accept-encoding", "identity")
        .send(body)
        .expect("POST /sync");
    assert_eq!(resp.status().as_u16(), 200);
    let mut reader: Box<dyn Read + Send> = Box::new(resp.into_body().into_reader());
    let mut first = [0u8; 8];
    reader.read_exact(&mut first).expect("first bytes");
    assert_eq!(&first[..4], b"SSP2");
    (reader, first)
}

fn stream_backends(conn: &mut postgres::Client) -> i64 {
    conn.query_one(
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%syncular.pull_stream(%' AND state = 'active' \
           AND pid <> pg_backend_pid()",
        &[],
    )
    .unwrap()
    .get(0)
}

fn client_record(conn: &mut postgres::Client, partition: &str, client: &str) -> bool {
    conn.query_opt("SELECT 1 FROM syncular.sync_clients WHERE partition = $1 AND client_id = $2", &[&partition, &client])
        .unwrap()
        .is_some()
}

#[test]
fn a_client_gone_mid_stream_leaves_nothing_and_the_gateway_serves_on() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-gone");
    grant(&mut conn, &partition, "alice", &["p1"]);
    commit_big_rows(&mut conn, &partition);
    let dsn = syncular_integration_tests::dsn();
    let gw = Gateway::start_with_dsn(
        &format!("{dsn} options='-c syncular.response_budget_bytes=67108864'"),
        &["--auth", "dev", "--pool-size", "1"],
    );
    for round in 0..5 {
        let client = format!("gone-{round}");
        let (reader, _) = open_body(&gw, &partition, &big_pull(&mut conn, &partition, &client));
        drop(reader);
        wait_until("the abandoned pull stopped", || stream_backends(&mut conn) == 0);
        assert!(!client_record(&mut conn, &partition, &client), "nothing of the abandoned pull was committed");
    }
    // The single pooled connection still serves a whole round.
    let (mut reader, first) = open_body(&gw, &partition, &big_pull(&mut conn, &partition, "after"));
    let mut body = first.to_vec();
    reader.read_to_end(&mut body).expect("the whole body");
    let msg = decode_response(&body).expect("a well-formed response");
    assert_eq!(delivered(&msg).expect("rows decode").rows.len(), SUBS * ROWS);
    wait_until("the full pull committed", || client_record(&mut conn, &partition, "after"));
}
