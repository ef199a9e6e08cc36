//! `--notify-database-url` through a running gateway (Citus function delegation: a sync call
//! runs on the worker owning its partition, so its NOTIFY fires there, not on the coordinator).
//! NOTIFY is per database, so a second database of the test server stands in for a second node
//! (`syncular_notify_b`: the extension with the test database's notification key, as a Citus
//! reference table would hold it). A gateway listening on that node only does not hear the
//! test database's own NOTIFY, and delivers the commit once the extension's exact signed payload
//! is notified on the node; duplicates deliver nothing twice; a reconnect of that node's LISTEN
//! connection resynchronizes (the missed commit arrives). With one of two nodes unreachable the
//! gateway serves (fed by the other) but `/healthz` answers 503, naming the node by index only.
//! Needs `SYNCULAR_TEST_DSN` and the gateway binary (scripts/test builds it).

use std::time::{Duration, Instant};

use postgres::Client;
use serde_json::Value;
use syncular_integration_tests::fixtures::partition_name;
use syncular_integration_tests::gateway::{grant, setup, sql_commit_task, wait_until, Gateway, Peer};
use syncular_integration_tests::notify::{expected_payload, notification_key};
use syncular_integration_tests::{connect, connect_to, dsn};

/// The database standing in for a second node (one test uses it: no clash between threads).
const NODE_B: &str = "syncular_notify_b";

/// (Re)creates [`NODE_B`] with the extension and the test database's notification key;
/// returns its connection string (the test DSN, key=value form, with another `dbname`).
fn create_node_b(conn: &mut Client) -> String {
    conn.batch_execute(&format!("DROP DATABASE IF EXISTS {NODE_B} WITH (FORCE)")).expect("drop node b");
    conn.batch_execute(&format!("CREATE DATABASE {NODE_B}")).expect("create node b");
    let node_dsn = format!("{} dbname={NODE_B}", dsn());
    let mut b = connect_to(&node_dsn);
    b.batch_execute("CREATE EXTENSION syncular").expect("extension on node b");
    b.execute("INSERT INTO syncular.sync_notification_key (id, key) VALUES (1, $1)", &[&notification_key()])
        .expect("the shared notification key");
    node_dsn
}

/// The payload the extension sends for a commit, computed in the test database (signed with
/// its key).
fn commit_payload(conn: &mut Client, partition: &str, seq: i64) -> String {
    let payload: String =
        conn.query_one("SELECT syncular.commit_notification_payload($1, $2)", &[&partition, &seq]).expect("payload").get(0);
    assert_eq!(payload, expected_payload(partition, seq));
    payload
}

fn notify(node: &mut Client, payload: &str) {
    node.execute("SELECT pg_notify('syncular_commit', $1)", &[&payload]).expect("pg_notify on node b");
}

