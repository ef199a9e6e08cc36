//! Breaker attacks on issue 12 through the gateway (regression tests): a client that goes away
//! in the middle of a streamed `POST /sync` leaves nothing of the pull behind — the backend
//! stops, no client record is committed — and the gateway keeps serving on a pool of one
//! connection. Needs `SYNCULAR_TEST_DSN` and the gateway binary.

use std::io::Read;

use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::partition_name;
use syncular_integration_tests::stream_fixture::{big_gateway, big_pull, commit_big_rows, open_body, ROWS, SUBS};
use syncular_integration_tests::gateway::{grant, setup, wait_until};
use syncular_integration_tests::wire::{decode_response, delivered};

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
    let gw = big_gateway(&["--pool-size", "1"]);
    for round in 0..5 {
        let client = format!("gone-{round}");
        let (reader, _) = open_body(&gw, &partition, &big_pull(&mut conn, &partition, &client));
        drop(reader);
        wait_until("the abandoned pull stopped", || stream_backends(&mut conn) == 0);
        assert!(!client_record(&mut conn, &partition, &client), "nothing of the abandoned pull was committed");
    }
    // The single pooled connection still serves a whole round.
    let (mut reader, first) = open_body(&gw, &partition, &big_pull(&mut conn, &partition, "after"));
    let mut body = first;
    reader.read_to_end(&mut body).expect("the whole body");
    let msg = decode_response(&body).expect("a well-formed response");
    assert_eq!(delivered(&msg).expect("rows decode").rows.len(), SUBS * ROWS);
    wait_until("the full pull committed", || client_record(&mut conn, &partition, "after"));
}
