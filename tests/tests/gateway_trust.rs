//! What a gateway trusts (issue 8 review): Postgres lets any role NOTIFY any channel, so a role
//! with no syncular privilege forges `syncular_commit`, `syncular_scopes` and
//! `syncular_presence` payloads — the gateway drops every one (their tags and seals do not
//! verify), a forged `commitSeq` neither serves a revoked client a later commit nor silences a
//! session, and no forged presence reaches a client. And a commit made while a socket is
//! being opened reaches it without waiting for another commit.
//! `forged_presence_relay_payloads_are_dropped` is Rust-gateway only (scripts/test NODE_RUST_ONLY);
//! the rest also runs against the Node gateway.
//! Needs `SYNCULAR_TEST_DSN` and the gateway binary (scripts/test builds it).

use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::json;
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::partition_name;
use syncular_integration_tests::gateway::{
    grant, revoke_and_refresh, setup, sql_commit_task, wait_until, Gateway, Peer, Received,
};

/// Sends `payloads` on `channel` as a role with no privilege on schema `syncular`.
fn notify_as_stranger(conn: &mut postgres::Client, channel: &str, payloads: &[String]) {
    conn.batch_execute(
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'gw_test_stranger') \
         THEN CREATE ROLE gw_test_stranger; END IF; END $$",
    )
    .unwrap();
    let mut tx = conn.transaction().unwrap();
    tx.batch_execute("SET LOCAL ROLE gw_test_stranger").unwrap();
    for p in payloads {
        tx.execute("SELECT pg_notify($1, $2)", &[&channel, p]).unwrap();
    }
    tx.commit().unwrap();
}

fn presence_count(p: &Peer) -> usize {
    p.received.iter().filter(|r| matches!(r, Received::Text(v) if v["event"] == "presence")).count()
}

#[test]
fn forged_notifications_are_dropped_and_change_nothing() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-forge");
    grant(&mut conn, &partition, "alice", &["p1"]);
    grant(&mut conn, &partition, "bob", &["p1"]);
    grant(&mut conn, &partition, "carol", &["p1"]);
    let gw = Gateway::start(&[]);
    let mut bob = Peer::connected(&gw, &partition, "bob", "bob-forge", &["p1"]);
    let mut carol = Peer::connected(&gw, &partition, "carol", "carol-forge", &["p1"]);
    let p64 = URL_SAFE_NO_PAD.encode(partition.as_bytes());

    // Bob is revoked (refresh_scopes in the same transaction): he is woken, then must get
    // nothing written after the revocation.
    revoke_and_refresh(&mut conn, &partition, "bob", "p1");
    bob.pump_until("the revocation's wake-up", |p| !p.wakes().is_empty());
    // A stranger forges a huge commitSeq (unsigned, and with a made-up tag), a refresh, and a
    // presence document from "the-ceo".
    notify_as_stranger(
        &mut conn,
        "syncular_commit",
        &[format!("{p64}:999999999"), format!("{p64}:999999999:AAAAAAAAAAAAAAAAAAAAAA")],
    );
    notify_as_stranger(&mut conn, "syncular_scopes", std::slice::from_ref(&p64));
    wait_until("the forgeries counted as rejected", || {
        gw.metric("syncular_gateway_notifications_rejected_total{channel=\"syncular_commit\"") >= 2.0
            && gw.metric("syncular_gateway_notifications_rejected_total{channel=\"syncular_scopes\"") >= 1.0
    });

    // A genuine commit after all that: carol (still a member) gets it as a delta — the forged
    // seq did not silence her — and bob gets nothing.
    let seq = sql_commit_task(&mut conn, &partition, "alice", "secret-after-revoke", "p1", "for members only");
    carol.pump_until("carol's delta", |p| p.holds("secret-after-revoke"));
    assert_eq!(carol.deltas_containing("secret-after-revoke"), 1);
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        bob.pump();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(bob.deltas_containing("secret-after-revoke"), 0, "a revoked client got commit {seq}");
    assert!(!bob.holds("secret-after-revoke"));
}

/// Rust gateway only (scripts/test NODE_RUST_ONLY): the Node gateway has no presence relay.
#[test]
fn forged_presence_relay_payloads_are_dropped() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-forge-presence");
    grant(&mut conn, &partition, "bob", &["p1"]);
    grant(&mut conn, &partition, "carol", &["p1"]);
    let gw = Gateway::start(&[]);
    let mut bob = Peer::connected(&gw, &partition, "bob", "bob-forge-p", &["p1"]);
    let mut carol = Peer::connected(&gw, &partition, "carol", "carol-forge-p", &["p1"]);
    // A stranger forges a presence document from "the-ceo".
    let forged_presence = json!({"v": 1, "g": "evil", "q": 1, "ts": 0, "t": "pub", "p": partition,
        "k": "project:p1", "s": "x", "a": "the-ceo", "c": "c", "d": {"hi": 1}});
    notify_as_stranger(&mut conn, "syncular_presence", &[forged_presence.to_string()]);
    wait_until("the forgery counted as rejected", || {
        gw.metric("syncular_gateway_notifications_rejected_total{channel=\"syncular_presence\"") >= 1.0
    });
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        bob.pump();
        carol.pump();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(presence_count(&carol) + presence_count(&bob), 0, "forged presence reached a client");
}

#[test]
fn a_commit_made_while_a_socket_opens_is_delivered_without_another_commit() {
    let mut conn = connect();
    setup(&mut conn);
    // `slow-open`: the test resolver takes 1.5 s, so realtime_open is still running when the
    // commit lands (after the open read latestCursor).
    let partition = partition_name("gw-slow-open");
    grant(&mut conn, &partition, "alice", &["p1"]);
    grant(&mut conn, &partition, "bob", &["p1"]);
    let gw = Gateway::start(&[]);
    let mut bob = Peer::new(&gw.base_url, &partition, "bob", "bob-slow");
    bob.subscribe("tasks", &["p1"]);
    bob.sync_idle(6).expect("initial HTTP sync");
    let writer_partition = partition.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        sql_commit_task(&mut connect(), &writer_partition, "alice", "mid-open", "p1", "landed while bob connected")
    });
    bob.connect();
    let seq = writer.join().expect("writer");
    bob.pump_until("hello", |p| p.hello().is_some());
    assert!(bob.hello().unwrap()["latestCursor"].as_i64().unwrap() < seq, "the commit landed after the open read latestCursor");
    // No further commit: the one made during the open still arrives.
    bob.pump_until("the commit made during the open", |p| p.holds("mid-open"));
    assert_eq!(bob.deltas_containing("mid-open"), 1);
}