/// Pumps `peer` for `span` (a bounded negative: nothing may arrive meanwhile).
fn pump_for(peer: &mut Peer, span: Duration) {
    let until = Instant::now() + span;
    while Instant::now() < until {
        peer.pump();
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn commits_are_heard_on_the_notify_nodes_only_and_a_node_reconnect_resynchronizes() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-nodes");
    grant(&mut conn, &partition, "bob", &["p1"]);
    let node_dsn = create_node_b(&mut conn);
    let mut b = connect_to(&node_dsn);
    let gw = Gateway::start(&["--notify-database-url", &node_dsn]);
    gw.wait_health(200);
    let mut bob = Peer::connected(&gw, &partition, "bob", "bob-nodes", &["p1"]);

    // The commit's own NOTIFY fires in the test database, which this gateway does not LISTEN to.
    let seq1 = sql_commit_task(&mut conn, &partition, "alice", "n1", "p1", "committed on the coordinator");
    pump_for(&mut bob, Duration::from_secs(1));
    assert!(!bob.holds("n1") && bob.delta_count() == 0, "not heard, not delivered: {:?}", bob.events());

    // The exact signed payload, notified on the listened node: delivered.
    let p1 = commit_payload(&mut conn, &partition, seq1);
    notify(&mut b, &p1);
    bob.pump_until("n1 after the NOTIFY on node b", |p| p.holds("n1"));

    // The same commit heard again, and the next one heard twice: nothing is sent twice.
    notify(&mut b, &p1);
    let seq2 = sql_commit_task(&mut conn, &partition, "alice", "n2", "p1", "heard twice");
    let p2 = commit_payload(&mut conn, &partition, seq2);
    notify(&mut b, &p2);
    notify(&mut b, &p2);
    bob.pump_until("n2", |p| p.holds("n2"));

    // A commit nobody notifies, then node b's LISTEN backend is killed: its reconnect
    // refreshes every session and runs a delta pass from their cursors — n3 arrives.
    sql_commit_task(&mut conn, &partition, "alice", "n3", "p1", "caught up by the resync");
    let killed: i64 = conn
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND datname = $2",
            &[&gw.listen_application_name(), &NODE_B],
        )
        .unwrap()
        .get(0);
    assert_eq!(killed, 1, "one LISTEN backend on node b");
    wait_until("node b's LISTEN reconnected", || gw.metric("syncular_gateway_listen_reconnects_total") >= 1.0);
    gw.wait_health(200);
    bob.pump_until("n3 after the reconnect", |p| p.holds("n3"));

    // A last commit notified on node b: everything before it in the queue was processed.
    let seq4 = sql_commit_task(&mut conn, &partition, "alice", "n4", "p1", "after");
    notify(&mut b, &commit_payload(&mut conn, &partition, seq4));
    bob.pump_until("n4", |p| p.holds("n4"));
    pump_for(&mut bob, Duration::from_millis(300));
    for id in ["n1", "n2", "n3", "n4"] {
        assert_eq!(bob.deltas_containing(id), 1, "{id} delivered exactly once: {:?}", bob.events());
    }
    assert!(bob.wakes().is_empty(), "{:?}", bob.wakes());
    assert_eq!(gw.metric("syncular_gateway_notifications_rejected_total"), 0.0, "the shared key verifies");
    let logs = gw.logs.lock().unwrap().join("\n");
    assert!(!logs.contains(NODE_B), "a node's URL is never logged:\n{logs}");

    drop(bob);
    drop(gw);
    drop(b);
    conn.batch_execute(&format!("DROP DATABASE IF EXISTS {NODE_B} WITH (FORCE)")).expect("drop node b");
}

#[test]
fn healthz_is_503_while_one_notify_node_is_unreachable() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-node-down");
    grant(&mut conn, &partition, "bob", &["p1"]);
    // Node 1: a closed port (the test server only has a Unix socket).
    let secret = "notify-node-password-3f9c";
    let unreachable = format!("host=127.0.0.1 port=1 user=postgres password={secret} dbname=syncular connect_timeout=2");
    let gw = Gateway::start(&["--notify-database-url", &dsn(), "--notify-database-url", &unreachable]);

    // Served (node 0 is up), but unhealthy while node 1 is down: a missed node is missed commits.
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        let (status, body) = gw.get("/healthz");
        assert_eq!(status, 503, "{body}");
        let health: Value = serde_json::from_str(&body).unwrap();
        assert_eq!((health["database"].as_bool(), health["listen"].as_bool()), (Some(true), Some(false)), "{health}");
        assert_eq!(health["listenDown"], serde_json::json!([1]), "{health}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(gw.metric("syncular_gateway_listen_connections_up{node=\"0\"}"), 1.0);
    assert_eq!(gw.metric("syncular_gateway_listen_connections_up{node=\"1\"}"), 0.0);
    let (_, metrics) = gw.get("/metrics");
    assert!(metrics.contains("syncular_gateway_listen_connections_up{node=\"1\"} 0"), "{metrics}");

    // Node 0 still feeds the hub.
    let mut bob = Peer::connected(&gw, &partition, "bob", "bob-node-down", &["p1"]);
    sql_commit_task(&mut conn, &partition, "alice", "d1", "p1", "heard on node 0");
    bob.pump_until("d1", |p| p.holds("d1"));
    assert_eq!(bob.deltas_containing("d1"), 1);
    assert_eq!(gw.get("/healthz").0, 503, "still down");

    let logs = gw.logs.lock().unwrap().join("\n");
    assert!(
        logs.lines().any(|l| l.contains("cannot open the LISTEN connection") && l.contains("node=1")),
        "the failing node is named by its index:\n{logs}"
    );
    assert!(!logs.contains(secret), "a node's URL is never logged:\n{logs}");
}
